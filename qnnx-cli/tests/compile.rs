//! `qnnx compile / check / run model.onnx / cache` end to end. Models come from
//! `make_models.py` (onnx + numpy, with onnx.reference outputs) or, for tests that need no QNN
//! library, from `lowering::testing::ModelBuilder`. Live tests skip with a message without the
//! HTP library or the Python `onnx` package, and fail instead with `QNNX_REQUIRE_HTP=1`.

use std::path::Path;
use std::process::Command;

use lowering::dtype::{DType, OnnxCode};
use lowering::tensor::Tensor;
use lowering::testing::{ModelBuilder, A};
use serde_json::Value;

mod common;
use common::{htp_available, json, ok_json, qnnx, qnnx_env, required, s, stderr, temp_dir};

/// The models of make_models.py in `dir`, or `None` (skip) without Python's onnx package.
fn make_models(dir: &Path) -> Option<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/make_models.py");
    let out = Command::new("python3").arg(&script).arg(dir).output();
    match out {
        Ok(o) if o.status.success() => Some(()),
        Ok(o) if required() => panic!("make_models.py failed: {}", stderr(&o)),
        Err(e) if required() => panic!("python3 unavailable: {e}"),
        Ok(o) => {
            eprintln!(
                "skipped: make_models.py failed (is the onnx package installed?): {}",
                stderr(&o)
            );
            None
        }
        Err(e) => {
            eprintln!("skipped: python3 unavailable ({e})");
            None
        }
    }
}

/// A .npy file: its descr, shape and data bytes.
fn read_npy(path: &Path) -> (String, Vec<usize>, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = String::from_utf8_lossy(&bytes[10..10 + hlen]).into_owned();
    let descr = header.split('\'').nth(3).unwrap().to_string();
    let shape_text = &header[header.find('(').unwrap() + 1..header.find(')').unwrap()];
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (descr, shape, bytes[10 + hlen..].to_vec())
}

fn f32s(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let (descr, shape, data) = read_npy(path);
    assert_eq!(descr, "<f4", "{}", path.display());
    let v = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (shape, v)
}

fn assert_close(got: &[f32], want: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}[{i}]: got {g}, want {w} (atol {atol}, rtol {rtol})\ngot  {got:?}\nwant {want:?}"
        );
    }
}

/// What the Python package computes for the same ONNX file, or `None` (skip) when
/// `qnnx_backend` is not installed (on a fresh machine it is built after the Rust tests).
fn python_path(model: &Path, input: &Path, out: &Path) -> Option<()> {
    const SCRIPT: &str = r#"
import sys, numpy as np
from qnnx_backend import _native
c = _native.compile(open(sys.argv[1], "rb").read(), _native.Spec("npu"))
x = np.ascontiguousarray(np.load(sys.argv[2]))
(_, _, shape, _), = c.outputs
y = np.empty(shape, np.float32)
c.run([(x.ctypes.data, x.nbytes)], [(y.ctypes.data, y.nbytes)])
np.save(sys.argv[3], y)
"#;
    let probe = Command::new("python3")
        .args(["-c", "import qnnx_backend._native"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped the Python-path comparison: qnnx_backend is not installed");
        return None;
    }
    let o = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(model)
        .arg(input)
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "Python path failed: {}", stderr(&o));
    Some(())
}

#[test]
fn compile_inspect_run_match_the_reference_and_the_python_path() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("e2e");
    let Some(()) = make_models(&dir) else {
        return;
    };
    // fp16 tolerance: the emulated HTP (SoC 60) computes float graphs in fp16.
    for (name, input, output) in [("mlp", "x", "y"), ("cnn", "img", "scores")] {
        let onnx = dir.join(format!("{name}.onnx"));
        let bin = dir.join(format!("{name}.bin"));
        let x = dir.join(format!("{name}.in.{input}.npy"));
        let spec = format!("{input}={}", x.display());

        let v = ok_json(&["check", s(&onnx), "--json"]);
        assert_eq!(v["supported"], true, "{v}");

        let v = ok_json(&["compile", s(&onnx), "-o", s(&bin), "--json"]);
        assert_eq!(v["soc"], "SC8380XP", "{v}");
        assert_eq!(v["inputs"][0]["name"], input);
        assert!(v["size"].as_u64().unwrap() > 0);
        assert_eq!(
            std::fs::metadata(&bin).unwrap().len(),
            v["size"].as_u64().unwrap()
        );

        let v = ok_json(&["inspect", s(&bin), "--json"]);
        assert_eq!(v["graphs"][0]["name"], "qnnx");
        assert_eq!(v["graphs"][0]["inputs"][0]["name"], input);
        assert_eq!(v["graphs"][0]["outputs"][0]["name"], output);
        assert_eq!(v["soc_model"], 60);

        let out_bin = dir.join(format!("{name}-out-bin"));
        let out_onnx = dir.join(format!("{name}-out-onnx"));
        let v = ok_json(&[
            "run",
            s(&bin),
            "--input",
            &spec,
            "--runs",
            "3",
            "-o",
            s(&out_bin),
            "--json",
        ]);
        assert_eq!(v["runs"], 3);
        assert!(v["p95_ms"].as_f64().unwrap() >= v["min_ms"].as_f64().unwrap());
        let v = ok_json(&[
            "run",
            s(&onnx),
            "--input",
            &spec,
            "--runs",
            "2",
            "-o",
            s(&out_onnx),
            "--json",
        ]);
        assert_eq!(v["prepare"]["from_cache"], false);

        let file = format!("{output}.npy");
        let (shape_bin, y_bin) = f32s(&out_bin.join(&file));
        let (shape_onnx, y_onnx) = f32s(&out_onnx.join(&file));
        let (shape_ref, y_ref) = f32s(&dir.join(format!("{name}.ref.{output}.npy")));
        assert_eq!(shape_bin, shape_ref);
        assert_eq!(shape_onnx, shape_ref);
        assert_eq!(y_bin, y_onnx, "{name}: .bin and .onnx runs differ");
        assert_close(&y_onnx, &y_ref, 2e-3, 5e-3, name);

        let py = dir.join(format!("{name}-py.npy"));
        if python_path(&onnx, &x, &py).is_some() {
            assert_eq!(f32s(&py).1, y_onnx, "{name}: Python path differs");
        }
    }

    // Random inputs depend on the input name only: .bin and .onnx get the same ones.
    let a = dir.join("rand-bin");
    let b = dir.join("rand-onnx");
    ok_json(&[
        "run",
        s(&dir.join("mlp.bin")),
        "-o",
        s(&a),
        "--runs",
        "0",
        "--json",
    ]);
    ok_json(&[
        "run",
        s(&dir.join("mlp.onnx")),
        "-o",
        s(&b),
        "--runs",
        "0",
        "--json",
    ]);
    assert_eq!(f32s(&a.join("y.npy")).1, f32s(&b.join("y.npy")).1);

    // int64 model I/O: the graph takes int32, `run model.onnx` converts at the boundary.
    let int = dir.join("int.onnx");
    let out = dir.join("int-out");
    let spec = format!("ids={}", dir.join("int.in.ids.npy").display());
    ok_json(&[
        "run",
        s(&int),
        "--input",
        &spec,
        "-o",
        s(&out),
        "--runs",
        "1",
        "--json",
    ]);
    let got = read_npy(&out.join("out.npy"));
    let want = read_npy(&dir.join("int.ref.out.npy"));
    assert_eq!(got, want);
    let v = ok_json(&["compile", s(&int), "-o", s(&dir.join("int.bin")), "--json"]);
    assert_eq!(v["inputs"][0]["dtype"], "i32");
    assert_eq!(v["inputs"][0]["model_dtype"], "i64");
}

fn relu_model() -> ModelBuilder {
    ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 4])
        .node("Relu", &["x"], &["y"], &[])
        .output("y")
}

#[test]
fn binaries_for_other_socs_inspect_as_those_socs() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("socs");
    let onnx = dir.join("relu.onnx");
    std::fs::write(&onnx, relu_model().bytes()).unwrap();
    for (flags, model, name, arch) in [
        (&["--soc", "SM8650"][..], 57, "SM8650", 75),
        (&["--soc", "x1e80100"][..], 60, "SC8380XP", 73),
        (&["--soc-model", "43"][..], 43, "SM8550", 73),
        (
            &["--soc", "SM8750", "--htp-arch", "v79"][..],
            69,
            "SM8750",
            79,
        ),
    ] {
        let bin = dir.join(format!("relu-{model}.bin"));
        let mut args = vec!["compile", s(&onnx), "-o", s(&bin), "--json"];
        args.extend_from_slice(flags);
        let v = ok_json(&args);
        assert_eq!(v["soc"], name, "{flags:?}: {v}");
        let v = ok_json(&["inspect", s(&bin), "--json"]);
        assert_eq!(v["soc_model"], model, "{flags:?}: {v}");
        assert_eq!(v["soc"], name);
        assert_eq!(v["htp_arch"], arch);
        let text = String::from_utf8(qnnx(&["inspect", s(&bin)]).stdout).unwrap();
        assert!(
            text.contains(&format!("{name}, HTP v{arch}")),
            "{flags:?}: {text}"
        );
        // It runs on the emulator configured as that SoC, with fp16 precision flags too.
        let v = ok_json(&[
            "run",
            s(&bin),
            "-o",
            s(&dir.join("out")),
            "--runs",
            "1",
            "--json",
        ]);
        assert_eq!(v["prepare"]["soc_model"], model);
    }
    let v = ok_json(&[
        "compile",
        s(&onnx),
        "-o",
        s(&dir.join("fp16.bin")),
        "--precision",
        "fp16",
        "--opt-level",
        "3",
        "--json",
    ]);
    assert_eq!(v["precision"], "fp16");
    assert_eq!(
        v["inputs"][0]["dtype"], "f32",
        "graph I/O keeps the model's dtype"
    );
}

/// The emulator runs a binary whatever SoC it was compiled for (docs/qnn-notes.md gotcha 12):
/// `run` checks the SoC given on the command line against the binary's own.
#[test]
fn run_refuses_a_binary_for_another_soc_than_given() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("run-soc");
    let onnx = dir.join("relu.onnx");
    std::fs::write(&onnx, relu_model().bytes()).unwrap();
    let bin = dir.join("relu-sm8650.bin");
    ok_json(&[
        "compile",
        s(&onnx),
        "-o",
        s(&bin),
        "--soc",
        "SM8650",
        "--json",
    ]);
    for flags in [&["--soc", "SC8380XP"][..], &["--soc-model", "60"][..]] {
        let mut args = vec!["run", s(&bin), "--runs", "1"];
        args.extend_from_slice(flags);
        let out = qnnx(&args);
        assert_eq!(out.status.code(), Some(3), "{flags:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("is for SoC 57 (SM8650), the target is SoC 60 (SC8380XP)")
                && err.contains("--soc SM8650"),
            "{err}"
        );
    }
    for flags in [
        &["--soc", "SM8650"][..],
        &["--soc-model", "57"][..],
        &[][..],
    ] {
        let mut args = vec!["run", s(&bin), "--runs", "1", "--json"];
        args.extend_from_slice(flags);
        let v = ok_json(&args);
        assert_eq!(v["prepare"]["soc_model"], 57, "{flags:?}");
    }
}

#[test]
fn float_models_are_refused_for_socs_without_fp16() {
    // Checked before QNN is asked: needs no library.
    let dir = temp_dir("fp16");
    let onnx = dir.join("relu.onnx");
    std::fs::write(&onnx, relu_model().bytes()).unwrap();
    for flags in [&["--soc", "QCS6490"][..], &["--htp-arch", "v68"][..]] {
        let mut args = vec!["compile", s(&onnx), "-o", "/nonexistent/x.bin"];
        args.extend_from_slice(flags);
        let out = qnnx(&args);
        assert_eq!(out.status.code(), Some(3), "{flags:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("FP16") && err.contains("float"), "{err}");
        assert!(err.contains("SM8650"), "names the SoCs that can: {err}");
        if flags[1] == "QCS6490" {
            assert!(err.contains("QCS6490"), "{err}");
        }
        // check takes the same target flags and refuses it the same way.
        let mut args = vec!["check", s(&onnx)];
        args.extend_from_slice(flags);
        let out = qnnx(&args);
        assert_eq!(out.status.code(), Some(3), "{flags:?}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("FP16") && text.contains("SM8650"), "{text}");
        args.push("--json");
        let v = json(&qnnx(&args));
        assert_eq!(v["supported"], false, "{v}");
        assert_eq!(v["htp_arch"], 68, "{v}");
        assert!(v["no_float_path"].as_str().unwrap().contains("FP16"), "{v}");
    }
    // A quantized model passes the same check for the v68 SoC; the float one passes at the
    // default target (SoC 60).
    let qdq = dir.join("relu.qdq.onnx");
    let scale = || Tensor::from_f32(vec![], &[0.02]);
    let zero = || Tensor::from_i64_as(DType::U8, vec![], &[128]);
    let m = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 4])
        .init("s", scale())
        .init("z", zero())
        .node("QuantizeLinear", &["x", "s", "z"], &["xq"], &[])
        .node("DequantizeLinear", &["xq", "s", "z"], &["xd"], &[])
        .node("Relu", &["xd"], &["r"], &[])
        .node("QuantizeLinear", &["r", "s", "z"], &["rq"], &[])
        .node("DequantizeLinear", &["rq", "s", "z"], &["y"], &[])
        .output("y");
    std::fs::write(&qdq, m.bytes()).unwrap();
    let v = ok_json(&["check", s(&qdq), "--soc", "QCS6490", "--json"]);
    assert_eq!(
        (v["soc"].as_str(), v["supported"].as_bool()),
        (Some("QCS6490"), Some(true)),
        "{v}"
    );
    let v = ok_json(&["check", s(&onnx), "--json"]);
    assert_eq!(v["soc_model"], 60, "{v}");
    let out = qnnx(&["check", s(&onnx), "--backend", "gpu", "--soc", "QCS6490"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn check_reports_each_node_and_exits_3_when_one_is_unsupported() {
    let dir = temp_dir("check");
    let onnx = dir.join("det.onnx");
    let m = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 2, 2])
        .named_node("relu", "Relu", &["x"], &["h"], &[])
        // Matrix determinant: no QNN backend has it.
        .named_node("det", "Det", &["h"], &["y"], &[])
        .output("y");
    std::fs::write(&onnx, m.bytes()).unwrap();
    let out = qnnx(&["check", s(&onnx), "--json"]);
    assert_eq!(out.status.code(), Some(3));
    let v = json(&out);
    assert_eq!(v["supported"], false);
    assert_eq!(v["node_count"], 2);
    assert_eq!(v["supported_count"], 1);
    assert_eq!(v["nodes"][0]["supported"], true);
    assert_eq!(v["nodes"][1]["name"], "det");
    assert_eq!(v["unsupported"][0]["node"], "det");
    assert!(v["unsupported"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("Det"));
    let text = qnnx(&["check", s(&onnx)]);
    assert_eq!(text.status.code(), Some(3));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("1 of 2 nodes") && text.contains("Det"),
        "{text}"
    );

    // compile and run refuse it the same way.
    let cmds: &[&str] = if htp_available() {
        &["compile", "run"]
    } else {
        &[]
    };
    for &cmd in cmds {
        let out = qnnx(&[cmd, s(&onnx), "--json"]);
        assert_eq!(out.status.code(), Some(3), "{cmd}");
        let v = json(&out);
        assert_eq!(v["exit_code"], 3);
        assert_eq!(v["unsupported"][0]["node"], "det", "{cmd}: {v}");
        assert!(v["error"].as_str().unwrap().contains("qnnx check"), "{v}");
    }

    let ok = dir.join("relu.onnx");
    std::fs::write(&ok, relu_model().bytes()).unwrap();
    let out = qnnx(&["check", s(&ok)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn bad_inputs_fail_with_what_to_do() {
    let dir = temp_dir("bad");
    let garbage = dir.join("garbage.onnx");
    std::fs::write(&garbage, b"not a protobuf \xff\xff\xff\xff").unwrap();
    let missing = dir.join("missing.onnx");
    for cmd in ["compile", "check", "run"] {
        let out = qnnx(&[cmd, s(&missing)]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        assert!(stderr(&out).contains("missing.onnx"), "{cmd}");
        assert!(stderr(&out).contains("check the path"), "{cmd}");

        let out = qnnx(&[cmd, s(&garbage)]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        assert!(
            stderr(&out).contains("not an ONNX model"),
            "{cmd}: {}",
            stderr(&out)
        );
    }
    let relu = dir.join("relu.onnx");
    std::fs::write(&relu, relu_model().bytes()).unwrap();
    let out = qnnx(&["compile", s(&relu), "--soc", "SM9999"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("SM8650 (57)"), "{}", stderr(&out));
    let out = qnnx(&["compile", s(&relu), "--soc", "SM9999", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(json(&out)["error"]
        .as_str()
        .unwrap()
        .contains("unknown SoC"));
    let out = qnnx(&["compile", s(&relu), "--htp-arch", "v70"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("v73"), "{}", stderr(&out));
    let out = qnnx(&["compile", s(&relu), "--soc", "SM8650", "--htp-arch", "v73"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("HTP v75"), "{}", stderr(&out));
    let out = qnnx(&["compile", s(&relu), "--opt-level", "4"]);
    assert_eq!(out.status.code(), Some(2));
    let out = qnnx(&["compile", s(&relu), "--backend", "gpu", "--soc", "SM8650"]);
    assert_eq!(out.status.code(), Some(2));
    let out = qnnx(&["cache", "prune", "--max-size", "lots"]);
    assert_eq!(out.status.code(), Some(2));

    // A symbolic input dim without --input-shape says how to give one.
    let dynamic = dir.join("dynamic.onnx");
    let m = ModelBuilder::new(17)
        .input("x", DType::F32, &[-1, 4])
        .node("Relu", &["x"], &["y"], &[])
        .output("y");
    std::fs::write(&dynamic, m.bytes()).unwrap();
    let out = qnnx(&["compile", s(&dynamic), "--soc", "QCS6490"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--input-shape"), "{}", stderr(&out));
    // An ONNX file given to inspect is recognised.
    if htp_available() {
        let out = qnnx(&["inspect", s(&relu)]);
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains("qnnx compile"), "{}", stderr(&out));
    }
}

#[test]
fn cache_is_shared_listed_pruned_and_cleared() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("cache");
    let cache = dir.join("cache");
    let onnx = dir.join("relu.onnx");
    std::fs::write(&onnx, relu_model().bytes()).unwrap();
    let c = s(&cache);

    let v = ok_json(&["cache", "list", "--cache-dir", c, "--json"]);
    assert_eq!(v["entries"], serde_json::json!([]));
    assert!(!cache.exists(), "listing does not create the folder");

    let a = dir.join("a.bin");
    let b = dir.join("b.bin");
    let v = ok_json(&[
        "compile",
        s(&onnx),
        "-o",
        s(&a),
        "--cache",
        "--cache-dir",
        c,
        "--json",
    ]);
    assert_eq!(v["from_cache"], false);
    let key = v["cache_key"].as_str().unwrap().to_string();
    // $QNNX_CACHE_DIR names the same folder.
    let out = qnnx_env(
        &["compile", s(&onnx), "-o", s(&b), "--cache", "--json"],
        &[("QNNX_CACHE_DIR", &cache)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["from_cache"], true, "{v}");
    assert_eq!(v["cache_key"], key.as_str());
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    // run model.onnx uses the same entry (same graph name and settings).
    let v = ok_json(&[
        "run",
        s(&onnx),
        "--cache",
        "--cache-dir",
        c,
        "-o",
        s(&dir.join("out")),
        "--runs",
        "1",
        "--json",
    ]);
    assert_eq!(v["prepare"]["from_cache"], true, "{v}");
    // Without --cache nothing is read or written.
    let v = ok_json(&["compile", s(&onnx), "-o", s(&b), "--cache-dir", c, "--json"]);
    assert_eq!(v["from_cache"], false);
    assert_eq!(v["cache_key"], Value::Null);

    let v = ok_json(&["cache", "list", "--cache-dir", c, "--json"]);
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{v}");
    assert_eq!(entries[0]["key"], key.as_str());
    assert_eq!(entries[0]["soc"], "SC8380XP");
    assert_eq!(entries[0]["graphs"], serde_json::json!(["qnnx"]));
    let size = v["bytes"].as_u64().unwrap();
    assert!(size > 0);

    let v = ok_json(&["doctor", "--cache-dir", c, "--json"]);
    assert_eq!(v["cache"]["entries"], 1);
    assert_eq!(v["cache"]["bytes"], size);

    let v = ok_json(&[
        "cache",
        "prune",
        "--max-size",
        "1G",
        "--cache-dir",
        c,
        "--json",
    ]);
    assert_eq!(v["removed"], serde_json::json!([]));
    // A Python FX alias pointing at the entry goes with it.
    std::fs::create_dir_all(cache.join("fx")).unwrap();
    let alias = cache.join("fx").join(format!("{}.key", "ab".repeat(32)));
    std::fs::write(&alias, &key).unwrap();
    let v = ok_json(&[
        "cache",
        "prune",
        "--max-size",
        "1K",
        "--cache-dir",
        c,
        "--json",
    ]);
    assert_eq!(v["removed"][0]["key"], key.as_str());
    assert_eq!(v["removed_aliases"], 1);
    assert!(!alias.exists());
    let v = ok_json(&["cache", "list", "--cache-dir", c, "--json"]);
    assert_eq!(v["entries"], serde_json::json!([]));

    ok_json(&[
        "compile",
        s(&onnx),
        "-o",
        s(&a),
        "--cache",
        "--cache-dir",
        c,
        "--json",
    ]);
    let text = qnnx(&["cache", "clear", "--cache-dir", c]);
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("removed 1 entries"));
    assert_eq!(
        ok_json(&["cache", "list", "--cache-dir", c, "--json"])["bytes"],
        0
    );
}

#[test]
fn external_data_models_compile_without_the_cache() {
    if !htp_available() {
        return;
    }
    use lowering::onnx;
    let dir = temp_dir("external");
    let mut m = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 4])
        .node("Add", &["x", "w"], &["y"], &[])
        .output("y");
    let w: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(dir.join("w.data"), &w).unwrap();
    let entry = |k: &str, v: &str| onnx::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    m.model
        .graph
        .as_mut()
        .unwrap()
        .initializer
        .push(onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![2, 4],
            data_type: Some(DType::F32.to_onnx()),
            data_location: Some(onnx::data_location::EXTERNAL),
            external_data: vec![entry("location", "w.data"), entry("length", "32")],
            ..Default::default()
        });
    let onnx_path = dir.join("add.onnx");
    std::fs::write(&onnx_path, m.bytes()).unwrap();
    let cache = dir.join("cache");
    let out = qnnx(&[
        "compile",
        s(&onnx_path),
        "--cache",
        "--cache-dir",
        s(&cache),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["cache_key"], Value::Null);
    assert!(stderr(&out).contains("external data"), "{}", stderr(&out));
    assert!(
        dir.join("add.bin").is_file(),
        "default output: the model's path with .bin"
    );
    let v = ok_json(&["cache", "list", "--cache-dir", s(&cache), "--json"]);
    assert_eq!(v["entries"], serde_json::json!([]));
}

#[cfg(unix)]
#[test]
fn check_refuses_a_fifo_as_external_data_promptly() {
    // Lowering only: needs no QNN library. The old loader opened the FIFO for reading and
    // waited for a writer forever.
    use lowering::onnx;
    let dir = temp_dir("fifo");
    let fifo = dir.join("w.data");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.as_ref().is_ok_and(|s| s.success()) {
        eprintln!("skipped: mkfifo failed ({made:?})");
        return;
    }
    let mut m = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 4])
        .node("Add", &["x", "w"], &["y"], &[])
        .output("y");
    let entry = |k: &str, v: &str| onnx::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    m.model
        .graph
        .as_mut()
        .unwrap()
        .initializer
        .push(onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![2, 4],
            data_type: Some(DType::F32.to_onnx()),
            data_location: Some(onnx::data_location::EXTERNAL),
            external_data: vec![entry("location", "w.data"), entry("length", "32")],
            ..Default::default()
        });
    let onnx_path = dir.join("add.onnx");
    std::fs::write(&onnx_path, m.bytes()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_qnnx"))
        .args(["check", s(&onnx_path)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("qnnx check blocked on the FIFO for 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("initializer 'w'")
            && err.contains("is a FIFO, not a regular file")
            && err.contains(s(&fifo)),
        "{err}"
    );
}

/// A two-layer MatMul + Relu stack (256 x 256 weights, the same values whatever `rows`) taking
/// x [rows, 256]: the "prefill" and "decode" of one model.
fn stack_model(rows: i64) -> Vec<u8> {
    const D: usize = 256;
    ModelBuilder::new(17)
        .input("x", DType::F32, &[rows, D as i64])
        .init(
            "w1",
            lowering::tensor::Tensor::from_f32(
                vec![D, D],
                &lowering::testing::rand_f32(1, D * D)
                    .iter()
                    .map(|v| v * 0.06)
                    .collect::<Vec<_>>(),
            ),
        )
        .init(
            "w2",
            lowering::tensor::Tensor::from_f32(
                vec![D, D],
                &lowering::testing::rand_f32(2, D * D)
                    .iter()
                    .map(|v| v * 0.06)
                    .collect::<Vec<_>>(),
            ),
        )
        .node("MatMul", &["x", "w1"], &["h"], &[])
        .node("Relu", &["h"], &["r"], &[])
        .node("MatMul", &["r", "w2"], &["y"], &[])
        .output("y")
        .bytes()
}

#[test]
fn several_models_compile_to_one_binary_with_shared_weights() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("many");
    let (prefill, decode) = (dir.join("prefill.onnx"), dir.join("decode.onnx"));
    std::fs::write(&prefill, stack_model(32)).unwrap();
    std::fs::write(&decode, stack_model(1)).unwrap();
    let shared = dir.join("shared.bin");
    let plain = dir.join("plain.bin");
    let v = ok_json(&[
        "compile",
        s(&prefill),
        s(&decode),
        "-o",
        s(&shared),
        "--json",
    ]);
    assert_eq!(v["weight_sharing"], true, "{v}");
    // Named after the file stems; the library lists them in no fixed order.
    let graphs = v["graphs"].as_array().unwrap();
    let mut names: Vec<&str> = graphs.iter().map(|g| g["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        ["decode", "prefill"],
        "graph names from the file stems"
    );
    let decode_graph = graphs.iter().find(|g| g["name"] == "decode").unwrap();
    assert_eq!(
        decode_graph["inputs"][0]["shape"],
        serde_json::json!([1, 256])
    );
    let shared_size = v["size"].as_u64().unwrap();
    assert!(v["shared_weights_bytes"].as_u64().unwrap() >= 2 * 256 * 256 * 2);
    let v = ok_json(&[
        "compile",
        s(&prefill),
        s(&decode),
        "-o",
        s(&plain),
        "--no-weight-sharing",
        "--names",
        "pre,dec",
        "--json",
    ]);
    assert_eq!(v["weight_sharing"], false);
    assert_eq!(v["graphs"][0]["name"], "pre");
    let plain_size = v["size"].as_u64().unwrap();
    assert!(
        (shared_size as f64) < 0.75 * plain_size as f64,
        "shared {shared_size} bytes, plain {plain_size} bytes"
    );
    assert_eq!(std::fs::metadata(&shared).unwrap().len(), shared_size);

    // inspect shows every graph, and whether weights are shared.
    let v = ok_json(&["inspect", s(&shared), "--json"]);
    assert_eq!(v["weight_sharing"], true);
    let graphs = v["graphs"].as_array().unwrap();
    assert_eq!(graphs.len(), 2);
    let decode_graph = graphs
        .iter()
        .find(|g| g["name"] == "decode")
        .expect("decode listed");
    assert_eq!(
        decode_graph["inputs"][0]["shape"],
        serde_json::json!([1, 256])
    );
    assert!(graphs.iter().any(|g| g["name"] == "prefill"), "{v}");
    let text = String::from_utf8(qnnx(&["inspect", s(&shared)]).stdout).unwrap();
    assert!(text.contains("graph \"prefill\""), "{text}");
    assert!(text.contains("graph \"decode\""), "{text}");
    assert!(text.contains("2 graphs sharing"), "{text}");
    let v = ok_json(&["inspect", s(&plain), "--json"]);
    assert_eq!(v["weight_sharing"], false);
    let graphs = v["graphs"].as_array().unwrap();
    assert!(graphs.iter().any(|g| g["name"] == "dec"), "{v}");

    // The unshared binary runs here, each graph by name; the shared one is refused with why.
    let out = dir.join("out");
    for graph in ["pre", "dec"] {
        ok_json(&[
            "run",
            s(&plain),
            "--graph",
            graph,
            "--runs",
            "1",
            "-o",
            s(&out),
            "--json",
        ]);
    }
    if cfg!(target_arch = "x86_64") {
        let r = qnnx(&["run", s(&shared), "--runs", "1", "-o", s(&out)]);
        assert_eq!(r.status.code(), Some(1));
        assert!(stderr(&r).contains("weight sharing"), "{}", stderr(&r));
    }

    // Bad command lines.
    for (args, want) in [
        (vec!["compile", s(&prefill), s(&decode)], "-o FILE"),
        (
            vec![
                "compile",
                s(&prefill),
                s(&decode),
                "-o",
                s(&plain),
                "--graph-name",
                "g",
            ],
            "--names",
        ),
        (
            vec![
                "compile",
                s(&prefill),
                s(&decode),
                "-o",
                s(&plain),
                "--names",
                "a",
            ],
            "1 names for 2 models",
        ),
        (
            vec!["compile", s(&prefill), s(&prefill), "-o", s(&plain)],
            "two graphs would be named",
        ),
    ] {
        let r = qnnx(&args);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", stderr(&r));
        assert!(stderr(&r).contains(want), "{args:?}: {}", stderr(&r));
    }
}

/// A cache folder other users can write is not used: the compile goes on without it, with one
/// warning naming the folder, and `doctor` reports it.
#[cfg(unix)]
#[test]
fn a_cache_folder_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    if !htp_available() {
        return;
    }
    let dir = temp_dir("shared-cache");
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let onnx = dir.join("relu.onnx");
    std::fs::write(&onnx, relu_model().bytes()).unwrap();
    let out = qnnx(&[
        "compile",
        s(&onnx),
        "-o",
        s(&dir.join("relu.bin")),
        "--cache",
        "--cache-dir",
        s(&cache),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains(s(&cache)) && err.contains("writable by"),
        "{err}"
    );
    assert_eq!(
        json(&out)["cache_key"],
        Value::Null,
        "compiled without the cache"
    );
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        0,
        "nothing stored"
    );
    let v = ok_json(&["doctor", "--cache-dir", s(&cache), "--json"]);
    assert!(
        v["cache"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("writable by"),
        "{v}"
    );
}

/// A rank-0 output (`(x * x).mean()` as ONNX) comes back as a rank-0 array, not `(1,)`: the
/// graph tensor is `[1]` (QNN ops take rank >= 1), the model's shape is restored at the boundary.
#[test]
fn rank0_outputs_keep_their_shape() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("rank0");
    let onnx = dir.join("mean.onnx");
    let m = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 3])
        .node("Mul", &["x", "x"], &["sq"], &[])
        .node("ReduceMean", &["sq"], &["y"], &[("keepdims", A::I(0))])
        .output("y");
    std::fs::write(&onnx, m.bytes()).unwrap();
    let out = dir.join("out");
    let v = ok_json(&["run", s(&onnx), "-o", s(&out), "--runs", "0", "--json"]);
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([]), "{v}");
    let (descr, shape, data) = read_npy(&out.join("y.npy"));
    assert_eq!((descr.as_str(), shape, data.len()), ("<f4", vec![], 4));
}

#[test]
fn saved_models_inspect_and_run_like_their_onnx_model() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("saved");
    let onnx = dir.join("m.onnx");
    let model = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 4])
        .node("Relu", &["x"], &["h"], &[])
        .node("Add", &["h", "x"], &["y"], &[])
        .output("y");
    std::fs::write(&onnx, model.bytes()).unwrap();
    let session = qnnx_engine::Session::open(&onnx, &Default::default()).unwrap();
    let saved = dir.join("m.qnnx");
    qnnx_engine::saved::save(
        session.compiled(),
        &saved,
        Default::default(),
        Default::default(),
    )
    .unwrap();

    let v = ok_json(&["inspect", s(&saved), "--json"]);
    let m = &v["saved_model"];
    assert_eq!(m["soc_model"], 60);
    assert_eq!(m["htp_arch"], 73);
    assert_eq!(
        m["graphs"][0]["inputs"][0]["dims"],
        serde_json::json!([2, 4])
    );

    let (a, b) = (dir.join("out-saved"), dir.join("out-onnx"));
    let v = ok_json(&["run", s(&saved), "-o", s(&a), "--json"]);
    assert!(v["prepare"]["load_ms"].as_f64().is_some(), "{v}");
    ok_json(&["run", s(&onnx), "-o", s(&b), "--json"]);
    // Same random inputs (by input name), same graph: the same output bytes.
    assert_eq!(
        std::fs::read(a.join("y.npy")).unwrap(),
        std::fs::read(b.join("y.npy")).unwrap()
    );

    let bytes = std::fs::read(&saved).unwrap();
    std::fs::write(&saved, &bytes[..bytes.len() / 2]).unwrap();
    let out = qnnx(&["run", s(&saved)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("truncated"), "{}", stderr(&out));
}

#[test]
fn each_model_gets_its_own_binary_built_in_parallel_processes() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("each");
    if make_models(&dir).is_none() {
        return;
    }
    let (cnn, mlp, out) = (dir.join("cnn.onnx"), dir.join("mlp.onnx"), dir.join("bins"));
    let v = ok_json(&[
        "--json",
        "compile",
        s(&cnn),
        s(&mlp),
        "--each",
        "--jobs",
        "2",
        "--soc",
        "60",
        "--out-dir",
        s(&out),
    ]);
    assert_eq!(v["jobs"], 2, "{v}");
    assert_eq!(v["failed"], 0, "{v}");
    let bins = v["binaries"].as_array().unwrap();
    assert_eq!(bins.len(), 2, "{v}");
    assert_eq!(bins[0]["output"], s(&out.join("cnn.bin")));
    assert_eq!(bins[1]["inputs"][0]["name"], "x", "{v}");
    // Each is what a single-model compile in a process of its own writes, byte for byte
    // (binaries of one graph built in separate processes are identical: docs/profiling.md).
    let single = dir.join("single.bin");
    ok_json(&[
        "--json",
        "compile",
        s(&cnn),
        "--soc",
        "60",
        "-o",
        s(&single),
    ]);
    assert_eq!(
        std::fs::read(out.join("cnn.bin")).unwrap(),
        std::fs::read(&single).unwrap()
    );
    // A model that fails is reported with the others built: one JSON document, exit 1.
    let out2 = dir.join("bins2");
    let missing = dir.join("missing.onnx");
    let o = qnnx(&[
        "--json",
        "compile",
        s(&mlp),
        s(&missing),
        "--each",
        "--soc",
        "60",
        "--out-dir",
        s(&out2),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("1 of 2 models failed"),
        "{v}"
    );
    assert_eq!(v["binaries"][1]["model"], s(&missing), "{v}");
    assert!(out2.join("mlp.bin").exists());
    assert!(!out2.join("missing.bin").exists());
    // Two models whose binaries would collide are refused before anything is built.
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(&cnn, sub.join("cnn.onnx")).unwrap();
    let o = qnnx(&[
        "compile",
        s(&cnn),
        s(&sub.join("cnn.onnx")),
        "--each",
        "--out-dir",
        s(&dir.join("bins3")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("would both write"), "{}", stderr(&o));
}
