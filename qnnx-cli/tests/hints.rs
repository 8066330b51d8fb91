//! What `qnnx` says when it cannot go on: each hint must point at something that helps (never at
//! a command that fails the same way), and a failure that is not about the graph must not be
//! called one. Live parts skip without the HTP library unless `QNNX_REQUIRE_HTP=1`.

use lowering::dtype::DType;
use lowering::testing::ModelBuilder;

mod common;
use common::{htp_available, ok_json, qnnx, s, stderr, temp_dir};

fn relu(dir: &std::path::Path) -> std::path::PathBuf {
    let m = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 4])
        .node("Relu", &["x"], &["y"], &[])
        .output("y");
    let path = dir.join("relu.onnx");
    std::fs::write(&path, m.bytes()).unwrap();
    path
}

#[test]
fn compile_without_a_library_says_how_to_get_one() {
    let dir = temp_dir("nolib");
    let model = relu(&dir);
    let lib = dir.join("nowhere/libQnnHtp.so");
    for cmd in ["compile", "run"] {
        let out = qnnx(&["--qnn-lib", s(&lib), cmd, s(&model)]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(err.contains(s(&lib)), "{cmd}: {err}");
        assert!(!err.contains("refused the graph"), "{cmd}: {err}");
        assert!(
            err.contains("qnnx doctor") && err.contains("onnxruntime-qnn"),
            "{cmd}: {err}"
        );
    }
}

/// QNN's x86_64 GPU library refuses to start without Qualcomm's tuning server: the message says
/// so (with QNN's code) instead of QNN's raw line, and does not blame the graph.
#[cfg(target_arch = "x86_64")]
#[test]
fn gpu_on_x86_says_it_cannot_execute_here() {
    if !htp_available() {
        return;
    }
    if let Err(qnn::Error::Load(e)) = qnn::Backend::new(qnn::BackendKind::Gpu) {
        eprintln!("skipped: no GPU library ({e})");
        return;
    }
    let dir = temp_dir("gpu");
    let model = relu(&dir);
    for cmd in ["compile", "run"] {
        let out = qnnx(&[cmd, s(&model), "--backend", "gpu"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(
            err.contains("cannot execute on x86_64 Linux") && err.contains("(4000, Backend)"),
            "{cmd}: {err}"
        );
        assert!(!err.contains("TuningMode"), "{cmd}: {err}");
        assert!(!err.contains("refused the graph"), "{cmd}: {err}");
        assert!(err.contains("--backend gpu"), "{cmd}: {err}");
    }
}

#[test]
fn a_truncated_binary_or_saved_model_is_not_sent_to_inspect() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("trunc");
    let model = relu(&dir);
    let bin = dir.join("relu.bin");
    ok_json(&["compile", s(&model), "-o", s(&bin), "--json"]);
    let bytes = std::fs::read(&bin).unwrap();
    let trunc = dir.join("trunc.bin");
    std::fs::write(&trunc, &bytes[..1000]).unwrap();

    let session = qnnx_engine::Session::open(&model, &Default::default()).unwrap();
    let saved = dir.join("relu.qnnx");
    qnnx_engine::saved::save(
        session.compiled(),
        &saved,
        Default::default(),
        Default::default(),
    )
    .unwrap();
    let bytes = std::fs::read(&saved).unwrap();
    let trunc_saved = dir.join("trunc.qnnx");
    std::fs::write(&trunc_saved, &bytes[..bytes.len() / 2]).unwrap();

    for (file, again) in [(&trunc, "qnnx compile"), (&trunc_saved, "save it again")] {
        // Whatever run says, inspect fails the same way: neither may point at inspect.
        for cmd in ["run", "inspect"] {
            let out = qnnx(&[cmd, s(file)]);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{cmd} {file:?}: {err}");
            assert!(!err.contains("qnnx inspect"), "{cmd} {file:?}: {err}");
            assert!(err.contains(again), "{cmd} {file:?}: {err}");
        }
    }
}
