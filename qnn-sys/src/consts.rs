//! Enum values of the QNN C API (`QnnTypes.h`, `QnnCommon.h`, `QnnLog.h`).

/// `Qnn_DataType_t`.
pub mod data_type {
    pub const INT_8: u32 = 0x0008;
    pub const INT_16: u32 = 0x0016;
    pub const INT_32: u32 = 0x0032;
    pub const INT_64: u32 = 0x0064;
    pub const UINT_8: u32 = 0x0108;
    pub const UINT_16: u32 = 0x0116;
    pub const UINT_32: u32 = 0x0132;
    pub const UINT_64: u32 = 0x0164;
    pub const FLOAT_16: u32 = 0x0216;
    pub const FLOAT_32: u32 = 0x0232;
    pub const FLOAT_64: u32 = 0x0264;
    pub const SFIXED_POINT_4: u32 = 0x0304;
    pub const SFIXED_POINT_8: u32 = 0x0308;
    pub const SFIXED_POINT_16: u32 = 0x0316;
    pub const SFIXED_POINT_32: u32 = 0x0332;
    pub const UFIXED_POINT_4: u32 = 0x0404;
    pub const UFIXED_POINT_8: u32 = 0x0408;
    pub const UFIXED_POINT_16: u32 = 0x0416;
    pub const UFIXED_POINT_32: u32 = 0x0432;
    pub const BOOL_8: u32 = 0x0508;
    pub const STRING: u32 = 0x0608;
    pub const UNDEFINED: u32 = 0x7FFF_FFFF;
}

/// `Qnn_TensorType_t`.
pub mod tensor_type {
    pub const APP_WRITE: u32 = 0;
    pub const APP_READ: u32 = 1;
    pub const APP_READWRITE: u32 = 2;
    pub const NATIVE: u32 = 3;
    pub const STATIC: u32 = 4;
    pub const NULL: u32 = 5;
    pub const UPDATEABLE_STATIC: u32 = 6;
    pub const UPDATEABLE_NATIVE: u32 = 7;
    pub const UPDATEABLE_APP_WRITE: u32 = 8;
    pub const UPDATEABLE_APP_READ: u32 = 9;
    pub const UPDATEABLE_APP_READWRITE: u32 = 10;
    pub const OPTIONAL_APP_WRITE: u32 = 11;
    pub const OPTIONAL_APP_READ: u32 = 12;
    pub const OPTIONAL_APP_READWRITE: u32 = 13;
}

/// `Qnn_TensorMemType_t`.
pub mod mem_type {
    pub const RAW: u32 = 0;
    pub const MEMHANDLE: u32 = 1;
    pub const RETRIEVE_RAW: u32 = 2;
}

/// `Qnn_TensorDataFormat_t`: only dense tensors are built here.
pub const DATA_FORMAT_DENSE: u32 = 0;

/// `Qnn_TensorVersion_t`.
pub const TENSOR_VERSION_1: u32 = 1;
/// `Qnn_TensorVersion_t`.
pub const TENSOR_VERSION_2: u32 = 2;
/// `Qnn_OpConfigVersion_t`.
pub const OPCONFIG_VERSION_1: u32 = 1;

/// `Qnn_ParamType_t`.
pub const PARAMTYPE_SCALAR: u32 = 0;
/// `Qnn_ParamType_t`.
pub const PARAMTYPE_TENSOR: u32 = 1;

/// `Qnn_Definition_t`.
pub const DEFINITION_IMPL_GENERATED: u32 = 0;
/// `Qnn_Definition_t`.
pub const DEFINITION_DEFINED: u32 = 1;
/// `Qnn_Definition_t`.
pub const DEFINITION_UNDEFINED: u32 = 0x7FFF_FFFF;
/// `Qnn_QuantizationEncoding_t` UNDEFINED; SCALE_OFFSET is 0, AXIS_SCALE_OFFSET 1.
pub const QUANTIZATION_ENCODING_UNDEFINED: u32 = 0x7FFF_FFFF;
/// `Qnn_QuantizationEncoding_t`.
pub const QUANTIZATION_ENCODING_SCALE_OFFSET: u32 = 0;
/// `Qnn_QuantizationEncoding_t`.
pub const QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET: u32 = 1;
/// `QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET`: per tensor, values of `bitwidth` bits.
pub const QUANTIZATION_ENCODING_BW_SCALE_OFFSET: u32 = 2;
/// `QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET`: per axis, values of `bitwidth` bits.
pub const QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET: u32 = 3;
/// `QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION` ("LPBQ"): per-channel scales times an
/// integer scale per block of the channel (`Qnn_BlockwiseExpansion_t`, behind a pointer).
pub const QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION: u32 = 5;
/// `Qnn_BlockwiseExpansionBlockScaleStorageType_t`: one byte per block scale.
pub const BLOCKWISE_EXPANSION_STORAGE_8: u32 = 0;
/// `Qnn_BlockwiseExpansionBlockScaleStorageType_t`: two bytes per block scale.
pub const BLOCKWISE_EXPANSION_STORAGE_16: u32 = 1;

/// `QnnLog_Level_t`.
pub mod log_level {
    pub const ERROR: u32 = 1;
    pub const WARN: u32 = 2;
    pub const INFO: u32 = 3;
    pub const VERBOSE: u32 = 4;
    pub const DEBUG: u32 = 5;
}

/// Generic `*_CONFIG_OPTION_CUSTOM`, shared by backend, device, context and graph configs.
pub const CONFIG_OPTION_CUSTOM: u32 = 0;
/// `QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO`.
pub const DEVICE_CONFIG_OPTION_PLATFORM_INFO: u32 = 1;
/// `QNN_GRAPH_CONFIG_OPTION_PRIORITY`.
pub const GRAPH_CONFIG_OPTION_PRIORITY: u32 = 3;

/// `QNN_BACKEND_ID_*` values reported by the providers of the x86_64 2.4x libraries.
pub mod backend_id {
    pub const SYSTEM: u32 = 0;
    pub const SAVER: u32 = 2;
    pub const GPU: u32 = 4;
    pub const HTP: u32 = 6;
    pub const IR: u32 = 9;
}

/// `QnnProperty` group key for devices (for `propertyHasCapability`).
pub const PROPERTY_GROUP_DEVICE: u32 = 1501;

/// The core API this crate's declarations follow: providers must have this major and at least
/// this minor.
pub const CORE_API_VERSION: crate::Version = crate::Version {
    major: 2,
    minor: 27,
    patch: 0,
};
/// The system API this crate's declarations follow.
pub const SYSTEM_API_VERSION: crate::Version = crate::Version {
    major: 1,
    minor: 4,
    patch: 0,
};
