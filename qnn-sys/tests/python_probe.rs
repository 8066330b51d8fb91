//! `locate` asks `python3` where `onnxruntime_qnn` is only when no earlier place in the search
//! order has the library, and at most once per process. `QNNX_PYTHON` points at a script that
//! records each run. One test function: it sets process-wide environment variables.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use qnn_sys::loader::{locate, LibraryKind, ONNXRUNTIME_QNN_DIR_VAR};

fn runs(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn python_is_asked_only_when_nothing_earlier_has_the_library_and_once() {
    let dir = std::env::temp_dir().join(format!("qnn-sys-python-probe-{}", std::process::id()));
    let pkg = dir.join("site-packages").join("onnxruntime_qnn");
    std::fs::create_dir_all(&pkg).unwrap();
    let log = dir.join("python-runs.log");
    let script = dir.join("fake-python");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho run >> '{}'\necho '{}'\n",
            log.display(),
            pkg.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for var in [
        "QNN_HTP_LIB",
        "QNN_CPU_LIB",
        "QNN_LIB_DIR",
        "QNN_SDK_ROOT",
        "VIRTUAL_ENV",
        "QNNX_RUNTIME_DIR",
        ONNXRUNTIME_QNN_DIR_VAR,
    ] {
        std::env::remove_var(var);
    }
    std::env::set_var("XDG_DATA_HOME", dir.join("no-data-home"));
    std::env::set_var("QNNX_PYTHON", &script);

    // An earlier place has the library: Python is not asked.
    let htp = dir.join("libQnnHtp.so");
    std::fs::write(&htp, b"stand-in").unwrap();
    std::env::set_var("QNN_HTP_LIB", &htp);
    assert_eq!(locate(LibraryKind::Htp, None).unwrap(), htp);
    assert_eq!(
        runs(&log),
        0,
        "python3 was asked although QNN_HTP_LIB has the library"
    );

    // The caller named the package folder (as the Python package does): no Python either.
    let named = dir.join("named");
    std::fs::create_dir_all(&named).unwrap();
    std::fs::write(named.join("libQnnCpu.so"), b"stand-in").unwrap();
    std::env::set_var(ONNXRUNTIME_QNN_DIR_VAR, &named);
    assert_eq!(
        locate(LibraryKind::Cpu, None).unwrap(),
        named.join("libQnnCpu.so")
    );
    assert_eq!(runs(&log), 0);
    std::env::remove_var(ONNXRUNTIME_QNN_DIR_VAR);

    // Nothing earlier has a CPU backend (the runtime folders are QNNX_RUNTIME_DIR, removed
    // above, and the empty data home): only Python can find it.
    std::fs::write(pkg.join("libQnnCpu.so"), b"stand-in").unwrap();
    assert_eq!(
        locate(LibraryKind::Cpu, None).unwrap(),
        pkg.join("libQnnCpu.so")
    );
    assert_eq!(runs(&log), 1);
    // The answer is kept for the process.
    locate(LibraryKind::Cpu, None).unwrap();
    assert_eq!(runs(&log), 1);
    std::fs::remove_dir_all(&dir).ok();
}
