//! `Backend`: an opened QNN backend library, its logger and its backend handle.

use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use qnn_sys::loader::{
    missing_htp_companions_in, needs_device_files, CompanionEnv, FileList, Os, RealFiles,
};
use qnn_sys::{BackendLibrary, Handle, LibraryKind, SystemLibrary};

use crate::api::{owned_str, qnn_call, Api};
use crate::config::BackendConfig;
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

/// What the device-side file check reads about this machine: OS, CPU, environment, filesystem.
/// Unit tests substitute a fake one (`TEST_HOST`) to exercise the device paths on x86_64.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    pub(crate) os: Os,
    pub(crate) cpu_arch: String,
    pub(crate) env: CompanionEnv,
    /// `None`: the real filesystem.
    pub(crate) files: Option<FileList>,
}

#[cfg(test)]
thread_local! {
    pub(crate) static TEST_HOST: std::cell::RefCell<Option<Host>> = const { std::cell::RefCell::new(None) };
}

impl Host {
    pub(crate) fn current() -> Host {
        #[cfg(test)]
        if let Some(h) = TEST_HOST.with(|h| h.borrow().clone()) {
            return h;
        }
        Host {
            os: Os::current(),
            cpu_arch: std::env::consts::ARCH.to_string(),
            env: CompanionEnv::from_process(),
            files: None,
        }
    }

    fn missing_htp_files(&self, library: &Path, arch: Option<u32>) -> Option<String> {
        match &self.files {
            Some(f) => missing_htp_companions_in(library, self.os, arch, &self.env, f),
            None => missing_htp_companions_in(library, self.os, arch, &self.env, &RealFiles),
        }
    }
}

/// For a failed `backendCreate`/`deviceCreate` of the HTP backend on a device (not the x86_64
/// emulator, which needs no stub or skel), adds the device-side files that are missing to the
/// error's context: `deviceCreate failed for <what>, with HTP v73 files missing:
/// libQnnHtpV73Skel.so (skel; looked for in ADSP_LIBRARY_PATH: ...): <code>`. `arch` gives the
/// HTP arch when known (only asked on a device); otherwise every arch whose stub sits beside
/// the library is checked. Other errors, and errors with nothing missing, pass unchanged.
pub(crate) fn with_missing_device_files(
    err: Error,
    kind: BackendKind,
    library: &Path,
    arch: impl FnOnce() -> Option<u32>,
) -> Error {
    if kind != BackendKind::Htp {
        return err;
    }
    let host = Host::current();
    if !needs_device_files(&host.cpu_arch) {
        return err;
    }
    let Error::Api(mut api) = err else {
        return err;
    };
    if let Some(missing) = host.missing_htp_files(library, arch()) {
        let what = api
            .context
            .take()
            .unwrap_or_else(|| library.display().to_string());
        api.context = Some(format!("{what}, with {missing}"));
    }
    Error::Api(api)
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

#[cfg(test)]
mod fake_tests {
    //! The safe layer against a hand-made function table: faults injected at chosen calls must
    //! come back as `ApiError`s naming the call, code, node and op, and handles must be freed.

    use std::ffi::CStr;
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

    use qnn_sys::{Config, CoreFunctions, ErrorHandle, Handle, OpConfig, Tensor};

    use super::*;
    use crate::{
        BackendConfig, Context, DType, Device, HtpConfig, HtpContextConfig, HtpDeviceConfig, Node,
    };

    static NEXT_ID: AtomicU32 = AtomicU32::new(1);
    static CONTEXT_FREES: AtomicU32 = AtomicU32::new(0);
    static BACKEND_FREES: AtomicU32 = AtomicU32::new(0);

    unsafe extern "C" fn log_create(
        _: qnn_sys::LogCallback,
        _: u32,
        out: *mut Handle,
    ) -> ErrorHandle {
        // SAFETY: out-pointer from the safe layer.
        unsafe { *out = 7 as Handle };
        0
    }
    unsafe extern "C" fn free1(_: Handle) -> ErrorHandle {
        0
    }
    unsafe extern "C" fn backend_free(_: Handle) -> ErrorHandle {
        BACKEND_FREES.fetch_add(1, SeqCst);
        0
    }
    unsafe extern "C" fn backend_create(
        _: Handle,
        _: *const *const Config,
        out: *mut Handle,
    ) -> ErrorHandle {
        // SAFETY: as above.
        unsafe { *out = 1 as Handle };
        0
    }
    unsafe extern "C" fn context_create(
        _: Handle,
        _: Handle,
        _: *const *const Config,
        out: *mut Handle,
    ) -> ErrorHandle {
        // SAFETY: as above.
        unsafe { *out = 2 as Handle };
        0
    }
    unsafe extern "C" fn context_free(_: Handle, _: Handle) -> ErrorHandle {
        CONTEXT_FREES.fetch_add(1, SeqCst);
        0
    }
    unsafe extern "C" fn graph_create(
        _: Handle,
        _: *const std::ffi::c_char,
        _: *const *const Config,
        out: *mut Handle,
    ) -> ErrorHandle {
        // SAFETY: as above.
        unsafe { *out = 3 as Handle };
        0
    }
    unsafe extern "C" fn tensor_create(_: Handle, t: *mut Tensor) -> ErrorHandle {
        // SAFETY: the safe layer passes a v2 tensor.
        unsafe { (*t).v.v2.id = NEXT_ID.fetch_add(1, SeqCst) };
        0
    }
    unsafe extern "C" fn validate(_: Handle, op: OpConfig) -> ErrorHandle {
        // SAFETY: the type name is a valid C string for the call.
        let ty = unsafe { CStr::from_ptr(op.v1.type_name) };
        if ty.to_bytes() == b"Bogus" {
            3110
        } else {
            0
        }
    }
    unsafe extern "C" fn add_node(_: Handle, _: OpConfig) -> ErrorHandle {
        0
    }
    unsafe extern "C" fn finalize_fails(_: Handle, _: Handle, _: Handle) -> ErrorHandle {
        // A full error handle: the code is the low 16 bits.
        (0xABCD_u64 << 32) | 6022
    }

    fn fake_backend() -> Backend {
        // SAFETY: an all-NULL table is valid: every slot is an Option.
        let mut f: CoreFunctions = unsafe { std::mem::zeroed() };
        f.logCreate = Some(log_create);
        f.logFree = Some(free1);
        f.backendCreate = Some(backend_create);
        f.backendFree = Some(backend_free);
        f.contextCreate = Some(context_create);
        f.contextFree = Some(context_free);
        f.graphCreate = Some(graph_create);
        f.tensorCreateGraphTensor = Some(tensor_create);
        f.backendValidateOpConfig = Some(validate);
        f.graphAddNode = Some(add_node);
        f.graphFinalize = Some(finalize_fails);
        Backend::from_api(
            Api::from_table(f, "fake"),
            BackendConfig::default_for(BackendKind::Htp),
            "fake".into(),
            "FAKE".into(),
            Default::default(),
            LogLevel::Warn,
        )
        .unwrap()
    }

    unsafe extern "C" fn backend_create_fails(
        _: Handle,
        _: *const *const Config,
        _: *mut Handle,
    ) -> ErrorHandle {
        4000
    }
    unsafe extern "C" fn device_create_fails(
        _: Handle,
        _: *const *const Config,
        _: *mut Handle,
    ) -> ErrorHandle {
        14002
    }

    /// A fake device host for this thread (dropped at the end of the test).
    struct FakeHost;
    impl FakeHost {
        fn set(os: qnn_sys::loader::Os, cpu: &str, adsp: Option<&str>, files: &[&str]) -> FakeHost {
            let host = Host {
                os,
                cpu_arch: cpu.to_string(),
                env: CompanionEnv {
                    adsp_library_path: adsp.map(str::to_string),
                    ..Default::default()
                },
                files: Some(FileList(files.iter().map(PathBuf::from).collect())),
            };
            TEST_HOST.with(|h| *h.borrow_mut() = Some(host));
            FakeHost
        }
    }
    impl Drop for FakeHost {
        fn drop(&mut self) {
            TEST_HOST.with(|h| *h.borrow_mut() = None);
        }
    }

    fn backend_at(path: &str, f: CoreFunctions, config: HtpConfig) -> Result<Backend> {
        Backend::from_api(
            Api::from_table(f, "fake"),
            BackendConfig::Htp(config),
            path.into(),
            "FAKE".into(),
            Default::default(),
            LogLevel::Warn,
        )
    }

    fn table() -> CoreFunctions {
        // SAFETY: an all-NULL table is valid: every slot is an Option.
        let mut f: CoreFunctions = unsafe { std::mem::zeroed() };
        f.logCreate = Some(log_create);
        f.logFree = Some(free1);
        f.backendCreate = Some(backend_create);
        // Not `backend_free`: `missing_slot_is_not_provided_and_handles_are_freed` counts those.
        f.backendFree = Some(free1);
        f.deviceCreate = Some(device_create_fails);
        f
    }

    #[test]
    fn failed_backend_create_on_a_device_names_the_missing_skel() {
        use qnn_sys::loader::Os;
        let mut f = table();
        f.backendCreate = Some(backend_create_fails);
        let lib = "/data/local/tmp/qnn/libQnnHtp.so";
        let files = [lib, "/data/local/tmp/qnn/libQnnHtpV75Stub.so"];
        let _host = FakeHost::set(Os::Android, "aarch64", Some("/data/local/tmp/qnn"), &files);
        let err = backend_at(lib, f, HtpConfig::default()).unwrap_err();
        assert_eq!(err.code(), Some(4000));
        let text = err.to_string();
        assert!(
            text.starts_with(
                "backendCreate failed for /data/local/tmp/qnn/libQnnHtp.so, with HTP v75 files \
                 missing: libQnnHtpV75Skel.so (skel; looked for in ADSP_LIBRARY_PATH: \
                 /data/local/tmp/qnn)"
            ),
            "{text}"
        );
        assert!(
            text.ends_with("QNN_BACKEND_ERROR_CANNOT_INITIALIZE (4000, Backend)"),
            "{text}"
        );

        // With the skel in place there is nothing to add.
        let files = [
            lib,
            "/data/local/tmp/qnn/libQnnHtpV75Stub.so",
            "/data/local/tmp/qnn/libQnnHtpV75Skel.so",
        ];
        let _host = FakeHost::set(Os::Android, "aarch64", Some("/data/local/tmp/qnn"), &files);
        let text = backend_at(lib, f, HtpConfig::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            text,
            "backendCreate failed: QNN_BACKEND_ERROR_CANNOT_INITIALIZE (4000, Backend)"
        );
    }

    #[test]
    fn failed_device_create_on_windows_names_files_for_the_soc_arch() {
        use qnn_sys::loader::Os;
        let lib = "C:/qnnx/runtime/qnn/QnnHtp.dll";
        // Stubs for v68 and v73 beside the DLL, no skel or catalog: SoC 60 is v73, and without
        // platform info (the fake has none) its arch decides which files are named.
        let files = [
            lib,
            "C:/qnnx/runtime/qnn/QnnHtpV68Stub.dll",
            "C:/qnnx/runtime/qnn/QnnHtpV73Stub.dll",
        ];
        let _host = FakeHost::set(Os::Windows, "aarch64", None, &files);
        let config = HtpConfig {
            device: HtpDeviceConfig {
                soc_model: Some(60),
                arch: None,
            },
            ..HtpConfig::default()
        };
        let backend = backend_at(lib, table(), config).unwrap();
        let err = Device::new(&backend).err().expect("deviceCreate fails");
        assert_eq!(err.code(), Some(14002));
        let text = err.to_string();
        assert!(text.starts_with("deviceCreate failed for Htp("), "{text}");
        assert!(
            text.contains(
                "with HTP v73 files missing: libQnnHtpV73Skel.so (skel; looked for beside the HTP \
                 library: C:/qnnx/runtime/qnn), libqnnhtpv73.cat (skel catalog;"
            ),
            "{text}"
        );
        assert!(!text.contains("V68") && !text.contains("Stub"), "{text}");
        assert!(text.ends_with("(14002, Device)"), "{text}");
    }

    #[test]
    fn the_x86_64_emulator_and_other_backends_get_no_device_file_check() {
        use qnn_sys::loader::Os;
        let mut f = table();
        f.backendCreate = Some(backend_create_fails);
        let lib = "/opt/qnn/libQnnHtp.so";
        let _host = FakeHost::set(Os::Linux, "x86_64", None, &[lib]);
        let text = backend_at(lib, f, HtpConfig::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            text,
            "backendCreate failed: QNN_BACKEND_ERROR_CANNOT_INITIALIZE (4000, Backend)"
        );
        // On a device, the GPU backend is not checked for HTP files either.
        let _host = FakeHost::set(Os::Linux, "aarch64", None, &[lib]);
        let err = Backend::from_api(
            Api::from_table(f, "fake"),
            BackendConfig::default_for(BackendKind::Gpu),
            "/opt/qnn/libQnnGpu.so".into(),
            "FAKE".into(),
            Default::default(),
            LogLevel::Warn,
        )
        .unwrap_err();
        assert!(!err.to_string().contains("missing"), "{err}");
        // ...while the HTP backend there is: no stub at all beside it.
        let text = backend_at(lib, f, HtpConfig::default())
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("with no HTP stub beside /opt/qnn/libQnnHtp.so"),
            "{text}"
        );
    }

    #[test]
    fn validation_failure_names_node_and_op() {
        let backend = fake_backend();
        let ctx = Context::new(&backend, None).unwrap();
        let mut g = ctx.build_graph("g").unwrap();
        let x = g.input("x", DType::F32, &[4]).unwrap();
        let y = g.output("y", DType::F32, &[4]).unwrap();
        let err = g
            .add_node(&Node::new("blk3/odd", "Bogus").inputs(&[x]).outputs(&[y]))
            .unwrap_err();
        assert_eq!(err.code(), Some(3110));
        let text = err.to_string();
        assert!(text.contains("backendValidateOpConfig"), "{text}");
        assert!(text.contains("\"blk3/odd\" (Bogus)"), "{text}");
        assert!(
            text.contains("QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE"),
            "{text}"
        );
        g.add_node(&Node::new("relu", "Relu").inputs(&[x]).outputs(&[y]))
            .unwrap();
    }

    #[test]
    fn finalize_failure_carries_code_family_and_handle() {
        let backend = fake_backend();
        let ctx = Context::new(&backend, None).unwrap();
        let g = ctx.build_graph("net").unwrap();
        let Error::Api(e) = g.finalize().unwrap_err() else {
            panic!("not an API error")
        };
        assert_eq!((e.call, e.code, e.family), ("graphFinalize", 6022, "Graph"));
        assert_eq!(e.name, Some("QNN_GRAPH_ERROR_FINALIZE_FAILED"));
        assert_eq!(e.handle, (0xABCD_u64 << 32) | 6022);
        assert_eq!(e.context.as_deref(), Some("graph \"net\""));
    }

    #[test]
    fn missing_slot_is_not_provided_and_handles_are_freed() {
        let before = (CONTEXT_FREES.load(SeqCst), BACKEND_FREES.load(SeqCst));
        let backend = fake_backend();
        let ctx = Context::new(&backend, None).unwrap();
        let err = backend.build_id().unwrap_err();
        assert!(
            matches!(
                err,
                Error::NotProvided {
                    call: "backendGetBuildId",
                    ..
                }
            ),
            "{err}"
        );
        drop(backend);
        // The context keeps the backend alive: nothing freed yet.
        assert!(BACKEND_FREES.load(SeqCst) == before.1 || CONTEXT_FREES.load(SeqCst) > before.0);
        drop(ctx);
        assert!(CONTEXT_FREES.load(SeqCst) > before.0);
        assert!(BACKEND_FREES.load(SeqCst) > before.1);
    }

    static CONTEXT_CONFIG: AtomicU32 = AtomicU32::new(u32::MAX);

    /// Records the config list `contextCreate` got: 0 for NULL, else `1000 + 100 * count +
    /// 10 * option + flag` of its one HTP custom config.
    unsafe extern "C" fn context_create_records(
        _: Handle,
        _: Handle,
        list: *const *const Config,
        out: *mut Handle,
    ) -> ErrorHandle {
        let v = if list.is_null() {
            0
        } else {
            // SAFETY: the safe layer passes a NULL-terminated list of CUSTOM configs pointing
            // at HTP context configs.
            unsafe {
                let mut n = 0;
                while !(*list.add(n)).is_null() {
                    n += 1;
                }
                let c = &**list;
                assert_eq!(c.option, qnn_sys::consts::CONFIG_OPTION_CUSTOM);
                let custom = &*c
                    .value
                    .custom_config
                    .cast::<qnn_sys::htp::ContextCustomConfig>();
                1000 + 100 * n as u32 + 10 * custom.option + u32::from(custom.value.flag)
            }
        };
        CONTEXT_CONFIG.store(v, SeqCst);
        // SAFETY: out-pointer from the safe layer.
        unsafe { *out = 2 as Handle };
        0
    }

    type ContextCreate =
        unsafe extern "C" fn(Handle, Handle, *const *const Config, *mut Handle) -> ErrorHandle;

    fn backend_with(config: BackendConfig, create: ContextCreate) -> Backend {
        // SAFETY: an all-NULL table is valid: every slot is an Option.
        let mut f: CoreFunctions = unsafe { std::mem::zeroed() };
        f.logCreate = Some(log_create);
        f.logFree = Some(free1);
        f.backendCreate = Some(backend_create);
        f.backendFree = Some(free1);
        f.contextCreate = Some(create);
        f.contextFree = Some(context_free);
        Backend::from_api(
            Api::from_table(f, "fake"),
            config,
            "fake".into(),
            "FAKE".into(),
            Default::default(),
            LogLevel::Warn,
        )
        .unwrap()
    }

    #[test]
    fn the_htp_context_config_passes_weight_sharing() {
        let b = backend_with(
            BackendConfig::default_for(BackendKind::Htp),
            context_create_records,
        );
        drop(Context::new(&b, None).unwrap());
        assert_eq!(CONTEXT_CONFIG.load(SeqCst), 0, "no configs: a NULL list");
        let shared = HtpConfig {
            context: HtpContextConfig {
                weight_sharing: true,
            },
            ..HtpConfig::default()
        };
        let b = backend_with(BackendConfig::Htp(shared), context_create_records);
        drop(Context::new(&b, None).unwrap());
        // One config, option 1 (WEIGHT_SHARING_ENABLED), flag true.
        assert_eq!(CONTEXT_CONFIG.load(SeqCst), 1000 + 100 + 10 + 1);
        // The GPU has no such option: its contexts get no configs.
        let gpu = backend_with(
            BackendConfig::default_for(BackendKind::Gpu),
            context_create_records,
        );
        drop(Context::new(&gpu, None).unwrap());
        assert_eq!(CONTEXT_CONFIG.load(SeqCst), 0);
    }
}
