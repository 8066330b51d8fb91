//! Reduced models of crashes and miscompilations found in real models
//! (`tests/models/regressions/<case>/`, made by `gen.py` there): each case is lowered whole,
//! run on the emulated HTP in a child process (so a case that crashes the library fails its
//! test instead of the test binary) and compared with onnx's reference evaluator.

use std::path::PathBuf;
use std::process::Command;

mod common;
use common::{compare, htp, read_all, repo, run_dir};

const CHILD_ENV: &str = "QNNX_REGRESSION_CASE";

fn cases() -> Vec<PathBuf> {
    let root = repo().join("tests/models/regressions");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.expect("read_dir entry").path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    v.sort();
    v
}

fn run_in_child(case: &str) {
    if htp().is_none() {
        return;
    }
    let dir = repo().join("tests/models/regressions").join(case);
    assert!(
        dir.join("model.onnx").is_file(),
        "{} is missing",
        dir.display()
    );
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child_runs_case", "--ignored", "--nocapture"])
        .env(CHILD_ENV, &dir)
        .output()
        .expect("start the child process");
    let stderr = String::from_utf8_lossy(&out.stderr);
    #[cfg(unix)]
    if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&out.status) {
        panic!("{case}: the child process died with signal {sig}:\n{stderr}");
    }
    assert!(out.status.success(), "{case}: {}\n{stderr}", out.status);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("case ok"),
        "{case}: the child did not run the case:\n{stderr}"
    );
}

/// The child half: runs the case named by `QNNX_REGRESSION_CASE`.
#[test]
#[ignore = "run by the case tests in a child process"]
fn child_runs_case() {
    let dir = PathBuf::from(std::env::var_os(CHILD_ENV).expect("QNNX_REGRESSION_CASE is set"));
    let (backend, device) = htp().expect("the parent checked the library");
    let got = run_dir(backend, device, &dir).unwrap_or_else(|e| panic!("{e}"));
    let want = read_all(&dir, "output");
    assert_eq!(got.len(), want.len(), "output count");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.shape, w.shape, "output {i} shape");
        compare(g, w).unwrap_or_else(|e| panic!("output {i}: {e}"));
    }
    println!("case ok");
}

/// Issue 13: repeat_kv with one KV head (multi-query attention) died with SIGSEGV.
#[test]
fn mqa_repeat_kv() {
    run_in_child("mqa_repeat_kv");
}

/// Every committed case has a test above.
#[test]
fn every_case_has_a_test() {
    let src = include_str!("regressions_htp.rs");
    for dir in cases() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            src.contains(&format!("run_in_child(\"{name}\")")),
            "tests/models/regressions/{name} has no test in regressions_htp.rs"
        );
    }
}
