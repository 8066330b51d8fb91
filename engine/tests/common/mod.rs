//! Helpers shared by the tests that run models on the emulated HTP (SoC 60).
// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lowering::{DType, LowerOptions, Model};
use qnnx_engine::emit::emit;
use qnnx_engine::HostTensor;

/// Prints why the test is skipped, or fails when `QNNX_REQUIRE_HTP` is set.
pub fn skip(why: &str) {
    if std::env::var_os("QNNX_REQUIRE_HTP").is_some() {
        panic!("QNNX_REQUIRE_HTP is set but {why}");
    }
    eprintln!("skipped: {why}");
}

/// The HTP library and its default host device, opened once; `None` (after [`skip`]) without
/// the library.
pub fn htp() -> Option<&'static (qnn::Backend, qnn::Device)> {
    static HTP: OnceLock<Result<(qnn::Backend, qnn::Device), String>> = OnceLock::new();
    let r = HTP.get_or_init(|| {
        let b = qnn::Backend::open(qnn::HtpConfig::host_default(), &Default::default())
            .map_err(|e| e.to_string())?;
        let d = qnn::Device::new(&b).expect("deviceCreate on the HTP library");
        Ok((b, d))
    });
    match r {
        Ok(h) => Some(h),
        Err(e) => {
            skip(&format!(
                "the HTP library is unavailable ({e}); run scripts/setup-runtime"
            ));
            None
        }
    }
}

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// FNV-1a: a stable content hash for the generated-model folders (std's hasher may change
/// between releases).
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The folder `script` (a Python generator under the repo, called as `script OUT_DIR`) writes its
/// models into, made once per content of `sources` (the script and what it imports) under
/// `target/test-models/NAME-<hash>`: a folder already holding `marker` is reused; written into
/// a temporary folder and renamed, so parallel test processes never see half a folder. `None`
/// (after [`skip`]) when python3 (`$QNNX_PYTHON`) cannot import `imports`.
pub fn generated_models(
    name: &str,
    sources: &[PathBuf],
    marker: &str,
    imports: &[&str],
) -> Option<PathBuf> {
    let python = std::env::var("QNNX_PYTHON").unwrap_or_else(|_| "python3".into());
    let bytes: Vec<Vec<u8>> = sources
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect();
    let parts: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let root = repo().join("target/test-models");
    let dir = root.join(format!("{name}-{:016x}", fnv1a(&parts)));
    if dir.join(marker).is_file() {
        return Some(dir);
    }
    let check = format!("import {}", imports.join(", "));
    match std::process::Command::new(&python)
        .args(["-c", &check])
        .output()
    {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            skip(&format!(
                "{python} cannot import {}: {}",
                imports.join(", "),
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ));
            return None;
        }
        Err(e) => {
            skip(&format!("{python} is not runnable: {e}"));
            return None;
        }
    }
    let tmp = root.join(format!(".{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("create the model folder");
    let out = std::process::Command::new(&python)
        .arg(&sources[0])
        .arg(&tmp)
        .output()
        .expect("run the generator");
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        sources[0].display(),
        String::from_utf8_lossy(&out.stderr)
    );
    if std::fs::rename(&tmp, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Some(dir)
}

/// Reads a C-order little-endian `.npy` file (format 1.0-3.0) of f32, f16, i64, i32 or bool.
pub fn read_npy(path: &Path) -> HostTensor {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}: not an npy file", path.display());
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        _ => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
    };
    let header = std::str::from_utf8(&b[start..start + hlen]).expect("npy header is text");
    let field = |k: &str| {
        let i = header
            .find(k)
            .unwrap_or_else(|| panic!("npy header lacks {k}: {header}"));
        header[i + k.len()..].trim_start_matches([' ', ':'])
    };
    assert!(
        field("'fortran_order'").starts_with("False"),
        "{}: Fortran order",
        path.display()
    );
    let descr = field("'descr'");
    let descr = &descr[1..descr[1..].find('\'').expect("descr is quoted") + 1];
    let dtype = match descr {
        "<f4" => DType::F32,
        "<f2" => DType::F16,
        "<i8" => DType::I64,
        "<i4" => DType::I32,
        "|b1" => DType::Bool,
        d => panic!("{}: unsupported npy dtype {d}", path.display()),
    };
    let shape_s = field("'shape'");
    let shape_s = &shape_s[1..shape_s.find(')').expect("shape tuple")];
    let shape: Vec<usize> = shape_s
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("shape dim"))
        .collect();
    let data = b[start + hlen..].to_vec();
    let size = dtype.size();
    assert_eq!(
        data.len(),
        shape.iter().product::<usize>() * size,
        "{}: data size",
        path.display()
    );
    HostTensor { dtype, shape, data }
}

pub fn read_all(dir: &Path, prefix: &str) -> Vec<HostTensor> {
    (0..)
        .map(|i| dir.join(format!("{prefix}_{i}.npy")))
        .take_while(|p| p.is_file())
        .map(|p| read_npy(&p))
        .collect()
}

/// Lowers, builds and runs the model in `dir` on its inputs; returns the outputs.
pub fn run_dir(
    backend: &qnn::Backend,
    device: &qnn::Device,
    dir: &Path,
) -> Result<Vec<HostTensor>, String> {
    let model = Model::load(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let inputs = read_all(dir, "input");
    let mut opts = LowerOptions {
        fp16: true,
        ..Default::default()
    };
    for (&v, t) in model.graph.inputs.iter().zip(&inputs) {
        opts.input_shapes
            .insert(model.graph.value(v).name.clone(), t.shape.clone());
    }
    let plan = lowering::lower(model, &opts).map_err(|e| e.to_string())?;
    let ctx = qnn::Context::new(backend, Some(device)).map_err(|e| e.to_string())?;
    let compiled = emit(&ctx, "case", &plan).map_err(|e| e.to_string())?;
    compiled.run(&inputs).map_err(|e| e.to_string())
}

/// The conformance runner's comparison: |got - want| <= 1e-2 + 1e-2 |want| for floats, exact
/// for integers.
pub fn compare(got: &HostTensor, want: &HostTensor) -> Result<(), String> {
    if got.shape.iter().product::<usize>() != want.shape.iter().product::<usize>() {
        return Err(format!("shape {:?} vs {:?}", got.shape, want.shape));
    }
    match (got.to_f32(), want.to_f32()) {
        (Some(g), Some(w)) => match g.iter().zip(&w).position(|(a, b)| {
            let d = (a - b).abs();
            d.is_nan() || d > 1e-2 + 1e-2 * b.abs()
        }) {
            Some(i) => Err(format!("element {i}: got {} want {}", g[i], w[i])),
            None => Ok(()),
        },
        _ if got.dtype == want.dtype && got.data == want.data => Ok(()),
        _ => Err(format!(
            "{} vs {} values differ",
            got.dtype.name(),
            want.dtype.name()
        )),
    }
}
