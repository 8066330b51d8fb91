//! `Backend`: an opened QNN backend library, its logger and its backend handle.

use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use qnn_sys::{BackendLibrary, Handle, LibraryKind, SystemLibrary};

use crate::api::{owned_str, qnn_call, Api};
use crate::config::BackendConfig;
use crate::diagnostics::with_missing_device_files;
use crate::error::{Error, Result};
use crate::log::LogLevel;

pub use qnnx_types::BackendKind;

pub(crate) fn library_kind(kind: BackendKind) -> LibraryKind {
    match kind {
        BackendKind::Htp => LibraryKind::Htp,
        BackendKind::Gpu => LibraryKind::Gpu,
        BackendKind::Cpu => LibraryKind::Cpu,
    }
}

/// Where to find a backend library and how loud its log is (what it computes is its
/// [`BackendConfig`]).
#[derive(Debug, Clone, Default)]
pub struct BackendOptions {
    /// An explicit library path; otherwise the search order of `qnn_sys::loader` applies.
    pub library: Option<PathBuf>,
    /// QNN's log level; otherwise `QNN_LOG_LEVEL`, or warnings.
    pub log_level: Option<LogLevel>,
}

/// One op a backend reports as supported (`QnnBackend_OperationName_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationName {
    pub package: String,
    pub name: String,
}

/// One hardware device from `deviceGetPlatformInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardwareDevice {
    pub device_id: u32,
    pub device_type: u32,
    pub num_cores: u32,
    /// HTP only: the SoC model (`Qnn_SocModel_t`), arch (68, 73, ...), VTCM MB, signed PD.
    pub htp: Option<HtpDeviceInfo>,
}

/// The HTP part of a device's platform info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HtpDeviceInfo {
    pub soc_model: u32,
    pub arch: u32,
    pub vtcm_mb: usize,
    pub signed_pd: bool,
}

/// Backend creation and freeing exclude every graph-building call and context load of *any*
/// backend in the process (which share this lock), while those still run concurrently with
/// each other. Measured on the QNN 2.49.40 HTP emulator under load (`tests/graph.rs`,
/// `threads_open_build_and_free_backends_at_once`): while threads created and freed their own
/// backends, `backendValidateOpConfig` of valid ops failed with 4005 ("Op package qti.aisw
/// validator function not found") in every thread building at that moment, and kept failing
/// for later backends of the run; with this lock it never did (docs/qnn-notes.md §11).
static LIFECYCLE: RwLock<()> = RwLock::new(());

/// Held around `backendCreate` and `backendFree` ([`LIFECYCLE`]).
pub(crate) fn lifecycle_exclusive() -> RwLockWriteGuard<'static, ()> {
    LIFECYCLE.write().unwrap_or_else(|e| e.into_inner())
}

/// Held around calls that use a backend's op packages ([`LIFECYCLE`]). Never taken twice by
/// one thread: a writer waiting between the two would deadlock it.
pub(crate) fn lifecycle_shared() -> RwLockReadGuard<'static, ()> {
    LIFECYCLE.read().unwrap_or_else(|e| e.into_inner())
}

/// What [`BackendInner::building`] holds: the backend's build lock and the shared lifecycle
/// lock.
pub(crate) struct BuildGuard<'a> {
    _build: MutexGuard<'a, ()>,
    _lifecycle: RwLockReadGuard<'static, ()>,
}

pub(crate) struct BackendInner {
    pub(crate) api: Api,
    pub(crate) kind: BackendKind,
    pub(crate) config: BackendConfig,
    pub(crate) log: Handle,
    pub(crate) handle: Handle,
    pub(crate) path: PathBuf,
    provider_name: String,
    pub(crate) api_version: qnn_sys::ApiVersion,
    system: OnceLock<std::result::Result<Arc<SystemLibrary>, String>>,
    /// Graph construction (tensor creation, validation, addNode, finalize) is serialised per
    /// backend: QNN documents no re-entrancy for it and concurrent building is untested.
    pub(crate) build_lock: Mutex<()>,
    /// Whether executes of any two graphs of this library must not overlap, for HTP releases
    /// whose emulator computes wrong outputs or hangs otherwise
    /// ([`qnn_sys::releases::Release::htp_concurrent_execute`]).
    pub(crate) serial_execute: bool,
    /// The tested release this library is, by build id.
    pub(crate) release: Option<&'static qnn_sys::releases::Release>,
}

// SAFETY: the handles are opaque values owned by this struct; QNN calls made through them are
// either documented thread-safe (execute on different graphs) or serialised by `build_lock` /
// per-graph locks.
unsafe impl Send for BackendInner {}
// SAFETY: see above.
unsafe impl Sync for BackendInner {}

impl BackendInner {
    /// Held around every graph-building call (create, tensors, validation, addNode, finalize).
    pub(crate) fn building(&self) -> BuildGuard<'_> {
        BuildGuard {
            _build: self.build_lock.lock().unwrap_or_else(|e| e.into_inner()),
            _lifecycle: lifecycle_shared(),
        }
    }
}

impl Drop for BackendInner {
    fn drop(&mut self) {
        let _lifecycle = lifecycle_exclusive();
        // SAFETY: handles created in `Backend::open`; every child holds an Arc to us, so none
        // is alive any more.
        if let Err(e) = unsafe { qnn_call!(self.api, backendFree(self.handle)) } {
            tracing::warn!(target: "qnn", "backendFree: {e}");
        }
        if !self.log.is_null() {
            // SAFETY: as above.
            if let Err(e) = unsafe { qnn_call!(self.api, logFree(self.log)) } {
                tracing::warn!(target: "qnn", "logFree: {e}");
            }
        }
    }
}

/// An initialised QNN backend. Cheap to clone; children (devices, contexts, graphs) keep it
/// alive. `Send + Sync`: graph construction is serialised internally.
#[derive(Clone)]
pub struct Backend {
    pub(crate) inner: Arc<BackendInner>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("kind", &self.inner.kind)
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Backend {
    /// Opens `kind` with its default configuration and library search (`logCreate` +
    /// `backendCreate`).
    pub fn new(kind: BackendKind) -> Result<Backend> {
        Backend::open(BackendConfig::default_for(kind), &BackendOptions::default())
    }

    /// Opens the backend `config` configures, with `options` saying where its library is. The
    /// configuration applies to every device, context and graph made from this backend.
    pub fn open(config: impl Into<BackendConfig>, options: &BackendOptions) -> Result<Backend> {
        let config = config.into();
        let kind = config.kind();
        let lib = Arc::new(BackendLibrary::find(
            library_kind(kind),
            options.library.as_deref(),
        )?);
        let (path, name, version) = (
            lib.path().to_path_buf(),
            lib.provider_name().to_string(),
            lib.api_version(),
        );
        let level = options.log_level.unwrap_or_else(LogLevel::from_env);
        Backend::from_api(Api::from_library(lib), config, path, name, version, level)
    }

    pub(crate) fn from_api(
        api: Api,
        config: BackendConfig,
        path: PathBuf,
        provider_name: String,
        api_version: qnn_sys::ApiVersion,
        level: LogLevel,
    ) -> Result<Backend> {
        let kind = config.kind();
        let mut log: Handle = std::ptr::null_mut();
        // SAFETY: the callback is a valid `extern "C"` fn for the life of the process; `log`
        // is a valid out-pointer.
        unsafe {
            qnn_call!(
                api,
                logCreate(Some(crate::log::callback), level as u32, &mut log)
            )
        }?;
        let mut handle: Handle = std::ptr::null_mut();
        let lifecycle = lifecycle_exclusive();
        // SAFETY: `log` was just created; NULL config is allowed.
        let created = unsafe { qnn_call!(api, backendCreate(log, std::ptr::null(), &mut handle)) };
        drop(lifecycle);
        if let Err(e) = created {
            // SAFETY: `log` is ours and unused elsewhere.
            let _ = unsafe { qnn_call!(api, logFree(log)) };
            let e = with_missing_device_files(e, kind, &path, || None);
            return Err(explain_gpu_on_x86(e, kind));
        }
        // The release is known from the build id before any device, context or graph config is
        // laid out; a release outside the tested table is used with the newest layouts.
        let mut id: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; the string is owned by the library.
        let build_id = match unsafe { qnn_call!(api, backendGetBuildId(&mut id)) } {
            Ok(()) => owned_str(id),
            Err(_) => String::new(),
        };
        let release = qnn_sys::releases::by_build_id(&build_id);
        if release.is_none() {
            warn_untested_release(&build_id, &path);
        }
        let serial_execute = match kind {
            BackendKind::Htp => {
                !qnn_sys::releases::htp_executes_concurrently(api_version.backend_api_version)
            }
            // Nothing measured says the GPU or CPU backends need it.
            BackendKind::Gpu | BackendKind::Cpu => false,
        };
        Ok(Backend {
            inner: Arc::new(BackendInner {
                api,
                kind,
                config,
                log,
                handle,
                path,
                provider_name,
                api_version,
                system: OnceLock::new(),
                build_lock: Mutex::new(()),
                serial_execute,
                release,
            }),
        })
    }

    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        self.inner.kind
    }

    /// What it was opened with.
    pub fn config(&self) -> &BackendConfig {
        &self.inner.config
    }

    /// The library file in use.
    pub fn library_path(&self) -> &Path {
        &self.inner.path
    }

    /// The provider name, such as `HTP_QTI_AISW`.
    pub fn provider_name(&self) -> &str {
        &self.inner.provider_name
    }

    /// Core and backend API versions the provider declares.
    pub fn api_version(&self) -> qnn_sys::ApiVersion {
        self.inner.api_version
    }

    /// `backendGetBuildId`, such as `v2.51.0.260929181845`.
    pub fn build_id(&self) -> Result<String> {
        let mut id: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; the string is owned by the library.
        unsafe { qnn_call!(self.inner.api, backendGetBuildId(&mut id)) }?;
        Ok(owned_str(id))
    }

    /// The tested QNN release this library belongs to (by its build id), or `None` for a
    /// release qnnx has not been tested with (a warning was logged when it was opened, and the
    /// newest known struct layouts are used: [`qnn_sys::releases`]).
    pub fn release(&self) -> Option<&'static qnn_sys::releases::Release> {
        self.inner.release
    }

    /// `backendGetSupportedOperations`.
    pub fn supported_operations(&self) -> Result<Vec<OperationName>> {
        let mut n = 0u32;
        let mut ops: *const qnn_sys::OperationName = std::ptr::null();
        // SAFETY: valid out-pointers; the array is owned by the backend.
        unsafe {
            qnn_call!(
                self.inner.api,
                backendGetSupportedOperations(self.inner.handle, &mut n, &mut ops)
            )
        }?;
        if ops.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: QNN returned `n` entries.
        let ops = unsafe { std::slice::from_raw_parts(ops, n as usize) };
        Ok(ops
            .iter()
            .map(|o| OperationName {
                package: owned_str(o.package_name),
                name: owned_str(o.name),
            })
            .collect())
    }

    /// `deviceGetPlatformInfo`: the devices this backend sees. On the x86_64 emulator this is
    /// the emulator's default part (SoC 30, v68), not the SoC a `Device` is configured for.
    pub fn platform_info(&self) -> Result<Vec<HardwareDevice>> {
        let api = &self.inner.api;
        let mut info: *const qnn_sys::PlatformInfo = std::ptr::null();
        // SAFETY: valid out-pointer; freed below with the matching call.
        unsafe { qnn_call!(api, deviceGetPlatformInfo(self.inner.log, &mut info)) }?;
        if info.is_null() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        // SAFETY: the library returned a valid platform info (version 1) that stays valid until
        // deviceFreePlatformInfo.
        unsafe {
            let p = &*info;
            for i in 0..p.v1.num_hw_devices as usize {
                let d = &(*p.v1.hw_devices.add(i)).v1;
                let htp =
                    if self.inner.kind == BackendKind::Htp && !d.device_info_extension.is_null() {
                        let ext =
                            &*(d.device_info_extension as *const qnn_sys::htp::DeviceInfoExtension);
                        let c = ext.on_chip_device;
                        Some(HtpDeviceInfo {
                            soc_model: c.soc_model,
                            arch: c.arch,
                            vtcm_mb: c.vtcm_size,
                            signed_pd: c.signed_pd_support,
                        })
                    } else {
                        None
                    };
                out.push(HardwareDevice {
                    device_id: d.device_id,
                    device_type: d.device_type,
                    num_cores: d.num_cores,
                    htp,
                });
            }
        }
        // SAFETY: frees what deviceGetPlatformInfo returned, once.
        if let Err(e) = unsafe { qnn_call!(api, deviceFreePlatformInfo(self.inner.log, info)) } {
            tracing::warn!(target: "qnn", "deviceFreePlatformInfo: {e}");
        }
        Ok(out)
    }

    /// The `QnnSystem` library beside this backend's library (or found by the usual search),
    /// opened once per backend.
    pub fn system(&self) -> Result<Arc<SystemLibrary>> {
        self.inner
            .system
            .get_or_init(|| {
                let sibling = self
                    .inner
                    .path
                    .parent()
                    .map(|d| {
                        d.join(qnn_sys::loader::file_name(
                            LibraryKind::System,
                            qnn_sys::loader::Os::current(),
                        ))
                    })
                    .filter(|p| p.is_file());
                SystemLibrary::find(sibling.as_deref())
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|e| Error::InvalidArgument(format!("QnnSystem library unavailable: {e}")))
    }

    /// `backendValidateOpConfig` for a raw op config (used by `GraphBuilder`).
    pub(crate) fn validate(
        &self,
        op: qnn_sys::OpConfig,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        // SAFETY: the caller keeps every pointer inside `op` alive for this call.
        unsafe { qnn_call!(self.inner.api, backendValidateOpConfig(self.inner.handle, op); what) }
    }
}

/// The log line of QNN's x86_64 GPU library when `backendCreate` is called without tuning mode
/// (docs/qnn-notes.md §1; QNN 2.47 to 2.51).
const GPU_TUNING_MODE_LINE: &str = "TuningMode must be enabled";

/// For a failed GPU `backendCreate` on x86_64, says what QNN's log line ("TuningMode must be
/// enabled on x86_64-linux-clang platforms") means: the host GPU library only runs in tuning
/// mode, which needs Qualcomm's tuning server (measured: with it enabled and no server,
/// `backendCreate` fails with 4012), so the GPU backend cannot execute here at all. The QNN call
/// and code are kept; the raw line stays in QNN's log (target `qnn`). Other errors pass
/// unchanged.
pub(crate) fn explain_gpu_on_x86(err: Error, kind: BackendKind) -> Error {
    if kind != BackendKind::Gpu {
        return err;
    }
    let Error::Api(mut api) = err else {
        return err;
    };
    if api.call == "backendCreate" && api.log.iter().any(|l| l.contains(GPU_TUNING_MODE_LINE)) {
        api.context = Some(
            "the QNN GPU backend, which cannot execute on x86_64 Linux (QNN's x86_64 GPU \
             library needs Qualcomm's tuning server; checking which ONNX nodes lower to the GPU \
             still works here; compile and run on a Snapdragon device)"
                .into(),
        );
        api.log.clear();
    }
    Error::Api(api)
}

/// Whether `kind` can be opened and initialised here (library found, provider compatible and
/// `backendCreate` succeeds). Never panics.
pub fn probe(kind: BackendKind) -> bool {
    Backend::new(kind).is_ok()
}

/// Logs, once per process and build id, that a library is a release outside
/// [`qnn_sys::releases::TESTED`].
fn warn_untested_release(build_id: &str, path: &Path) {
    static WARNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.iter().any(|w| w == build_id) {
        return;
    }
    warned.push(build_id.to_string());
    let tested: Vec<&str> = qnn_sys::releases::TESTED.iter().map(|r| r.qnn).collect();
    tracing::warn!(
        target: "qnn",
        "{} is QNN build {:?}, a release qnnx has not been tested with (tested: {}); struct \
         layouts and config options of the newest tested release are used",
        path.display(),
        build_id,
        tested.join(", ")
    );
}
