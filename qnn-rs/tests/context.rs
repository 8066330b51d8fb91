//! Context binaries on the real HTP library: save, inspect through QnnSystem, reload from a
//! memory-mapped file in a fresh process, and reject corrupt binaries without crashing.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{context, htp, values};
use qnn::{Context, DataType, GraphOptions, Input, Node, Output, Precision};

const K: usize = 16;
const N: usize = 8;

fn weights() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    (
        values(21, K, 1.0),
        values(22, N * K, 0.5),
        values(23, N, 0.1),
    )
}

/// Builds `fc` (FullyConnected, fp16 compute) and returns the context binary and its output.
fn build_fc() -> Option<(Vec<u8>, Vec<f32>)> {
    let (_b, _d, ctx) = context()?;
    let (x, w, b) = weights();
    let opts = GraphOptions {
        precision: Some(Precision::Fp16),
        ..Default::default()
    };
    let mut g = ctx.build_graph("fc", &opts).unwrap();
    let xi = g.input("input", DataType::F32, &[1, K as u32]).unwrap();
    let wi = g.constant("w", &[N as u32, K as u32], &w).unwrap();
    let bi = g.constant("b", &[N as u32], &b).unwrap();
    let y = g.output("output", DataType::F32, &[1, N as u32]).unwrap();
    g.add_node(
        &Node::new("fc", "FullyConnected")
            .inputs(&[xi, wi, bi])
            .outputs(&[y]),
    )
    .unwrap();
    let graph = g.finalize().unwrap();
    let mut out = vec![0f32; N];
    graph
        .execute(&[Input::new(&x)], &mut [Output::new(&mut out)])
        .unwrap();
    Some((ctx.to_binary().unwrap(), out))
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("qnn-rs-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn binary_info_describes_graphs_and_io() {
    let Some((bytes, _)) = build_fc() else { return };
    let (backend, _d) = htp().unwrap();
    let info = qnn::binary_info(&backend.system().unwrap(), &bytes).unwrap();
    assert_eq!(info.build_id, backend.build_id().unwrap());
    assert_eq!(info.soc_model, Some(60));
    assert_eq!(info.graphs.len(), 1);
    let g = &info.graphs[0];
    assert_eq!(g.name, "fc");
    assert_eq!(g.inputs.len(), 1);
    assert_eq!(
        (g.inputs[0].name.as_str(), g.inputs[0].dtype),
        ("input", DataType::F32)
    );
    assert_eq!(g.inputs[0].dims, vec![1, K as u32]);
    assert_eq!(
        (g.outputs[0].name.as_str(), g.outputs[0].dims.clone()),
        ("output", vec![1, N as u32])
    );
}

/// Saves the binary, then a child process (this test binary, running the ignored
/// `child_loads_binary`) memory-maps it, runs it, and prints the output for comparison.
#[test]
fn round_trip_in_a_fresh_process_from_mmap() {
    let Some((bytes, out)) = build_fc() else {
        return;
    };
    let path = temp_path("fc.bin");
    qnn::write_atomic(&path, &bytes).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_loads_binary",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("QNNX_CHILD_BINARY", &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("OUTPUT ").map(|s| s.1))
        .expect("child printed no output");
    let got: Vec<f32> = line.split(',').map(|v| v.parse().unwrap()).collect();
    assert_eq!(got, out, "reloaded graph differs from the built one");
    std::fs::remove_file(&path).ok();
}

#[test]
#[ignore = "run by round_trip_in_a_fresh_process_from_mmap in a child process"]
fn child_loads_binary() {
    let path = PathBuf::from(std::env::var_os("QNNX_CHILD_BINARY").expect("QNNX_CHILD_BINARY"));
    let (backend, device) = htp().expect("HTP library");
    let ctx = Context::from_file(&backend, Some(&device), &path).unwrap();
    assert_eq!(ctx.graph_names(), vec!["fc".to_string()]);
    let graph = ctx.graph("fc").unwrap();
    let (x, _, _) = weights();
    let mut out = vec![0f32; N];
    graph
        .execute(&[Input::new(&x)], &mut [Output::new(&mut out)])
        .unwrap();
    let text: Vec<String> = out.iter().map(|v| format!("{v:?}")).collect();
    println!("OUTPUT {}", text.join(","));
}

#[test]
fn truncated_and_garbage_binaries_are_clear_errors() {
    let Some((bytes, _)) = build_fc() else { return };
    let (backend, device) = htp().unwrap();
    let truncated = &bytes[..bytes.len() / 2];
    let err = Context::from_binary(&backend, Some(&device), truncated)
        .err()
        .expect("accepted");
    assert_eq!(err.code(), Some(30010), "{err}");
    assert!(err.to_string().contains("MALFORMED_BINARY"), "{err}");
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let err = Context::from_binary(&backend, Some(&device), &garbage)
        .err()
        .expect("accepted");
    assert!(err.code().is_some_and(|c| c >= 30000), "{err}");
    let err = Context::from_binary(&backend, Some(&device), &[])
        .err()
        .expect("accepted");
    assert!(matches!(err, qnn::Error::InvalidArgument(_)), "{err}");
    // From a file, the error names the file.
    let path = temp_path("truncated.bin");
    std::fs::write(&path, truncated).unwrap();
    let err = Context::from_file(&backend, Some(&device), &path)
        .err()
        .expect("accepted");
    assert!(err.to_string().contains("truncated.bin"), "{err}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn unknown_graph_name_lists_the_graphs() {
    let Some((bytes, _)) = build_fc() else { return };
    let (backend, device) = htp().unwrap();
    let ctx = Context::from_binary(&backend, Some(&device), &bytes).unwrap();
    let err = ctx.graph("nope").unwrap_err().to_string();
    assert!(err.contains("\"fc\""), "{err}");
}

#[test]
fn unfinalized_graph_blocks_serialization() {
    let Some((_b, _d, ctx)) = context() else {
        return;
    };
    let mut g = ctx.build_graph("open", &GraphOptions::default()).unwrap();
    let x = g.input("x", DataType::F32, &[4]).unwrap();
    let y = g.output("y", DataType::F32, &[4]).unwrap();
    g.add_node(&Node::new("relu", "Relu").inputs(&[x]).outputs(&[y]))
        .unwrap();
    let err = ctx.to_binary().unwrap_err();
    assert_eq!(err.code(), Some(5003), "{err}");
}
