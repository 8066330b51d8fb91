//! Lowering's shape inference against ONNX's: for every model of
//! `tests/models/shape_agreement/gen.py` (the repository's test generators and fixtures,
//! detection-style exports, Resize + Concat chains), every value whose shape
//! `onnx.shape_inference.infer_shapes(strict_mode=True, data_prop=True)` knows must have the
//! same element type, rank and static dims in [`lowering::infer_shapes`]. Detectors exported
//! with a symbolic height and width are inferred by both at a size other than the export's
//! (`NAME.inputs.json`). A value lowering cannot infer (downstream of a node it does not
//! support) is counted, not compared.
//!
//! The generated models are cached in `target/test-models/shape_agreement-<hash>/`, keyed by
//! the content of gen.py and of the generators it runs. Without python3 + torch + torchvision +
//! onnx the test prints why and returns; with `QNNX_REQUIRE_HTP=1` (CI) that is a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use lowering::dtype::OnnxCode;
use lowering::{LowerOptions, Model};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn skip(why: &str) {
    if std::env::var_os("QNNX_REQUIRE_HTP").is_some() {
        panic!("QNNX_REQUIRE_HTP is set but {why}");
    }
    eprintln!("skipped: {why}");
}

fn fnv1a(parts: &[Vec<u8>]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The generated folder, or `None` (after [`skip`]) when Python cannot run the generator.
fn generate() -> Option<PathBuf> {
    let python = std::env::var("QNNX_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = repo().join("tests/models/shape_agreement/gen.py");
    let mut inputs = vec![std::fs::read(&script).unwrap()];
    // The generators gen.py runs, and the fixtures it copies.
    let mut files: Vec<PathBuf> = vec![repo().join("qnnx-cli/tests/make_models.py")];
    for dir in ["tests/models"] {
        let mut stack = vec![repo().join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "py" || x == "onnx") {
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    for f in &files {
        inputs.push(f.to_string_lossy().into_owned().into_bytes());
        inputs.push(std::fs::read(f).unwrap());
    }
    let root = repo().join("target/test-models");
    let dir = root.join(format!("shape_agreement-{:016x}", fnv1a(&inputs)));
    if dir.join("rejected.json").is_file() {
        return Some(dir);
    }
    let probe = Command::new(&python)
        .args(["-c", "import torch, torchvision, onnx, onnxscript"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            skip(&format!(
                "{python} cannot import torch, torchvision, onnx, onnxscript: {}",
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
    let tmp = root.join(format!(".shape_agreement-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let out = Command::new(&python)
        .arg(&script)
        .arg(&tmp)
        .output()
        .expect("run gen.py");
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    if std::fs::rename(&tmp, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Some(dir)
}

/// A value's type as gen.py writes ONNX's: element type, dims (`None`: symbolic or unknown).
type OnnxType = (i32, Option<Vec<Option<usize>>>);

/// One model's comparison: values compared, values lowering did not infer, disagreements.
fn compare(dir: &Path, name: &str) -> (usize, Vec<String>, Vec<String>) {
    let path = dir.join(format!("{name}.onnx"));
    let model = Model::load(path.as_path()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let json = std::fs::read_to_string(dir.join(format!("{name}.shapes.json"))).unwrap();
    let onnx: BTreeMap<String, OnnxType> =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{name}.shapes.json: {e}"));
    let mut opts = LowerOptions::default();
    if let Ok(text) = std::fs::read_to_string(dir.join(format!("{name}.inputs.json"))) {
        opts.input_shapes =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}.inputs.json: {e}"));
    }
    let ours = match lowering::infer_shapes(&model, &opts) {
        Ok(s) => s,
        Err(e) => {
            return (
                0,
                vec![],
                vec![format!("{name}: lowering refused the model: {e}")],
            )
        }
    };
    let (mut compared, mut missing, mut bad) = (0, Vec::new(), Vec::new());
    for (value, (code, dims)) in &onnx {
        let Some(dims) = dims else { continue };
        let Some((dtype, shape)) = ours.get(value) else {
            missing.push(value.clone());
            continue;
        };
        compared += 1;
        let same_dims = shape.len() == dims.len()
            && shape
                .iter()
                .zip(dims)
                .all(|(a, b)| b.map_or(true, |b| b == *a));
        if dtype.to_onnx() != *code || !same_dims {
            bad.push(format!(
                "{name}: {value}: lowering {} {shape:?}, ONNX elem_type {code} {dims:?}",
                dtype.name()
            ));
        }
    }
    (compared, missing, bad)
}

#[test]
fn inferred_shapes_agree_with_onnx() {
    let Some(dir) = generate() else {
        return;
    };
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let f = e.file_name().to_string_lossy().into_owned();
            f.strip_suffix(".shapes.json").map(String::from)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 40, "only {} models generated", names.len());
    let rejected = std::fs::read_to_string(dir.join("rejected.json")).unwrap();
    assert_eq!(rejected.trim(), "{}", "ONNX rejected generated models");
    let mut all_bad = Vec::new();
    let mut total = 0;
    for name in &names {
        let (compared, missing, bad) = compare(&dir, name);
        eprintln!(
            "{name:<40} {compared:>5} values agree{}",
            if missing.is_empty() {
                String::new()
            } else {
                format!(", {} not inferred (first: {})", missing.len(), missing[0])
            }
        );
        total += compared;
        all_bad.extend(bad);
    }
    eprintln!("{total} values compared over {} models", names.len());
    assert!(
        all_bad.is_empty(),
        "{} disagreement(s):\n{}",
        all_bad.len(),
        all_bad.join("\n")
    );
}
