//! What every CLI test file needs: running the `qnnx` binary, reading its output, temporary
//! folders, and whether the HTP library is there (with `QNNX_REQUIRE_HTP`, as in CI, a missing
//! library fails instead of skipping). Each test binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Runs the `qnnx` binary under test with `env` added to its environment.
pub fn qnnx_env(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qnnx"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run qnnx")
}

pub fn qnnx(args: &[&str]) -> Output {
    qnnx_env(args, &[])
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `qnnx args` and checks that it exits with `code`, says `says` on stderr, and does not
/// panic.
pub fn refused(args: &[&str], code: i32, says: &str) {
    let out = qnnx(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "qnnx {args:?}: {err}");
    assert!(err.contains(says), "qnnx {args:?}: {err:?} lacks {says:?}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The JSON on stdout, whatever the exit status.
pub fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

/// Runs qnnx and insists on success, returning its JSON.
pub fn ok_json(args: &[&str]) -> Value {
    let out = qnnx(args);
    assert!(
        out.status.success(),
        "qnnx {args:?} failed ({:?}): {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    json(&out)
}

/// A fresh folder for this test binary's test `name`, removed when the returned guard is
/// dropped (at the end of the test, passed or failed), so test runs leave nothing behind.
pub fn temp_dir(name: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("qnnx-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// A folder of [`temp_dir`]: derefs to its path.
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether a missing library or tool must fail the test (CI) rather than skip it.
pub fn required() -> bool {
    std::env::var_os("QNNX_REQUIRE_HTP").is_some()
}

pub fn htp_available() -> bool {
    match qnn::Backend::new(qnn::BackendKind::Htp) {
        Ok(_) => true,
        Err(e) if required() => panic!("HTP unavailable: {e}"),
        Err(e) => {
            eprintln!("skipped: HTP library unavailable ({e})");
            false
        }
    }
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
