//! Several models as graphs of one QNN context ([`qnnx_engine::compile::multi`]) on the emulated HTP
//! (SoC 60): the prefill and decode exports of one decoder-like model
//! (`tests/models/decoder_pair/gen.py`), with and without weight sharing, against the same
//! models compiled alone and against eager PyTorch.
//!
//! Without the HTP library or python3 + torch a test prints why and returns; with
//! `QNNX_REQUIRE_HTP=1` (set by CI) either is a failure instead.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lowering::DType;
use qnnx_engine::compile::multi::{
    bind_graphs, bindings_json, compile_multi, GraphSpec, MultiCompiled, MultiOptions,
};
use qnnx_engine::{compile, CompileOptions, HostTensor, Target};

/// What the tests compile for: SoC 60, the emulator's fp16 target.
fn target() -> Target {
    Target::host_default(qnn::BackendKind::Htp)
}

mod common;
use common::{generated_models, htp, repo};

/// The two exported cases, generated once per content of the scripts; `None` (after
/// `common::skip`) without python3 + torch.
fn models() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let sources = [
            repo().join("tests/models/decoder_pair/gen.py"),
            repo().join("tests/models/common/export.py"),
        ];
        generated_models(
            "decoder_pair",
            &sources,
            "decode/output_0.npy",
            &["torch", "onnx"],
        )
    })
    .as_ref()
}

/// A C-order little-endian float32 `.npy` file.
fn read_f32_npy(path: &Path) -> HostTensor {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY");
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        _ => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
    };
    let header = std::str::from_utf8(&b[start..start + hlen]).expect("npy header");
    assert!(header.contains("'<f4'"), "{header}");
    let shape = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .expect("npy shape");
    let shape: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("dim"))
        .collect();
    HostTensor {
        dtype: DType::F32,
        shape,
        data: b[start + hlen..].to_vec(),
    }
}

struct Case {
    name: &'static str,
    onnx: Vec<u8>,
    input: HostTensor,
    want: Vec<f32>,
}

fn cases() -> Option<Vec<Case>> {
    let dir = models()?;
    Some(
        ["prefill", "decode"]
            .into_iter()
            .map(|name| {
                let d = dir.join(name);
                Case {
                    name,
                    onnx: std::fs::read(d.join("model.onnx")).expect("model.onnx"),
                    input: read_f32_npy(&d.join("input_0.npy")),
                    want: read_f32_npy(&d.join("output_0.npy")).to_f32().expect("f32"),
                }
            })
            .collect(),
    )
}

fn specs(cases: &[Case]) -> Vec<GraphSpec<'_>> {
    cases
        .iter()
        .map(|c| GraphSpec {
            name: c.name.into(),
            onnx: &c.onnx,
            ..Default::default()
        })
        .collect()
}

fn multi(cases: &[Case], weight_sharing: bool) -> MultiCompiled {
    let opts = MultiOptions {
        weight_sharing,
        ..Default::default()
    };
    compile_multi(&target(), &specs(cases), &opts, None).unwrap_or_else(|e| panic!("{e}"))
}

fn run(e: &qnnx_engine::Emitted, input: &HostTensor) -> Vec<f32> {
    let out = e.run(std::slice::from_ref(input)).expect("execute");
    out[0].to_f32().expect("f32 output")
}

/// Each model compiled alone, in its own context: outputs and binary sizes.
fn singles(cases: &[Case]) -> Vec<(Vec<f32>, usize)> {
    cases
        .iter()
        .map(|c| {
            let opts = CompileOptions {
                name: c.name.into(),
                ..Default::default()
            };
            let one = compile(&target(), &c.onnx, &opts, None).unwrap_or_else(|e| panic!("{e}"));
            let size = one.context.to_binary().expect("binary").len();
            (run(&one.emitted, &c.input), size)
        })
        .collect()
}

fn max_rel_err(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

/// Both graphs of one context, with and without weight sharing, compute exactly what each
/// model computes compiled alone, and match PyTorch within fp16 error. The weight-shared
/// binary is less than 3/4 of the unshared one, which is no larger than the two single ones.
#[test]
fn prefill_and_decode_in_one_context() {
    let Some(_) = htp() else { return };
    let Some(cases) = cases() else { return };
    let alone = singles(&cases);
    let mut sizes = Vec::new();
    for weight_sharing in [false, true] {
        let m = multi(&cases, weight_sharing);
        assert_eq!(m.weight_sharing, weight_sharing, "{:?}", m.warnings);
        for (c, (want, _)) in cases.iter().zip(&alone) {
            let g = m.graph(c.name).expect("graph by name");
            let got = run(&g.emitted, &c.input);
            assert_eq!(
                &got, want,
                "{} (weight sharing {weight_sharing}) differs from the model compiled alone",
                c.name
            );
            let err = max_rel_err(&got, &c.want);
            assert!(
                err < 2e-2,
                "{}: max error {err} of the output scale",
                c.name
            );
        }
        sizes.push(m.context.to_binary().expect("binary").len());
    }
    let separate: usize = alone.iter().map(|a| a.1).sum();
    let (unshared, shared) = (sizes[0], sizes[1]);
    eprintln!(
        "context binary bytes: two contexts {separate} ({} + {}), one context {unshared}, \
         one context with weight sharing {shared}",
        alone[0].1, alone[1].1
    );
    assert!(unshared <= separate, "{unshared} > {separate}");
    assert!(
        (shared as f64) < 0.75 * unshared as f64,
        "weight sharing saved too little: {shared} of {unshared} bytes"
    );
}

/// An unshared binary loads back with both graphs found by name and bound to the model I/O
/// through the stored bindings, computing bit for bit what the compiled graphs computed. A
/// weight-shared one is refused on x86_64 (the library there cannot load it) with an error,
/// not a crash.
#[test]
fn multi_graph_binary_round_trips() {
    let Some((b, d)) = htp() else { return };
    let Some(cases) = cases() else { return };
    let m = multi(&cases, false);
    let built: Vec<Vec<f32>> = m
        .graphs
        .iter()
        .zip(&cases)
        .map(|(g, c)| run(&g.emitted, &c.input))
        .collect();
    let binary = m.context.to_binary().unwrap();
    let bindings = bindings_json(m.graphs.iter().map(|g| (g.name.as_str(), &g.emitted)));
    drop(m);
    let ctx = qnn::Context::from_binary(b, Some(d), &binary).unwrap();
    // The library lists a binary's graphs in no fixed order (CI saw both).
    let mut stored = ctx.graph_names();
    stored.sort();
    assert_eq!(stored, ["decode", "prefill"]);
    // By name, in another order than stored.
    let graphs = bind_graphs(&ctx, &["decode", "prefill"], &bindings).expect("bindings fit");
    assert_eq!(graphs[0].name, "decode");
    assert_eq!(run(&graphs[0].emitted, &cases[1].input), built[1]);
    assert_eq!(run(&graphs[1].emitted, &cases[0].input), built[0]);
    assert!(bind_graphs(&ctx, &["nope"], &bindings).is_none());

    let shared = multi(&cases, true).context.to_binary().unwrap();
    let info = qnn::binary_info(&b.system().unwrap(), &shared).unwrap();
    assert!(info.uses_shared_weights());
    let mut names: Vec<&str> = info.graphs.iter().map(|g| g.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["decode", "prefill"]);
    if cfg!(target_arch = "x86_64") {
        let err = qnn::Context::from_binary(b, Some(d), &shared)
            .err()
            .expect("the x86_64 library cannot load weight-shared binaries");
        assert!(err.to_string().contains("weight sharing"), "{err}");
    }
}

/// Without weight sharing the combined binary is cached: a second compile loads it (no
/// lowering, no finalize) with the same outputs. A weight-shared compile is not cached on
/// x86_64, and says so.
#[test]
fn multi_graph_compile_uses_the_cache() {
    if htp().is_none() {
        return;
    }
    let Some(cases) = cases() else { return };
    let dir = std::env::temp_dir().join(format!("qnnx-multi-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = qnnx_engine::cache::Cache::open(&dir, None).unwrap();
    let specs = specs(&cases);
    let opts = MultiOptions::default();
    let first = compile_multi(&target(), &specs, &opts, Some(&cache)).unwrap();
    assert!(!first.from_cache);
    assert!(first.warnings.is_empty(), "{:?}", first.warnings);
    let key = first.cache_key.clone().expect("cached");
    let want: Vec<Vec<f32>> = first
        .graphs
        .iter()
        .zip(&cases)
        .map(|(g, c)| run(&g.emitted, &c.input))
        .collect();
    drop(first);
    let second = compile_multi(&target(), &specs, &opts, Some(&cache)).unwrap();
    assert!(second.from_cache);
    assert_eq!(second.cache_key.as_ref(), Some(&key));
    for ((g, c), w) in second.graphs.iter().zip(&cases).zip(&want) {
        assert_eq!(g.finalize_ms, 0.0);
        assert_eq!(&run(&g.emitted, &c.input), w, "{}", c.name);
    }
    // Other names, order or settings are other entries.
    let swapped: Vec<GraphSpec> = specs.iter().rev().cloned().collect();
    let rt = qnnx_engine::registry::for_target(&target(), None, false).unwrap();
    let other = qnnx_engine::compile::key::multi_key(&rt.backend, &swapped, &opts).unwrap();
    assert_ne!(other, key);
    let fp16 = MultiOptions { fp16: true, ..opts };
    assert_ne!(
        qnnx_engine::compile::key::multi_key(&rt.backend, &specs, &fp16).unwrap(),
        key
    );
    if cfg!(target_arch = "x86_64") {
        let shared = MultiOptions {
            weight_sharing: true,
            ..opts
        };
        let m = compile_multi(&target(), &specs, &shared, Some(&cache)).unwrap();
        assert!(!m.from_cache && m.cache_key.is_none());
        assert!(
            m.warnings.iter().any(|w| w.contains("not cached")),
            "{:?}",
            m.warnings
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model that does not lower fails the whole compile before QNN is called, and the error
/// names its graph.
#[test]
fn a_bad_model_is_named() {
    if htp().is_none() {
        return;
    }
    let Some(cases) = cases() else { return };
    let mut specs = specs(&cases);
    specs[1].onnx = b"not an onnx model";
    let err = compile_multi(&target(), &specs, &MultiOptions::default(), None)
        .err()
        .expect("accepted garbage");
    assert_eq!(err.graph.as_deref(), Some("decode"));
    assert!(err.to_string().starts_with("graph \"decode\": "), "{err}");
}
