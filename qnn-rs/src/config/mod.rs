//! Typed per-backend configuration, given once when a backend is opened ([`BackendConfig`]).
//!
//! Each backend has its own struct ([`HtpConfig`], [`GpuConfig`]) holding everything it can be
//! told: the device (SoC, arch), the contexts and the graphs it creates. Its module turns that
//! into the backend's custom configs for `deviceCreate`, `contextCreate` and `graphCreate`, so
//! an option of one backend cannot be given to another: the type has no field for it.

mod gpu;
mod htp;

pub use gpu::{GpuConfig, GpuContextConfig, GpuGraphConfig, GpuPerfHint, GpuPrecision};
pub use htp::{HtpConfig, HtpContextConfig, HtpDeviceConfig, HtpGraphConfig, Precision};

use qnnx_types::BackendKind;

/// What a backend is opened with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BackendConfig {
    Htp(HtpConfig),
    Gpu(GpuConfig),
    /// QNN's reference CPU backend has no custom configs.
    Cpu,
}

impl BackendConfig {
    /// The default configuration of `kind` (for the HTP: no SoC, the library's own default;
    /// see [`HtpConfig::host_default`] for the emulator's fp16 target).
    pub fn default_for(kind: BackendKind) -> BackendConfig {
        match kind {
            BackendKind::Htp => BackendConfig::Htp(HtpConfig::default()),
            BackendKind::Gpu => BackendConfig::Gpu(GpuConfig::default()),
            BackendKind::Cpu => BackendConfig::Cpu,
        }
    }

    /// Which backend this configures.
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendConfig::Htp(_) => BackendKind::Htp,
            BackendConfig::Gpu(_) => BackendKind::Gpu,
            BackendConfig::Cpu => BackendKind::Cpu,
        }
    }

    /// The HTP part, for an HTP backend.
    pub fn htp(&self) -> Option<&HtpConfig> {
        match self {
            BackendConfig::Htp(c) => Some(c),
            BackendConfig::Gpu(_) | BackendConfig::Cpu => None,
        }
    }
}

impl From<HtpConfig> for BackendConfig {
    fn from(c: HtpConfig) -> BackendConfig {
        BackendConfig::Htp(c)
    }
}

impl From<GpuConfig> for BackendConfig {
    fn from(c: GpuConfig) -> BackendConfig {
        BackendConfig::Gpu(c)
    }
}

/// The custom configs of one QNN call, owned: the typed structs a [`crate::api::CustomConfigs`]
/// list points at.
pub(crate) enum Customs {
    HtpDevice(Vec<qnn_sys::htp::DeviceCustomConfig>),
    HtpDevicePacked(Vec<qnn_sys::htp::DeviceCustomConfigPacked>),
    HtpContext(Vec<qnn_sys::htp::ContextCustomConfig>),
    HtpGraph(Vec<qnn_sys::htp::GraphCustomConfig>),
    GpuContext(Vec<qnn_sys::gpu::ContextCustomConfig>),
    GpuGraph(Vec<qnn_sys::gpu::GraphCustomConfig>),
    None,
}

impl Customs {
    /// The NULL-terminated list for the call; keep both alive until the call returns.
    pub(crate) fn list(&mut self) -> crate::api::CustomConfigs<'_> {
        match self {
            Customs::HtpDevice(v) => crate::api::CustomConfigs::new(v),
            Customs::HtpDevicePacked(v) => crate::api::CustomConfigs::new(v),
            Customs::HtpContext(v) => crate::api::CustomConfigs::new(v),
            Customs::HtpGraph(v) => crate::api::CustomConfigs::new(v),
            Customs::GpuContext(v) => crate::api::CustomConfigs::new(v),
            Customs::GpuGraph(v) => crate::api::CustomConfigs::new(v),
            Customs::None => crate::api::CustomConfigs::new::<u8>(&mut []),
        }
    }
}

impl BackendConfig {
    /// The device configs, in the layout of the library whose API version is `api`
    /// (`QnnHtpDevice_CustomConfig_t` changed layout between releases: see
    /// [`qnn_sys::htp::device_config_layout`]).
    pub(crate) fn device_customs(&self, api: qnn_sys::ApiVersion) -> Customs {
        match self {
            BackendConfig::Htp(c) => {
                let (layout, source) = qnn_sys::htp::device_config_layout(api.backend_api_version);
                if source == qnn_sys::htp::LayoutSource::Unknown && !c.device.options().is_empty() {
                    let v = api.backend_api_version;
                    tracing::warn!(
                        target: "qnn",
                        "HTP backend API {}.{}.{} is a QNN release qnnx has not been tested with; \
                         its device config is given in the layout of the newest one known",
                        v.major,
                        v.minor,
                        v.patch
                    );
                }
                c.device.customs(layout)
            }
            // The GPU backend has no device custom configs.
            BackendConfig::Gpu(_) | BackendConfig::Cpu => Customs::None,
        }
    }

    pub(crate) fn context_customs(&self) -> Customs {
        match self {
            BackendConfig::Htp(c) => Customs::HtpContext(c.context.customs()),
            BackendConfig::Gpu(c) => Customs::GpuContext(c.context.customs()),
            BackendConfig::Cpu => Customs::None,
        }
    }

    pub(crate) fn graph_customs(&self) -> crate::Result<Customs> {
        match self {
            BackendConfig::Htp(c) => Ok(Customs::HtpGraph(c.graph.customs()?)),
            BackendConfig::Gpu(c) => Ok(Customs::GpuGraph(c.graph.customs())),
            BackendConfig::Cpu => Ok(Customs::None),
        }
    }
}
