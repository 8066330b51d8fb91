//! The QnnSystem interface (`QnnSystemInterface_t`, system API 1.x) and the context-binary
//! introspection types it returns.

use std::ffi::{c_char, c_void};

use crate::types::*;

type H = Handle;
type R = ErrorHandle;

/// `QNN_SYSTEM_INTERFACE_VER_TYPE`: the 13-slot system table of the 1.4 header. Newer libraries
/// append slots (1.15 has 16); we read this prefix only.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_snake_case)]
pub struct SystemFunctions {
    /// `QnnSystemContext_create(&sysCtx)`.
    pub systemContextCreate: Option<unsafe extern "C" fn(*mut H) -> R>,
    /// `QnnSystemContext_getBinaryInfo(sysCtx, buffer, size, &info, &infoSize)`. The buffer is
    /// declared non-const but is only read (docs/qnn-notes.md gotcha 12).
    pub systemContextGetBinaryInfo: Option<
        unsafe extern "C" fn(
            H,
            *mut c_void,
            u64,
            *mut *const BinaryInfo,
            *mut ContextBinarySize,
        ) -> R,
    >,
    /// `QnnSystemContext_getMetadata(sysCtx, buffer, size, &info)`.
    pub systemContextGetMetaData:
        Option<unsafe extern "C" fn(H, *const c_void, u64, *mut *const BinaryInfo) -> R>,
    /// `QnnSystemContext_free(sysCtx)`: also frees every info it returned.
    pub systemContextFree: Option<unsafe extern "C" fn(H) -> R>,
    /// `QnnSystemTensor_getMemoryFootprint(tensor, &bytes)`: the tensor is passed by value.
    pub systemTensorGetMemoryFootprint: Option<unsafe extern "C" fn(Tensor, *mut u64) -> R>,
    /// `QnnSystemLog_create(callback, maxLevel, &log)`.
    pub systemLogCreate: Option<unsafe extern "C" fn(LogCallback, u32, *mut H) -> R>,
    /// `QnnSystemLog_setLogLevel(log, maxLevel)`.
    pub systemLogSetLogLevel: Option<unsafe extern "C" fn(H, u32) -> R>,
    /// `QnnSystemLog_free(log)`.
    pub systemLogFree: Option<unsafe extern "C" fn(H) -> R>,
    /// `QnnSystemDlc_createFromFile(log, path, &dlc)`.
    pub systemDlcCreateFromFile: Option<unsafe extern "C" fn(H, *const c_char, *mut H) -> R>,
    /// `QnnSystemDlc_createFromBinary(log, buffer, size, &dlc)`.
    pub systemDlcCreateFromBinary: Option<unsafe extern "C" fn(H, *const u8, u64, *mut H) -> R>,
    /// `QnnSystemDlc_composeGraphs`: takes a `QnnInterface_t` by value; we never call it, so
    /// its slot is only a placeholder of pointer size.
    pub systemDlcComposeGraphs: Option<unsafe extern "C" fn()>,
    /// `QnnSystemDlc_getOpMappings(dlc, &mappings, &n)`.
    pub systemDlcGetOpMappings: Option<unsafe extern "C" fn(H, *mut *const c_void, *mut u32) -> R>,
    /// `QnnSystemDlc_free(dlc)`.
    pub systemDlcFree: Option<unsafe extern "C" fn(H) -> R>,
}

/// `QnnSystemInterface_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SystemInterface {
    pub backend_id: u32,
    pub provider_name: *const c_char,
    pub system_api_version: Version,
    pub functions: SystemFunctions,
}

/// `QnnSystemInterface_getProviders(&providerList, &numProviders)`.
pub type GetSystemProvidersFn =
    unsafe extern "C" fn(*mut *const *const SystemInterface, *mut u32) -> R;

/// Symbol name of the system provider entry point.
pub const GET_SYSTEM_PROVIDERS_SYMBOL: &[u8] = b"QnnSystemInterface_getProviders\0";

/// The fields shared by `QnnSystemContext_GraphInfoV1/V2/V3_t` (V2 and V3 only append).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GraphInfoCommon {
    pub graph_name: *const c_char,
    pub num_graph_inputs: u32,
    pub graph_inputs: *mut Tensor,
    pub num_graph_outputs: u32,
    pub graph_outputs: *mut Tensor,
}

/// The fields `QnnSystemContext_GraphInfoV3_t` has after [`GraphInfoCommon`] (V2 has the first
/// two). Only meaningful when [`GraphInfo::version`] is 3.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GraphInfoV3Tail {
    pub num_updateable_tensors: u32,
    pub updateable_tensors: *mut Tensor,
    /// Size of `graph_blob_info`: a backend-specific description of the graph (for HTP,
    /// [`crate::htp::GraphBlobInfoV1`] followed by [`crate::htp::GraphBlobInfoV2`]).
    pub graph_blob_info_size: u32,
    pub graph_blob_info: *mut c_void,
    pub start_op_index: u32,
    pub end_op_index: u32,
}

/// `QnnSystemContext_GraphInfo_t`: `version` then an 80-byte union whose first 40 bytes are
/// [`GraphInfoCommon`] in every version.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GraphInfo {
    pub version: u32,
    pub common: GraphInfoCommon,
    pub v3: GraphInfoV3Tail,
}

/// `QnnSystemContext_BinaryInfoV1_t` (V2 appends `platformInfo`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BinaryInfoV1 {
    pub backend_id: u32,
    pub build_id: *const c_char,
    pub core_api_version: Version,
    pub backend_api_version: Version,
    pub soc_version: *const c_char,
    pub hw_info_blob_version: Version,
    pub context_blob_version: Version,
    pub hw_info_blob_size: u32,
    pub hw_info_blob: *mut c_void,
    pub context_blob_size: u64,
    pub num_context_tensors: u32,
    pub context_tensors: *mut Tensor,
    pub num_graphs: u32,
    pub graphs: *mut GraphInfo,
    /// V2 only.
    pub platform_info: *mut PlatformInfo,
}

/// `QnnSystemContext_BinaryInfoV3_t`: what the 2.4x libraries return.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BinaryInfoV3 {
    pub backend_id: u32,
    pub build_id: *const c_char,
    pub core_api_version: Version,
    pub backend_api_version: Version,
    pub soc_version: *const c_char,
    pub context_blob_version: Version,
    pub context_blob_size: u64,
    pub num_context_tensors: u32,
    pub context_tensors: *mut Tensor,
    pub num_graphs: u32,
    pub graphs: *mut GraphInfo,
    pub platform_info: *mut PlatformInfo,
    pub context_metadata_size: u32,
    pub context_metadata: *mut c_void,
    pub soc_model: u32,
}

/// The version union of `QnnSystemContext_BinaryInfo_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union BinaryInfoVersions {
    pub v1: BinaryInfoV1,
    pub v3: BinaryInfoV3,
}

/// `QnnSystemContext_BinaryInfo_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BinaryInfo {
    pub version: u32,
    pub v: BinaryInfoVersions,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<SystemFunctions>() == 13 * 8);
    assert!(offset_of!(SystemInterface, system_api_version) == 16);
    assert!(offset_of!(SystemInterface, functions) == 32);
    assert!(size_of::<SystemInterface>() == 136);
    assert!(size_of::<GraphInfoCommon>() == 40);
    assert!(size_of::<GraphInfo>() == 88);
    assert!(offset_of!(GraphInfo, common) == 8);
    assert!(offset_of!(GraphInfo, v3) == 48);
    assert!(offset_of!(GraphInfoV3Tail, graph_blob_info_size) == 16);
    assert!(offset_of!(GraphInfoV3Tail, graph_blob_info) == 24);
    assert!(size_of::<GraphInfoV3Tail>() == 40);
    assert!(offset_of!(BinaryInfoV1, context_blob_version) == 60);
    assert!(offset_of!(BinaryInfoV1, context_blob_size) == 88);
    assert!(offset_of!(BinaryInfoV1, num_graphs) == 112);
    assert!(offset_of!(BinaryInfoV1, graphs) == 120);
    assert!(size_of::<BinaryInfoV1>() == 136);
    assert!(offset_of!(BinaryInfoV3, soc_version) == 40);
    assert!(offset_of!(BinaryInfoV3, context_blob_version) == 48);
    assert!(offset_of!(BinaryInfoV3, context_blob_size) == 64);
    assert!(offset_of!(BinaryInfoV3, num_context_tensors) == 72);
    assert!(offset_of!(BinaryInfoV3, num_graphs) == 88);
    assert!(offset_of!(BinaryInfoV3, graphs) == 96);
    assert!(offset_of!(BinaryInfoV3, platform_info) == 104);
    assert!(offset_of!(BinaryInfoV3, context_metadata_size) == 112);
    assert!(offset_of!(BinaryInfoV3, context_metadata) == 120);
    assert!(offset_of!(BinaryInfoV3, soc_model) == 128);
    assert!(size_of::<BinaryInfoV3>() == 136);
    assert!(size_of::<BinaryInfo>() == 144);
    assert!(offset_of!(BinaryInfo, v) == 8);
};
