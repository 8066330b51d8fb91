//! The conformance ratchet: every ONNX node test listed in `tests/expected/htp.txt` must still
//! pass on the emulated HTP (lowered with fp16, compared with the same tolerances as
//! `scripts/conformance`). The list only grows, through `scripts/conformance --reset-expected`.
//!
//! Runs the same runner as the `conformance` example (its `runner.rs` is included below) with
//! its own executable as the worker process (`--worker`), so a crash in the QNN library is
//! reported as that test's failure. `harness = false`: this file is its own `main`.
//!
//! Without the HTP library or without python3 + onnx (whose wheel ships the test data) it prints
//! why and passes; with `QNNX_REQUIRE_HTP=1` (CI) either is a failure.

#[path = "../examples/conformance/runner.rs"]
mod runner;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn skip(why: &str) {
    if std::env::var_os("QNNX_REQUIRE_HTP").is_some() {
        eprintln!("conformance_ratchet: QNNX_REQUIRE_HTP is set but {why}");
        std::process::exit(1);
    }
    eprintln!("conformance_ratchet: skipped: {why}");
    println!("test result: ok. 0 passed; 0 failed; 1 ignored");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--worker") {
        runner::worker(60);
        return;
    }
    // The libtest protocol for test listers (cargo nextest, IDEs): one test, not an ignored one
    // (`--list --ignored` lists none, or nextest would skip it as ignored).
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("conformance_ratchet: test");
        }
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let list = repo.join("tests/expected/htp.txt");
    let expected: BTreeSet<String> = runner::read_expected(&list)
        .unwrap_or_else(|e| panic!("{}: {e}", list.display()))
        .into_iter()
        .collect();
    assert!(!expected.is_empty(), "{} lists no tests", list.display());
    if let Err(e) = qnn::Backend::new(qnn::BackendKind::Htp) {
        return skip(&format!(
            "the HTP library is unavailable ({e}); run scripts/setup-runtime"
        ));
    }
    let data = match std::env::var_os("QNNX_CONFORMANCE_DATA") {
        Some(d) => PathBuf::from(d),
        None => match runner::default_data_dir() {
            Some(d) => d,
            None => {
                return skip(
                    "python3 cannot import onnx, whose wheel has the node tests \
                     (pip install -r requirements-test.txt)",
                )
            }
        },
    };
    let tests: Vec<PathBuf> = runner::test_dirs(&data)
        .unwrap_or_else(|e| panic!("{}: {e}", data.display()))
        .into_iter()
        .filter(|p| expected.contains(p.file_name().unwrap().to_string_lossy().as_ref()))
        .collect();
    let found: BTreeSet<String> = tests
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let missing: Vec<&String> = expected.difference(&found).collect();
    let started = Instant::now();
    let results = runner::run_all(&tests, 60, false);
    let failed: Vec<&runner::Outcome> = results.iter().filter(|r| r.status != "pass").collect();
    eprintln!(
        "conformance_ratchet: {} of {} listed tests pass in {:.1} s",
        results.len() - failed.len(),
        expected.len(),
        started.elapsed().as_secs_f64()
    );
    let mut ok = true;
    if !missing.is_empty() {
        eprintln!(
            "{} listed test(s) are not in {}: {missing:?}",
            missing.len(),
            data.display()
        );
        ok = false;
    }
    if !failed.is_empty() {
        eprintln!(
            "{} listed test(s) no longer pass (run scripts/conformance --filter NAME):",
            failed.len()
        );
        for r in &failed {
            eprintln!("  {} ({}): {}", r.test, r.status, r.detail);
        }
        ok = false;
    }
    if !ok {
        std::process::exit(1);
    }
    println!("test result: ok. 1 passed; 0 failed");
}
