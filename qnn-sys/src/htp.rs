//! HTP backend custom config structs (the GPU ones are in [`crate::gpu`]). These change layout
//! between SDK releases more than the core types do; where releases differ both layouts are
//! here, and [`crate::releases`] says which release takes which.

use std::ffi::c_void;

use crate::types::ErrorHandle;

/// `QnnHtpDevice_ConfigOption_t` values.
pub mod device_option {
    pub const SOC: u32 = 0;
    pub const ARCH: u32 = 1;
    pub const SIGNEDPD: u32 = 2;
    /// Deprecated by Qualcomm: returns NOT_SUPPORTED at run time.
    pub const SECUREPD: u32 = 3;
    pub const ASYNC_EXECUTE: u32 = 4;
    pub const DYNAMIC_PARTITIONING: u32 = 5;
    pub const APP_UID: u32 = 6;
}

/// `QnnHtpDevice_Minimum_Arch_t`. `arch` is a `QnnHtpDevice_Arch_t`: the architecture's number
/// (68 for v68), as `qnnx_types::HtpArch::number` gives it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceArch {
    pub device_id: u32,
    pub arch: u32,
}

/// `QnnHtpDevice_UseDynamicPartitioning_t`: the member that makes the union pointer-aligned.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceDynamicPartitioning {
    pub device_id: u32,
    pub use_dynamic_partitioning: bool,
    pub rsm_handle: *mut c_void,
}

/// The union of [`DeviceCustomConfig`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union DeviceCustomValue {
    pub soc_model: u32,
    pub arch: DeviceArch,
    /// `{deviceId, bool}` for SIGNEDPD and ASYNC_EXECUTE.
    pub device_flag: DeviceArch,
    pub dynamic_partitioning: DeviceDynamicPartitioning,
    pub app_uid: u32,
}

/// `QnnHtpDevice_CustomConfig_t` with the union at offset 8 (the union holds a pointer member,
/// `QnnHtpDevice_UseDynamicPartitioning_t`): the layout of the 2.47, 2.48, 2.50 and 2.51 HTP
/// libraries. See [`DeviceConfigLayout`] for which release takes which.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceCustomConfig {
    pub option: u32,
    pub value: DeviceCustomValue,
}

/// The union of [`DeviceCustomConfigPacked`]: `uint32_t` members only.
#[repr(C)]
#[derive(Clone, Copy)]
pub union DeviceCustomValuePacked {
    pub soc_model: u32,
    pub arch: DeviceArch,
    pub device_flag: DeviceArch,
    pub app_uid: u32,
}

/// `QnnHtpDevice_CustomConfig_t` with the union at offset 4 (no pointer member): the layout of
/// the 2.36-era public headers and, measured, of the 2.49 HTP library (onnxruntime-qnn 2.5.0,
/// build v2.49.40, HTP backend API 5.49), which reads its SoC number at offset 4 and, given the
/// offset-8 layout, logs "Unknown config socModel 0" and fails `deviceCreate` with 14001
/// (issue 18; docs/qnn-notes.md §11).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceCustomConfigPacked {
    pub option: u32,
    pub value: DeviceCustomValuePacked,
}

/// Which `QnnHtpDevice_CustomConfig_t` layout a library takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceConfigLayout {
    /// [`DeviceCustomConfig`]: union at offset 8.
    UnionAt8,
    /// [`DeviceCustomConfigPacked`]: union at offset 4.
    UnionAt4,
}

/// How [`device_config_layout`] knows a release's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutSource {
    /// Probed on that release's library.
    Measured,
    /// Read from that release's public headers.
    Header,
    /// A release we have neither probed nor seen the headers of: the newest layout is assumed.
    Unknown,
}

/// The device-config layout of the HTP library with backend API `htp_api`, and how that is
/// known.
///
/// Measured: the tested releases' [`crate::releases::Release::htp_device_config`] (a probe
/// passed a SOC config (60) to `deviceCreate` in each layout on the HTP library of every
/// onnxruntime-qnn wheel for Linux x86_64, 2.3.0 to 2.7.0: backend API 5.47, 5.48, 5.50 and
/// 5.51 accept only the offset-8 layout (14001 with offset 4), 5.49 only the offset-4 layout
/// (14001 with offset 8)). Headers: the 2.36.1 set (HTP API 5.36) has offset 4
/// (docs/qnn-notes.md §2, gotcha 1). `cargo build --features bindgen` compares a user's SDK
/// header with [`DeviceCustomConfig`].
pub fn device_config_layout(htp_api: crate::Version) -> (DeviceConfigLayout, LayoutSource) {
    if let Some(r) = crate::releases::by_htp_api(htp_api) {
        return (r.htp_device_config, LayoutSource::Measured);
    }
    match (htp_api.major, htp_api.minor) {
        (5, ..=36) => (DeviceConfigLayout::UnionAt4, LayoutSource::Header),
        _ => (DeviceConfigLayout::UnionAt8, LayoutSource::Unknown),
    }
}

/// `QnnHtpDevice_OnChipDeviceInfoExtension_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OnChipDeviceInfo {
    /// VTCM size in MB.
    pub vtcm_size: usize,
    pub soc_model: u32,
    pub signed_pd_support: bool,
    pub dlbc_support: bool,
    pub arch: u32,
}

/// `QnnHtpDevice_DeviceInfoExtension_t`: what `deviceGetPlatformInfo` points at for HTP.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceInfoExtension {
    pub dev_type: u32,
    pub on_chip_device: OnChipDeviceInfo,
}

/// `QnnHtpGraph_ConfigOption_t` values.
pub mod graph_option {
    pub const OPTIMIZATION: u32 = 1;
    pub const PRECISION: u32 = 2;
    pub const VTCM_SIZE_IN_MB: u32 = 3;
    pub const FOLD_RELU_ACTIVATION_INTO_CONV_OFF: u32 = 4;
    pub const SHORT_DEPTH_CONV_ON_HMX_OFF: u32 = 5;
    pub const NUM_HVX_THREADS: u32 = 6;
    pub const FINALIZE_CONFIG: u32 = 7;
    pub const NUM_CORES: u32 = 8;
    pub const PARALLEL_GRAPH_EXECUTION_CONFIG: u32 = 9;
    pub const VTCM_SIZE_IN_BYTES: u32 = 10;
    pub const HMX_BOUNDING: u32 = 11;
    pub const WEIGHTS_PACKING: u32 = 12;
    pub const ASSUME_SAME_QUANT: u32 = 13;
    pub const SHARE_IO_BUFFER: u32 = 14;
}

/// `QnnHtpGraph_OptimizationType_t` values.
pub mod optimization_type {
    pub const SCHEDULE_THRESHOLD: u32 = 1;
    pub const FINALIZE_RETRIES: u32 = 2;
    /// `floatValue` 1 to 3: higher spends more finalize time for a faster graph.
    pub const FINALIZE_OPTIMIZATION_FLAG: u32 = 3;
    pub const ENABLE_DLBC: u32 = 4;
    pub const ENABLE_DLBC_WEIGHTS: u32 = 5;
}

/// `Qnn_Precision_t` values.
pub mod precision {
    pub const FLOAT32: u32 = 0;
    pub const FLOAT16: u32 = 1;
}

/// `QnnHtpGraph_OptimizationOption_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GraphOptimization {
    pub option_type: u32,
    pub float_value: f32,
}

/// The union of [`GraphCustomConfig`] (48 bytes: its largest members are finalize and parallel
/// execution configs we do not build).
#[repr(C)]
#[derive(Clone, Copy)]
pub union GraphCustomValue {
    pub optimization: GraphOptimization,
    pub precision: u32,
    pub vtcm_size_in_mb: u32,
    pub num_hvx_threads: u64,
    pub num_cores: u32,
    pub vtcm_size_in_bytes: u32,
    pub flag: bool,
    pub raw: [u64; 6],
}

/// `QnnHtpGraph_CustomConfig_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GraphCustomConfig {
    pub option: u32,
    pub value: GraphCustomValue,
}

/// `QnnHtpContext_ConfigOption_t` values (`HTP/QnnHtpContext.h`; numbers from the copy in
/// `qualcomm/geniex-qairt-plugin` `qnn-api/include/HTP/QnnHtpContext.h` at commit `c40b5e0e`,
/// docs/qnn-notes.md §2). Options not listed are not used by this workspace.
pub mod context_option {
    /// `bool weightSharingEnabled`: graphs of the context store static tensors they share
    /// once. Qualcomm documents it for offline prepare on x86_64 Linux, HTP v73 and later, at
    /// most 64 graphs per context.
    pub const WEIGHT_SHARING_ENABLED: u32 = 1;
    /// `QnnHtpContext_GroupRegistration_t groupRegistration`.
    pub const REGISTER_MULTI_CONTEXTS: u32 = 2;
    /// `uint64_t fileReadMemoryBudgetInMb`.
    pub const FILE_READ_MEMORY_BUDGET: u32 = 3;
}

/// `QnnHtpContext_GroupRegistration_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ContextGroupRegistration {
    /// `Qnn_ContextHandle_t firstGroupHandle`: 0 to start a new group.
    pub first_group_handle: crate::Handle,
    pub max_spill_fill_buffer: u64,
}

/// The union of [`ContextCustomConfig`]. Its largest members in the header are 16 bytes
/// (`QnnHtpContext_GroupRegistration_t`, `QnnHtpContext_ParallelWeightLoading_t`) and it holds
/// pointers and `uint64_t`s, so it is 8-aligned; `raw` gives it that size.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ContextCustomValue {
    /// For [`context_option::WEIGHT_SHARING_ENABLED`] and the other `bool` options.
    pub flag: bool,
    pub group_registration: ContextGroupRegistration,
    pub file_read_memory_budget_mb: u64,
    pub raw: [u64; 2],
}

/// `QnnHtpContext_CustomConfig_t`: `{QnnHtpContext_ConfigOption_t option; union {...}}`, the
/// union at offset 8. The layout is the same in the 2.36-era header (whose union already held a
/// pointer and a `uint64_t`) and the newer one.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ContextCustomConfig {
    pub option: u32,
    pub value: ContextCustomValue,
}

/// `QnnHtpSystemContext_GraphBlobInfoV1_t` with its `version` (`QnnHtpSystemContext_GraphBlobInfo_t`
/// holding the V1 member): what `graph_blob_info` of a version-3 graph info points at.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GraphBlobInfoV1 {
    /// 1.
    pub version: u32,
    pub spill_fill_buffer_size: u64,
    pub vtcm_size: u32,
    pub optimization_level: u32,
    pub htp_dlbc: u8,
    pub num_hvx_threads: u64,
}

/// `QnnHtpSystemContext_GraphBlobInfoV2_t` (from a copy of `HTP/QnnHtpSystemContext.h` newer than
/// the 2.36-era set, found through the code index: docs/qnn-notes.md §2). The 2.51 library writes a
/// 112-byte blob: a [`GraphBlobInfoV1`] (version 1) followed by this struct (version 2) at
/// offset 40; observed, the header does not say so.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GraphBlobInfoV2 {
    /// 2.
    pub version: u32,
    pub native_k_channel_size: u64,
    pub native_v_channel_size: u64,
    pub is_safe_share_io: u32,
    /// Graph input and output tensors, bytes.
    pub io_tensor_size: u64,
    /// Op data such as run lists, bytes.
    pub op_data_size: u64,
    /// Static data of the graph that it does not share, bytes.
    pub const_size: u64,
    pub ddr_tensor_size: u64,
    /// Weights in the context's shared-weights buffer, bytes: non-zero exactly for graphs
    /// prepared with [`context_option::WEIGHT_SHARING_ENABLED`] (observed).
    pub shared_weights_size: u64,
}

/// Where the 2.51 library puts [`GraphBlobInfoV2`] inside the graph blob info.
pub const GRAPH_BLOB_INFO_V2_OFFSET: usize = 40;

/// `QnnHtpDevice_InfrastructureType_t` of a perf infrastructure.
pub const INFRASTRUCTURE_TYPE_PERF: u32 = 0;

/// `QnnHtpDevice_PerfInfrastructure_t`: the HTP's power and memory voting functions, reached
/// through `deviceGetInfrastructure` (not the core function table). Any entry may be NULL.
/// Fields are spelled as in the C header, like [`crate::CoreFunctions`]' slots, so that errors
/// name the call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_snake_case)]
pub struct PerfInfrastructure {
    /// `createPowerConfigId(deviceId, coreId, &powerConfigId)`.
    pub createPowerConfigId: Option<unsafe extern "C" fn(u32, u32, *mut u32) -> ErrorHandle>,
    /// `destroyPowerConfigId(powerConfigId)`.
    pub destroyPowerConfigId: Option<unsafe extern "C" fn(u32) -> ErrorHandle>,
    /// `setPowerConfig(powerConfigId, NULL-terminated list of power configs)`.
    pub setPowerConfig: Option<unsafe extern "C" fn(u32, *const *const PowerConfig) -> ErrorHandle>,
    /// `setMemoryConfig(deviceId, coreId, NULL-terminated list of memory configs)`.
    pub setMemoryConfig:
        Option<unsafe extern "C" fn(u32, u32, *const *const c_void) -> ErrorHandle>,
}

/// `QnnHtpDevice_Infrastructure_t`: what `deviceGetInfrastructure` of the HTP library points at
/// (`QnnDevice_Infrastructure_t` is an opaque pointer to it). The union holds only
/// `perfInfra`, at offset 8.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceInfrastructure {
    /// [`INFRASTRUCTURE_TYPE_PERF`] for the perf infrastructure.
    pub infra_type: u32,
    pub perf_infra: PerfInfrastructure,
}

/// `QnnHtpPerfInfrastructure_PowerConfigOption_t` values used here.
pub mod power_option {
    /// [`super::DcvsV3`].
    pub const DCVS_V3: u32 = 1;
    /// `rpcControlLatencyConfig`, microseconds.
    pub const RPC_CONTROL_LATENCY: u32 = 2;
    /// `rpcPollingTimeConfig`, microseconds (at most [`super::MAX_RPC_POLLING_TIME_US`]); the
    /// header says V69 and later only, and process-wide.
    pub const RPC_POLLING_TIME: u32 = 3;
}

/// `QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIG_MAX_RPC_POLLING_TIME`.
pub const MAX_RPC_POLLING_TIME_US: u32 = 9999;

/// `QnnHtpPerfInfrastructure_PowerMode_t` values (HAP DCVS v2 modes).
pub mod power_mode {
    pub const ADJUST_UP_DOWN: u32 = 0x1;
    pub const ADJUST_ONLY_UP: u32 = 0x2;
    pub const POWER_SAVER: u32 = 0x4;
    pub const POWER_SAVER_AGGRESSIVE: u32 = 0x8;
    pub const PERFORMANCE: u32 = 0x10;
    pub const DUTY_CYCLE: u32 = 0x20;
}

/// `QnnHtpPerfInfrastructure_VoltageCorner_t` values (each maps to a `HAP_DCVS_VCORNER_*`).
pub mod voltage_corner {
    pub const DISABLE: u32 = 0x10;
    pub const MIN: u32 = 0x20;
    pub const SVS2: u32 = 0x30;
    pub const SVS: u32 = 0x40;
    pub const SVS_PLUS: u32 = 0x50;
    pub const NOM: u32 = 0x60;
    pub const NOM_PLUS: u32 = 0x70;
    pub const TURBO: u32 = 0x80;
    pub const TURBO_PLUS: u32 = 0x90;
    pub const MAX: u32 = 0xA0;
}

/// `QnnHtpPerfInfrastructure_DcvsV3_t`: a DCVS vote with separate bus and core voltage corners
/// (`set*` fields are booleans that make the following fields count).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DcvsV3 {
    pub context_id: u32,
    pub set_dcvs_enable: u32,
    pub dcvs_enable: u32,
    /// A [`power_mode`] value.
    pub power_mode: u32,
    pub set_sleep_latency: u32,
    /// Microseconds.
    pub sleep_latency: u32,
    pub set_sleep_disable: u32,
    pub sleep_disable: u32,
    pub set_bus_params: u32,
    pub bus_voltage_corner_min: u32,
    pub bus_voltage_corner_target: u32,
    pub bus_voltage_corner_max: u32,
    pub set_core_params: u32,
    pub core_voltage_corner_min: u32,
    pub core_voltage_corner_target: u32,
    pub core_voltage_corner_max: u32,
}

/// The union of [`PowerConfig`]: every member is made of `uint32_t`s and the largest is
/// [`DcvsV3`] (64 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union PowerConfigValue {
    pub dcvs_v3: DcvsV3,
    pub rpc_control_latency_us: u32,
    pub rpc_polling_time_us: u32,
    pub raw: [u32; 16],
}

/// `QnnHtpPerfInfrastructure_PowerConfig_t`: 68 bytes, the union at offset 4. The layout is
/// the same in every header seen: the QNN 2.13 copy (`peyer/qcom_qnn`) and the newest one in
/// `qualcomm/geniex-qairt-plugin` (`qnn-api/include/HTP/QnnHtpPerfInfrastructure.h` at commit
/// `cb68d5d5`, which `static_assert`s the size 68 as an ABI invariant: members added since
/// (HMX v2, CENG, DCVS v3 with expanded corners) stay within `DcvsV3`'s 64 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PowerConfig {
    /// A [`power_option`] value.
    pub option: u32,
    pub value: PowerConfigValue,
}

impl std::fmt::Debug for PowerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: every member of the union is plain `u32`s and `raw` covers all 64 bytes.
        let raw = unsafe { self.value.raw };
        f.debug_struct("PowerConfig")
            .field("option", &self.option)
            .field("value", &raw)
            .finish()
    }
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(DeviceCustomConfig, value) == 8);
    assert!(size_of::<DeviceCustomConfig>() == 24);
    assert!(offset_of!(DeviceCustomConfigPacked, value) == 4);
    assert!(size_of::<DeviceCustomConfigPacked>() == 12);
    assert!(size_of::<DeviceInfoExtension>() == 32);
    assert!(offset_of!(DeviceInfoExtension, on_chip_device) == 8);
    assert!(offset_of!(OnChipDeviceInfo, soc_model) == 8);
    assert!(offset_of!(OnChipDeviceInfo, signed_pd_support) == 12);
    assert!(offset_of!(OnChipDeviceInfo, arch) == 16);
    assert!(size_of::<GraphCustomConfig>() == 56);
    assert!(offset_of!(GraphCustomConfig, value) == 8);
    assert!(offset_of!(ContextCustomConfig, value) == 8);
    assert!(size_of::<ContextCustomConfig>() == 24);
    assert!(size_of::<ContextGroupRegistration>() == 16);
    assert!(size_of::<GraphBlobInfoV1>() == GRAPH_BLOB_INFO_V2_OFFSET);
    assert!(offset_of!(GraphBlobInfoV2, io_tensor_size) == 32);
    assert!(offset_of!(GraphBlobInfoV2, shared_weights_size) == 64);
    assert!(size_of::<GraphBlobInfoV2>() == 72);
    assert!(size_of::<DcvsV3>() == 64);
    assert!(offset_of!(DcvsV3, core_voltage_corner_max) == 60);
    assert!(offset_of!(PowerConfig, value) == 4);
    assert!(size_of::<PowerConfig>() == 68);
    assert!(offset_of!(DeviceInfrastructure, perf_infra) == 8);
    assert!(offset_of!(PerfInfrastructure, setPowerConfig) == 16);
    assert!(size_of::<DeviceInfrastructure>() == 40);
};

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn releases_pick_their_device_config_layout() {
        let v = |minor| crate::Version {
            major: 5,
            minor,
            patch: 0,
        };
        assert_eq!(device_config_layout(v(51)).0, DeviceConfigLayout::UnionAt8);
        assert_eq!(
            device_config_layout(v(49)),
            (DeviceConfigLayout::UnionAt4, LayoutSource::Measured)
        );
        assert_eq!(device_config_layout(v(36)).1, LayoutSource::Header);
        // Unknown releases, older or newer: the newest layout, flagged.
        assert_eq!(
            device_config_layout(v(44)),
            (DeviceConfigLayout::UnionAt8, LayoutSource::Unknown)
        );
        assert_eq!(device_config_layout(v(60)).1, LayoutSource::Unknown);
    }
}
