//! `qnnx quantize` end to end: make_models.py's float CNN and MLP, calibration data written by
//! numpy, the QDQ model checked by onnx's checker, compiled for the v68 QCS6490 (which runs no
//! float model) and run against the float reference; and the mistakes a user makes with the
//! calibration data, each a clear error. Live tests skip without the HTP library or Python's
//! onnx package, and fail instead with `QNNX_REQUIRE_HTP=1`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;
use common::{htp_available, qnnx, required, s, stderr, temp_dir};

/// Runs a Python snippet (numpy and onnx); `None` (skip) where Python or onnx is missing.
fn python(code: &str) -> Option<String> {
    let out = Command::new("python3").arg("-c").arg(code).output();
    match out {
        Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) if required() => panic!("python failed: {}", stderr(&o)),
        Err(e) if required() => panic!("python3 unavailable: {e}"),
        Ok(o) => {
            eprintln!("skipped: python failed (onnx installed?): {}", stderr(&o));
            None
        }
        Err(e) => {
            eprintln!("skipped: python3 unavailable ({e})");
            None
        }
    }
}

/// make_models.py's models in `dir`.
fn models(dir: &Path) -> Option<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/make_models.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        assert!(!required(), "make_models.py: {}", stderr(&out));
        eprintln!("skipped: make_models.py failed: {}", stderr(&out));
        return None;
    }
    Some(())
}

/// Calibration data of the kind make_models.py's CNN sees (its input is standard normal): 16
/// samples in one .npz.
fn cnn_calibration(calib: &Path) {
    let code = format!(
        r#"
import numpy as np
r = np.random.default_rng(1)
np.savez({calib:?}, img=r.standard_normal((16, 1, 3, 8, 8)).astype(np.float32))
"#,
        calib = s(calib)
    );
    python(&code).unwrap();
}

/// Runs the CNN's quantized model `qdq` on the QCS6490 with make_models.py's input and returns
/// the cosine and the largest error (as a share of the output range) against its float
/// reference.
fn run_on_v68(dir: &Path, qdq: &Path) -> (f64, f64) {
    let outd = dir.join("out");
    let run = qnnx(&[
        "run",
        s(qdq),
        "--soc",
        "QCS6490",
        "--input",
        &format!("img={}", s(&dir.join("cnn.in.img.npy"))),
        "--runs",
        "1",
        "-o",
        s(&outd),
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let code = format!(
        r#"
import numpy as np
a = np.load({got:?}).ravel(); b = np.load({want:?}).ravel()
print(float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b)), float(np.abs(a - b).max() / (b.max() - b.min())))
"#,
        got = s(&outd.join("scores.npy")),
        want = s(&dir.join("cnn.ref.scores.npy"))
    );
    let r: Vec<f64> = python(&code)
        .unwrap()
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (r[0], r[1])
}

#[test]
fn a_quantized_cnn_runs_on_v68_close_to_the_float_reference() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("cnn");
    if models(&dir).is_none() {
        return;
    }
    let (onnx, calib, qdq) = (
        dir.join("cnn.onnx"),
        dir.join("calib.npz"),
        dir.join("cnn.qdq.onnx"),
    );
    cnn_calibration(&calib);
    let out = qnnx(&[
        "--json",
        "quantize",
        s(&onnx),
        "--calib",
        s(&calib),
        "-o",
        s(&qdq),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["samples"], 16);
    assert_eq!(v["scheme"], "8a8w");
    assert!(v["weights"].as_u64().unwrap() >= 2, "{v}");
    assert_eq!(v["float_nodes"].as_array().unwrap().len(), 0, "{v}");
    // A standard QDQ model: onnx's checker accepts it and its weights are int8 per channel.
    let code = format!(
        r#"
import onnx, collections
m = onnx.load({qdq:?}); onnx.checker.check_model(m)
ops = collections.Counter(n.op_type for n in m.graph.node)
ints = [i for i in m.graph.initializer if i.data_type == onnx.TensorProto.INT8]
print(ops["QuantizeLinear"], ops["DequantizeLinear"], len(ints))
"#,
        qdq = s(&qdq)
    );
    let counts = python(&code).unwrap();
    let counts: Vec<usize> = counts
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(counts[0] >= 4 && counts[1] > counts[0], "{counts:?}");
    assert!(counts[2] >= 2, "int8 weights: {counts:?}");
    // check shows the lowered tensors: all quantized but the float I/O.
    let out = qnnx(&["--json", "check", s(&qdq)]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["plan"]["quantized"], true, "{v}");
    assert_eq!(v["plan"]["float_nodes"].as_array().unwrap().len(), 0, "{v}");
    let enc = v["plan"]["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["dtype"] == "qi8")
        .expect("int8 weights");
    assert_eq!(enc["encoding"]["storage"], "i8");
    assert!(enc["encoding"]["axis"].is_u64(), "per channel: {enc}");
    // With quantized I/O, inspect shows the binary's input encoding.
    let bin = dir.join("cnn.qdq.bin");
    let out = qnnx(&[
        "compile",
        s(&qdq),
        "--quantized-io",
        "--soc",
        "QCS6490",
        "-o",
        s(&bin),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = qnnx(&["--json", "inspect", s(&bin)]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let input = &v["graphs"][0]["inputs"][0];
    assert_eq!(input["dtype"], "qu8", "{v}");
    assert!(
        input["encoding"]["scale"].as_f64().unwrap() > 0.0,
        "{input}"
    );
    // It compiles for QCS6490, where the float model is refused, and runs close to the float
    // reference (one 8-bit step of the output range is about 0.4% of it).
    let (cos, max_err) = run_on_v68(&dir, &qdq);
    assert!(cos >= 0.99, "cosine {cos}");
    assert!(max_err <= 0.05, "max error {max_err} of the output range");
}

#[test]
fn a_16a4w_model_stores_int4_weights_and_runs_on_v68() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("cnn4");
    if models(&dir).is_none() {
        return;
    }
    let (onnx, calib, qdq) = (
        dir.join("cnn.onnx"),
        dir.join("calib.npz"),
        dir.join("cnn.16a4w.onnx"),
    );
    cnn_calibration(&calib);
    let out = qnnx(&[
        "quantize",
        s(&onnx),
        "--calib",
        s(&calib),
        "--scheme",
        "16a4w",
        "-o",
        s(&qdq),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Standard ONNX: INT4 weights (opset 21), values in -7..7, checked by onnx's checker.
    let code = format!(
        r#"
import onnx
from onnx import numpy_helper
m = onnx.load({qdq:?}); onnx.checker.check_model(m)
w = [numpy_helper.to_array(i) for i in m.graph.initializer if i.data_type == onnx.TensorProto.INT4]
print(len(w), min(int(a.min()) for a in w), max(int(a.max()) for a in w))
"#,
        qdq = s(&qdq)
    );
    let r: Vec<i64> = python(&code)
        .unwrap()
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(r[0] >= 2 && r[1] >= -8 && r[2] <= 7, "int4 weights: {r:?}");
    let out = qnnx(&["--json", "check", s(&qdq)]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["plan"]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["dtype"] == "qi4"),
        "{v}"
    );
    let (cos, _) = run_on_v68(&dir, &qdq);
    // Measured 0.99972 on the QNN 2.51 emulator (4-bit weights of a small random-weight CNN).
    assert!(cos >= 0.995, "cosine {cos}");
}

#[test]
fn calibration_data_that_does_not_fit_is_a_clear_error() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("bad");
    if models(&dir).is_none() {
        return;
    }
    let onnx = dir.join("cnn.onnx");
    let code = format!(
        r#"
import numpy as np, os
d = {d:?}
np.savez(d + "/wrong_name.npz", image=np.zeros((1, 3, 8, 8), np.float32))
np.savez(d + "/wrong_dtype.npz", img=np.zeros((1, 3, 8, 8), np.float64))
np.savez(d + "/wrong_shape.npz", img=np.zeros((1, 3, 9, 9), np.float32))
os.makedirs(d + "/empty", exist_ok=True)
"#,
        d = s(&dir)
    );
    python(&code).unwrap();
    let q = |calib: &str, extra: &[&str]| {
        let c = dir.join(calib);
        let o = dir.join("o.onnx");
        let mut args = vec!["quantize", s(&onnx), "--calib", s(&c), "-o", s(&o)];
        args.extend_from_slice(extra);
        let out = qnnx(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{calib} {extra:?}: {}",
            stderr(&out)
        );
        assert!(!o.exists(), "nothing written on error");
        stderr(&out)
    };
    let e = q("wrong_name.npz", &[]);
    assert!(
        e.contains("\"image\" is not a model input (the inputs are img)"),
        "{e}"
    );
    let e = q("wrong_dtype.npz", &[]);
    assert!(e.contains("\"img\" is f64 but the model takes f32"), "{e}");
    let e = q("wrong_shape.npz", &[]);
    assert!(
        e.contains("has shape [1, 3, 9, 9]; the model takes [1, 3, 8, 8]"),
        "{e}"
    );
    let e = q("empty", &[]);
    assert!(e.contains("the folder has no .npz files"), "{e}");
    let e = q("wrong_name.npz", &["--scheme", "4a4w"]);
    assert!(e.contains("unknown scheme"), "{e}");
}

/// Twelve 16x16 MatMuls with a Relu after each but the last, a second input `z` added before
/// the sixth Relu (node `add5`), and 8 calibration samples where one `z` has a -2000 outlier
/// that stretches only the Add's 8-bit range (the Relu after it clips it away).
fn deep_side_input(dir: &Path) -> Option<()> {
    let code = format!(
        r#"
import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
r = np.random.default_rng(0)
nodes, inits, prev = [], [], "x"
for k in range(12):
    w = (r.uniform(-0.1, 0.1, (16, 16)) + 0.9 * np.roll(np.eye(16), k, axis=1)).astype(np.float32)
    inits.append(numpy_helper.from_array(w, f"w{{k}}"))
    nodes.append(helper.make_node("MatMul", [prev, f"w{{k}}"], [f"h{{k}}"], name=f"matmul{{k}}"))
    prev = f"h{{k}}"
    if k == 5:
        nodes.append(helper.make_node("Add", [prev, "z"], ["a5"], name="add5"))
        prev = "a5"
    if k != 11:
        nodes.append(helper.make_node("Relu", [prev], [f"r{{k}}"], name=f"relu{{k}}"))
        prev = f"r{{k}}"
vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16])
g = helper.make_graph(nodes, "deep", [vi("x"), vi("z")], [vi(prev)], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.save(m, {model:?})
x = r.uniform(-1, 1, (8, 1, 16)).astype(np.float32)
z = r.uniform(-0.1, 0.1, (8, 1, 16)).astype(np.float32)
z[5, 0, 0] = -2000.0
np.savez({calib:?}, x=x, z=z)
"#,
        model = s(&dir.join("deep.onnx")),
        calib = s(&dir.join("calib.npz"))
    );
    python(&code).map(|_| ())
}

#[test]
fn the_mixed_precision_search_promotes_the_stretched_value_and_its_keep_pins_it() {
    if !htp_available() {
        return;
    }
    let dir = temp_dir("mixed");
    if deep_side_input(&dir).is_none() {
        return;
    }
    let (onnx, calib) = (dir.join("deep.onnx"), dir.join("calib.npz"));
    let (searched, pinned) = (dir.join("searched.onnx"), dir.join("pinned.onnx"));
    let out = qnnx(&[
        "--json",
        "quantize",
        s(&onnx),
        "--calib",
        s(&calib),
        "-o",
        s(&searched),
        "--target-sqnr-db",
        "18",
        "--for-soc",
        "QCS6490",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &v["mixed"];
    eprintln!("{m}");
    let promoted: Vec<(&str, &str)> = m["promoted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["node"].as_str().unwrap(), p["to"].as_str().unwrap()))
        .collect();
    // The Add and its reader, 2 of 24 nodes, reach the target on the v68 SoC (QNN 2.51: 8.0 dB
    // at 8a8w, 21.1 dB so; twelve 8-bit layers stay near 21 dB whatever is promoted).
    assert_eq!(promoted, [("add5", "16"), ("relu5", "16")], "{m}");
    let history: Vec<f64> = m["output_sqnr_db_per_attempt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(history[0] < 13.0 && *history.last().unwrap() >= 18.0, "{m}");
    // The printed --keep arguments make the same model without a search.
    let keep = m["keep"].as_str().unwrap();
    assert_eq!(keep, "--keep add5=16 --keep relu5=16");
    let mut args = vec!["quantize", s(&onnx), "--calib", s(&calib), "-o", s(&pinned)];
    args.extend(keep.split(' '));
    let out = qnnx(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(&searched).unwrap(),
        std::fs::read(&pinned).unwrap()
    );
    // A target no assignment reaches within the attempts is refused, naming the best.
    let out = qnnx(&[
        "quantize",
        s(&onnx),
        "--calib",
        s(&calib),
        "-o",
        s(&dir.join("never.onnx")),
        "--target-sqnr-db",
        "90",
        "--for-soc",
        "QCS6490",
        "--max-attempts",
        "2",
    ]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("no assignment within 2 attempts reaches 90 dB"),
        "{e}"
    );
    assert!(!dir.join("never.onnx").exists(), "nothing is written");
    // The search needs the exact float reference: a calibration SoC is refused.
    let out = qnnx(&[
        "quantize",
        s(&onnx),
        "--calib",
        s(&calib),
        "-o",
        s(&dir.join("x.onnx")),
        "--soc",
        "SM8650",
        "--target-sqnr-db",
        "28",
        "--for-soc",
        "QCS6490",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("drop --soc"), "{}", stderr(&out));
}
