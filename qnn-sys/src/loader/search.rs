//! Where a backend library is looked for: the search order documented in the module docs of
//! [`crate::loader`] and in `qnn-sys/README.md`, and the `python3` probe it ends with.

use std::path::{Path, PathBuf};

use super::{file_name, LibraryKind, Os};

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
    /// Folders made by `scripts/setup-runtime`, each searched in its `qnn/` subfolder:
    /// `$QNNX_RUNTIME_DIR`, then the user's data folder (`$XDG_DATA_HOME/qnnx/runtime`,
    /// `%LOCALAPPDATA%\qnnx\runtime`). Never a folder of the checkout the crate was built from,
    /// which would be baked into every binary: cargo sets `QNNX_RUNTIME_DIR` to the checkout's
    /// `runtime/` for the processes it runs (`.cargo/config.toml`).
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
        let mut env = SearchEnv::from_vars(kind, Os::current(), &|k| std::env::var_os(k));
        if probe_python && env.ask_python {
            env.python_probe = python_package_dir();
        }
        env
    }

    /// [`SearchEnv::from_process`] for the variables `var` returns on `os`, without asking
    /// `python3`: the Windows rules (`%LOCALAPPDATA%`, a venv's `Lib\site-packages`) are
    /// unit-tested on any host.
    pub fn from_vars(
        kind: LibraryKind,
        os: Os,
        var: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    ) -> SearchEnv {
        let set = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let mut python_package_dirs = Vec::new();
        python_package_dirs.extend(set(ONNXRUNTIME_QNN_DIR_VAR));
        if let Some(venv) = set("VIRTUAL_ENV") {
            python_package_dirs.extend(site_packages_under(&venv));
        }
        let ask_python = var(ONNXRUNTIME_QNN_DIR_VAR).is_none();
        let mut runtime_dirs = Vec::new();
        if let Some(d) = set("QNNX_RUNTIME_DIR") {
            runtime_dirs.push(d);
        }
        if let Some(d) = user_data_dir(os, &set) {
            runtime_dirs.push(d.join("qnnx").join("runtime"));
        }
        SearchEnv {
            kind_lib: set(kind.env_var()),
            lib_dir: set("QNN_LIB_DIR"),
            sdk_root: set("QNN_SDK_ROOT"),
            python_package_dirs,
            runtime_dirs,
            ask_python,
            python_probe: None,
        }
    }
}

fn user_data_dir(os: Os, var: &dyn Fn(&str) -> Option<PathBuf>) -> Option<PathBuf> {
    match os {
        Os::Windows => var("LOCALAPPDATA"),
        Os::Linux | Os::Android => {
            var("XDG_DATA_HOME").or_else(|| var("HOME").map(|h| h.join(".local").join("share")))
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed list of file paths standing in for the filesystem.
    struct FileList(Vec<PathBuf>);

    impl FileList {
        fn is_file(&self, path: &Path) -> bool {
            self.0.iter().any(|p| p == path)
        }
    }

    fn files(paths: &[&str]) -> FileList {
        FileList(paths.iter().map(PathBuf::from).collect())
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
}
