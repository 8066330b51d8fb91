//! The search order names no folder of the checkout the library was built from, so binaries and
//! wheels built here do not carry the developer's path: a source build finds the checkout's
//! `runtime/` through `QNNX_RUNTIME_DIR`, which `.cargo/config.toml` sets for the processes cargo
//! runs. One test function: it sets process-wide environment variables.

use std::path::{Path, PathBuf};

use qnn_sys::loader::{candidates_in, LibraryKind, Os, SearchEnv, ONNXRUNTIME_QNN_DIR_VAR};

const KINDS: [LibraryKind; 4] = [
    LibraryKind::Htp,
    LibraryKind::Gpu,
    LibraryKind::Cpu,
    LibraryKind::System,
];

/// Every path the search for `kind` would look at, from the process environment.
fn searched(kind: LibraryKind) -> (SearchEnv, Vec<PathBuf>) {
    let env = SearchEnv::from_process(kind, false);
    let paths = candidates_in(kind, None, &env, Os::current(), std::env::consts::ARCH)
        .into_iter()
        .map(|c| c.path)
        .collect();
    (env, paths)
}

#[test]
fn search_names_no_checkout_folder_unless_qnnx_runtime_dir_does() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checkout = crate_dir.parent().unwrap();
    let mut roots = vec![checkout.to_path_buf(), crate_dir.to_path_buf()];
    if let Ok(real) = checkout.canonicalize() {
        roots.push(real);
    }
    let under_checkout = |p: &Path| roots.iter().any(|r| p.starts_with(r));

    for var in [
        "QNN_HTP_LIB",
        "QNN_GPU_LIB",
        "QNN_CPU_LIB",
        "QNN_SYSTEM_LIB",
        "QNN_LIB_DIR",
        "QNN_SDK_ROOT",
        "VIRTUAL_ENV",
        "QNNX_RUNTIME_DIR",
        ONNXRUNTIME_QNN_DIR_VAR,
    ] {
        std::env::remove_var(var);
    }
    let data_home =
        std::env::temp_dir().join(format!("qnn-sys-no-checkout-{}", std::process::id()));
    std::env::set_var("XDG_DATA_HOME", &data_home);
    std::env::set_var("LOCALAPPDATA", &data_home);

    for kind in KINDS {
        let (env, paths) = searched(kind);
        assert_eq!(
            env.runtime_dirs,
            [data_home.join("qnnx").join("runtime")],
            "{kind:?}"
        );
        let baked: Vec<_> = paths.iter().filter(|p| under_checkout(p)).collect();
        assert!(
            baked.is_empty(),
            "{kind:?}: the search names the build checkout {}: {baked:?}",
            checkout.display()
        );
    }

    // The variable cargo sets from .cargo/config.toml (or the caller's own) comes first.
    let runtime = checkout.join("runtime");
    std::env::set_var("QNNX_RUNTIME_DIR", &runtime);
    let (env, _) = searched(LibraryKind::Htp);
    assert_eq!(env.runtime_dirs[0], runtime);
    assert_eq!(env.runtime_dirs.len(), 2);
}
