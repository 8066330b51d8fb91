//! HTP performance modes: DCVS votes through the HTP perf infrastructure
//! (`deviceGetInfrastructure` → `QnnHtpDevice_PerfInfrastructure_t`: `createPowerConfigId`,
//! `setPowerConfig`, `destroyPowerConfigId`).
//!
//! A vote sets the clocks and voltage corners of a real HTP. On the x86_64 emulator it has no
//! effect that can be measured: the emulator runs on the host CPU, whose clocks these calls do
//! not touch.

use std::str::FromStr;

use qnn_sys::htp::{
    power_mode, power_option, voltage_corner as vc, DcvsV3, DeviceInfrastructure,
    PerfInfrastructure, PowerConfigValue, INFRASTRUCTURE_TYPE_PERF,
};

use crate::api::qnn_call;
use crate::device::Device;
use crate::error::{Error, Result};

/// An HTP performance mode, named as ONNX Runtime's QNN execution provider names the values
/// of its `htp_performance_mode` option ([`HtpPerformanceMode::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HtpPerformanceMode {
    /// No vote: the library's own DCVS policy.
    Default,
    Burst,
    SustainedHighPerformance,
    HighPerformance,
    Balanced,
    LowBalanced,
    HighPowerSaver,
    PowerSaver,
    LowPowerSaver,
    ExtremePowerSaver,
}

impl HtpPerformanceMode {
    /// Every mode, from the fastest to the most frugal (`Default` first).
    pub const ALL: [HtpPerformanceMode; 10] = [
        HtpPerformanceMode::Default,
        HtpPerformanceMode::Burst,
        HtpPerformanceMode::SustainedHighPerformance,
        HtpPerformanceMode::HighPerformance,
        HtpPerformanceMode::Balanced,
        HtpPerformanceMode::LowBalanced,
        HtpPerformanceMode::HighPowerSaver,
        HtpPerformanceMode::PowerSaver,
        HtpPerformanceMode::LowPowerSaver,
        HtpPerformanceMode::ExtremePowerSaver,
    ];

    /// ONNX Runtime's name of the mode (`"burst"`, `"sustained_high_performance"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            HtpPerformanceMode::Default => "default",
            HtpPerformanceMode::Burst => "burst",
            HtpPerformanceMode::SustainedHighPerformance => "sustained_high_performance",
            HtpPerformanceMode::HighPerformance => "high_performance",
            HtpPerformanceMode::Balanced => "balanced",
            HtpPerformanceMode::LowBalanced => "low_balanced",
            HtpPerformanceMode::HighPowerSaver => "high_power_saver",
            HtpPerformanceMode::PowerSaver => "power_saver",
            HtpPerformanceMode::LowPowerSaver => "low_power_saver",
            HtpPerformanceMode::ExtremePowerSaver => "extreme_power_saver",
        }
    }

    /// The valid names, comma-separated, for messages.
    pub fn names() -> String {
        HtpPerformanceMode::ALL.map(|m| m.name()).join(", ")
    }

    /// The power configs that make this mode's vote for client `id`, in the order of their
    /// `setPowerConfig` calls (empty for `Default`).
    ///
    /// The values are ONNX Runtime's, so that a model ported from its QNN EP runs at the same
    /// clocks: `HtpPowerConfigManager::SetHtpPerformancePowerConfig` in
    /// `microsoft/onnxruntime` `onnxruntime/core/providers/qnn/builder/qnn_htp_power_config_manager.cc`
    /// (commit 1cc8bbcb; the same table is `QnnBackendManager::SetHtpPowerConfig` in
    /// `qnn_backend_manager.cc` of earlier releases and of `onnxruntime/onnxruntime-qnn`), with
    /// the sleep latencies of `qnn_def.h` (`kSleepMinLatency` 40 us, `kSleepLowLatency` 100,
    /// `kSleepMediumLatency` 1000). Every mode sends one DCVS v3 config (power mode
    /// PERFORMANCE, sleep not disabled, bus and core corners pinned to one value):
    ///
    /// | mode | DCVS | sleep latency | bus = core corner |
    /// |---|---|---|---|
    /// | burst | off | 40 | MAX |
    /// | sustained_high_performance, high_performance | off | 100 | TURBO |
    /// | balanced | on | 1000 | NOM_PLUS |
    /// | low_balanced | on | 1000 | NOM |
    /// | high_power_saver | on | 1000 | SVS_PLUS |
    /// | power_saver | on | 1000 | SVS |
    /// | low_power_saver | on | 1000 | SVS2 |
    /// | extreme_power_saver | on, power mode POWER_SAVER | 1000 | DISABLE |
    ///
    /// Burst also sets the RPC polling time to 9999 us (the header's maximum), in a second
    /// call, as ONNX Runtime's EP does for that mode alone (`default_rpc_polling_time_ = 9999`
    /// in `onnxruntime/onnxruntime-qnn` `onnxruntime/core/providers/qnn/qnn_execution_provider.cc`,
    /// sent by `QnnBackendManager::SetRpcPowerConfigs`). ONNX Runtime sets the RPC control
    /// latency only from its own `rpc_control_latency` option, never from the mode, so no mode
    /// sets it here.
    pub fn power_configs(self, id: u32) -> Vec<qnn_sys::htp::PowerConfig> {
        let dcvs = |enable: bool, sleep_latency: u32, corner: u32| DcvsV3 {
            context_id: id,
            set_dcvs_enable: 1,
            dcvs_enable: enable as u32,
            power_mode: power_mode::PERFORMANCE,
            set_sleep_latency: 1,
            sleep_latency,
            set_sleep_disable: 0,
            sleep_disable: 0,
            set_bus_params: 1,
            bus_voltage_corner_min: corner,
            bus_voltage_corner_target: corner,
            bus_voltage_corner_max: corner,
            set_core_params: 1,
            core_voltage_corner_min: corner,
            core_voltage_corner_target: corner,
            core_voltage_corner_max: corner,
        };
        let v3 = match self {
            HtpPerformanceMode::Default => return Vec::new(),
            HtpPerformanceMode::Burst => dcvs(false, 40, vc::MAX),
            HtpPerformanceMode::SustainedHighPerformance | HtpPerformanceMode::HighPerformance => {
                dcvs(false, 100, vc::TURBO)
            }
            HtpPerformanceMode::Balanced => dcvs(true, 1000, vc::NOM_PLUS),
            HtpPerformanceMode::LowBalanced => dcvs(true, 1000, vc::NOM),
            HtpPerformanceMode::HighPowerSaver => dcvs(true, 1000, vc::SVS_PLUS),
            HtpPerformanceMode::PowerSaver => dcvs(true, 1000, vc::SVS),
            HtpPerformanceMode::LowPowerSaver => dcvs(true, 1000, vc::SVS2),
            HtpPerformanceMode::ExtremePowerSaver => DcvsV3 {
                power_mode: power_mode::POWER_SAVER,
                ..dcvs(true, 1000, vc::DISABLE)
            },
        };
        let mut dcvs_config = zeroed(power_option::DCVS_V3);
        dcvs_config.value.dcvs_v3 = v3;
        let mut v = vec![dcvs_config];
        if self == HtpPerformanceMode::Burst {
            let mut polling = zeroed(power_option::RPC_POLLING_TIME);
            polling.value.rpc_polling_time_us = qnn_sys::htp::MAX_RPC_POLLING_TIME_US;
            v.push(polling);
        }
        v
    }
}

/// A power config with its whole union zeroed, so that no uninitialised bytes cross into C
/// when a smaller member is then set.
fn zeroed(option: u32) -> qnn_sys::htp::PowerConfig {
    qnn_sys::htp::PowerConfig {
        option,
        value: PowerConfigValue { raw: [0; 16] },
    }
}

impl std::fmt::Display for HtpPerformanceMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HtpPerformanceMode {
    type Err = String;

    /// ONNX Runtime's names; an unknown one is refused with the valid names.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        HtpPerformanceMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown HTP performance mode {s:?}; valid: {}",
                    HtpPerformanceMode::names()
                )
            })
    }
}

/// A power configuration client of an HTP device (`createPowerConfigId`): votes made through it
/// ([`PowerConfig::set`]) hold until another vote through it, or until it is dropped, which
/// destroys the id (`destroyPowerConfigId`) and so withdraws them. Keeps its device (and so the
/// library) alive.
pub struct PowerConfig {
    device: Device,
    infra: PerfInfrastructure,
    id: u32,
    mode: Option<HtpPerformanceMode>,
}

impl std::fmt::Debug for PowerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PowerConfig")
            .field("id", &self.id)
            .field("mode", &self.mode)
            .finish()
    }
}

impl PowerConfig {
    /// `deviceGetInfrastructure`, then `createPowerConfigId` for the first HTP and core
    /// (device 0, core 0, as ONNX Runtime's EP by default). Only the HTP backend has this
    /// infrastructure: other backends get [`Error::InvalidArgument`].
    pub fn new(device: &Device) -> Result<PowerConfig> {
        let b = &device.inner.backend;
        if b.kind != qnnx_types::BackendKind::Htp {
            return Err(Error::InvalidArgument(format!(
                "HTP performance modes apply to the HTP backend, not the {}",
                b.kind
            )));
        }
        let mut raw: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the out-pointer is valid for the call.
        unsafe { qnn_call!(b.api, deviceGetInfrastructure(&mut raw)) }?;
        if raw.is_null() {
            return Err(Error::NotProvided {
                call: "deviceGetInfrastructure (returned NULL)",
                library: b.api.library.clone(),
            });
        }
        // SAFETY: the HTP library's `QnnDevice_Infrastructure_t` points at its
        // `QnnHtpDevice_Infrastructure_t`, which lives as long as the library; copied out.
        let infra = unsafe { *(raw as *const DeviceInfrastructure) };
        if infra.infra_type != INFRASTRUCTURE_TYPE_PERF {
            return Err(Error::InvalidArgument(format!(
                "the HTP library's device infrastructure has type {}, not the perf \
                 infrastructure ({INFRASTRUCTURE_TYPE_PERF})",
                infra.infra_type
            )));
        }
        let perf = infra.perf_infra;
        let mut id = 0u32;
        // SAFETY: a function of the library's perf infrastructure; the out-pointer is valid.
        unsafe { qnn_call!(b.api, perf => createPowerConfigId(0, 0, &mut id)) }?;
        Ok(PowerConfig {
            device: device.clone(),
            infra: perf,
            id,
            mode: None,
        })
    }

    /// `setPowerConfig` with `mode`'s configs ([`HtpPerformanceMode::power_configs`]), one call
    /// each. `Default` sends nothing (a vote made before stays). The mode is recorded once
    /// every call succeeded.
    pub fn set(&mut self, mode: HtpPerformanceMode) -> Result<()> {
        let api = &self.device.inner.backend.api;
        let perf = self.infra;
        for c in mode.power_configs(self.id) {
            let list = [&c as *const qnn_sys::htp::PowerConfig, std::ptr::null()];
            // SAFETY: `list` is NULL-terminated and points at `c`, alive until after the call.
            unsafe { qnn_call!(*api, perf => setPowerConfig(self.id, list.as_ptr())) }?;
        }
        self.mode = Some(mode);
        Ok(())
    }

    /// The client id `createPowerConfigId` returned.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The last mode [`PowerConfig::set`] applied.
    pub fn mode(&self) -> Option<HtpPerformanceMode> {
        self.mode
    }
}

impl Drop for PowerConfig {
    fn drop(&mut self) {
        let api = &self.device.inner.backend.api;
        let perf = self.infra;
        // SAFETY: the id came from `createPowerConfigId` of this library, which our device keeps
        // loaded; it is destroyed once.
        if let Err(e) = unsafe { qnn_call!(*api, perf => destroyPowerConfigId(self.id)) } {
            tracing::warn!(target: "qnn", "destroyPowerConfigId({}): {e}", self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_lists_valid() {
        for m in HtpPerformanceMode::ALL {
            assert_eq!(m.name().parse::<HtpPerformanceMode>(), Ok(m));
        }
        let e = "turbo".parse::<HtpPerformanceMode>().unwrap_err();
        assert!(
            e.contains("burst") && e.contains("extreme_power_saver"),
            "{e}"
        );
    }

    #[test]
    fn modes_carry_onnx_runtimes_values() {
        assert!(HtpPerformanceMode::Default.power_configs(1).is_empty());
        let burst = HtpPerformanceMode::Burst.power_configs(7);
        assert_eq!(burst.len(), 2);
        assert_eq!(burst[0].option, power_option::DCVS_V3);
        // SAFETY: built as DCVS v3 / RPC polling configs above.
        let (d, poll) = unsafe { (burst[0].value.dcvs_v3, burst[1].value.rpc_polling_time_us) };
        assert_eq!((d.context_id, d.dcvs_enable, d.sleep_latency), (7, 0, 40));
        assert_eq!(
            (d.core_voltage_corner_target, d.bus_voltage_corner_max),
            (vc::MAX, vc::MAX)
        );
        assert_eq!(
            (burst[1].option, poll),
            (power_option::RPC_POLLING_TIME, 9999)
        );
        let corner = |m: HtpPerformanceMode| {
            let c = m.power_configs(1);
            assert_eq!(c.len(), 1, "{m}");
            // SAFETY: as above.
            unsafe { c[0].value.dcvs_v3 }
        };
        assert_eq!(
            corner(HtpPerformanceMode::SustainedHighPerformance).core_voltage_corner_min,
            vc::TURBO
        );
        assert_eq!(corner(HtpPerformanceMode::Balanced).dcvs_enable, 1);
        assert_eq!(
            corner(HtpPerformanceMode::LowPowerSaver).bus_voltage_corner_target,
            vc::SVS2
        );
        let x = corner(HtpPerformanceMode::ExtremePowerSaver);
        assert_eq!(
            (x.power_mode, x.core_voltage_corner_max),
            (power_mode::POWER_SAVER, vc::DISABLE)
        );
    }
}
