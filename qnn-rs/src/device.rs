//! `Device`: a backend device handle, configured from its backend's [`crate::BackendConfig`]
//! (for the HTP: the SoC and arch).

use std::sync::Arc;

use qnn_sys::Handle;

use crate::api::qnn_call;
use crate::backend::{Backend, BackendInner};
use crate::diagnostics::with_missing_device_files;
use crate::error::Result;

pub(crate) struct DeviceInner {
    pub(crate) backend: Arc<BackendInner>,
    pub(crate) handle: Handle,
}

// SAFETY: opaque handle owned by this struct; see `BackendInner`.
unsafe impl Send for DeviceInner {}
// SAFETY: see above.
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if self.handle.is_null() {
            return; // a backend without devices (see `Device::new`)
        }
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
    /// `deviceCreate` with the device configs of `backend`'s configuration. QNN's CPU backend has
    /// no devices (its `deviceCreate` answers 1000 QNN_COMMON_ERROR_NOT_SUPPORTED, measured with
    /// QNN 2.47's libQnnCpu.so): its `Device` holds no handle and contexts are created without one.
    pub fn new(backend: &Backend) -> Result<Device> {
        let b = &backend.inner;
        if b.kind == qnnx_types::BackendKind::Cpu {
            return Ok(Device {
                inner: Arc::new(DeviceInner {
                    backend: b.clone(),
                    handle: std::ptr::null_mut(),
                }),
            });
        }
        let mut customs = b.config.device_customs(b.api_version);
        let configs = customs.list();
        let list_ptr = configs.as_ptr();
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: `list` is NULL-terminated and points at configs that live until after the call.
        unsafe {
            qnn_call!(b.api, deviceCreate(b.log, list_ptr, &mut handle); || format!("{:?}", b.config))
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
                let htp = b.config.htp().map(|c| c.device).unwrap_or_default();
                platform
                    .or_else(|| {
                        htp.soc_model
                            .and_then(qnnx_types::soc::by_model)
                            .map(|s| s.arch.number())
                    })
                    .or(htp.arch.map(|a| a.number()))
            })
        })?;
        Ok(Device {
            inner: Arc::new(DeviceInner {
                backend: b.clone(),
                handle,
            }),
        })
    }
}
