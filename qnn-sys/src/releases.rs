//! The QNN releases qnnx is tested with, and what differs between them: the one table of them
//! ([`TESTED`]). `scripts/setup-runtime` and `scripts/test-matrix` read the `Release { .. }`
//! literals below (the `wheel`, `qnn` and `build_id` fields), so keep each a plain literal.
//!
//! Every release here ships in an `onnxruntime-qnn` wheel for Linux x86_64 (the only QNN
//! libraries that can be downloaded without an account), whose `libQnnHtp.so` is the HTP
//! emulator. How each fact was measured is said at the field; `scripts/test-matrix` runs the
//! live tests against each release.

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
