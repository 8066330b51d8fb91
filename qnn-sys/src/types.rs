//! `#[repr(C)]` declarations of the QNN core types, written from the QNN C API (core API 2.27+,
//! checked against the 2.40 library: see `docs/qnn-notes.md` §4). Every struct has a
//! compile-time size and offset check at the bottom of this file (x86_64 / aarch64, LP64 and
//! LLP64 alike: all members are fixed-width or pointers).

use std::ffi::{c_char, c_void};

/// `Qnn_ErrorHandle_t`: 0 is success; the error code is `value & 0xFFFF`.
pub type ErrorHandle = u64;
/// `Qnn_LogHandle_t`, `Qnn_BackendHandle_t`, ...: opaque; the HTP library hands out small integers.
pub type Handle = *mut c_void;
/// `Qnn_ContextBinarySize_t`.
pub type ContextBinarySize = u64;

/// `QnnLog_Callback_t`. `args` is the C `va_list`; on the SysV x86_64 and AAPCS64 Linux ABIs it
/// arrives as one pointer-sized value that can be handed to `vsnprintf` unchanged.
pub type LogCallback =
    Option<unsafe extern "C" fn(fmt: *const c_char, level: u32, timestamp: u64, args: VaListRaw)>;

/// The C `va_list` argument of the log callback. On every target we build for (SysV x86_64,
/// AAPCS64 where the 32-byte `va_list` struct is passed by reference, and Windows where it is a
/// `char*`) it crosses the call as one pointer, which can be handed to `vsnprintf` unchanged.
pub type VaListRaw = *mut c_void;

/// `Qnn_Version_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// `Qnn_ApiVersion_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApiVersion {
    pub core_api_version: Version,
    pub backend_api_version: Version,
}

/// `Qnn_ScaleOffset_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ScaleOffset {
    pub scale: f32,
    pub offset: i32,
}

/// `Qnn_AxisScaleOffset_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AxisScaleOffset {
    pub axis: i32,
    pub num_scale_offsets: u32,
    pub scale_offset: *mut ScaleOffset,
}

/// `Qnn_BwScaleOffset_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct BwScaleOffset {
    pub bitwidth: u32,
    pub scale: f32,
    pub offset: i32,
}

/// `Qnn_BwAxisScaleOffset_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BwAxisScaleOffset {
    pub bitwidth: u32,
    pub axis: i32,
    pub num_elements: u32,
    pub scales: *mut f32,
    pub offsets: *mut i32,
}

/// `Qnn_BlockwiseExpansion_t` (QnnTypes.h, core API 2.27): the scale of element `(c, b)` (slice
/// `c` of `axis`, block `b` of it) is `scale_offsets[c].scale * blocks_scale[c *
/// num_blocks_per_axis + b]`; the integer block scales are `block_scale_bitwidth` bits wide,
/// stored in bytes or 16-bit words as `block_scale_storage_type` says.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BlockwiseExpansion {
    pub axis: i32,
    /// `axisSize` entries.
    pub scale_offsets: *mut ScaleOffset,
    pub num_blocks_per_axis: u32,
    pub block_scale_bitwidth: u32,
    /// `consts::BLOCKWISE_EXPANSION_STORAGE_8` or `_16`.
    pub block_scale_storage_type: u32,
    /// The union `{ uint8_t* blocksScale8; uint16_t* blocksScale16; }`.
    pub blocks_scale: *mut c_void,
}

/// The encoding union of `Qnn_QuantizeParams_t` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union QuantizeEncoding {
    pub scale_offset: ScaleOffset,
    pub axis_scale_offset: AxisScaleOffset,
    pub bw_scale_offset: BwScaleOffset,
    pub bw_axis_scale_offset: BwAxisScaleOffset,
    /// `QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION`: a pointer, not a value.
    pub blockwise_expansion: *mut BlockwiseExpansion,
    /// Block and vector encodings are not built by this crate: only storage here.
    pub raw: [u64; 4],
}

/// `Qnn_QuantizeParams_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QuantizeParams {
    pub encoding_definition: u32,
    pub quantization_encoding: u32,
    pub encoding: QuantizeEncoding,
}

impl QuantizeParams {
    /// Both fields `UNDEFINED`: the value for float and plain integer tensors.
    pub const UNDEFINED: QuantizeParams = QuantizeParams {
        encoding_definition: crate::consts::DEFINITION_UNDEFINED,
        quantization_encoding: crate::consts::QUANTIZATION_ENCODING_UNDEFINED,
        encoding: QuantizeEncoding { raw: [0; 4] },
    };
}

/// `Qnn_ClientBuffer_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ClientBuffer {
    pub data: *mut c_void,
    pub data_size: u32,
}

impl ClientBuffer {
    pub const NULL: ClientBuffer = ClientBuffer {
        data: std::ptr::null_mut(),
        data_size: 0,
    };
}

/// The memory union of a tensor: `clientBuf` (RAW), `memHandle` (MEMHANDLE) or, in v2,
/// `retrieveRaw` (RETRIEVE_RAW).
#[repr(C)]
#[derive(Clone, Copy)]
pub union TensorMemory {
    pub client_buf: ClientBuffer,
    pub mem_handle: Handle,
    pub retrieve_raw: *mut c_void,
}

/// `Qnn_SparseParams_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SparseParams {
    pub layout_type: u32,
    pub num_specified_elements: u32,
    pub num_sparse_dimensions: u32,
}

/// `Qnn_TensorV1_t`: an exact prefix of [`TensorV2`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TensorV1 {
    pub id: u32,
    pub name: *const c_char,
    pub tensor_type: u32,
    pub data_format: u32,
    pub data_type: u32,
    pub quantize_params: QuantizeParams,
    pub rank: u32,
    pub dimensions: *mut u32,
    pub mem_type: u32,
    pub memory: TensorMemory,
}

/// `Qnn_TensorV2_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TensorV2 {
    pub id: u32,
    pub name: *const c_char,
    pub tensor_type: u32,
    pub data_format: u32,
    pub data_type: u32,
    pub quantize_params: QuantizeParams,
    pub rank: u32,
    pub dimensions: *mut u32,
    pub mem_type: u32,
    pub memory: TensorMemory,
    pub is_dynamic_dimensions: *mut u8,
    pub sparse_params: SparseParams,
    pub is_produced: u8,
}

/// The version union of `Qnn_Tensor_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union TensorVersions {
    pub v1: TensorV1,
    pub v2: TensorV2,
}

/// `Qnn_Tensor_t`: 144 bytes whatever the version, so arrays of tensors have a stride of 144.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Tensor {
    pub version: u32,
    pub v: TensorVersions,
}

/// The value union of `Qnn_Scalar_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ScalarValue {
    pub f32: f32,
    pub f64: f64,
    pub u64: u64,
    pub i64: i64,
    pub u32: u32,
    pub i32: i32,
    pub u16: u16,
    pub i16: i16,
    pub u8: u8,
    pub i8: i8,
    pub bool8: u8,
    pub string: *const c_char,
}

/// `Qnn_Scalar_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Scalar {
    pub data_type: u32,
    pub value: ScalarValue,
}

/// The value union of `Qnn_Param_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ParamValue {
    pub scalar: Scalar,
    pub tensor: Tensor,
}

/// `Qnn_Param_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Param {
    pub param_type: u32,
    pub name: *const c_char,
    pub value: ParamValue,
}

/// `Qnn_OpConfigV1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OpConfigV1 {
    pub name: *const c_char,
    pub package_name: *const c_char,
    pub type_name: *const c_char,
    pub num_of_params: u32,
    pub params: *mut Param,
    pub num_of_inputs: u32,
    pub input_tensors: *mut Tensor,
    pub num_of_outputs: u32,
    pub output_tensors: *mut Tensor,
}

/// `Qnn_OpConfig_t`: passed **by value** to `graphAddNode` and `backendValidateOpConfig`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OpConfig {
    pub version: u32,
    pub v1: OpConfigV1,
}

/// The generic `Qnn*_Config_t` shape shared by backend, device, context and graph configs:
/// `option` then a pointer-sized union. Lists of configs are NULL-terminated arrays of pointers.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Config {
    pub option: u32,
    pub value: ConfigValue,
}

/// The union of [`Config`]; for the CUSTOM option (0) it holds a backend-specific struct pointer.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ConfigValue {
    pub custom_config: *mut c_void,
    pub u32: u32,
    pub ptr: *const c_void,
}

/// `QnnBackend_Config_t`.
pub type BackendConfig = Config;
/// `QnnDevice_Config_t`.
pub type DeviceConfig = Config;
/// `QnnContext_Config_t`.
pub type ContextConfig = Config;
/// `QnnGraph_Config_t`.
pub type GraphConfig = Config;

/// `QnnBackend_OperationName_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OperationName {
    pub package_name: *const c_char,
    pub name: *const c_char,
    pub target: *const c_char,
}

/// `QnnDevice_CoreInfoV1_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CoreInfoV1 {
    pub core_id: u32,
    pub core_type: u32,
    pub core_info_extension: *mut c_void,
}

/// `QnnDevice_CoreInfo_t` (only version 1 exists).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CoreInfo {
    pub version: u32,
    pub v1: CoreInfoV1,
}

/// `QnnDevice_HardwareDeviceInfoV1_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HardwareDeviceInfoV1 {
    pub device_id: u32,
    pub device_type: u32,
    pub num_cores: u32,
    pub cores: *mut CoreInfo,
    /// Backend-specific; for HTP a [`crate::htp::DeviceInfoExtension`].
    pub device_info_extension: *mut c_void,
}

/// `QnnDevice_HardwareDeviceInfo_t` (only version 1 exists).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HardwareDeviceInfo {
    pub version: u32,
    pub v1: HardwareDeviceInfoV1,
}

/// `QnnDevice_PlatformInfoV1_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PlatformInfoV1 {
    pub num_hw_devices: u32,
    pub hw_devices: *mut HardwareDeviceInfo,
}

/// `QnnDevice_PlatformInfo_t` (only version 1 exists).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PlatformInfo {
    pub version: u32,
    pub v1: PlatformInfoV1,
}

const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<Version>() == 12);
    assert!(size_of::<ApiVersion>() == 24);
    assert!(offset_of!(ApiVersion, backend_api_version) == 12);
    assert!(size_of::<QuantizeEncoding>() == 32);
    assert!(size_of::<BlockwiseExpansion>() == 40);
    assert!(offset_of!(BlockwiseExpansion, scale_offsets) == 8);
    assert!(offset_of!(BlockwiseExpansion, num_blocks_per_axis) == 16);
    assert!(offset_of!(BlockwiseExpansion, block_scale_bitwidth) == 20);
    assert!(offset_of!(BlockwiseExpansion, block_scale_storage_type) == 24);
    assert!(offset_of!(BlockwiseExpansion, blocks_scale) == 32);
    assert!(size_of::<QuantizeParams>() == 40);
    assert!(offset_of!(QuantizeParams, encoding) == 8);
    assert!(size_of::<ClientBuffer>() == 16);
    assert!(offset_of!(ClientBuffer, data_size) == 8);
    assert!(size_of::<TensorV1>() == 112);
    assert!(size_of::<TensorV2>() == 136);
    assert!(offset_of!(TensorV2, name) == 8);
    assert!(offset_of!(TensorV2, tensor_type) == 16);
    assert!(offset_of!(TensorV2, data_format) == 20);
    assert!(offset_of!(TensorV2, data_type) == 24);
    assert!(offset_of!(TensorV2, quantize_params) == 32);
    assert!(offset_of!(TensorV2, rank) == 72);
    assert!(offset_of!(TensorV2, dimensions) == 80);
    assert!(offset_of!(TensorV2, mem_type) == 88);
    assert!(offset_of!(TensorV2, memory) == 96);
    assert!(offset_of!(TensorV2, is_dynamic_dimensions) == 112);
    assert!(offset_of!(TensorV2, sparse_params) == 120);
    assert!(offset_of!(TensorV2, is_produced) == 132);
    assert!(offset_of!(TensorV1, memory) == 96);
    assert!(size_of::<Tensor>() == 144);
    assert!(align_of::<Tensor>() == 8);
    assert!(offset_of!(Tensor, v) == 8);
    assert!(size_of::<Scalar>() == 16);
    assert!(offset_of!(Scalar, value) == 8);
    assert!(size_of::<Param>() == 160);
    assert!(offset_of!(Param, name) == 8);
    assert!(offset_of!(Param, value) == 16);
    assert!(size_of::<OpConfigV1>() == 72);
    assert!(offset_of!(OpConfigV1, type_name) == 16);
    assert!(offset_of!(OpConfigV1, num_of_params) == 24);
    assert!(offset_of!(OpConfigV1, params) == 32);
    assert!(offset_of!(OpConfigV1, num_of_inputs) == 40);
    assert!(offset_of!(OpConfigV1, input_tensors) == 48);
    assert!(offset_of!(OpConfigV1, num_of_outputs) == 56);
    assert!(offset_of!(OpConfigV1, output_tensors) == 64);
    assert!(size_of::<OpConfig>() == 80);
    assert!(offset_of!(OpConfig, v1) == 8);
    assert!(size_of::<Config>() == 16);
    assert!(offset_of!(Config, value) == 8);
    assert!(size_of::<OperationName>() == 24);
    assert!(size_of::<CoreInfo>() == 24);
    assert!(offset_of!(CoreInfo, v1) == 8);
    assert!(size_of::<HardwareDeviceInfo>() == 40);
    assert!(offset_of!(HardwareDeviceInfo, v1) + offset_of!(HardwareDeviceInfoV1, cores) == 24);
    assert!(size_of::<PlatformInfo>() == 24);
    assert!(offset_of!(PlatformInfo, v1) + offset_of!(PlatformInfoV1, hw_devices) == 16);
};
