//! Opening libraries: the real HTP library's identity and platform info, and clear errors for
//! missing or wrong libraries.

mod common;

use std::path::Path;

use qnn::{Backend, BackendKind, BackendOptions, Error, LoadError};

fn open(path: &Path) -> Result<Backend, Error> {
    Backend::open(
        qnn::BackendConfig::default_for(BackendKind::Htp),
        &BackendOptions {
            library: Some(path.into()),
            log_level: None,
        },
    )
}

#[test]
fn htp_identity_and_supported_ops() {
    let Some((backend, _d)) = common::htp() else {
        return;
    };
    let id = backend.build_id().unwrap();
    assert!(id.starts_with('v'), "{id}");
    assert_eq!(backend.provider_name(), "HTP_QTI_AISW");
    let v = backend.api_version();
    assert_eq!(v.core_api_version.major, 2);
    assert!(v.core_api_version.minor >= 27);
    // The library is one of the tested releases, known by its build id, and declares the
    // API versions the table has for it.
    let release = backend.release().expect("a tested release");
    assert_eq!(release.build_id, id);
    assert_eq!(release.core_api, v.core_api_version);
    assert_eq!(release.htp_api, v.backend_api_version);
    // scripts/test-matrix names the release it installed: the tests must run on that one, not
    // on another library the search found first.
    if let Ok(want) = std::env::var("QNNX_EXPECT_QNN") {
        assert_eq!(release.qnn, want, "{}", backend.library_path().display());
    }
    let ops = backend.supported_operations().unwrap();
    for op in [
        "Conv2d",
        "FullyConnected",
        "Softmax",
        "ElementWiseAdd",
        "ReduceMean",
    ] {
        assert!(ops.iter().any(|o| o.name == op), "{op} not reported");
    }
    assert!(!ops.iter().any(|o| o.name == "ElementWiseSoftplus"));
    let devices = backend.platform_info().unwrap();
    assert!(!devices.is_empty());
    assert!(devices[0].htp.is_some_and(|h| h.arch >= 68));
}

#[test]
fn missing_library_names_the_path() {
    let err = open(Path::new("/nonexistent/dir/libQnnHtp.so")).unwrap_err();
    assert!(matches!(err, Error::Load(_)), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/dir/libQnnHtp.so"),
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_a_library_is_refused() {
    let dir = std::env::temp_dir().join(format!("qnn-rs-notlib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("libQnnHtp.so");
    std::fs::write(&fake, b"\x7fELF but not really").unwrap();
    let err = open(&fake).unwrap_err();
    assert!(
        matches!(err, Error::Load(LoadError::Dlopen { .. })),
        "{err}"
    );
    assert!(err.to_string().contains(fake.to_str().unwrap()), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(target_os = "linux")]
#[test]
fn a_library_without_the_qnn_entry_point_is_refused() {
    // libm is a real shared library without QnnInterface_getProviders.
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/lib/aarch64-linux-gnu/libm.so.6",
        "/usr/lib/libm.so.6",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.exists());
    let Some(libm) = libm else {
        eprintln!("skipped: no libm.so.6 at the usual paths");
        return;
    };
    let err = open(libm).unwrap_err();
    assert!(
        matches!(err, Error::Load(LoadError::MissingSymbol { .. })),
        "{err}"
    );
    assert!(
        err.to_string().contains("QnnInterface_getProviders"),
        "{err}"
    );
}

/// The GPU backend needs a remote tuning server on x86_64 (docs/qnn-notes.md §1): it must fail with a
/// QNN error, not crash. GPU execution cannot be tested on this machine.
#[cfg(target_arch = "x86_64")]
#[test]
fn gpu_backend_on_x86_fails_cleanly() {
    if common::htp().is_none() {
        return;
    }
    match Backend::new(BackendKind::Gpu) {
        Err(Error::Api(e)) => {
            assert_eq!(e.call, "backendCreate");
            // QNN's raw line ("TuningMode must be enabled on x86_64-linux-clang platforms") is
            // explained, with the QNN code kept and the error name said once.
            assert_eq!(e.code, 4000);
            let text = e.to_string();
            assert!(
                text.contains("cannot execute on x86_64 Linux")
                    && text.contains("tuning server")
                    && text.contains("QNN_BACKEND_ERROR_CANNOT_INITIALIZE (4000, Backend)"),
                "{text}"
            );
            assert!(!text.contains("TuningMode"), "{text}");
            assert_eq!(
                text.matches("QNN_BACKEND_ERROR_CANNOT_INITIALIZE").count(),
                1,
                "{text}"
            );
        }
        Err(Error::Load(e)) => eprintln!("GPU library not installed: {e}"),
        other => panic!("unexpected: {:?}", other.map(|_| ())),
    }
}
