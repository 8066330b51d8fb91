//! `qnnx compare` end to end: make_models.py's float CNN quantized by `qnnx quantize` and
//! compared layer by layer on the v68 QCS6490 against its float model (the Conv runs in NHWC,
//! so its observed values are permuted back), the fp16 build of the float model on an FP16 SoC,
//! and the mistakes a user makes, each a clear error. Live tests skip without the HTP library or
//! Python's onnx package, and fail instead with `QNNX_REQUIRE_HTP=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::{htp_available, qnnx, required, s, stderr, temp_dir, TempDir};

/// make_models.py's models and a calibration set in a fresh folder; `None` (skip) without
/// Python's onnx.
fn models(name: &str) -> Option<TempDir> {
    let dir = temp_dir(&format!("compare-{name}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/make_models.py");
    let calib = dir.join("calib.npz");
    let code = format!(
        "import numpy as np; r = np.random.default_rng(1); \
         np.savez({:?}, img=r.standard_normal((16, 1, 3, 8, 8)).astype(np.float32))",
        s(&calib)
    );
    let made = python(Command::new("python3").arg(&script).arg(&*dir))
        && python(Command::new("python3").arg("-c").arg(&code));
    made.then_some(dir)
}

/// Runs a python3 command: true when it succeeded; else a skip (a failure with
/// `QNNX_REQUIRE_HTP=1`).
fn python(cmd: &mut Command) -> bool {
    match cmd.output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            assert!(!required(), "python: {}", stderr(&o));
            eprintln!("skipped: python failed: {}", stderr(&o));
            false
        }
        Err(e) => {
            assert!(!required(), "python3: {e}");
            eprintln!("skipped: python3 unavailable ({e})");
            false
        }
    }
}

/// [`models`] and the CNN quantized by `qnnx quantize` on the calibration set: (folder, float
/// model, QDQ model).
fn quantized(name: &str) -> Option<(TempDir, PathBuf, PathBuf)> {
    let dir = models(name)?;
    let (onnx, qdq) = (dir.join("cnn.onnx"), dir.join("cnn.qdq.onnx"));
    let calib = dir.join("calib.npz");
    let out = qnnx(&["quantize", s(&onnx), "--calib", s(&calib), "-o", s(&qdq)]);
    assert!(out.status.success(), "{}", stderr(&out));
    Some((dir, onnx, qdq))
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sqnr(l: &Value) -> f64 {
    l["sqnr_db"].as_f64().unwrap_or_else(|| panic!("{l}"))
}

#[test]
fn a_quantized_cnn_and_an_fp16_one_are_compared_layer_by_layer() {
    if !htp_available() {
        return;
    }
    let Some((dir, onnx, qdq)) = quantized("cnn") else {
        return;
    };
    let csv = dir.join("cnn.csv");
    let input = format!("img={}", s(&dir.join("cnn.in.img.npy")));
    let v = json(&qnnx(&[
        "--json",
        "compare",
        s(&qdq),
        "--reference",
        s(&onnx),
        "--soc",
        "QCS6490",
        "--input",
        &input,
        "--csv",
        s(&csv),
    ]));
    let layers = v["layers"].as_array().unwrap();
    let names: Vec<&str> = layers
        .iter()
        .map(|l| l["value"].as_str().unwrap())
        .collect();
    for want in ["c", "r", "p", "f", "scores"] {
        assert!(names.contains(&want), "{want} missing: {v}");
    }
    // Worst first; 8-bit activations of a small CNN lose 25-40 dB, not everything (a value
    // permuted wrongly from NHWC would be near 0 dB).
    let s_all: Vec<f64> = layers.iter().map(sqnr).collect();
    assert!(s_all.windows(2).all(|w| w[0] <= w[1]), "{s_all:?}");
    assert!(s_all.iter().all(|&x| x > 20.0 && x < 60.0), "{v}");
    assert!(v["first_jump"].is_null(), "{v}");
    let scores = layers.iter().find(|l| l["value"] == "scores").unwrap();
    assert_eq!(scores["is_output"], true);
    assert_eq!(scores["node"], "fc");
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 1 + layers.len(), "{text}");
    assert!(
        text.starts_with("value,node,op_type,order,sqnr_db"),
        "{text}"
    );

    // The float model itself in fp16 on an FP16 SoC: far closer than 8 bits.
    let v = json(&qnnx(&[
        "--json",
        "compare",
        s(&onnx),
        "--soc",
        "SM8550",
        "--input",
        &input,
    ]));
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 5, "{v}");
    assert!(layers.iter().all(|l| sqnr(l) > 45.0), "{v}");
    assert!(v["test"].as_str().unwrap().starts_with("fp16"), "{v}");

    // A text table by default, naming each value.
    let out = qnnx(&["compare", s(&onnx), "--soc", "SM8550", "--input", &input]);
    assert!(out.status.success(), "{}", stderr(&out));
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(
        t.contains("SQNR dB") && t.contains("scores") && t.contains("first jump"),
        "{t}"
    );
}

#[test]
fn mistakes_are_clear_errors() {
    if !htp_available() {
        return;
    }
    let Some((dir, onnx, qdq)) = quantized("mistakes") else {
        return;
    };
    // A QDQ model with nothing to compare it to.
    let out = qnnx(&["compare", s(&qdq), "--soc", "QCS6490"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--reference"), "{}", stderr(&out));
    // The reference must be float.
    let out = qnnx(&["compare", s(&qdq), "--reference", s(&qdq)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("float model"), "{}", stderr(&out));
    // A float model on a SoC with no float path.
    let out = qnnx(&["compare", s(&onnx), "--soc", "QCS6490"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("qnnx quantize"), "{}", stderr(&out));
    // An input that is not the model's.
    let npy = format!("nope={}", s(&dir.join("cnn.in.img.npy")));
    let out = qnnx(&["compare", s(&onnx), "--soc", "SM8550", "--input", &npy]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no input \"nope\""),
        "{}",
        stderr(&out)
    );
    let out = qnnx(&["compare", s(&onnx), "--jump-db", "-3"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn a_folder_of_samples_is_compared_over_all_of_them() {
    if !htp_available() {
        return;
    }
    let Some((dir, onnx, qdq)) = quantized("samples") else {
        return;
    };
    // Five different samples, and one sample twice (with its .npy for a single-input run).
    let (five, twice) = (dir.join("five"), dir.join("twice"));
    let code = format!(
        "import numpy as np, os; r = np.random.default_rng(7); os.makedirs({five:?}); \
         os.makedirs({twice:?}); x = r.standard_normal((1, 3, 8, 8)).astype(np.float32); \
         [np.savez(os.path.join({five:?}, f's{{k}}.npz'), img=r.standard_normal((1, 3, 8, 8)).astype(np.float32)) for k in range(5)]; \
         [np.savez(os.path.join({twice:?}, f'{{k}}.npz'), img=x) for k in range(2)]; \
         np.save(os.path.join({twice:?}, 'x.npy'), x)",
        five = s(&five),
        twice = s(&twice)
    );
    if !python(Command::new("python3").arg("-c").arg(&code)) {
        return;
    }
    let run = |extra: &[&str]| {
        let mut a = vec![
            "--json",
            "compare",
            s(&qdq),
            "--reference",
            s(&onnx),
            "--soc",
            "QCS6490",
        ];
        a.extend_from_slice(extra);
        json(&qnnx(&a))
    };
    let by_value = |v: &Value| -> Vec<(String, f64)> {
        let mut l: Vec<(String, f64)> = v["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["value"].as_str().unwrap().to_string(), sqnr(l)))
            .collect();
        l.sort_by(|a, b| a.0.cmp(&b.0));
        l
    };
    // The same sample twice: every value's numbers are those of the sample alone, and the two
    // outputs make a batch of two.
    let one = run(&["--input", &format!("img={}", s(&twice.join("x.npy")))]);
    let two = run(&["--inputs", s(&twice)]);
    assert_eq!(two["samples"], 2, "{two}");
    for ((a, x), (b, y)) in by_value(&one).iter().zip(by_value(&two).iter()) {
        assert_eq!(a, b);
        assert!((x - y).abs() < 1e-6, "{a}: {x} alone, {y} twice");
    }
    assert_eq!(by_value(&one).len(), by_value(&two).len());
    assert!(one["batch"].as_array().unwrap().is_empty(), "{one}");
    let batch = &two["batch"][0];
    assert_eq!(
        (batch["value"].as_str(), batch["n"].as_u64()),
        (Some("scores"), Some(2)),
        "{two}"
    );
    assert_eq!(batch["top1_agreement"], 1.0, "{two}");
    // Five samples: the outputs' batch statistics are over the five, and so is the text.
    let v = run(&["--inputs", s(&five)]);
    assert_eq!(
        (v["samples"].as_u64(), v["batch"][0]["n"].as_u64()),
        (Some(5), Some(5)),
        "{v}"
    );
    assert!(v["batch"][0]["offdiag_correlation"].is_number(), "{v}");
    let out = qnnx(&[
        "compare",
        s(&qdq),
        "--reference",
        s(&onnx),
        "--soc",
        "QCS6490",
        "--inputs",
        s(&five),
    ]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(
        t.contains("over 5 samples") && t.contains("over 5 inputs"),
        "{t}"
    );
    // The stacked calibration file works as a set too; --input with --inputs, or a folder
    // without samples, is refused.
    let v = run(&["--inputs", s(&dir.join("calib.npz"))]);
    assert_eq!(v["samples"], 16, "{v}");
    let out = qnnx(&[
        "compare",
        s(&onnx),
        "--soc",
        "SM8550",
        "--inputs",
        s(&five),
        "--input",
        "img=x.npy",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = qnnx(&[
        "compare",
        s(&onnx),
        "--soc",
        "SM8550",
        "--inputs",
        s(&empty),
    ]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("no .npz files"), "{}", stderr(&out));
}
