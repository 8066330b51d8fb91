//! Finding and opening QNN libraries at run time.
//!
//! `search.rs` holds the search order, `quiet.rs` the silencing of stdout around `dlopen`, and
//! this file the library kinds, [`LoadError`], opening a library and selecting its provider;
//! their public items are re-exported here. What the HTP library needs beside it on a device
//! (stub, skel, catalog) is installation diagnostics, not loading: `qnn::diagnostics`.
//!
//! # Search order
//!
//! [`candidates`] lists, in this order, where a backend library is looked for; [`locate`] opens
//! the first file that exists, walking the list through [`search_in`] (the last step lets the
//! system loader search):
//!
//! 1. an explicit path given by the caller;
//! 2. `QNN_<KIND>_LIB` (`QNN_HTP_LIB`, `QNN_GPU_LIB`, `QNN_SYSTEM_LIB`, ...): a full file path;
//! 3. `QNN_LIB_DIR`: a folder holding the libraries;
//! 4. `$QNN_SDK_ROOT/lib/<target>`, where `<target>` is `x86_64-linux-clang`,
//!    `aarch64-windows-msvc`, `aarch64-oe-linux-gcc11.2` (or another `aarch64-oe-linux-gcc*`
//!    folder present), `aarch64-ubuntu-gcc9.4` or `aarch64-android`;
//! 5. the `onnxruntime_qnn` folder of an installed `onnxruntime-qnn` Python package, where it is
//!    known without running Python: `$QNNX_ONNXRUNTIME_QNN_DIR` (set by the Python package in
//!    its own process), then the site-packages of `$VIRTUAL_ENV`;
//! 6. the project's runtime folder made by `scripts/setup-runtime`: `$QNNX_RUNTIME_DIR/qnn`, then
//!    `$XDG_DATA_HOME/qnnx/runtime/qnn` (`%LOCALAPPDATA%\qnnx\runtime\qnn` on Windows). No
//!    folder of the build checkout is compiled in; cargo sets `QNNX_RUNTIME_DIR` to the
//!    checkout's `runtime/` for the processes it runs (`.cargo/config.toml`);
//! 7. the `onnxruntime_qnn` folder that `python3` finds (nothing is imported). Spawning Python
//!    costs 100 ms and more, so it is asked only when none of the places above has the library,
//!    at most once per process, and never when `QNNX_ONNXRUNTIME_QNN_DIR` is set (even empty);
//! 8. the bare file name, resolved by the system loader (`LD_LIBRARY_PATH`, `PATH`, ...).
//!
//! File names: `libQnnHtp.so` on Linux and Android, `QnnHtp.dll` on Windows.
//!
//! The x86_64 HTP library prints a banner to **stdout** from a constructor while it is being
//! opened; on Unix we point fd 1 at `/dev/null` for the duration of `dlopen` so that programs
//! whose stdout carries data stay clean.

mod quiet;
mod search;

pub use search::{
    candidates, candidates_in, python_package_dir, sdk_lib_targets, search_in, Candidate, Search,
    SearchEnv, ONNXRUNTIME_QNN_DIR_VAR,
};

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use crate::interface::{CoreFunctions, Interface, GET_PROVIDERS_SYMBOL};
use crate::system::{SystemFunctions, SystemInterface, GET_SYSTEM_PROVIDERS_SYMBOL};
use crate::types::{ApiVersion, ErrorHandle, Version};
use quiet::open_quietly;
pub use quiet::{stdout_to_stderr, StdoutSilencer};

/// Which QNN library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LibraryKind {
    /// The Hexagon NPU backend (an emulator on x86_64).
    Htp,
    /// The Adreno GPU backend.
    Gpu,
    /// The reference CPU backend (shipped with the SDK, not in the onnxruntime-qnn wheel).
    Cpu,
    /// Context-binary introspection (`QnnSystem`).
    System,
}

impl LibraryKind {
    /// The stem shared by every OS: `QnnHtp`, `QnnGpu`, ...
    pub fn stem(self) -> &'static str {
        match self {
            LibraryKind::Htp => "QnnHtp",
            LibraryKind::Gpu => "QnnGpu",
            LibraryKind::Cpu => "QnnCpu",
            LibraryKind::System => "QnnSystem",
        }
    }

    /// The environment variable naming this library's full path.
    pub fn env_var(self) -> &'static str {
        match self {
            LibraryKind::Htp => "QNN_HTP_LIB",
            LibraryKind::Gpu => "QNN_GPU_LIB",
            LibraryKind::Cpu => "QNN_CPU_LIB",
            LibraryKind::System => "QNN_SYSTEM_LIB",
        }
    }
}

/// Target operating systems whose naming rules differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    Linux,
    Android,
    Windows,
}

impl Os {
    /// The OS this crate was compiled for.
    pub const fn current() -> Os {
        if cfg!(target_os = "windows") {
            Os::Windows
        } else if cfg!(target_os = "android") {
            Os::Android
        } else {
            Os::Linux
        }
    }
}

/// The library file name for `kind` on `os`.
pub fn file_name(kind: LibraryKind, os: Os) -> String {
    match os {
        Os::Windows => format!("{}.dll", kind.stem()),
        Os::Linux | Os::Android => format!("lib{}.so", kind.stem()),
    }
}

/// Why a library could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The dynamic loader refused the file.
    #[error("cannot load {path}: {reason}")]
    Dlopen { path: PathBuf, reason: String },
    /// The file loaded but lacks the provider entry point: not a QNN library of this kind.
    #[error("{path} is not a QNN {what} library: symbol {symbol} not found")]
    MissingSymbol {
        path: PathBuf,
        what: &'static str,
        symbol: &'static str,
    },
    /// The entry point failed or returned no provider.
    #[error("{path}: {symbol} returned error {code} with {count} providers")]
    NoProviders {
        path: PathBuf,
        symbol: &'static str,
        code: u64,
        count: u32,
    },
    /// No provider has an API version we can talk to.
    #[error(
        "{path}: no provider with API {required_major}.x (>= {required_major}.{required_minor}); \
         found {found}"
    )]
    NoCompatibleProvider {
        path: PathBuf,
        required_major: u32,
        required_minor: u32,
        found: String,
    },
    /// No candidate file exists.
    #[error(
        "QNN library {name} not found; looked in: {searched}. Run `scripts/setup-runtime` to fetch \
         the x86_64 QNN libraries into a checkout's runtime/ (programs that cargo does not run \
         find them with QNNX_RUNTIME_DIR=<checkout>/runtime), or set {env_var} / QNN_LIB_DIR / \
         QNN_SDK_ROOT"
    )]
    NotFound {
        name: String,
        env_var: &'static str,
        searched: String,
    },
}

/// An opened core backend library and its selected provider.
pub struct BackendLibrary {
    path: PathBuf,
    provider_name: String,
    backend_id: u32,
    api_version: ApiVersion,
    functions: CoreFunctions,
    // Declared last so the table above is never used after the library is unloaded.
    _lib: libloading::Library,
}

// SAFETY: the table holds plain function pointers into a library that stays loaded while `self`
// lives; which calls may run concurrently is decided by the safe layer, not here.
unsafe impl Send for BackendLibrary {}
// SAFETY: as above; the struct is immutable after construction.
unsafe impl Sync for BackendLibrary {}

impl BackendLibrary {
    /// Opens the library at `path` (any file name) and selects a core provider whose API major
    /// equals ours and whose minor is at least ours.
    pub fn open(path: &Path) -> Result<BackendLibrary, LoadError> {
        let lib = open_quietly(path)?;
        let required = crate::consts::CORE_API_VERSION;
        let entry = ProviderEntry {
            symbol: GET_PROVIDERS_SYMBOL,
            name: "QnnInterface_getProviders",
            what: "backend",
        };
        let picked = select_provider(&lib, path, &entry, required, |p: *const Interface| {
            // Read the header fields first: the function table may only be read as our 68-slot
            // prefix once the version says the library's table is at least that long.
            // SAFETY: every provider record starts with these fields.
            let (backend_id, name_ptr, api) = unsafe {
                (
                    std::ptr::addr_of!((*p).backend_id).read(),
                    std::ptr::addr_of!((*p).provider_name).read(),
                    std::ptr::addr_of!((*p).api_version).read(),
                )
            };
            let name = cstr_or(name_ptr, "<unnamed>");
            let core = api.core_api_version;
            if core.major == required.major && core.minor >= required.minor {
                // SAFETY: version checked above: the record holds at least our table.
                let functions = unsafe { std::ptr::addr_of!((*p).functions).read() };
                Ok((backend_id, name, api, functions))
            } else {
                Err(format!(
                    "{name} core {}.{}.{}",
                    core.major, core.minor, core.patch
                ))
            }
        })?;
        let (backend_id, provider_name, api_version, functions) = picked;
        Ok(BackendLibrary {
            path: path.to_path_buf(),
            provider_name,
            backend_id,
            api_version,
            functions,
            _lib: lib,
        })
    }

    /// Searches the [`candidates`] for `kind` and opens the first file that exists. A file that
    /// exists but fails to open is an error (we never silently fall through to another copy).
    pub fn find(kind: LibraryKind, explicit: Option<&Path>) -> Result<BackendLibrary, LoadError> {
        let path = locate(kind, explicit)?;
        BackendLibrary::open(&path)
    }

    /// The file that was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The provider name, such as `HTP_QTI_AISW`.
    pub fn provider_name(&self) -> &str {
        &self.provider_name
    }
    /// `QnnInterface_t.backendId` (HTP 6, GPU 4).
    pub fn backend_id(&self) -> u32 {
        self.backend_id
    }
    /// Core and backend API versions of the provider.
    pub fn api_version(&self) -> ApiVersion {
        self.api_version
    }
    /// The function table (slots may be NULL).
    pub fn functions(&self) -> &CoreFunctions {
        &self.functions
    }
}

/// An opened `QnnSystem` library.
pub struct SystemLibrary {
    path: PathBuf,
    api_version: Version,
    functions: SystemFunctions,
    _lib: libloading::Library,
}

// SAFETY: see `BackendLibrary`.
unsafe impl Send for SystemLibrary {}
// SAFETY: see `BackendLibrary`.
unsafe impl Sync for SystemLibrary {}

impl SystemLibrary {
    /// Opens a `QnnSystem` library and selects a provider with system API 1.x (>= 1.4).
    pub fn open(path: &Path) -> Result<SystemLibrary, LoadError> {
        let lib = open_quietly(path)?;
        let required = crate::consts::SYSTEM_API_VERSION;
        let entry = ProviderEntry {
            symbol: GET_SYSTEM_PROVIDERS_SYMBOL,
            name: "QnnSystemInterface_getProviders",
            what: "system",
        };
        let picked = select_provider(&lib, path, &entry, required, |p: *const SystemInterface| {
            // SAFETY: every provider record starts with these fields.
            let v = unsafe { std::ptr::addr_of!((*p).system_api_version).read() };
            if v.major == required.major && v.minor >= required.minor {
                // SAFETY: version checked: the record holds at least our 13-slot table.
                let functions = unsafe { std::ptr::addr_of!((*p).functions).read() };
                Ok((v, functions))
            } else {
                Err(format!("system {}.{}.{}", v.major, v.minor, v.patch))
            }
        })?;
        let (api_version, functions) = picked;
        Ok(SystemLibrary {
            path: path.to_path_buf(),
            api_version,
            functions,
            _lib: lib,
        })
    }

    /// Searches like [`BackendLibrary::find`] for `QnnSystem`.
    pub fn find(explicit: Option<&Path>) -> Result<SystemLibrary, LoadError> {
        let path = locate(LibraryKind::System, explicit)?;
        SystemLibrary::open(&path)
    }

    /// The file that was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The system API version of the provider.
    pub fn api_version(&self) -> Version {
        self.api_version
    }
    /// The function table (slots may be NULL).
    pub fn functions(&self) -> &SystemFunctions {
        &self.functions
    }
}

/// The provider entry point of one kind of library.
struct ProviderEntry {
    /// The symbol, NUL-terminated.
    symbol: &'static [u8],
    /// The symbol, for messages.
    name: &'static str,
    /// What a library lacking it is not ("backend", "system").
    what: &'static str,
}

/// Calls `entry` of `lib` (`*_getProviders(&providerList, &numProviders)`, the same C signature
/// for every provider record `P`) and returns the first provider `pick` accepts, in the list's
/// order. `pick` reads a non-NULL record and returns what to keep, or a description of the
/// provider ("HTP_QTI_AISW core 2.26.0") for the error when none is compatible with `required`.
fn select_provider<P, T>(
    lib: &libloading::Library,
    path: &Path,
    entry: &ProviderEntry,
    required: Version,
    mut pick: impl FnMut(*const P) -> Result<T, String>,
) -> Result<T, LoadError> {
    type GetProviders<P> = unsafe extern "C" fn(*mut *const *const P, *mut u32) -> ErrorHandle;
    // SAFETY: the symbol has this C signature in every QNN release.
    let get: libloading::Symbol<GetProviders<P>> =
        unsafe { lib.get(entry.symbol) }.map_err(|_| LoadError::MissingSymbol {
            path: path.to_path_buf(),
            what: entry.what,
            symbol: entry.name,
        })?;
    let mut list: *const *const P = std::ptr::null();
    let mut n = 0u32;
    // SAFETY: both out-pointers are valid for writes.
    let rc = unsafe { get(&mut list, &mut n) };
    if rc != 0 || list.is_null() || n == 0 {
        return Err(LoadError::NoProviders {
            path: path.to_path_buf(),
            symbol: entry.name,
            code: rc,
            count: n,
        });
    }
    let mut found = Vec::new();
    for i in 0..n as usize {
        // SAFETY: the library returned `n` valid provider pointers that live as long as it.
        let p = unsafe { *list.add(i) };
        if p.is_null() {
            continue;
        }
        match pick(p) {
            Ok(picked) => return Ok(picked),
            Err(described) => found.push(described),
        }
    }
    Err(LoadError::NoCompatibleProvider {
        path: path.to_path_buf(),
        required_major: required.major,
        required_minor: required.minor,
        found: if found.is_empty() {
            "none".into()
        } else {
            found.join(", ")
        },
    })
}

/// The first existing candidate for `kind`, or the bare name for the system loader when nothing
/// exists on disk (the loader may still find it through `LD_LIBRARY_PATH`/`PATH`).
pub fn locate(kind: LibraryKind, explicit: Option<&Path>) -> Result<PathBuf, LoadError> {
    // An explicit path that does not exist is the caller's mistake: say so instead of finding
    // some other copy.
    if let Some(p) = explicit {
        if !p.exists() {
            return Err(LoadError::Dlopen {
                path: p.to_path_buf(),
                reason: "no such file".into(),
            });
        }
        return Ok(p.to_path_buf());
    }
    let search = search_in(
        kind,
        &SearchEnv::from_process(kind, false),
        Os::current(),
        std::env::consts::ARCH,
        &|p| p.is_file(),
        &mut python_package_dir,
    );
    if let Some(c) = search.found {
        return Ok(c.path);
    }
    let bare = PathBuf::from(file_name(kind, Os::current()));
    // Only hand the bare name to the loader if it can resolve it; otherwise report the search.
    match open_quietly(&bare) {
        Ok(_) => Ok(bare),
        Err(_) => Err(LoadError::NotFound {
            name: file_name(kind, Os::current()),
            env_var: kind.env_var(),
            searched: search
                .searched
                .iter()
                .filter(|c| c.source != "system")
                .map(|c| c.path.display().to_string())
                .chain(std::iter::once("the system loader path".to_string()))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Whether `kind` can be found and opened with a compatible provider.
pub fn probe(kind: LibraryKind) -> bool {
    match kind {
        LibraryKind::System => SystemLibrary::find(None).is_ok(),
        _ => BackendLibrary::find(kind, None).is_ok(),
    }
}

fn cstr_or(p: *const std::ffi::c_char, default: &str) -> String {
    if p.is_null() {
        return default.to_string();
    }
    // SAFETY: QNN strings are NUL-terminated and live as long as the library.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_per_os() {
        assert_eq!(file_name(LibraryKind::Htp, Os::Linux), "libQnnHtp.so");
        assert_eq!(file_name(LibraryKind::Htp, Os::Android), "libQnnHtp.so");
        assert_eq!(file_name(LibraryKind::Htp, Os::Windows), "QnnHtp.dll");
        assert_eq!(file_name(LibraryKind::System, Os::Windows), "QnnSystem.dll");
        assert_eq!(file_name(LibraryKind::Gpu, Os::Linux), "libQnnGpu.so");
    }

    #[test]
    fn missing_explicit_path_is_an_error_naming_it() {
        let err = locate(
            LibraryKind::Htp,
            Some(Path::new("/nonexistent/libQnnHtp.so")),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/nonexistent/libQnnHtp.so"), "{err}");
    }

    #[test]
    fn a_file_that_is_not_a_library_is_a_dlopen_error() {
        let dir = std::env::temp_dir().join(format!("qnn-sys-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("libQnnHtp.so");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let err = BackendLibrary::open(&fake).err().expect("must fail");
        assert!(matches!(err, LoadError::Dlopen { .. }), "{err}");
        assert!(err.to_string().contains(fake.to_str().unwrap()));
        std::fs::remove_dir_all(&dir).ok();
    }
}
