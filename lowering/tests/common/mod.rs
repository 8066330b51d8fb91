//! Helpers shared by the tests that run models on the emulated HTP (SoC 60).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Prints why the test is skipped, or fails when `QNNX_REQUIRE_HTP` is set.
pub fn skip(why: &str) {
    if std::env::var_os("QNNX_REQUIRE_HTP").is_some() {
        panic!("QNNX_REQUIRE_HTP is set but {why}");
    }
    eprintln!("skipped: {why}");
}

/// The HTP library and its default host device, opened once; `None` (after [`skip`]) without
/// the library.
pub fn htp() -> Option<&'static (qnn::Backend, qnn::Device)> {
    static HTP: OnceLock<Result<(qnn::Backend, qnn::Device), String>> = OnceLock::new();
    let r = HTP.get_or_init(|| {
        let b = qnn::Backend::new(qnn::BackendKind::Htp).map_err(|e| e.to_string())?;
        let d = qnn::Device::new(&b, &qnn::DeviceOptions::host_default())
            .expect("deviceCreate on the HTP library");
        Ok((b, d))
    });
    match r {
        Ok(h) => Some(h),
        Err(e) => {
            skip(&format!(
                "the HTP library is unavailable ({e}); run scripts/setup-runtime"
            ));
            None
        }
    }
}

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// FNV-1a: a stable content hash for the generated-model folders (std's hasher may change
/// between releases).
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}
