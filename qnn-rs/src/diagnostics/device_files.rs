//! Device-side companion files of the HTP library: their names and where QNN and FastRPC look
//! for each of them, per OS (see the module docs of [`crate::diagnostics`] and
//! `qnn-sys/README.md`).

use std::path::{Path, PathBuf};

use qnn_sys::loader::Os;

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

#[cfg(test)]
mod tests {
    use super::*;

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
