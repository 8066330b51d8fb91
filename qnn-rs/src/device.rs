//! `Device`: a backend device handle, with the HTP SoC / arch configuration.

use std::sync::Arc;

use qnn_sys::htp::{device_option, DeviceArch, DeviceCustomConfig, DeviceCustomValue};
use qnn_sys::Handle;

use crate::api::qnn_call;
use crate::backend::{with_missing_device_files, Backend, BackendInner, BackendKind};
use crate::error::{Error, Result};

/// Device configuration. For HTP, `soc_model` selects the target SoC (`Qnn_SocModel_t`, for
/// example 60 = SC8380XP, v73) and `arch` a minimum HTP architecture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DeviceOptions {
    pub soc_model: Option<u32>,
    pub arch: Option<u32>,
}

/// SoC 60 (SC8380XP, Snapdragon X Elite, HTP v73): the emulator's target on x86_64 hosts.
pub const EMULATOR_DEFAULT_SOC: u32 = 60;

impl DeviceOptions {
    /// What to use when the caller does not say: on an x86_64 host (the HTP emulator) SoC 60,
    /// so the emulator computes in fp16 like the NPU; without it the emulator picks a v68 part
    /// and computes exact fp32, hiding precision bugs (docs/qnn-notes.md gotcha 2). On a device, the
    /// device's own SoC.
    pub fn host_default() -> DeviceOptions {
        if cfg!(target_arch = "x86_64") {
            DeviceOptions {
                soc_model: Some(EMULATOR_DEFAULT_SOC),
                arch: None,
            }
        } else {
            DeviceOptions::default()
        }
    }
}

pub(crate) struct DeviceInner {
    pub(crate) backend: Arc<BackendInner>,
    pub(crate) handle: Handle,
    pub(crate) options: DeviceOptions,
}

// SAFETY: opaque handle owned by this struct; see `BackendInner`.
unsafe impl Send for DeviceInner {}
// SAFETY: see above.
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // SAFETY: created in `Device::new`; contexts using it hold an Arc to us.
        if let Err(e) = unsafe { qnn_call!(self.backend.api, deviceFree(self.handle)) } {
            tracing::warn!(target: "qnn", "deviceFree: {e}");
        }
    }
}

/// A device of a backend. Cheap to clone.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl Device {
    /// `deviceCreate` with the given options.
    pub fn new(backend: &Backend, options: &DeviceOptions) -> Result<Device> {
        let b = &backend.inner;
        let mut customs: Vec<DeviceCustomConfig> = Vec::new();
        if b.kind == BackendKind::Htp {
            if let Some(soc) = options.soc_model {
                customs.push(DeviceCustomConfig {
                    option: device_option::SOC,
                    value: DeviceCustomValue { soc_model: soc },
                });
            }
            if let Some(arch) = options.arch {
                customs.push(DeviceCustomConfig {
                    option: device_option::ARCH,
                    value: DeviceCustomValue {
                        arch: DeviceArch { device_id: 0, arch },
                    },
                });
            }
        } else if options.soc_model.is_some() || options.arch.is_some() {
            return Err(Error::InvalidArgument(format!(
                "SoC model and HTP arch apply to the HTP backend, not {:?}",
                b.kind
            )));
        }
        let configs = crate::api::CustomConfigs::new(&mut customs);
        let list_ptr = configs.as_ptr();
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: `list` is NULL-terminated and points at configs that live until after the call.
        unsafe {
            qnn_call!(b.api, deviceCreate(b.log, list_ptr, &mut handle); || format!("{options:?}"))
        }
        .map_err(|e| {
            // The error (and the QNN log lines of the call) is complete: only now may more QNN
            // calls run. The device's own arch first, then the one asked for.
            with_missing_device_files(e, b.kind, &b.path, || {
                let platform = backend.platform_info().ok().and_then(|devices| {
                    devices
                        .iter()
                        .find_map(|d| d.htp.map(|h| h.arch))
                        .filter(|&a| a > 0)
                });
                platform
                    .or_else(|| {
                        options
                            .soc_model
                            .and_then(crate::soc::by_model)
                            .map(|s| s.arch)
                    })
                    .or(options.arch)
            })
        })?;
        Ok(Device {
            inner: Arc::new(DeviceInner {
                backend: b.clone(),
                handle,
                options: *options,
            }),
        })
    }

    /// The options the device was created with.
    pub fn options(&self) -> DeviceOptions {
        self.inner.options
    }
}
