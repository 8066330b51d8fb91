//! The conformance runner shared by the `conformance` example and the ratchet test
//! (`engine/tests/conformance_ratchet.rs` includes this file): worker processes that lower,
//! emit and run ONNX node tests on the HTP library, and the comparison with expected outputs.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use lowering::{LowerError, LowerOptions, Model};
use qnnx_engine::emit::emit;
use qnnx_engine::{Error, HostTensor};

const RESULT: &str = "@@RESULT ";
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Test folders (those with a model.onnx) under `data`, sorted by name.
pub fn test_dirs(data: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut tests: Vec<PathBuf> = std::fs::read_dir(data)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    tests.sort();
    Ok(tests)
}

/// Test names listed in an expected-pass file: one per line, `#` starts a comment.
pub fn read_expected(path: &Path) -> std::io::Result<Vec<String>> {
    Ok(std::fs::read_to_string(path)?
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// The node tests shipped in the `onnx` wheel, or `None` when python3 cannot import onnx.
pub fn default_data_dir() -> Option<PathBuf> {
    let out = Command::new(std::env::var("QNNX_PYTHON").unwrap_or_else(|_| "python3".into()))
        .args(["-c", "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data', 'node'))"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// One test's outcome, as the worker reports it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub test: String,
    pub status: String,
    pub ops: Vec<String>,
    pub detail: String,
}

fn parse_outcome(line: &str) -> Option<Outcome> {
    let v: serde_json::Value = serde_json::from_str(line.strip_prefix(RESULT)?).ok()?;
    Some(Outcome {
        test: v["test"].as_str()?.to_string(),
        status: v["status"].as_str()?.to_string(),
        ops: v["ops"]
            .as_array()?
            .iter()
            .filter_map(|o| o.as_str().map(String::from))
            .collect(),
        detail: v["detail"].as_str().unwrap_or("").to_string(),
    })
}

/// Runs `tests` in worker processes (this executable with `--worker`), restarting a worker that
/// crashes or hangs; a test that takes its worker down is recorded as an error.
pub fn run_all(tests: &[PathBuf], soc: u32, progress: bool) -> Vec<Outcome> {
    let mut results: Vec<Outcome> = Vec::new();
    let mut next = 0;
    while next < tests.len() {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--worker", "--soc", &soc.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn worker");
        // Fed from a thread: a worker that dies mid-list closes the pipe, which is not an error
        // here (its death is handled below).
        let mut stdin = child.stdin.take().unwrap();
        let todo: Vec<PathBuf> = tests[next..].to_vec();
        std::thread::spawn(move || {
            for t in todo {
                if writeln!(stdin, "{}", t.display()).is_err() {
                    break;
                }
            }
        });
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        loop {
            match rx.recv_timeout(TEST_TIMEOUT) {
                Ok(line) => {
                    if let Some(o) = parse_outcome(&line) {
                        if progress {
                            eprintln!("{:<10} {}", o.status, o.test);
                        }
                        results.push(o);
                        next += 1;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    record_failure(&mut results, &mut next, tests, "timed out");
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait().ok();
                    if next < tests.len() {
                        let why = format!("worker died ({status:?}) on this test");
                        record_failure(&mut results, &mut next, tests, &why);
                    }
                    break;
                }
            }
        }
        let _ = child.wait();
    }
    results
}

fn record_failure(results: &mut Vec<Outcome>, next: &mut usize, tests: &[PathBuf], why: &str) {
    let t = &tests[*next];
    let name = t.file_name().unwrap().to_string_lossy().into_owned();
    let ops = Model::load(t.join("model.onnx"))
        .map(|m| op_types(&m))
        .unwrap_or_default();
    eprintln!("{:<10} {name}: {why}", "error");
    results.push(Outcome {
        test: name,
        status: "error".into(),
        ops,
        detail: why.into(),
    });
    *next += 1;
}

pub fn op_types(m: &Model) -> Vec<String> {
    let mut ops: Vec<String> = m.graph.nodes.iter().map(|n| n.op_type.clone()).collect();
    ops.sort();
    ops.dedup();
    ops
}

/// The worker loop: test folders on stdin, one result line each on stdout.
pub fn worker(soc: u32) {
    let config = qnn::HtpConfig {
        device: qnn::HtpDeviceConfig {
            soc_model: Some(soc),
            arch: None,
        },
        ..qnn::HtpConfig::default()
    };
    let backend = qnn::Backend::open(config, &Default::default()).expect("HTP library");
    let device = qnn::Device::new(&backend).expect("deviceCreate");
    let stdin = std::io::stdin();
    for line in stdin.lock().lines().map_while(Result::ok) {
        let dir = PathBuf::from(line);
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let (status, ops, detail) = run_one(&backend, &device, &dir);
        let v = serde_json::json!({ "test": name, "status": status, "ops": ops, "detail": detail });
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{RESULT}{v}");
        let _ = out.flush();
    }
}

fn run_one(
    backend: &qnn::Backend,
    device: &qnn::Device,
    dir: &Path,
) -> (&'static str, Vec<String>, String) {
    let model = match Model::load(dir.join("model.onnx")) {
        Ok(m) => m,
        Err(e) => return ("unsupported", vec![], format!("load: {e}")),
    };
    let ops = op_types(&model);
    let set = dir.join("test_data_set_0");
    let read_all = |prefix: &str| -> Result<Vec<lowering::tensor::Tensor>, String> {
        let mut v = Vec::new();
        for i in 0.. {
            let p = set.join(format!("{prefix}_{i}.pb"));
            if !p.is_file() {
                break;
            }
            let bytes = std::fs::read(&p).map_err(|e| e.to_string())?;
            v.push(
                lowering::load::tensor_from_bytes(&bytes)
                    .map_err(|e| e.to_string())?
                    .1,
            );
        }
        Ok(v)
    };
    let (inputs, expected) = match (read_all("input"), read_all("output")) {
        (Ok(i), Ok(o)) => (i, o),
        (Err(e), _) | (_, Err(e)) => return ("error", ops, format!("test data: {e}")),
    };
    let graph_inputs: Vec<String> = model
        .graph
        .inputs
        .iter()
        .map(|&v| model.graph.values[v].name.clone())
        .collect();
    if graph_inputs.len() != inputs.len() {
        return (
            "unsupported",
            ops,
            "test omits optional graph inputs".into(),
        );
    }
    let mut opts = LowerOptions {
        fp16: true,
        ..Default::default()
    };
    for (name, t) in graph_inputs.iter().zip(&inputs) {
        opts.input_shapes.insert(name.clone(), t.shape.clone());
    }
    let plan = match lowering::lower(model, &opts) {
        Ok(p) => p,
        Err(e @ LowerError::InvalidModel(_)) => return ("error", ops, e.to_string()),
        Err(e) => return ("unsupported", ops, e.to_string()),
    };
    let ctx = match qnn::Context::new(backend, Some(device)) {
        Ok(c) => c,
        Err(e) => return ("error", ops, e.to_string()),
    };
    let compiled = match emit(&ctx, "test", &plan) {
        Ok(c) => c,
        Err(Error::Qnn {
            node: Some(n),
            source,
        }) if matches!(source.code(), Some(3110 | 4005)) => {
            return (
                "unsupported",
                ops,
                format!("QNN rejected node {n}: {source}"),
            );
        }
        Err(e) => return ("error", ops, e.to_string()),
    };
    let host: Vec<HostTensor> = inputs
        .iter()
        .map(|t| HostTensor {
            dtype: t.dtype,
            shape: t.shape.clone(),
            data: t.bytes().to_vec(),
        })
        .collect();
    let got = match compiled.run(&host) {
        Ok(g) => g,
        Err(e) => return ("error", ops, e.to_string()),
    };
    if got.len() != expected.len() {
        return (
            "error",
            ops,
            format!("{} outputs, expected {}", got.len(), expected.len()),
        );
    }
    for (i, (g, want)) in got.iter().zip(&expected).enumerate() {
        if let Err(why) = compare(g, want) {
            return ("mismatch", ops, format!("output {i}: {why}"));
        }
    }
    ("pass", ops, String::new())
}

/// Shape and dtype exactly; values with fp16 tolerances for floats (the HTP computes in fp16:
/// |d| <= 1e-2 + 1e-2 |want|), exactly for integers and bools.
fn compare(got: &HostTensor, want: &lowering::tensor::Tensor) -> Result<(), String> {
    if got.dtype != want.dtype {
        return Err(format!(
            "dtype {} vs {}",
            got.dtype.name(),
            want.dtype.name()
        ));
    }
    // Exact, as the ONNX backend test runner requires: [1] is not a scalar [], [2, 3] is not
    // [3, 2].
    if got.shape != want.shape {
        return Err(format!("shape {:?} vs {:?}", got.shape, want.shape));
    }
    let numel: usize = want.shape.iter().product();
    let g = lowering::tensor::Tensor::from_bytes(got.dtype, want.shape.clone(), got.data.clone())?;
    if want.dtype.is_float() {
        let (gv, wv) = (g.to_f64(), want.to_f64());
        let bad = gv.iter().zip(&wv).position(|(a, b)| {
            if (a.is_nan() && b.is_nan()) || (a.is_infinite() && a == b) {
                return false;
            }
            let diff = (a - b).abs();
            diff.is_nan() || diff > 1e-2 + 1e-2 * b.abs()
        });
        if let Some(i) = bad {
            return Err(format!("element {i}: got {} want {}", gv[i], wv[i]));
        }
    } else if g.bytes() != want.bytes() {
        let i = (0..numel)
            .find(|&i| g.get_i64(i) != want.get_i64(i))
            .unwrap_or(0);
        return Err(format!(
            "element {i}: got {} want {}",
            g.get_i64(i),
            want.get_i64(i)
        ));
    }
    Ok(())
}
