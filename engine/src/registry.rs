//! One opened backend and device per configuration for the whole process, shared by every
//! compile and load: opening the HTP library and creating its first graph cost far more than
//! compiling a small model (docs/qnn-notes.md gotcha 16), so front ends never open their own.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use qnn::{Backend, BackendConfig, BackendOptions, Device, LogLevel};

use crate::error::Result;
use crate::target::Target;

/// An opened backend and its device.
pub struct Runtime {
    pub backend: Backend,
    pub device: Device,
    /// Devices created again for this backend by [`activate`], kept alive for as long as the
    /// backend (contexts made with `device` keep using it).
    reasserted: Mutex<Vec<Device>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", &self.backend)
            .finish()
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    config: BackendConfig,
    library: Option<PathBuf>,
}

static RUNTIMES: Mutex<Option<HashMap<Key, Arc<Runtime>>>> = Mutex::new(None);
/// The HTP device configuration QNN's HTP library works for now: that of the device created
/// last in the process (see [`activate`]).
static ACTIVE_HTP: Mutex<Option<qnn::HtpDeviceConfig>> = Mutex::new(None);
static LOG_LEVEL: Mutex<Option<LogLevel>> = Mutex::new(None);

/// QNN's log level for backends opened from now on (otherwise `QNN_LOG_LEVEL`, or warnings).
pub fn set_log_level(level: LogLevel) {
    *LOG_LEVEL.lock().unwrap_or_else(|e| e.into_inner()) = Some(level);
}

/// The runtime for `config` from `library` (or the library search), opened on first use.
pub fn runtime(config: &BackendConfig, library: Option<PathBuf>) -> Result<Arc<Runtime>> {
    let key = Key {
        config: config.clone(),
        library,
    };
    let mut map = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(r) = map.get(&key) {
        let r = r.clone();
        activate(&r)?;
        return Ok(r);
    }
    let log_level = *LOG_LEVEL.lock().unwrap_or_else(|e| e.into_inner());
    let backend = Backend::open(
        key.config.clone(),
        &BackendOptions {
            library: key.library.clone(),
            log_level,
        },
    )?;
    // Created under the lock: a device created while another thread builds a graph would move
    // that graph's validation to this device's SoC (see `hold`).
    let device = match &key.config {
        BackendConfig::Htp(c) => {
            let mut active = ACTIVE_HTP.lock().unwrap_or_else(|e| e.into_inner());
            let device = Device::new(&backend)?;
            *active = Some(c.device);
            device
        }
        _ => Device::new(&backend)?,
    };
    let r = Arc::new(Runtime {
        backend,
        device,
        reasserted: Mutex::new(Vec::new()),
    });
    map.insert(key, r.clone());
    activate(&r)?;
    Ok(r)
}

/// Makes `rt`'s HTP device configuration the one QNN's HTP library works for before a graph is
/// validated and finalized on it. The library validates (and finalizes) every backend's graphs
/// for the SoC of the device created last in the process, whichever backend it belongs to:
/// measured with QNN 2.51's emulator, a 16-bit MatMul that validates for SoC 60 is refused
/// ("expected >= 73") once a QCS6490 device exists, and validates again after a device for SoC 60
/// is created anew (docs/qnn-notes.md §13, "One HTP device configuration per process"). So when
/// another configuration was created since, a device for this one is created again.
pub fn activate(rt: &Runtime) -> Result<()> {
    hold(rt).map(drop)
}

/// [`activate`], keeping `rt`'s HTP device configuration the active one until the guard is
/// dropped: held while a graph is built and finalized, so that another thread compiling for
/// another SoC cannot create its device in between (seen with QNN 2.49.40: a graph validated
/// for v68 instead of v73, a QCS6490 result 16 steps off, in 2 of 3 runs of the quantized
/// tests). `None` for backends other than the HTP. Take it after the runtime (the registry's
/// lock comes first) and do not ask the registry for a runtime while holding it.
pub(crate) fn hold(rt: &Runtime) -> Result<Option<Active>> {
    let BackendConfig::Htp(c) = rt.backend.config() else {
        return Ok(None);
    };
    let mut active = ACTIVE_HTP.lock().unwrap_or_else(|e| e.into_inner());
    if active.as_ref() != Some(&c.device) {
        let device = Device::new(&rt.backend)?;
        rt.reasserted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(device);
        *active = Some(c.device);
    }
    Ok(Some(Active(active)))
}

/// While alive, no other HTP device configuration is created in this process ([`hold`]).
pub(crate) struct Active(#[allow(dead_code)] MutexGuard<'static, Option<qnn::HtpDeviceConfig>>);

/// The runtime a target compiles and runs on with these HTP graph settings (see
/// [`Target::backend_config`]).
pub fn for_target(
    target: &Target,
    opt_level: Option<u8>,
    weight_sharing: bool,
) -> Result<Arc<Runtime>> {
    runtime(
        &target.backend_config(opt_level, weight_sharing)?,
        target.library.clone(),
    )
}
