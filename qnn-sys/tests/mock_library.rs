//! Libraries that are not usable QNN backends, built or patched on the spot: one whose provider
//! declares an unsupported API major version (a small C mock compiled with the system `cc`),
//! and a real library patched to another CPU architecture. Each must be a `LoadError` naming the
//! path and what was found.

#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::process::Command;

use qnn_sys::{BackendLibrary, LoadError};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qnn-sys-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A provider record of the 2.x layout (backendId, name, API versions, then the table) whose
/// core API major is 3.
const MOCK: &str = r#"
#include <stdint.h>
#include <stddef.h>
typedef struct { uint32_t major, minor, patch; } V;
typedef struct { uint32_t backendId; const char* name; V core; V backend; void* table[68]; } P;
static P provider = { 6, "MOCK_FUTURE", {3, 0, 0}, {1, 0, 0}, {0} };
static const P* list[1] = { &provider };
uint64_t QnnInterface_getProviders(const P*** out, uint32_t* n) { *out = list; *n = 1; return 0; }
"#;

fn cc() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    Command::new(&cc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| cc)
}

#[test]
fn provider_with_another_api_major_is_refused_with_the_versions_found() {
    let Some(cc) = cc() else {
        eprintln!("skipped: no C compiler to build the mock library");
        return;
    };
    let dir = temp_dir("mock");
    let src = dir.join("mock.c");
    let lib = dir.join("libQnnHtp.so");
    std::fs::write(&src, MOCK).unwrap();
    let out = Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = BackendLibrary::open(&lib)
        .err()
        .expect("a 3.x provider was accepted");
    assert!(
        matches!(err, LoadError::NoCompatibleProvider { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(lib.to_str().unwrap()), "{text}");
    assert!(
        text.contains("MOCK_FUTURE core 3.0.0") && text.contains("2.x (>= 2.27)"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A copy of a real shared library with its ELF machine field set to AArch64: the loader must
/// refuse it and the error must name the file.
#[cfg(target_arch = "x86_64")]
#[test]
fn library_for_another_cpu_is_a_dlopen_error_naming_it() {
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
    ]
    .into_iter()
    .map(std::path::Path::new)
    .find(|p| p.exists());
    let Some(libm) = libm else {
        eprintln!("skipped: no libm.so.6 to patch");
        return;
    };
    let mut bytes = std::fs::read(libm).unwrap();
    // e_machine (offset 18, little-endian u16): 0x3E x86-64 -> 0xB7 AArch64.
    assert_eq!(&bytes[18..20], &[0x3E, 0x00]);
    bytes[18] = 0xB7;
    let dir = temp_dir("arch");
    let lib = dir.join("libQnnHtp.so");
    std::fs::write(&lib, bytes).unwrap();
    let err = BackendLibrary::open(&lib)
        .err()
        .expect("a foreign-architecture library loaded");
    assert!(matches!(err, LoadError::Dlopen { .. }), "{err}");
    assert!(err.to_string().contains(lib.to_str().unwrap()), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
