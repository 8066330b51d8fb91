//! `qnnx run --profile / --trace` and `qnnx compile --timings` end to end on the emulated HTP.
//! Skips without the HTP library unless `QNNX_REQUIRE_HTP=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lowering::dtype::DType;
use lowering::tensor::Tensor;
use lowering::testing::{rand_f32, ModelBuilder};
use serde_json::Value;

mod common;
use common::{htp_available, qnnx_env, s, temp_dir};

fn qnnx(args: &[&str], cache: &Path) -> Output {
    qnnx_env(args, &[("QNNX_CACHE_DIR", cache)])
}

fn ok(args: &[&str], cache: &Path) -> String {
    let out = qnnx(args, cache);
    assert!(
        out.status.success(),
        "qnnx {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok_json(args: &[&str], cache: &Path) -> Value {
    let text = ok(args, cache);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn model(dir: &Path) -> PathBuf {
    let m = ModelBuilder::new(17)
        .input("x", DType::F32, &[4, 16])
        .init("w", Tensor::from_f32(vec![16, 32], &rand_f32(1, 16 * 32)))
        .node("MatMul", &["x", "w"], &["h"], &[])
        .node("Relu", &["h"], &["r"], &[])
        .node("Sigmoid", &["r"], &["y"], &[])
        .output("y");
    let path = dir.join("m.onnx");
    std::fs::write(&path, m.bytes()).unwrap();
    path
}

fn onnx_nodes(v: &Value) -> Vec<String> {
    v["profile"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["onnx_node"].as_str().map(String::from))
        .collect()
}

#[test]
fn run_profiles_per_op_and_writes_a_trace() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("run");
    let cache = dir.join("cache");
    let m = model(&dir);
    let trace = dir.join("t.json");

    // Without --profile there is no profile in the report.
    let v = ok_json(&["run", s(&m), "--runs", "1", "--json"], &cache);
    assert!(v.get("profile").is_none(), "{v}");

    let v = ok_json(
        &[
            "run",
            s(&m),
            "--runs",
            "1",
            "--profile",
            "--trace",
            s(&trace),
            "--json",
        ],
        &cache,
    );
    let p = &v["profile"];
    assert_eq!(p["level"], "detailed");
    let nodes = onnx_nodes(&v);
    for n in ["MatMul_0", "Relu_1", "Sigmoid_2"] {
        assert!(nodes.iter().any(|x| x == n), "{n} missing: {p}");
    }
    let share: f64 = p["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["share"].as_f64().unwrap())
        .sum();
    assert!((share - 1.0).abs() < 1e-6, "{share}");
    assert!(p["by_onnx_node"].as_array().is_some_and(|a| !a.is_empty()));

    // The trace is Chrome's JSON object format, with the compile's stages and the ops.
    let t: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let spans: Vec<&Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert!(spans
        .iter()
        .any(|e| e["cat"] == "compile" && e["name"] == "finalize"));
    assert!(spans
        .iter()
        .any(|e| e["cat"] == "op" && e["args"]["onnx_node"] == "Relu_1"));
    assert!(spans
        .iter()
        .all(|e| e["dur"].as_f64().is_some_and(|d| d >= 0.0)));

    // The text table names the ops.
    let text = ok(&["run", s(&m), "--runs", "0", "--profile"], &cache);
    assert!(
        text.contains("profile (detailed)") && text.contains("Sigmoid_2"),
        "{text}"
    );

    // basic: whole-graph times only.
    let v = ok_json(
        &["run", s(&m), "--runs", "0", "--profile", "basic", "--json"],
        &cache,
    );
    assert!(
        v["profile"]["execute_us"].as_u64().is_some_and(|u| u > 0),
        "{v}"
    );
    assert_eq!(v["profile"]["ops"], serde_json::json!([]));

    // A graph from the cache still maps its ops to ONNX nodes.
    ok(&["run", s(&m), "--cache", "--runs", "0"], &cache);
    let v = ok_json(
        &[
            "run",
            s(&m),
            "--cache",
            "--runs",
            "0",
            "--profile",
            "--json",
        ],
        &cache,
    );
    assert_eq!(v["prepare"]["from_cache"], true);
    assert!(onnx_nodes(&v).iter().any(|x| x == "Sigmoid_2"), "{v}");

    // A bad level is a usage error, not a panic.
    let out = qnnx(&["run", s(&m), "--profile", "full"], &cache);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("basic or detailed"));
}

/// A context binary's profile names each op's QNN type and ONNX node, as the ONNX model's does,
/// from the file `qnnx compile` writes beside it; without that file (or with one of another
/// binary) the ops are QNN node names, and the text says why.
#[test]
fn a_compiled_binary_profiles_with_op_types_and_onnx_nodes() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("bin");
    let cache = dir.join("cache");
    let m = model(&dir);
    let bin = dir.join("m.bin");
    ok(&["compile", s(&m), "-o", s(&bin)], &cache);
    let sidecar = dir.join("m.bin.nodes.json");
    assert!(sidecar.is_file());
    let v = ok_json(
        &["run", s(&bin), "--runs", "0", "--profile", "--json"],
        &cache,
    );
    let nodes = onnx_nodes(&v);
    for n in ["MatMul_0", "Relu_1", "Sigmoid_2"] {
        assert!(nodes.iter().any(|x| x == n), "{n} missing: {v}");
    }
    let ops = v["profile"]["ops"].as_array().unwrap();
    assert!(ops.iter().any(|o| o["qnn_op"] == "Relu"), "{v}");
    let text = ok(&["run", s(&bin), "--runs", "0", "--profile"], &cache);
    assert!(!text.contains(" ? "), "{text}");

    // The same binary without the file: QNN node names, and a note saying what is missing.
    let alone = dir.join("alone.bin");
    std::fs::copy(&bin, &alone).unwrap();
    let text = ok(&["run", s(&alone), "--runs", "0", "--profile"], &cache);
    assert!(text.contains(".nodes.json"), "{text}");
    // A file left beside a binary compiled again is not applied to it.
    ok(
        &["compile", s(&m), "-o", s(&alone), "--precision", "fp16"],
        &cache,
    );
    std::fs::copy(&sidecar, dir.join("alone.bin.nodes.json")).unwrap();
    let out = qnnx(
        &["run", s(&alone), "--runs", "0", "--profile", "--json"],
        &cache,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("another binary"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(onnx_nodes(&v).is_empty(), "{v}");
}

#[test]
fn compile_timings_list_every_stage() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("timings");
    let cache = dir.join("cache");
    let m = model(&dir);
    let bin = dir.join("m.bin");
    let stages = |v: &Value| -> Vec<String> {
        v["timings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["stage"].as_str().unwrap().to_string())
            .collect()
    };
    let v = ok_json(
        &["compile", s(&m), "-o", s(&bin), "--cache", "--json"],
        &cache,
    );
    assert_eq!(
        stages(&v),
        [
            "read file",
            "backend open",
            "cache lookup",
            "load",
            "passes",
            "lowering",
            "QNN graph build",
            "finalize",
            "serialization",
            "cache store",
            "binary from the cache",
            "write"
        ]
    );
    let v = ok_json(
        &["compile", s(&m), "-o", s(&bin), "--cache", "--json"],
        &cache,
    );
    assert_eq!(
        stages(&v),
        [
            "read file",
            "backend open",
            "cache lookup",
            "cache load",
            "binary from the cache",
            "write"
        ]
    );
    let text = ok(&["compile", s(&m), "-o", s(&bin), "--timings"], &cache);
    assert!(
        text.contains("QNN graph build") && text.contains("finalize") && text.contains("total"),
        "{text}"
    );
    // --timings also profiles the finalize: the preparer's phases.
    assert!(text.contains("Graph Optimizations"), "{text}");
    let v = ok_json(
        &["compile", s(&m), "-o", s(&bin), "--timings", "--json"],
        &cache,
    );
    assert!(
        v["finalize_phases"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "{v}"
    );
    let v = ok_json(&["compile", s(&m), "-o", s(&bin), "--json"], &cache);
    assert_eq!(v["finalize_phases"], serde_json::json!([]));
    // Several models: each graph's own stages.
    let m2 = dir.join("m2.onnx");
    std::fs::copy(&m, &m2).unwrap();
    let both = dir.join("both.bin");
    let v = ok_json(
        &[
            "compile",
            s(&m),
            s(&m2),
            "-o",
            s(&both),
            "--no-weight-sharing",
            "--json",
        ],
        &cache,
    );
    for g in v["graphs"].as_array().unwrap() {
        assert_eq!(
            stages(g),
            ["load", "passes", "lowering", "QNN graph build", "finalize"],
            "{g}"
        );
    }
    let text = ok(
        &[
            "compile",
            s(&m),
            s(&m2),
            "-o",
            s(&both),
            "--no-weight-sharing",
            "--timings",
        ],
        &cache,
    );
    assert_eq!(text.matches("QNN graph build").count(), 2, "{text}");
    // QNNX_LOG=info logs the engine's stages as they end.
    let out = Command::new(env!("CARGO_BIN_EXE_qnnx"))
        .args(["compile", s(&m), "-o", s(&bin)])
        .env("QNNX_LOG", "info")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("finalize: ") && log.contains("passes: "),
        "{log}"
    );
}
