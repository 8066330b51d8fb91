//! The library search on Windows ARM64 (a Snapdragon X laptop), checked on any host: the
//! environment, OS and file system are parameters of `SearchEnv::from_vars` and `search_in`.
//! Where `QnnHtp.dll` comes from there: `QNN_SDK_ROOT` (Qualcomm's AI Engine Direct SDK), the
//! `onnxruntime_qnn` folder of the `onnxruntime-qnn` ARM64 wheel (the DLL sits beside the
//! package's `__init__.py`), the runtime folder of `scripts/setup-runtime`, or the system loader.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use qnn_sys::loader::{candidates_in, search_in, Candidate, LibraryKind, Os, SearchEnv};

const SDK: &str = "C:/Qualcomm/AIStack/QAIRT/2.51.0";
const VENV: &str = "C:/Users/me/.venv";
const LOCAL_APP_DATA: &str = "C:/Users/me/AppData/Local";

fn windows_env(kind: LibraryKind, vars: &[(&str, &str)]) -> SearchEnv {
    let vars: HashMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect();
    SearchEnv::from_vars(kind, Os::Windows, &|k| vars.get(k).cloned())
}

/// The usual laptop: the SDK installed, a venv with the onnxruntime-qnn wheel, the user's
/// runtime folder; and variables of Linux that must not matter on Windows.
fn laptop(kind: LibraryKind) -> SearchEnv {
    windows_env(
        kind,
        &[
            ("QNN_SDK_ROOT", SDK),
            ("VIRTUAL_ENV", VENV),
            ("LOCALAPPDATA", LOCAL_APP_DATA),
            ("XDG_DATA_HOME", "/home/me/.local/share"),
            ("HOME", "/home/me"),
        ],
    )
}

fn listed(c: &[Candidate]) -> Vec<(&'static str, PathBuf)> {
    c.iter().map(|c| (c.source, c.path.clone())).collect()
}

fn p(parts: &[&str]) -> PathBuf {
    parts.iter().collect()
}

#[test]
fn windows_arm64_order_and_file_names() {
    let c = candidates_in(
        LibraryKind::Htp,
        None,
        &laptop(LibraryKind::Htp),
        Os::Windows,
        "aarch64",
    );
    assert_eq!(
        listed(&c),
        vec![
            (
                "QNN_SDK_ROOT",
                p(&[SDK, "lib", "aarch64-windows-msvc", "QnnHtp.dll"])
            ),
            (
                "QNN_SDK_ROOT",
                p(&[SDK, "lib", "arm64x-windows-msvc", "QnnHtp.dll"])
            ),
            (
                "onnxruntime_qnn",
                p(&[
                    VENV,
                    "Lib",
                    "site-packages",
                    "onnxruntime_qnn",
                    "QnnHtp.dll"
                ])
            ),
            (
                "runtime",
                p(&[LOCAL_APP_DATA, "qnnx", "runtime", "qnn", "QnnHtp.dll"])
            ),
            ("system", PathBuf::from("QnnHtp.dll")),
        ]
    );
    let system = candidates_in(
        LibraryKind::System,
        None,
        &laptop(LibraryKind::System),
        Os::Windows,
        "aarch64",
    );
    assert!(system.iter().all(|c| c.path.ends_with("QnnSystem.dll")));
}

#[test]
fn the_variables_come_before_the_sdk_and_an_empty_one_is_unset() {
    let env = windows_env(
        LibraryKind::Htp,
        &[
            ("QNN_HTP_LIB", "D:/qnn/QnnHtp.dll"),
            ("QNN_LIB_DIR", "D:/libs"),
            ("QNN_SDK_ROOT", SDK),
            ("QNNX_RUNTIME_DIR", ""),
            ("LOCALAPPDATA", ""),
        ],
    );
    let c = candidates_in(
        LibraryKind::Htp,
        Some(Path::new("E:/mine/QnnHtp.dll")),
        &env,
        Os::Windows,
        "aarch64",
    );
    let sources: Vec<_> = c.iter().map(|c| c.source).collect();
    assert_eq!(
        sources,
        [
            "explicit",
            "QNN_HTP_LIB",
            "QNN_LIB_DIR",
            "QNN_SDK_ROOT",
            "QNN_SDK_ROOT",
            "system"
        ]
    );
    assert_eq!(c[2].path, p(&["D:/libs", "QnnHtp.dll"]));
}

/// Searches the laptop's environment over a fake file system holding `files`; python3 (asked
/// only when nothing earlier has the library) finds `probe`.
fn search(files: &[PathBuf], probe: Option<&str>) -> (Option<Candidate>, usize) {
    let mut asked = 0;
    let s = search_in(
        LibraryKind::Htp,
        &laptop(LibraryKind::Htp),
        Os::Windows,
        "aarch64",
        &|path| files.iter().any(|f| f == path),
        &mut || {
            asked += 1;
            probe.map(PathBuf::from)
        },
    );
    assert_eq!(s.searched.last().map(|c| c.source), Some("system"));
    (s.found, asked)
}

#[test]
fn the_sdk_wins_over_the_wheel_and_its_arm64x_folder_is_tried() {
    let sdk = p(&[SDK, "lib", "aarch64-windows-msvc", "QnnHtp.dll"]);
    let arm64x = p(&[SDK, "lib", "arm64x-windows-msvc", "QnnHtp.dll"]);
    let wheel = p(&[
        VENV,
        "Lib",
        "site-packages",
        "onnxruntime_qnn",
        "QnnHtp.dll",
    ]);
    let (found, asked) = search(&[wheel.clone(), sdk.clone()], None);
    assert_eq!(found.map(|c| c.path), Some(sdk));
    assert_eq!(asked, 0);
    let (found, _) = search(&[wheel.clone(), arm64x.clone()], None);
    assert_eq!(found.map(|c| c.path), Some(arm64x));
    let (found, asked) = search(std::slice::from_ref(&wheel), None);
    assert_eq!(
        found.map(|c| (c.source, c.path)),
        Some(("onnxruntime_qnn", wheel))
    );
    assert_eq!(
        asked, 0,
        "python is not started when the venv has the wheel"
    );
}

#[test]
fn the_wheel_beside_the_package_is_found_through_python_last() {
    // onnxruntime-qnn installed into the Python that runs qnnx_backend, outside any venv: the
    // package sets QNNX_ONNXRUNTIME_QNN_DIR from find_spec, so no python3 is started.
    let pkg = "C:/Users/me/AppData/Local/Programs/Python/Python313-arm64/Lib/site-packages/onnxruntime_qnn";
    let env = windows_env(
        LibraryKind::Htp,
        &[
            ("QNNX_ONNXRUNTIME_QNN_DIR", pkg),
            ("LOCALAPPDATA", LOCAL_APP_DATA),
        ],
    );
    assert!(!env.ask_python);
    let c = candidates_in(LibraryKind::Htp, None, &env, Os::Windows, "aarch64");
    assert_eq!(
        (c[0].source, c[0].path.clone()),
        ("onnxruntime_qnn", p(&[pkg, "QnnHtp.dll"]))
    );
    // qnnx.exe, with nothing set: only the python on PATH knows where the wheel is, and it is
    // asked once, after the runtime folder.
    let probed = "C:/Python313/Lib/site-packages/onnxruntime_qnn";
    let (found, asked) = search(&[p(&[probed, "QnnHtp.dll"])], Some(probed));
    assert_eq!(asked, 1);
    assert_eq!(
        found.map(|c| (c.source, c.path)),
        Some(("python3", p(&[probed, "QnnHtp.dll"])))
    );
    let runtime = p(&[LOCAL_APP_DATA, "qnnx", "runtime", "qnn", "QnnHtp.dll"]);
    let (found, asked) = search(&[runtime.clone(), p(&[probed, "QnnHtp.dll"])], Some(probed));
    assert_eq!((found.map(|c| c.path), asked), (Some(runtime), 0));
}

#[test]
fn nothing_found_leaves_the_bare_name_to_the_windows_loader() {
    let (found, asked) = search(&[], None);
    assert_eq!((found, asked), (None, 1));
}
