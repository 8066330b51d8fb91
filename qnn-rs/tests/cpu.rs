//! QNN's CPU backend (`libQnnCpu.so`, shipped in the onnxruntime-qnn 2.3.0 wheel, QNN 2.47, and
//! in every SDK) through the same safe layer: a graph built by hand runs there in exact fp32, the
//! reference that tells a lowering bug from HTP numerics. The library is looked up as
//! `QNNX_CPU_LIB`, else `$QNNX_RUNTIME_DIR/releases/2.3.0/qnn/libQnnCpu.so`
//! (`scripts/setup-runtime --all` installs it); without one the test prints why and passes.

use std::path::PathBuf;

use qnn::{Backend, BackendConfig, BackendOptions, Context, Device};

mod common;

fn cpu_library() -> Option<PathBuf> {
    let lib = std::env::var_os("QNNX_CPU_LIB")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("QNNX_RUNTIME_DIR").map(|r| {
                PathBuf::from(r)
                    .join("releases")
                    .join("2.3.0")
                    .join("qnn")
                    .join("libQnnCpu.so")
            })
        });
    let lib = lib.filter(|p| p.is_file());
    if lib.is_none() {
        eprintln!(
            "skipped: no libQnnCpu.so (set QNNX_CPU_LIB, or scripts/setup-runtime --all for QNN 2.47's)"
        );
    }
    lib
}

#[test]
fn a_fully_connected_relu_graph_runs_on_the_cpu_backend_in_exact_fp32() {
    let Some(lib) = cpu_library() else { return };
    let backend = Backend::open(
        BackendConfig::Cpu,
        &BackendOptions {
            library: Some(lib),
            log_level: None,
        },
    )
    .expect("the CPU backend opens");
    // The CPU backend has no devices: Device::new holds no handle for it (deviceCreate answers
    // 1000 there) and the context is created without one.
    let device = Device::new(&backend).unwrap();
    let ctx = Context::new(&backend, Some(&device)).unwrap();
    let (got, want) = common::run_fc_relu(&ctx, 16, 8);
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "got {got:?}, want {want:?}"
        );
    }
    assert!(
        got.iter().any(|&v| v > 0.0) && got.contains(&0.0),
        "{got:?}"
    );
}
