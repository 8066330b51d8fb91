//! The `qnnx` binary end to end on the real HTP library (skips with a message without it, fails
//! with `QNNX_REQUIRE_HTP=1`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use qnn::{Backend, BackendOptions, Context, DType, Device, HtpConfig, Input, Node};

mod common;
use common::temp_dir;

fn qnnx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qnnx"))
        .args(args)
        .output()
        .expect("run qnnx")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn htp() -> Option<Backend> {
    match Backend::open(HtpConfig::host_default(), &BackendOptions::default()) {
        Ok(b) => Some(b),
        Err(e) if std::env::var_os("QNNX_REQUIRE_HTP").is_some() => panic!("HTP unavailable: {e}"),
        Err(e) => {
            eprintln!("skipped: HTP library unavailable ({e})");
            None
        }
    }
}

/// A relu(x) + 1 graph saved as a context binary; returns (path, input, expected output).
fn fixture(dir: &Path) -> Option<(PathBuf, Vec<f32>, Vec<f32>)> {
    let b = htp()?;
    let d = Device::new(&b).unwrap();
    let ctx = Context::new(&b, Some(&d)).unwrap();
    let mut g = ctx.build_graph("net").unwrap();
    let x = g.input("x", DType::F32, &[2, 3]).unwrap();
    let one = g.constant("one", &[2, 3], &[1f32; 6]).unwrap();
    let h = g.native("h", DType::F32, &[2, 3]).unwrap();
    let y = g.output("y", DType::F32, &[2, 3]).unwrap();
    g.add_node(&Node::new("relu", "Relu").inputs(&[x]).outputs(&[h]))
        .unwrap();
    g.add_node(
        &Node::new("add", "ElementWiseAdd")
            .inputs(&[h, one])
            .outputs(&[y]),
    )
    .unwrap();
    let graph = g.finalize().unwrap();
    let input = vec![-2f32, -0.5, 0.0, 0.5, 1.0, 2.0];
    let mut want = vec![0f32; 6];
    graph
        .execute(&[Input::new(&input)], &mut [qnn::Output::new(&mut want)])
        .unwrap();
    let path = dir.join("net.bin");
    ctx.save(&path).unwrap();
    Some((path, input, want))
}

fn write_npy_f32(path: &Path, shape: &[usize], v: &[f32]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
        dims.join(", ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    std::fs::write(path, bytes).unwrap();
}

fn read_npy_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    bytes[10 + hlen..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn doctor_reports_the_htp_backend() {
    if htp().is_none() {
        return;
    }
    let out = qnnx(&["doctor", "--json"]);
    assert!(out.status.success());
    let v = json(&out);
    let htp = &v["backends"][0];
    assert_eq!(htp["backend"], "Htp");
    assert_eq!(htp["ok"], true, "{v}");
    assert!(htp["build_id"].as_str().unwrap().starts_with('v'));
    assert!(v["libraries"][0]["found"].is_string());
    // The loaded library is a tested release (the one the test matrix asked for, if any), and
    // the tested matrix is listed.
    let qnn = htp["qnn_release"]
        .as_str()
        .expect("a tested release")
        .to_string();
    assert_eq!(htp["tested"], true);
    if let Ok(want) = std::env::var("QNNX_EXPECT_QNN") {
        assert_eq!(qnn, want);
    }
    assert_eq!(v["tested_releases"].as_array().unwrap().len(), 5, "{v}");
    // Text mode too, and the library's load banner must not reach our stdout.
    let text = String::from_utf8(qnnx(&["doctor"]).stdout).unwrap();
    assert!(
        text.contains("Htp") && !text.contains("LIBNATIVE"),
        "{text}"
    );
    assert!(text.contains(&format!("QNN {qnn}, tested")), "{text}");
    assert!(
        text.contains("  (loaded)") && text.contains("QNN 2.47.0"),
        "{text}"
    );

    // The SoC doctor says compiles target is the one compile uses; the platform info (on x86_64
    // the emulator's own SoC 30, v68) is labelled as such, not shown as the target.
    let dir = temp_dir("doctor");
    let onnx = dir.join("relu.onnx");
    let m = lowering::testing::ModelBuilder::new(17)
        .input("x", lowering::dtype::DType::F32, &[2, 4])
        .node("Relu", &["x"], &["y"], &[])
        .output("y");
    std::fs::write(&onnx, m.bytes()).unwrap();
    let out = dir.join("relu.bin");
    let c = json(&qnnx(&[
        "compile",
        onnx.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(
        htp["default_target"]["soc_model"], c["soc_model"],
        "{v}\n{c}"
    );
    assert_eq!(htp["default_target"]["htp_arch"], c["htp_arch"], "{v}\n{c}");
    let soc = c["soc"].as_str().unwrap();
    assert!(
        text.contains(&format!("compiles for {soc} (SoC {}", c["soc_model"])),
        "{text}"
    );
    assert!(!text.contains("platform SoC"), "{text}");
    if cfg!(target_arch = "x86_64") {
        assert_eq!(c["soc_model"], 60);
        assert_eq!(htp["platform_from"], "emulator");
        assert!(
            text.contains("the emulator's platform info reports SoC"),
            "{text}"
        );
    }
}

#[test]
fn inspect_then_run_gives_the_in_process_numbers() {
    let dir = temp_dir("run");
    let Some((bin, input, want)) = fixture(&dir) else {
        return;
    };
    let v = json(&qnnx(&["inspect", bin.to_str().unwrap(), "--json"]));
    assert_eq!(v["graphs"][0]["name"], "net");
    assert_eq!(v["graphs"][0]["inputs"][0]["name"], "x");
    assert_eq!(
        v["graphs"][0]["inputs"][0]["shape"],
        serde_json::json!([2, 3])
    );
    assert_eq!(v["soc_model"], 60);
    assert_eq!(v["soc"], "SC8380XP");

    let x = dir.join("x.npy");
    write_npy_f32(&x, &[2, 3], &input);
    let outdir = dir.join("out");
    let spec = format!("x={}", x.display());
    let out = qnnx(&[
        "run",
        bin.to_str().unwrap(),
        "--input",
        &spec,
        "--runs",
        "5",
        "-o",
        outdir.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v = json(&out);
    assert_eq!(v["runs"], 5);
    assert!(v["median_ms"].as_f64().unwrap() > 0.0);
    assert!(v["p95_ms"].as_f64().unwrap() >= v["min_ms"].as_f64().unwrap());
    assert_eq!(read_npy_f32(&outdir.join("y.npy")), want);
    assert_eq!(
        v["outputs"][0]["file"],
        outdir.join("y.npy").to_str().unwrap()
    );

    // Without -o nothing is written (not even into the working folder); a summary is printed.
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_qnnx"))
        .args([
            "run",
            bin.to_str().unwrap(),
            "--input",
            &spec,
            "--runs",
            "1",
        ])
        .current_dir(&cwd)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("output \"y\": f32 [2, 3], min "), "{text}");
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0, "files written");
}

#[test]
fn bad_inputs_fail_with_clear_messages() {
    let dir = temp_dir("bad");
    let missing = qnnx(&["inspect", "/nonexistent/model.bin"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/model.bin"));
    let Some((bin, _, _)) = fixture(&dir) else {
        return;
    };
    let bytes = std::fs::read(&bin).unwrap();
    let corrupt = dir.join("corrupt.bin");
    std::fs::write(&corrupt, &bytes[..bytes.len() / 3]).unwrap();
    for cmd in ["inspect", "run"] {
        let out = qnnx(
            &[cmd, corrupt.to_str().unwrap(), "-o", dir.to_str().unwrap()]
                [..if cmd == "run" { 4 } else { 2 }],
        );
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("MALFORMED_BINARY") || err.contains("30010"),
            "{cmd}: {err}"
        );
    }
    let out = qnnx(&["run", bin.to_str().unwrap(), "--soc", "SM9999"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SC8380XP (60)"));
    let out = qnnx(&["run", bin.to_str().unwrap(), "--input", "nope=x.npy"]);
    assert_eq!(out.status.code(), Some(1));
    let out = qnnx(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}
