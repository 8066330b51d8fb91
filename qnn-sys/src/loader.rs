//! Finding and opening QNN libraries at run time.
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
//!    `<source checkout>/runtime/qnn` (for builds from a checkout), then
//!    `$XDG_DATA_HOME/qnnx/runtime/qnn` (`%LOCALAPPDATA%\qnnx\runtime\qnn` on Windows);
//! 7. the `onnxruntime_qnn` folder that `python3` finds (nothing is imported). Spawning Python
//!    costs 100 ms and more, so it is asked only when none of the places above has the library,
//!    at most once per process, and never when `QNNX_ONNXRUNTIME_QNN_DIR` is set (even empty);
//! 8. the bare file name, resolved by the system loader (`LD_LIBRARY_PATH`, `PATH`, ...).
//!
//! File names: `libQnnHtp.so` on Linux and Android, `QnnHtp.dll` on Windows.
//!
//! # Device-side files of the HTP library
//!
//! On a device (every CPU but x86_64, whose `libQnnHtp` is an emulator), the HTP library also
//! needs, per HTP architecture (v68, v73, ...), the stub, the skel and on Windows the skel's
//! signed catalog; [`htp_companion_names`] names them, [`companion_search`] states where each is
//! looked for on each OS, and [`htp_companions_in`] / [`missing_htp_companions_in`] report which
//! are missing, for any OS, environment and (fake) filesystem.
//!
//! The x86_64 HTP library prints a banner to **stdout** from a constructor while it is being
//! opened; on Unix we point fd 1 at `/dev/null` for the duration of `dlopen` so that programs
//! whose stdout carries data stay clean.

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use crate::interface::{CoreFunctions, GetProvidersFn, Interface, GET_PROVIDERS_SYMBOL};
use crate::system::{
    GetSystemProvidersFn, SystemFunctions, SystemInterface, GET_SYSTEM_PROVIDERS_SYMBOL,
};
use crate::types::{ApiVersion, Version};

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

/// The `$QNN_SDK_ROOT/lib/<target>` folder names to try for an OS and CPU, most specific first.
pub fn sdk_lib_targets(os: Os, arch: &str) -> &'static [&'static str] {
    match (os, arch) {
        (Os::Windows, "aarch64") => &["aarch64-windows-msvc", "arm64x-windows-msvc"],
        (Os::Windows, _) => &["x86_64-windows-msvc"],
        (Os::Android, _) => &["aarch64-android"],
        (Os::Linux, "aarch64") => &[
            "aarch64-oe-linux-gcc11.2",
            "aarch64-oe-linux-gcc9.3",
            "aarch64-oe-linux-gcc8.2",
            "aarch64-ubuntu-gcc9.4",
        ],
        (Os::Linux, _) => &["x86_64-linux-clang"],
    }
}

/// One place a library may be found, and which rule produced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The rule: `explicit`, `QNN_HTP_LIB`, `QNN_LIB_DIR`, `QNN_SDK_ROOT`, `onnxruntime_qnn`,
    /// `runtime`, `python3`, `system`.
    pub source: &'static str,
    /// A path, or for the `system` rule a bare file name.
    pub path: PathBuf,
}

/// The variable naming the `onnxruntime_qnn` package folder, set by a caller that already knows
/// it (the Python package sets it in its own process from `importlib.util.find_spec`). Set, even
/// to an empty value, it also stops the loader from asking `python3`.
pub const ONNXRUNTIME_QNN_DIR_VAR: &str = "QNNX_ONNXRUNTIME_QNN_DIR";

/// The environment that [`candidates_in`] and [`search_in`] read; separated out so the order is
/// unit-testable.
#[derive(Debug, Clone, Default)]
pub struct SearchEnv {
    pub kind_lib: Option<PathBuf>,
    pub lib_dir: Option<PathBuf>,
    pub sdk_root: Option<PathBuf>,
    /// `onnxruntime_qnn` folders known without running Python: `QNNX_ONNXRUNTIME_QNN_DIR`, then
    /// the site-packages under `$VIRTUAL_ENV`.
    pub python_package_dirs: Vec<PathBuf>,
    pub runtime_dirs: Vec<PathBuf>,
    /// Whether `python3` may be asked where `onnxruntime_qnn` is (not when the caller set
    /// `QNNX_ONNXRUNTIME_QNN_DIR`).
    pub ask_python: bool,
    /// The folder `python3` reported, once asked: listed after the runtime folders.
    pub python_probe: Option<PathBuf>,
}

impl SearchEnv {
    /// Reads the process environment. Asking `python3` where `onnxruntime_qnn` lives costs a
    /// process spawn (100 ms and more), so it is done here only when `probe_python` is set; see
    /// [`python_package_dir`].
    pub fn from_process(kind: LibraryKind, probe_python: bool) -> SearchEnv {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let mut python_package_dirs = Vec::new();
        python_package_dirs.extend(var(ONNXRUNTIME_QNN_DIR_VAR));
        if let Some(venv) = var("VIRTUAL_ENV") {
            python_package_dirs.extend(site_packages_under(&venv));
        }
        let ask_python = std::env::var_os(ONNXRUNTIME_QNN_DIR_VAR).is_none();
        let mut runtime_dirs = Vec::new();
        if let Some(d) = var("QNNX_RUNTIME_DIR") {
            runtime_dirs.push(d);
        }
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("runtime");
        runtime_dirs.push(checkout.canonicalize().unwrap_or(checkout));
        if let Some(d) = user_data_dir() {
            runtime_dirs.push(d.join("qnnx").join("runtime"));
        }
        SearchEnv {
            kind_lib: var(kind.env_var()),
            lib_dir: var("QNN_LIB_DIR"),
            sdk_root: var("QNN_SDK_ROOT"),
            python_package_dirs,
            runtime_dirs,
            ask_python,
            python_probe: if probe_python && ask_python {
                python_package_dir()
            } else {
                None
            },
        }
    }
}

fn user_data_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if cfg!(target_os = "windows") {
        var("LOCALAPPDATA")
    } else {
        var("XDG_DATA_HOME").or_else(|| var("HOME").map(|h| h.join(".local").join("share")))
    }
}

fn site_packages_under(prefix: &Path) -> Vec<PathBuf> {
    let mut out = vec![prefix
        .join("Lib")
        .join("site-packages")
        .join("onnxruntime_qnn")];
    if let Ok(entries) = std::fs::read_dir(prefix.join("lib")) {
        for e in entries.flatten() {
            let name = e.file_name();
            if name.to_string_lossy().starts_with("python") {
                out.push(e.path().join("site-packages").join("onnxruntime_qnn"));
            }
        }
    }
    out
}

/// Where the Python on PATH (`$QNNX_PYTHON`, else `python3`; `python` on Windows) finds
/// `onnxruntime_qnn`. Asked at most once per process; the answer, found or not, is kept.
pub fn python_package_dir() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(python_find_package).clone()
}

/// Asks the Python on PATH where `onnxruntime_qnn` is, without importing it (`find_spec` of a
/// top-level package only locates it, so ONNX Runtime is never loaded).
fn python_find_package() -> Option<PathBuf> {
    let python = std::env::var_os("QNNX_PYTHON").unwrap_or_else(|| {
        if cfg!(target_os = "windows") {
            "python"
        } else {
            "python3"
        }
        .into()
    });
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('onnxruntime_qnn'); \
             print(s.submodule_search_locations[0] if s else '')",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| PathBuf::from(text))
}

/// Every place `kind` is looked for, in order, given `explicit` and the process environment
/// (`python3` is asked, once per process, so that its answer is listed too).
pub fn candidates(kind: LibraryKind, explicit: Option<&Path>) -> Vec<Candidate> {
    candidates_in(
        kind,
        explicit,
        &SearchEnv::from_process(kind, true),
        Os::current(),
        std::env::consts::ARCH,
    )
}

/// [`candidates`] for a given environment, OS and CPU.
pub fn candidates_in(
    kind: LibraryKind,
    explicit: Option<&Path>,
    env: &SearchEnv,
    os: Os,
    arch: &str,
) -> Vec<Candidate> {
    let name = file_name(kind, os);
    let mut out = Vec::new();
    let mut push = |source, path: PathBuf| out.push(Candidate { source, path });
    if let Some(p) = explicit {
        push("explicit", p.to_path_buf());
    }
    if let Some(p) = &env.kind_lib {
        push(kind.env_var(), p.clone());
    }
    if let Some(d) = &env.lib_dir {
        push("QNN_LIB_DIR", d.join(&name));
    }
    if let Some(root) = &env.sdk_root {
        for t in sdk_lib_targets(os, arch) {
            push("QNN_SDK_ROOT", root.join("lib").join(t).join(&name));
        }
    }
    for d in &env.python_package_dirs {
        push("onnxruntime_qnn", d.join(&name));
    }
    for d in &env.runtime_dirs {
        push("runtime", d.join("qnn").join(&name));
    }
    if let Some(d) = &env.python_probe {
        push("python3", d.join(&name));
    }
    push("system", PathBuf::from(&name));
    out
}

/// The outcome of [`search_in`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// The first candidate that exists (never the `system` one).
    pub found: Option<Candidate>,
    /// The candidates looked at, in order, ending with the bare `system` name.
    pub searched: Vec<Candidate>,
}

/// Walks the search order for `kind` (no explicit path) and stops at the first candidate for
/// which `exists` holds. `probe_python` is called only when no candidate before the `python3`
/// step exists and `env.ask_python` is set, so a library found in an earlier place costs no
/// process spawn.
pub fn search_in(
    kind: LibraryKind,
    env: &SearchEnv,
    os: Os,
    arch: &str,
    exists: &dyn Fn(&Path) -> bool,
    probe_python: &mut dyn FnMut() -> Option<PathBuf>,
) -> Search {
    let mut env = env.clone();
    let mut searched = Vec::new();
    let check = |list: Vec<Candidate>, searched: &mut Vec<Candidate>| {
        for c in list.into_iter().filter(|c| c.source != "system") {
            if !searched.contains(&c) {
                let hit = exists(&c.path);
                searched.push(c.clone());
                if hit {
                    return Some(c);
                }
            }
        }
        None
    };
    env.python_probe = None;
    let mut found = check(candidates_in(kind, None, &env, os, arch), &mut searched);
    if found.is_none() && env.ask_python {
        env.python_probe = probe_python();
        found = check(candidates_in(kind, None, &env, os, arch), &mut searched);
    }
    searched.push(Candidate {
        source: "system",
        path: PathBuf::from(file_name(kind, os)),
    });
    Search { found, searched }
}

// ---------------------------------------------------------------------------------------------
// Device-side companion files of the HTP library

/// HTP architectures that QNN ships stubs and skels for, oldest first. Used only to name an
/// example when the arch is unknown; [`stub_archs`] reads whatever stubs are actually present.
pub const HTP_ARCHS: &[u32] = &[68, 69, 73, 75, 79, 81];

/// The built-in skel search list of the open-source FastRPC library (`DSP_SEARCH_PATH` in
/// quic/fastrpc `inc/apps_std_internal.h`), used when `ADSP_LIBRARY_PATH` is not set. The empty
/// first entry is the current directory. A vendor build of `libcdsprpc.so` may compile in a
/// different list; set `ADSP_LIBRARY_PATH` when the skel lives anywhere else.
pub const FASTRPC_DEFAULT_SEARCH_PATH: &str =
    ";/usr/lib/rfsa/adsp;/vendor/lib/rfsa/adsp;/vendor/dsp/;/usr/lib/dsp/;";

/// What a device-side companion file of the HTP library is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompanionRole {
    /// The CPU half of the FastRPC link to one HTP generation: `libQnnHtpV73Stub.so`,
    /// `QnnHtpV73Stub.dll`.
    Stub,
    /// The Hexagon library FastRPC loads onto the NPU: `libQnnHtpV73Skel.so` on every OS.
    Skel,
    /// Windows only: the signed catalog of the skel, `libqnnhtpv73.cat`.
    Catalog,
    /// The graph preparer (`libQnnHtpPrepare.so`, `QnnHtpPrepare.dll`): needed to finalize graphs
    /// built at run time, not to create a backend or device or to load a context binary.
    Prepare,
}

impl CompanionRole {
    /// Whether `backendCreate`/`deviceCreate` can fail without it (everything but the preparer).
    pub fn needed_to_start(self) -> bool {
        !matches!(self, CompanionRole::Prepare)
    }

    /// A short description for messages.
    pub fn describe(self) -> &'static str {
        match self {
            CompanionRole::Stub => "stub",
            CompanionRole::Skel => "skel",
            CompanionRole::Catalog => "skel catalog",
            CompanionRole::Prepare => "graph preparer",
        }
    }
}

/// The stub file name for HTP `arch` on `os`: `QnnHtpV73Stub.dll`, `libQnnHtpV73Stub.so`.
pub fn stub_name(os: Os, arch: u32) -> String {
    stub_pattern(os).replace("<arch>", &arch.to_string())
}

/// The stub file name with `<arch>` in place of the arch, for messages.
pub fn stub_pattern(os: Os) -> &'static str {
    match os {
        Os::Windows => "QnnHtpV<arch>Stub.dll",
        Os::Linux | Os::Android => "libQnnHtpV<arch>Stub.so",
    }
}

/// The companion files of the HTP library for `os` and HTP `arch`, in the order QNN needs them.
///
/// The catalog is listed for v73 and later: Qualcomm's win_arm64 `onnxruntime-qnn` 2.7.0 wheel
/// ships `libqnnhtpv73.cat` and `libqnnhtpv81.cat` but no catalog beside its v68 skel.
pub fn htp_companion_names(os: Os, arch: u32) -> Vec<(CompanionRole, String)> {
    let mut out = vec![
        (CompanionRole::Stub, stub_name(os, arch)),
        (CompanionRole::Skel, format!("libQnnHtpV{arch}Skel.so")),
    ];
    if os == Os::Windows && arch >= 73 {
        out.push((CompanionRole::Catalog, format!("libqnnhtpv{arch}.cat")));
    }
    let prepare = match os {
        Os::Windows => "QnnHtpPrepare.dll",
        Os::Linux | Os::Android => "libQnnHtpPrepare.so",
    };
    out.push((CompanionRole::Prepare, prepare.to_string()));
    out
}

/// The HTP archs whose stub is among `names` (file names in the HTP library's folder), sorted.
pub fn stub_archs<S: AsRef<str>>(os: Os, names: impl IntoIterator<Item = S>) -> Vec<u32> {
    let (prefix, suffix) = match os {
        Os::Windows => ("QnnHtpV", "Stub.dll"),
        Os::Linux | Os::Android => ("libQnnHtpV", "Stub.so"),
    };
    let mut archs: Vec<u32> = names
        .into_iter()
        .filter_map(|n| {
            let digits = n.as_ref().strip_prefix(prefix)?.strip_suffix(suffix)?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        })
        .collect();
    archs.sort_unstable();
    archs.dedup();
    archs
}

/// Splits an `ADSP_LIBRARY_PATH`-style list: entries are separated by `;` on every OS, and an
/// empty entry (such as the leading `;` of FastRPC's default) is the current directory.
pub fn split_dsp_search_path(value: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let entries: Vec<&str> = value.split(';').collect();
    let last = entries.len() - 1;
    for (i, e) in entries.iter().enumerate() {
        let e = e.trim();
        // The separator after the last entry ("a;b;") does not add the current directory.
        if e.is_empty() && i == last && i > 0 {
            continue;
        }
        let dir = if e.is_empty() {
            PathBuf::from(".")
        } else {
            PathBuf::from(e)
        };
        if !out.contains(&dir) {
            out.push(dir);
        }
    }
    out
}

/// The environment the companion search reads; separated out so the rules are unit-testable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompanionEnv {
    /// `ADSP_LIBRARY_PATH` (`;`-separated), where FastRPC looks for the skel on Linux/Android.
    pub adsp_library_path: Option<String>,
    /// `LD_LIBRARY_PATH` (`:`-separated), where the dynamic loader also finds the stub.
    pub ld_library_path: Option<String>,
    /// `QNN_SDK_ROOT`: not searched by QNN, but a missing skel found under
    /// `lib/hexagon-v<arch>/unsigned` there is named in the report with what to do.
    pub sdk_root: Option<PathBuf>,
}

impl CompanionEnv {
    /// Reads the process environment (empty variables count as unset).
    pub fn from_process() -> CompanionEnv {
        let var = |k: &str| {
            std::env::var_os(k)
                .map(|v| v.to_string_lossy().into_owned())
                .filter(|v| !v.is_empty())
        };
        CompanionEnv {
            adsp_library_path: var("ADSP_LIBRARY_PATH"),
            ld_library_path: var("LD_LIBRARY_PATH"),
            sdk_root: var("QNN_SDK_ROOT").map(PathBuf::from),
        }
    }
}

/// The filesystem as the companion search sees it: the real one ([`RealFiles`]) or a listing
/// ([`FileList`]) in tests.
pub trait Files {
    /// Whether `path` is an existing file.
    fn is_file(&self, path: &Path) -> bool;
    /// The file names in `dir` (empty when it cannot be read).
    fn names_in(&self, dir: &Path) -> Vec<String>;
}

/// The real filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFiles;

impl Files for RealFiles {
    fn is_file(&self, path: &Path) -> bool {
        path.is_file()
    }
    fn names_in(&self, dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A fixed list of file paths standing in for the filesystem.
#[derive(Debug, Clone, Default)]
pub struct FileList(pub Vec<PathBuf>);

impl Files for FileList {
    fn is_file(&self, path: &Path) -> bool {
        self.0.iter().any(|p| p == path)
    }
    fn names_in(&self, dir: &Path) -> Vec<String> {
        self.0
            .iter()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect()
    }
}

/// Where one companion file is looked for: the rule, for messages, and the folders in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompanionSearch {
    /// `beside the HTP library`, `beside the HTP library, then in LD_LIBRARY_PATH`,
    /// `in ADSP_LIBRARY_PATH` or `in FastRPC's default path (ADSP_LIBRARY_PATH is not set)`.
    pub rule: &'static str,
    pub dirs: Vec<PathBuf>,
}

impl CompanionSearch {
    /// The folders searched, as text (for messages and `qnnx doctor`).
    pub fn dir_names(&self) -> Vec<String> {
        self.dirs.iter().map(|d| d.display().to_string()).collect()
    }
}

/// The search rule for a companion of the HTP library in `library_dir`:
///
/// - Windows: every companion beside `QnnHtp.dll` (the stub is resolved from the DLL's folder;
///   the skel and its catalog are looked for there too);
/// - Linux and Android, stub and preparer: beside `libQnnHtp.so`, then `LD_LIBRARY_PATH` (the
///   dynamic loader opens them by name);
/// - Linux and Android, skel: the `;`-separated `ADSP_LIBRARY_PATH`, or when it is unset,
///   FastRPC's built-in list [`FASTRPC_DEFAULT_SEARCH_PATH`].
pub fn companion_search(
    role: CompanionRole,
    os: Os,
    library_dir: &Path,
    env: &CompanionEnv,
) -> CompanionSearch {
    let beside = || vec![library_dir.to_path_buf()];
    match (os, role) {
        (Os::Windows, _) => CompanionSearch {
            rule: "beside the HTP library",
            dirs: beside(),
        },
        (_, CompanionRole::Skel) => match &env.adsp_library_path {
            Some(v) => CompanionSearch {
                rule: "in ADSP_LIBRARY_PATH",
                dirs: split_dsp_search_path(v),
            },
            None => CompanionSearch {
                rule: "in FastRPC's default path (ADSP_LIBRARY_PATH is not set)",
                dirs: split_dsp_search_path(FASTRPC_DEFAULT_SEARCH_PATH),
            },
        },
        _ => {
            let mut dirs = beside();
            for d in env.ld_library_path.as_deref().unwrap_or("").split(':') {
                let d = PathBuf::from(d);
                if !d.as_os_str().is_empty() && !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
            CompanionSearch {
                rule: if dirs.len() > 1 {
                    "beside the HTP library, then in LD_LIBRARY_PATH"
                } else {
                    "beside the HTP library"
                },
                dirs,
            }
        }
    }
}

/// One companion file: where it was looked for and whether it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Companion {
    pub role: CompanionRole,
    pub name: String,
    pub search: CompanionSearch,
    /// The first folder of the search holding it.
    pub found: Option<PathBuf>,
    /// For a missing skel or catalog: the copy under `$QNN_SDK_ROOT/lib/hexagon-v<arch>/unsigned`,
    /// which QNN does not search by itself.
    pub elsewhere: Option<PathBuf>,
}

impl Companion {
    /// `libQnnHtpV73Skel.so (skel; looked for in ADSP_LIBRARY_PATH: /a, /b)`, plus what to do
    /// when a copy exists in the SDK.
    pub fn describe_missing(&self, os: Os) -> String {
        let dirs = self.search.dir_names();
        let mut s = format!(
            "{} ({}; looked for {}: {})",
            self.name,
            self.role.describe(),
            self.search.rule,
            dirs.join(", ")
        );
        if let Some(e) = &self.elsewhere {
            let folder = e.parent().unwrap_or(e).display();
            s += &match os {
                Os::Windows => format!("; a copy is in {folder}: copy it beside the HTP library"),
                Os::Linux | Os::Android => {
                    format!("; a copy is in {folder}: add that folder to ADSP_LIBRARY_PATH")
                }
            };
        }
        s
    }
}

/// The companions of one HTP library for one HTP arch on one OS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompanionReport {
    pub library: PathBuf,
    pub os: Os,
    pub arch: u32,
    pub files: Vec<Companion>,
}

impl CompanionReport {
    /// The companions that were not found.
    pub fn missing(&self) -> Vec<&Companion> {
        self.files.iter().filter(|c| c.found.is_none()).collect()
    }

    /// The missing companions that `backendCreate`/`deviceCreate` need (all but the preparer).
    pub fn missing_to_start(&self) -> Vec<&Companion> {
        self.files
            .iter()
            .filter(|c| c.found.is_none() && c.role.needed_to_start())
            .collect()
    }
}

/// Lists the companions of the HTP library at `library` for `os` and HTP `arch` and looks each
/// one up by the rules of [`companion_search`], in the given environment and filesystem.
pub fn htp_companions_in(
    library: &Path,
    os: Os,
    arch: u32,
    env: &CompanionEnv,
    files: &dyn Files,
) -> CompanionReport {
    let library_dir = library
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let list = htp_companion_names(os, arch)
        .into_iter()
        .map(|(role, name)| {
            let search = companion_search(role, os, library_dir, env);
            let found = search
                .dirs
                .iter()
                .find(|d| files.is_file(&d.join(&name)))
                .cloned();
            let elsewhere = match (&found, role, &env.sdk_root) {
                (None, CompanionRole::Skel | CompanionRole::Catalog, Some(root)) => Some(
                    root.join("lib")
                        .join(format!("hexagon-v{arch}"))
                        .join("unsigned")
                        .join(&name),
                )
                .filter(|p| files.is_file(p)),
                _ => None,
            };
            Companion {
                role,
                name,
                search,
                found,
                elsewhere,
            }
        })
        .collect();
    CompanionReport {
        library: library.to_path_buf(),
        os,
        arch,
        files: list,
    }
}

/// [`htp_companions_in`] for this OS, the process environment and the real filesystem.
pub fn htp_companions(library: &Path, arch: u32) -> CompanionReport {
    htp_companions_in(
        library,
        Os::current(),
        arch,
        &CompanionEnv::from_process(),
        &RealFiles,
    )
}

/// Whether a host with this CPU (`std::env::consts::ARCH`) needs the device-side files: every
/// CPU but x86_64, whose `libQnnHtp` is an emulator that opens no stub or skel (docs/qnn-notes.md
/// gotcha 17).
pub fn needs_device_files(cpu_arch: &str) -> bool {
    cpu_arch != "x86_64"
}

/// What is missing for the HTP library at `library`, as one sentence, or `None` when nothing the
/// backend needs to start is missing. With `arch` unknown, every arch whose stub sits beside the
/// library is checked; with no stub there at all, that is what is reported.
pub fn missing_htp_companions_in(
    library: &Path,
    os: Os,
    arch: Option<u32>,
    env: &CompanionEnv,
    files: &dyn Files,
) -> Option<String> {
    let dir = library
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let archs = match arch {
        Some(a) => vec![a],
        None => stub_archs(os, files.names_in(dir)),
    };
    if archs.is_empty() {
        return Some(format!(
            "no HTP stub beside {}: it needs the {} of the device's HTP arch (such as {} on v73 \
             parts) and the matching libQnnHtpV<arch>Skel.so",
            library.display(),
            stub_pattern(os),
            stub_name(os, 73),
        ));
    }
    let parts: Vec<String> = archs
        .iter()
        .filter_map(|&a| {
            let report = htp_companions_in(library, os, a, env, files);
            let missing = report.missing_to_start();
            (!missing.is_empty()).then(|| {
                format!(
                    "HTP v{a} files missing: {}",
                    missing
                        .iter()
                        .map(|c| c.describe_missing(os))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
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
         the x86_64 QNN libraries, or set {env_var} / QNN_LIB_DIR / QNN_SDK_ROOT"
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
        // SAFETY: the symbol has this C signature in every QNN release.
        let get: libloading::Symbol<GetProvidersFn> = unsafe { lib.get(GET_PROVIDERS_SYMBOL) }
            .map_err(|_| LoadError::MissingSymbol {
                path: path.to_path_buf(),
                what: "backend",
                symbol: "QnnInterface_getProviders",
            })?;
        let mut list: *const *const Interface = std::ptr::null();
        let mut n = 0u32;
        // SAFETY: both out-pointers are valid for writes.
        let rc = unsafe { get(&mut list, &mut n) };
        if rc != 0 || list.is_null() || n == 0 {
            return Err(LoadError::NoProviders {
                path: path.to_path_buf(),
                symbol: "QnnInterface_getProviders",
                code: rc,
                count: n,
            });
        }
        let required = crate::consts::CORE_API_VERSION;
        let mut found = Vec::new();
        for i in 0..n as usize {
            // SAFETY: the library returned `n` valid provider pointers that live as long as it.
            let p = unsafe { *list.add(i) };
            if p.is_null() {
                continue;
            }
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
            found.push(format!(
                "{name} core {}.{}.{}",
                core.major, core.minor, core.patch
            ));
            if core.major == required.major && core.minor >= required.minor {
                // SAFETY: version checked above: the record holds at least our table.
                let functions = unsafe { std::ptr::addr_of!((*p).functions).read() };
                return Ok(BackendLibrary {
                    path: path.to_path_buf(),
                    provider_name: name,
                    backend_id,
                    api_version: api,
                    functions,
                    _lib: lib,
                });
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
        // SAFETY: the symbol has this C signature in every QNN release.
        let get: libloading::Symbol<GetSystemProvidersFn> = unsafe {
            lib.get(GET_SYSTEM_PROVIDERS_SYMBOL)
        }
        .map_err(|_| LoadError::MissingSymbol {
            path: path.to_path_buf(),
            what: "system",
            symbol: "QnnSystemInterface_getProviders",
        })?;
        let mut list: *const *const SystemInterface = std::ptr::null();
        let mut n = 0u32;
        // SAFETY: both out-pointers are valid for writes.
        let rc = unsafe { get(&mut list, &mut n) };
        if rc != 0 || list.is_null() || n == 0 {
            return Err(LoadError::NoProviders {
                path: path.to_path_buf(),
                symbol: "QnnSystemInterface_getProviders",
                code: rc,
                count: n,
            });
        }
        let required = crate::consts::SYSTEM_API_VERSION;
        let mut found = Vec::new();
        for i in 0..n as usize {
            // SAFETY: the library returned `n` provider pointers.
            let p = unsafe { *list.add(i) };
            if p.is_null() {
                continue;
            }
            // SAFETY: every provider record starts with these fields.
            let v = unsafe { std::ptr::addr_of!((*p).system_api_version).read() };
            found.push(format!("system {}.{}.{}", v.major, v.minor, v.patch));
            if v.major == required.major && v.minor >= required.minor {
                // SAFETY: version checked: the record holds at least our 13-slot table.
                let functions = unsafe { std::ptr::addr_of!((*p).functions).read() };
                return Ok(SystemLibrary {
                    path: path.to_path_buf(),
                    api_version: v,
                    functions,
                    _lib: lib,
                });
            }
        }
        Err(LoadError::NoCompatibleProvider {
            path: path.to_path_buf(),
            required_major: required.major,
            required_minor: required.minor,
            found: found.join(", "),
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

/// Opens a library with stdout silenced (see the module docs).
fn open_quietly(path: &Path) -> Result<libloading::Library, LoadError> {
    let _quiet = StdoutSilencer::new();
    open_raw(path).map_err(|e| LoadError::Dlopen {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[cfg(unix)]
fn open_raw(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading a library runs its constructors; QNN libraries are trusted code chosen by
    // the search order above.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map(Into::into)
}

#[cfg(windows)]
fn open_raw(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::windows::{Library, LOAD_WITH_ALTERED_SEARCH_PATH};
    // The HTP stub DLL (`QnnHtpV73Stub.dll`, ...) sits beside `QnnHtp.dll`: altered search path
    // makes Windows resolve it from the library's own folder.
    // SAFETY: as on Unix.
    unsafe { Library::load_with_flags(path, LOAD_WITH_ALTERED_SEARCH_PATH) }.map(Into::into)
}

/// Redirects fd 1 to `/dev/null` while alive. Process-wide, so a global lock serialises users.
struct StdoutSilencer {
    #[cfg(unix)]
    saved: Option<i32>,
    #[cfg(unix)]
    _guard: std::sync::MutexGuard<'static, ()>,
}

#[cfg(unix)]
static STDOUT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl StdoutSilencer {
    #[cfg(unix)]
    fn new() -> StdoutSilencer {
        use std::io::Write;
        let guard = STDOUT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _ = std::io::stdout().flush();
        // SAFETY: plain fd syscalls on fds we own; every failure leaves stdout untouched.
        let saved = unsafe {
            let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            if devnull < 0 {
                None
            } else {
                let saved = libc::dup(1);
                if saved >= 0 && libc::dup2(devnull, 1) < 0 {
                    libc::close(saved);
                    libc::close(devnull);
                    None
                } else {
                    libc::close(devnull);
                    (saved >= 0).then_some(saved)
                }
            }
        };
        StdoutSilencer {
            saved,
            _guard: guard,
        }
    }

    #[cfg(not(unix))]
    fn new() -> StdoutSilencer {
        StdoutSilencer {}
    }
}

impl Drop for StdoutSilencer {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(saved) = self.saved.take() {
            // SAFETY: restores the fd saved in `new`.
            unsafe {
                libc::fflush(std::ptr::null_mut());
                libc::dup2(saved, 1);
                libc::close(saved);
            }
        }
    }
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
    fn search_order_is_documented_order() {
        let env = SearchEnv {
            kind_lib: Some("/k/libQnnHtp.so".into()),
            lib_dir: Some("/d".into()),
            sdk_root: Some("/sdk".into()),
            python_package_dirs: vec!["/py/onnxruntime_qnn".into()],
            runtime_dirs: vec!["/rt".into()],
            ask_python: true,
            python_probe: Some("/probed/onnxruntime_qnn".into()),
        };
        let c = candidates_in(
            LibraryKind::Htp,
            Some(Path::new("/x.so")),
            &env,
            Os::Linux,
            "x86_64",
        );
        let got: Vec<_> = c
            .iter()
            .map(|c| (c.source, c.path.to_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("explicit", "/x.so"),
                ("QNN_HTP_LIB", "/k/libQnnHtp.so"),
                ("QNN_LIB_DIR", "/d/libQnnHtp.so"),
                ("QNN_SDK_ROOT", "/sdk/lib/x86_64-linux-clang/libQnnHtp.so"),
                ("onnxruntime_qnn", "/py/onnxruntime_qnn/libQnnHtp.so"),
                ("runtime", "/rt/qnn/libQnnHtp.so"),
                ("python3", "/probed/onnxruntime_qnn/libQnnHtp.so"),
                ("system", "libQnnHtp.so"),
            ]
        );
    }

    fn lazy_env() -> SearchEnv {
        SearchEnv {
            sdk_root: Some("/sdk".into()),
            python_package_dirs: vec!["/venv/onnxruntime_qnn".into()],
            runtime_dirs: vec!["/rt".into()],
            ask_python: true,
            ..Default::default()
        }
    }

    /// A Linux x86_64 HTP search over `fs` whose python3 answers `/py/onnxruntime_qnn`, and
    /// how many times python3 was asked.
    fn search_counting_python(fs: &FileList) -> (Search, usize) {
        let mut asked = 0;
        let s = search_in(
            LibraryKind::Htp,
            &lazy_env(),
            Os::Linux,
            "x86_64",
            &|p| fs.is_file(p),
            &mut || {
                asked += 1;
                Some("/py/onnxruntime_qnn".into())
            },
        );
        (s, asked)
    }

    #[test]
    fn python_is_not_asked_when_an_earlier_place_has_the_library() {
        for (file, source) in [
            ("/sdk/lib/x86_64-linux-clang/libQnnHtp.so", "QNN_SDK_ROOT"),
            ("/venv/onnxruntime_qnn/libQnnHtp.so", "onnxruntime_qnn"),
            ("/rt/qnn/libQnnHtp.so", "runtime"),
        ] {
            let fs = files(&[file]);
            let (s, asked) = search_counting_python(&fs);
            assert_eq!(asked, 0, "{file}");
            let found = s.found.expect("found");
            assert_eq!((found.source, found.path.to_str().unwrap()), (source, file));
        }
    }

    #[test]
    fn python_is_asked_once_after_the_runtime_folder() {
        let fs = files(&["/py/onnxruntime_qnn/libQnnHtp.so"]);
        let (s, asked) = search_counting_python(&fs);
        assert_eq!(asked, 1);
        assert_eq!(
            s.found.map(|c| (c.source, c.path)),
            Some(("python3", "/py/onnxruntime_qnn/libQnnHtp.so".into()))
        );
        let order: Vec<_> = s.searched.iter().map(|c| c.source).collect();
        assert_eq!(
            order,
            [
                "QNN_SDK_ROOT",
                "onnxruntime_qnn",
                "runtime",
                "python3",
                "system"
            ]
        );
    }

    #[test]
    fn python_is_not_asked_when_the_caller_named_the_package_folder() {
        let env = SearchEnv {
            ask_python: false,
            ..lazy_env()
        };
        let s = search_in(
            LibraryKind::Htp,
            &env,
            Os::Linux,
            "x86_64",
            &|_| false,
            &mut || panic!("python3 must not be asked"),
        );
        assert_eq!(s.found, None);
        assert_eq!(s.searched.last().map(|c| c.source), Some("system"));
        assert!(!s.searched.iter().any(|c| c.source == "python3"));
    }

    #[test]
    fn sdk_targets_per_platform() {
        let env = SearchEnv {
            sdk_root: Some("/sdk".into()),
            ..Default::default()
        };
        let win = candidates_in(LibraryKind::Htp, None, &env, Os::Windows, "aarch64");
        assert_eq!(
            win[0].path,
            Path::new("/sdk/lib/aarch64-windows-msvc/QnnHtp.dll")
        );
        let android = candidates_in(LibraryKind::Htp, None, &env, Os::Android, "aarch64");
        assert_eq!(
            android[0].path,
            Path::new("/sdk/lib/aarch64-android/libQnnHtp.so")
        );
        let board = candidates_in(LibraryKind::Htp, None, &env, Os::Linux, "aarch64");
        assert!(board[0]
            .path
            .starts_with("/sdk/lib/aarch64-oe-linux-gcc11.2"));
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
    // ---- device-side companion files: pure rules, fake environment and filesystem ----

    fn files(paths: &[&str]) -> FileList {
        FileList(paths.iter().map(PathBuf::from).collect())
    }

    fn names(list: Vec<(CompanionRole, String)>) -> Vec<String> {
        list.into_iter().map(|(_, n)| n).collect()
    }

    #[test]
    fn companion_names_per_os_and_arch() {
        assert_eq!(
            names(htp_companion_names(Os::Windows, 73)),
            [
                "QnnHtpV73Stub.dll",
                "libQnnHtpV73Skel.so",
                "libqnnhtpv73.cat",
                "QnnHtpPrepare.dll"
            ]
        );
        // The win_arm64 wheel ships no catalog for v68.
        assert_eq!(
            names(htp_companion_names(Os::Windows, 68)),
            [
                "QnnHtpV68Stub.dll",
                "libQnnHtpV68Skel.so",
                "QnnHtpPrepare.dll"
            ]
        );
        for os in [Os::Linux, Os::Android] {
            assert_eq!(
                names(htp_companion_names(os, 75)),
                [
                    "libQnnHtpV75Stub.so",
                    "libQnnHtpV75Skel.so",
                    "libQnnHtpPrepare.so"
                ]
            );
        }
        let roles: Vec<_> = htp_companion_names(Os::Windows, 81)
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        assert_eq!(
            roles,
            [
                CompanionRole::Stub,
                CompanionRole::Skel,
                CompanionRole::Catalog,
                CompanionRole::Prepare
            ]
        );
        assert!(!CompanionRole::Prepare.needed_to_start());
        assert!(CompanionRole::Catalog.needed_to_start());
    }

    #[test]
    fn stub_archs_come_from_the_listing() {
        // The onnxruntime-qnn 2.7.0 win_arm64 wheel's folder, plus names that must not count.
        let win = [
            "QnnHtp.dll",
            "QnnHtpV68Stub.dll",
            "QnnHtpV81Stub.dll",
            "QnnHtpV73Stub.dll",
            "libQnnHtpV73Skel.so",
            "libqnnhtpv73.cat",
            "QnnHtpPrepare.dll",
            "QnnHtpVxStub.dll",
            "QnnHtpV+7Stub.dll",
            "QnnHtpVStub.dll",
            "libQnnHtpV75Stub.so",
        ];
        assert_eq!(stub_archs(Os::Windows, win), [68, 73, 81]);
        assert_eq!(stub_archs(Os::Linux, win), [75]);
        assert_eq!(
            stub_archs(Os::Android, ["libQnnHtpV79Stub.so", "libQnnHtp.so"]),
            [79]
        );
        assert!(stub_archs(Os::Linux, ["libQnnHtp.so"]).is_empty());
        assert_eq!(stub_name(Os::Windows, 81), "QnnHtpV81Stub.dll");
    }

    #[test]
    fn dsp_search_path_is_semicolon_separated_and_empty_means_current_dir() {
        let p = |v: &str| -> Vec<String> {
            split_dsp_search_path(v)
                .iter()
                .map(|d| d.display().to_string())
                .collect()
        };
        assert_eq!(p(";/a;/b;"), [".", "/a", "/b"]);
        assert_eq!(p("/a;;/b"), ["/a", ".", "/b"]);
        assert_eq!(p("/a"), ["/a"]);
        assert_eq!(p("/a;/b;/a"), ["/a", "/b"]);
        // A ':' is part of a folder name here, not a separator.
        assert_eq!(p("/a:/b"), ["/a:/b"]);
        assert_eq!(
            p(FASTRPC_DEFAULT_SEARCH_PATH),
            [
                ".",
                "/usr/lib/rfsa/adsp",
                "/vendor/lib/rfsa/adsp",
                "/vendor/dsp/",
                "/usr/lib/dsp/"
            ]
        );
    }

    #[test]
    fn search_rules_per_os() {
        let env = CompanionEnv {
            adsp_library_path: Some("/data/local/tmp/qnn;/vendor/lib/rfsa/adsp".into()),
            ld_library_path: Some("/l1::/l2".into()),
            sdk_root: None,
        };
        let dir = Path::new("/q");
        let dirs = |role, os, env: &CompanionEnv| {
            let s = companion_search(role, os, dir, env);
            (
                s.rule,
                s.dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>(),
            )
        };
        // Windows: everything beside QnnHtp.dll, whatever the environment says.
        for role in [
            CompanionRole::Stub,
            CompanionRole::Skel,
            CompanionRole::Catalog,
        ] {
            assert_eq!(
                dirs(role, Os::Windows, &env),
                ("beside the HTP library", vec!["/q".to_string()])
            );
        }
        for os in [Os::Linux, Os::Android] {
            assert_eq!(
                dirs(CompanionRole::Skel, os, &env),
                (
                    "in ADSP_LIBRARY_PATH",
                    vec![
                        "/data/local/tmp/qnn".to_string(),
                        "/vendor/lib/rfsa/adsp".to_string()
                    ]
                )
            );
            assert_eq!(
                dirs(CompanionRole::Stub, os, &env),
                (
                    "beside the HTP library, then in LD_LIBRARY_PATH",
                    vec!["/q".to_string(), "/l1".to_string(), "/l2".to_string()]
                )
            );
            let unset = CompanionEnv::default();
            let (rule, skel_dirs) = dirs(CompanionRole::Skel, os, &unset);
            assert!(rule.contains("FastRPC's default"), "{rule}");
            assert_eq!(skel_dirs[0], ".");
            assert_eq!(
                dirs(CompanionRole::Stub, os, &unset),
                ("beside the HTP library", vec!["/q".to_string()])
            );
        }
    }

    #[test]
    fn report_finds_the_first_folder_and_lists_what_is_missing() {
        let env = CompanionEnv {
            adsp_library_path: Some("/x;/y".into()),
            ..Default::default()
        };
        let fs = files(&[
            "/q/libQnnHtp.so",
            "/q/libQnnHtpV73Stub.so",
            "/y/libQnnHtpV73Skel.so",
        ]);
        let r = htp_companions_in(Path::new("/q/libQnnHtp.so"), Os::Android, 73, &env, &fs);
        assert_eq!(r.files[0].found.as_deref(), Some(Path::new("/q")));
        assert_eq!(r.files[1].found.as_deref(), Some(Path::new("/y")));
        let missing: Vec<_> = r.missing().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(missing, ["libQnnHtpPrepare.so"]);
        assert!(r.missing_to_start().is_empty());
        // With the skel in both folders, the first one wins.
        let both = files(&["/x/libQnnHtpV73Skel.so", "/y/libQnnHtpV73Skel.so"]);
        let r = htp_companions_in(Path::new("/q/libQnnHtp.so"), Os::Linux, 73, &env, &both);
        assert_eq!(r.files[1].found.as_deref(), Some(Path::new("/x")));
        assert_eq!(r.files[0].found, None);

        // Windows: the catalog is the one missing file needed to start.
        let fs = files(&[
            "/w/QnnHtp.dll",
            "/w/QnnHtpV73Stub.dll",
            "/w/libQnnHtpV73Skel.so",
            "/w/QnnHtpPrepare.dll",
            "/elsewhere/libqnnhtpv73.cat",
        ]);
        let r = htp_companions_in(
            Path::new("/w/QnnHtp.dll"),
            Os::Windows,
            73,
            &CompanionEnv::default(),
            &fs,
        );
        let missing: Vec<_> = r
            .missing_to_start()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(missing, ["libqnnhtpv73.cat"]);
    }

    #[test]
    fn missing_message_names_files_and_where_they_were_looked_for() {
        let lib = Path::new("/data/local/tmp/qnn/libQnnHtp.so");
        let env = CompanionEnv {
            adsp_library_path: Some("/data/local/tmp/qnn".into()),
            ..Default::default()
        };
        // Arch unknown: taken from the stub beside the library.
        let fs = files(&[
            "/data/local/tmp/qnn/libQnnHtp.so",
            "/data/local/tmp/qnn/libQnnHtpV75Stub.so",
        ]);
        let msg = missing_htp_companions_in(lib, Os::Android, None, &env, &fs).unwrap();
        assert!(
            msg.starts_with("HTP v75 files missing: libQnnHtpV75Skel.so"),
            "{msg}"
        );
        assert!(
            msg.contains("looked for in ADSP_LIBRARY_PATH: /data/local/tmp/qnn"),
            "{msg}"
        );
        assert!(!msg.contains("Stub"), "{msg}");
        assert!(!msg.contains("Prepare"), "{msg}");

        // Arch given: its stub is missing too, the other arch's files do not matter.
        let msg = missing_htp_companions_in(lib, Os::Android, Some(73), &env, &fs).unwrap();
        assert!(
            msg.contains("libQnnHtpV73Stub.so (stub; looked for beside"),
            "{msg}"
        );
        assert!(msg.contains("libQnnHtpV73Skel.so (skel;"), "{msg}");
        assert!(!msg.contains("V75"), "{msg}");

        // No stub at all.
        let fs = files(&["/data/local/tmp/qnn/libQnnHtp.so"]);
        let msg = missing_htp_companions_in(lib, Os::Linux, None, &env, &fs).unwrap();
        assert!(
            msg.contains("no HTP stub beside /data/local/tmp/qnn/libQnnHtp.so"),
            "{msg}"
        );
        assert!(msg.contains("libQnnHtpV<arch>Stub.so"), "{msg}");

        // Everything there: nothing to say.
        let fs = files(&[
            "/data/local/tmp/qnn/libQnnHtp.so",
            "/data/local/tmp/qnn/libQnnHtpV75Stub.so",
            "/data/local/tmp/qnn/libQnnHtpV75Skel.so",
        ]);
        assert_eq!(
            missing_htp_companions_in(lib, Os::Android, None, &env, &fs),
            None
        );
    }

    #[test]
    fn a_skel_in_the_sdk_is_pointed_to() {
        let env = CompanionEnv {
            sdk_root: Some("/sdk".into()),
            ..Default::default()
        };
        let fs = files(&[
            "/sdk/lib/aarch64-android/libQnnHtp.so",
            "/sdk/lib/aarch64-android/libQnnHtpV79Stub.so",
            "/sdk/lib/hexagon-v79/unsigned/libQnnHtpV79Skel.so",
        ]);
        let lib = Path::new("/sdk/lib/aarch64-android/libQnnHtp.so");
        let msg = missing_htp_companions_in(lib, Os::Android, Some(79), &env, &fs).unwrap();
        assert!(msg.contains("FastRPC's default path"), "{msg}");
        assert!(
            msg.contains(
                "a copy is in /sdk/lib/hexagon-v79/unsigned: add that folder to ADSP_LIBRARY_PATH"
            ),
            "{msg}"
        );
        let fs = files(&[
            "/sdk/lib/aarch64-windows-msvc/QnnHtp.dll",
            "/sdk/lib/aarch64-windows-msvc/QnnHtpV73Stub.dll",
            "/sdk/lib/hexagon-v73/unsigned/libQnnHtpV73Skel.so",
            "/sdk/lib/hexagon-v73/unsigned/libqnnhtpv73.cat",
        ]);
        let lib = Path::new("/sdk/lib/aarch64-windows-msvc/QnnHtp.dll");
        let msg = missing_htp_companions_in(lib, Os::Windows, None, &env, &fs).unwrap();
        assert!(
            msg.starts_with("HTP v73 files missing: libQnnHtpV73Skel.so"),
            "{msg}"
        );
        assert!(msg.contains("libqnnhtpv73.cat (skel catalog;"), "{msg}");
        assert_eq!(
            msg.matches("copy it beside the HTP library").count(),
            2,
            "{msg}"
        );
    }

    #[test]
    fn only_non_x86_hosts_need_device_files() {
        assert!(!needs_device_files("x86_64"));
        assert!(needs_device_files("aarch64"));
    }

    #[test]
    fn companions_on_the_real_filesystem() {
        let dir = std::env::temp_dir().join(format!("qnn-sys-companions-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["QnnHtp.dll", "QnnHtpV73Stub.dll", "libQnnHtpV73Skel.so"] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        let lib = dir.join("QnnHtp.dll");
        assert_eq!(stub_archs(Os::Windows, RealFiles.names_in(&dir)), [73]);
        let r = htp_companions_in(&lib, Os::Windows, 73, &CompanionEnv::default(), &RealFiles);
        let missing: Vec<_> = r.missing().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(missing, ["libqnnhtpv73.cat", "QnnHtpPrepare.dll"]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
