//! Cross-check of our declarations against bindings generated from a local QNN SDK
//! (`cargo test -p qnn-sys --features bindgen` with `QNN_SDK_ROOT` set; needs libclang).
//! The generated file lives in OUT_DIR and is never committed.

#[cfg(qnn_sdk_bindings)]
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    clippy::all
)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/qnn_bindings.rs"));
}

#[cfg(all(test, qnn_sdk_bindings))]
mod tests {
    use super::generated as g;
    use std::mem::size_of;

    macro_rules! same_size {
        ($($ours:ty => $theirs:ty),* $(,)?) => {{
            let mut bad = Vec::new();
            $(
                if size_of::<$ours>() != size_of::<$theirs>() {
                    bad.push(format!(
                        "{}: ours {} bytes, SDK {} bytes",
                        stringify!($theirs), size_of::<$ours>(), size_of::<$theirs>()
                    ));
                }
            )*
            bad
        }};
    }

    #[test]
    fn core_layouts_match_the_sdk() {
        let bad = same_size!(
            crate::Version => g::Qnn_Version_t,
            crate::ApiVersion => g::Qnn_ApiVersion_t,
            crate::QuantizeParams => g::Qnn_QuantizeParams_t,
            crate::ClientBuffer => g::Qnn_ClientBuffer_t,
            crate::TensorV1 => g::Qnn_TensorV1_t,
            crate::TensorV2 => g::Qnn_TensorV2_t,
            crate::Tensor => g::Qnn_Tensor_t,
            crate::Scalar => g::Qnn_Scalar_t,
            crate::Param => g::Qnn_Param_t,
            crate::OpConfigV1 => g::Qnn_OpConfigV1_t,
            crate::OpConfig => g::Qnn_OpConfig_t,
            crate::GraphConfig => g::QnnGraph_Config_t,
            crate::DeviceConfig => g::QnnDevice_Config_t,
            crate::ContextConfig => g::QnnContext_Config_t,
            crate::BackendConfig => g::QnnBackend_Config_t,
            crate::OperationName => g::QnnBackend_OperationName_t,
            crate::PlatformInfo => g::QnnDevice_PlatformInfo_t,
            crate::HardwareDeviceInfo => g::QnnDevice_HardwareDeviceInfo_t,
            crate::system::GraphInfo => g::QnnSystemContext_GraphInfo_t,
            crate::system::BinaryInfo => g::QnnSystemContext_BinaryInfo_t,
            crate::htp::GraphCustomConfig => g::QnnHtpGraph_CustomConfig_t,
            crate::htp::ContextCustomConfig => g::QnnHtpContext_CustomConfig_t,
            crate::htp::DeviceInfoExtension => g::QnnHtpDevice_DeviceInfoExtension_t,
            crate::htp::DeviceInfrastructure => g::QnnHtpDevice_Infrastructure_t,
            crate::htp::DcvsV3 => g::QnnHtpPerfInfrastructure_DcvsV3_t,
            crate::htp::PowerConfig => g::QnnHtpPerfInfrastructure_PowerConfig_t,
            crate::gpu::BackendCustomConfig => g::QnnGpuBackend_CustomConfig_t,
            crate::gpu::ContextCustomConfig => g::QnnGpuContext_CustomConfig_t,
            crate::gpu::GraphCustomConfig => g::QnnGpuGraph_CustomConfig_t,
        );
        assert!(bad.is_empty(), "layout differences:\n{}", bad.join("\n"));
    }

    #[test]
    fn function_tables_are_a_prefix_of_the_sdk_tables() {
        // Our tables are the 2.27 / system 1.4 prefixes; a newer SDK may only append.
        assert!(size_of::<crate::CoreFunctions>() <= size_of::<g::QnnInterface_t>() - 40);
        assert!(size_of::<crate::SystemFunctions>() <= size_of::<g::QnnSystemInterface_t>() - 32);
    }

    /// The HTP device custom config is the one struct known to differ between SDKs: headers
    /// before the union gained a pointer member put it at offset 4, and the 2.4x libraries
    /// reject that layout (docs/qnn-notes.md gotcha 1). This fails against such an old header, by design.
    #[test]
    fn htp_device_config_matches_the_24x_layout() {
        assert_eq!(
            size_of::<crate::htp::DeviceCustomConfig>(),
            size_of::<g::QnnHtpDevice_CustomConfig_t>(),
            "this SDK's QnnHtpDevice_CustomConfig_t predates the 2.4x layout our libraries use"
        );
    }
}
