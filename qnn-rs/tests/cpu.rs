//! QNN's CPU backend (`libQnnCpu.so`, shipped in the onnxruntime-qnn 2.3.0 wheel, QNN 2.47, and
//! in every SDK) through the same safe layer: a graph built by hand runs there in exact fp32, the
//! reference that tells a lowering bug from HTP numerics. The library is looked up as
//! `QNNX_CPU_LIB`, else `$QNNX_RUNTIME_DIR/releases/2.3.0/qnn/libQnnCpu.so`
//! (`scripts/setup-runtime --all` installs it); without one the test prints why and passes.

use std::path::PathBuf;

use qnn::{Backend, BackendConfig, BackendOptions, Context, DType, Device, Input, Node, Output};

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
    const K: usize = 16;
    const N: usize = 8;
    let x = common::values(1, K, 1.0);
    let w = common::values(2, N * K, 0.5);
    let b = common::values(3, N, 0.1);
    let mut g = ctx.build_graph("fc").unwrap();
    let xi = g.input("x", DType::F32, &[1, K as u32]).unwrap();
    let wi = g.constant("w", &[N as u32, K as u32], &w).unwrap();
    let bi = g.constant("b", &[N as u32], &b).unwrap();
    let h = g.native("h", DType::F32, &[1, N as u32]).unwrap();
    let y = g.output("y", DType::F32, &[1, N as u32]).unwrap();
    g.add_node(
        &Node::new("fc", "FullyConnected")
            .inputs(&[xi, wi, bi])
            .outputs(&[h]),
    )
    .unwrap();
    g.add_node(&Node::new("relu", "Relu").inputs(&[h]).outputs(&[y]))
        .unwrap();
    let graph = g.finalize().unwrap();
    let mut got = vec![0f32; N];
    graph
        .execute(&[Input::new(&x)], &mut [Output::new(&mut got)])
        .unwrap();
    let want: Vec<f32> = (0..N)
        .map(|n| {
            let dot: f32 = (0..K).map(|k| w[n * K + k] * x[k]).sum();
            (dot + b[n]).max(0.0)
        })
        .collect();
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
