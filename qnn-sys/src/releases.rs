//! The QNN releases qnnx is tested with, and what differs between them: the one table of them
//! ([`TESTED`]). `scripts/setup-runtime` and `scripts/test-matrix` read the `Release { .. }`
//! literals below (the `wheel`, `qnn` and `build_id` fields), so keep each a plain literal.
//!
//! Every release here ships in an `onnxruntime-qnn` wheel for Linux x86_64 (the only QNN
//! libraries that can be downloaded without an account), whose `libQnnHtp.so` is the HTP
//! emulator. How each fact was measured is said at the field; `scripts/test-matrix` runs the
//! live tests against each release.
//!
//! # Which layout each release takes
//!
//! The library's versions are read when it is opened, before any struct is passed to it: the
//! providers' core and backend API versions (`QnnInterface_getProviders`: a core major other than
//! ours is refused by name, [`crate::loader`]) and `backendGetBuildId`, which names the release
//! in this table (`qnn::Backend::release`). A library outside the table is used with the newest
//! layouts, and a warning says so (once per build id, and again for the device config when one
//! is given: [`crate::htp::device_config_layout`]).
//!
//! | struct | 2.47.0 | 2.48.40 | 2.49.40 | 2.50.40 | 2.51.0 | how it is known |
//! |---|---|---|---|---|---|---|
//! | `QnnHtpDevice_CustomConfig_t` ([`crate::htp::DeviceCustomConfig`], `..Packed`) | union at 8 | at 8 | **at 4** | at 8 | at 8 | `deviceCreate` with SoC 60 in each layout: 14001 for the wrong one ([`Release::htp_device_config`]); offset asserts for both |
//! | `Qnn_Tensor_t` ([`crate::types::Tensor`], version 2 only is written) | v2 | v2 | v2 | v2 | v2 | every graph of the live tests is built with v2 tensors, on each release (`scripts/test-matrix`) |
//! | HTP graph custom config ([`crate::htp::GraphCustomConfig`]: precision, optimization level) | same | same | same | same | same | the live tests set fp16 precision (`qnn-rs/tests/context.rs`) and the optimization level (`qnn-rs/tests/graph.rs`) on each release and compare outputs; the VTCM size option is not exercised |
//! | HTP context custom config ([`crate::htp::ContextCustomConfig`]: weight sharing) | same | same | same | same | same | `qnn-rs/tests/context.rs` weight-sharing tests on each release (one copy of equal weights, outputs bit for bit) |
//! | `QnnSystemContext_BinaryInfo_t` ([`crate::system::BinaryInfo`]) | v3 | v3 | v3 | v3 | v3 | `qnn-rs/tests/context.rs` asserts version 3 for its own binaries, on each release; v1 and v2 are read too (older SDKs) |
//! | HTP graph blob info ([`crate::htp::GraphBlobInfoV2`]) | v1+v2 | v1+v2 | v1+v2 | v1+v2 | v1+v2 | the binary-info tests of `qnn-rs/tests/context.rs` on each release |
//! | HTP perf infrastructure ([`crate::htp::DeviceInfrastructure`], [`crate::htp::PowerConfig`]: performance modes) | ? | ? | ? | ? | accepted | `qnn-rs/tests/power.rs` sets every mode on 2.51 (2.47-2.50 not yet run: `scripts/test-matrix` does); the header `static_assert`s the 68-byte power config as an ABI invariant |
//! | `graphExecute` of two graphs at once | serialised | serialised | concurrent | concurrent | concurrent | [`Release::htp_concurrent_execute`] |
//!
//! `cargo build -p qnn-sys --features bindgen` with `QNN_SDK_ROOT` set compares every struct
//! here with that SDK's headers (`bindgen_check.rs`): the way to check a release not listed.

use crate::htp::DeviceConfigLayout;
use crate::types::Version;

/// One QNN release and what qnnx knows about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The `onnxruntime-qnn` wheel version that ships it (`scripts/setup-runtime --wheel-version`).
    pub wheel: &'static str,
    /// The QNN version (`qnn_version` in the wheel's `build_and_package_info.py`).
    pub qnn: &'static str,
    /// What `backendGetBuildId` returns, for every backend library of the release; context
    /// binaries record it too.
    pub build_id: &'static str,
    /// Core API version of the providers (`QnnInterface_getProviders`).
    pub core_api: Version,
    /// HTP backend API version (`QnnInterface_t::apiVersion.backendApiVersion` of
    /// `HTP_QTI_AISW`): the key [`crate::htp::device_config_layout`] and
    /// [`htp_executes_concurrently`] look releases up by, known before any call is made.
    pub htp_api: Version,
    /// `QnnSystem` API version (`QnnSystemInterface_getProviders`).
    pub system_api: Version,
    /// CPU backend API version, when the wheel has `libQnnCpu.so` (only the 2.3.0 wheel does).
    pub cpu_api: Option<Version>,
    /// The layout of `QnnHtpDevice_CustomConfig_t` the HTP library reads. Measured by passing a
    /// SOC config (60) to `deviceCreate` in each layout: the library answers 14001
    /// (`Unknown config socModel 0`) to the other one (commit aee2ba2).
    pub htp_device_config: DeviceConfigLayout,
    /// Whether the HTP library's `graphExecute` may run on two different graphs at once (one
    /// graph's executes are always serialised by `qnn-rs`). Measured on the x86_64 emulator:
    /// two threads each executing their own graph (in one context, in two contexts of one
    /// backend, or in two backends), 30 executes each, results compared with the graph run
    /// alone. 2.47 and 2.48 computed wrong outputs or never returned: one execute spun at 100%
    /// CPU in `continue_execution_fast` (`sched_yield`) while the emulator's one process-wide
    /// pool of HVX/HMX worker threads waited. Building and finalizing graphs while another
    /// graph executes was correct on both. 2.49, 2.50 and 2.51 were correct in every case.
    /// Not measured on a device library.
    pub htp_concurrent_execute: bool,
    /// Whether the HTP library's `graphFinalize` prints its stages on stdout ("Starting stage:
    /// Graph Preparation Initializing", ...) whatever the log level: 2.47, 2.48 and 2.49 do
    /// (seen as non-JSON output of `qnnx --json compile`, with `QNN_LOG_LEVEL=error` too), 2.50
    /// and 2.51 do not. `qnn-rs` sends stdout to stderr around the call for those.
    pub htp_finalize_prints: bool,
}

const fn v(major: u32, minor: u32, patch: u32) -> Version {
    Version {
        major,
        minor,
        patch,
    }
}

/// The tested releases, oldest first. Versions were read from each library with
/// `QNN_LIB_DIR=<release>/qnn` (the providers' `apiVersion`, `backendGetBuildId`).
pub const TESTED: &[Release] = &[
    Release {
        wheel: "2.3.0",
        qnn: "2.47.0",
        build_id: "v2.47.0.260601114230",
        core_api: v(2, 36, 0),
        htp_api: v(5, 47, 0),
        system_api: v(1, 11, 0),
        cpu_api: Some(v(1, 1, 0)),
        htp_device_config: DeviceConfigLayout::UnionAt8,
        htp_finalize_prints: true,
        htp_concurrent_execute: false,
    },
    Release {
        wheel: "2.4.0",
        qnn: "2.48.40",
        build_id: "v2.48.40.260702151143",
        core_api: v(2, 37, 0),
        htp_api: v(5, 48, 0),
        system_api: v(1, 12, 0),
        cpu_api: None,
        htp_device_config: DeviceConfigLayout::UnionAt8,
        htp_finalize_prints: true,
        htp_concurrent_execute: false,
    },
    Release {
        wheel: "2.5.0",
        qnn: "2.49.40",
        build_id: "v2.49.40.260810104044",
        core_api: v(2, 38, 0),
        htp_api: v(5, 49, 0),
        system_api: v(1, 13, 0),
        cpu_api: None,
        htp_device_config: DeviceConfigLayout::UnionAt4,
        htp_finalize_prints: true,
        htp_concurrent_execute: true,
    },
    Release {
        wheel: "2.6.0",
        qnn: "2.50.40",
        build_id: "v2.50.40.260831140417",
        core_api: v(2, 39, 0),
        htp_api: v(5, 50, 0),
        system_api: v(1, 14, 0),
        cpu_api: None,
        htp_device_config: DeviceConfigLayout::UnionAt8,
        htp_finalize_prints: false,
        htp_concurrent_execute: true,
    },
    Release {
        wheel: "2.7.0",
        qnn: "2.51.0",
        build_id: "v2.51.0.260929181845",
        core_api: v(2, 40, 0),
        htp_api: v(5, 51, 0),
        system_api: v(1, 15, 0),
        cpu_api: None,
        htp_device_config: DeviceConfigLayout::UnionAt8,
        htp_finalize_prints: false,
        htp_concurrent_execute: true,
    },
];

/// The release `scripts/setup-runtime` installs by default (into `runtime/`).
pub const DEFAULT: &Release = &TESTED[TESTED.len() - 1];

/// The tested release with this build id. An SDK's build id may carry a suffix after the one a
/// wheel's library reports (`v2.36.1.250708151608_123266` in an SDK header): it still names the
/// same build.
pub fn by_build_id(build_id: &str) -> Option<&'static Release> {
    TESTED.iter().find(|r| {
        build_id
            .strip_prefix(r.build_id)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['_', '-']))
    })
}

/// The tested release whose HTP library declares backend API `htp_api` (major and minor; the
/// patch is not compared: a fix release keeps its structs).
pub fn by_htp_api(htp_api: Version) -> Option<&'static Release> {
    TESTED
        .iter()
        .find(|r| (r.htp_api.major, r.htp_api.minor) == (htp_api.major, htp_api.minor))
}

/// Whether the HTP library with backend API `htp_api` executes different graphs concurrently
/// correctly (see [`Release::htp_concurrent_execute`]). Releases older than the tested ones
/// are assumed not to (serialising costs only throughput); newer ones, like the newest tested.
pub fn htp_executes_concurrently(htp_api: Version) -> bool {
    match by_htp_api(htp_api) {
        Some(r) => r.htp_concurrent_execute,
        None => (htp_api.major, htp_api.minor) > (TESTED[0].htp_api.major, TESTED[0].htp_api.minor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_found_by_build_id_and_api() {
        assert_eq!(by_build_id("v2.49.40.260810104044").unwrap().wheel, "2.5.0");
        assert_eq!(
            by_build_id("v2.49.40.260810104044_9").unwrap().qnn,
            "2.49.40"
        );
        assert!(by_build_id("v2.49.40.2608101040449").is_none());
        assert!(by_build_id("v2.52.0.261001000000").is_none());
        assert_eq!(by_htp_api(v(5, 48, 3)).unwrap().qnn, "2.48.40");
        assert!(by_htp_api(v(5, 52, 0)).is_none());
        assert_eq!(DEFAULT.qnn, "2.51.0");
    }

    #[test]
    fn the_table_is_ordered_and_consistent() {
        for w in TESTED.windows(2) {
            assert!(w[0].htp_api < w[1].htp_api && w[0].core_api < w[1].core_api);
        }
        for r in TESTED {
            assert!(r.build_id.starts_with(&format!("v{}.", r.qnn)), "{r:?}");
            // The HTP backend API minor is the QNN minor in every release so far.
            assert_eq!(r.qnn.split('.').nth(1), Some(&*r.htp_api.minor.to_string()));
        }
    }

    #[test]
    fn finalize_prints_on_stdout_up_to_2_49() {
        let printing: Vec<&str> = TESTED
            .iter()
            .filter(|r| r.htp_finalize_prints)
            .map(|r| r.qnn)
            .collect();
        assert_eq!(printing, ["2.47.0", "2.48.40", "2.49.40"]);
    }

    #[test]
    fn only_2_47_and_2_48_serialise_executes() {
        let serial: Vec<&str> = TESTED
            .iter()
            .filter(|r| !htp_executes_concurrently(r.htp_api))
            .map(|r| r.qnn)
            .collect();
        assert_eq!(serial, ["2.47.0", "2.48.40"]);
        assert!(!htp_executes_concurrently(v(5, 40, 0)));
        assert!(htp_executes_concurrently(v(5, 60, 0)));
    }
}
