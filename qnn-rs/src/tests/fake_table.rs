//! The safe layer against a hand-made function table: faults injected at chosen calls must
//! come back as `ApiError`s naming the call, code, node and op, and handles must be freed.

use std::cell::Cell;
use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use qnn_sys::{Config, CoreFunctions, ErrorHandle, Handle, OpConfig, Tensor};

use crate::api::Api;
use crate::diagnostics::{CompanionEnv, FileList, Host, TEST_HOST};
use crate::{
    Backend, BackendConfig, BackendKind, Context, DType, Device, Error, HtpConfig,
    HtpContextConfig, HtpDeviceConfig, LogLevel, Node, Result,
};

static NEXT_ID: AtomicU32 = AtomicU32::new(1);
thread_local! {
    // Per test thread: the tests run in parallel and a free is called on the thread that drops
    // the handle, so a test sees only its own frees (global counters raced: another test's
    // backend freed between two reads failed missing_slot_is_not_provided_and_handles_are_freed).
    static CONTEXT_FREES: Cell<u32> = const { Cell::new(0) };
    static BACKEND_FREES: Cell<u32> = const { Cell::new(0) };
}

unsafe extern "C" fn log_create(_: qnn_sys::LogCallback, _: u32, out: *mut Handle) -> ErrorHandle {
    // SAFETY: out-pointer from the safe layer.
    unsafe { *out = 7 as Handle };
    0
}
unsafe extern "C" fn free1(_: Handle) -> ErrorHandle {
    0
}
unsafe extern "C" fn backend_free(_: Handle) -> ErrorHandle {
    BACKEND_FREES.with(|c| c.set(c.get() + 1));
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
    CONTEXT_FREES.with(|c| c.set(c.get() + 1));
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

/// A table with the slots every fake backend needs: logging, and a backend that is created and
/// freed (`free1`, uncounted); the rest NULL.
fn base_table() -> CoreFunctions {
    // SAFETY: an all-NULL table is valid: every slot is an Option.
    let mut f: CoreFunctions = unsafe { std::mem::zeroed() };
    f.logCreate = Some(log_create);
    f.logFree = Some(free1);
    f.backendCreate = Some(backend_create);
    f.backendFree = Some(free1);
    f
}

/// The backend a fake table makes, as if loaded from `path`.
fn backend_from(f: CoreFunctions, config: BackendConfig, path: &str) -> Result<Backend> {
    Backend::from_api(
        Api::from_table(f, "fake"),
        config,
        path.into(),
        "FAKE".into(),
        Default::default(),
        LogLevel::Warn,
    )
}

fn fake_backend() -> Backend {
    let mut f = base_table();
    f.backendFree = Some(backend_free);
    f.contextCreate = Some(context_create);
    f.contextFree = Some(context_free);
    f.graphCreate = Some(graph_create);
    f.tensorCreateGraphTensor = Some(tensor_create);
    f.backendValidateOpConfig = Some(validate);
    f.graphAddNode = Some(add_node);
    f.graphFinalize = Some(finalize_fails);
    backend_from(f, BackendConfig::default_for(BackendKind::Htp), "fake").unwrap()
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
    backend_from(f, BackendConfig::Htp(config), path)
}

fn table() -> CoreFunctions {
    // backendFree stays `free1`, not `backend_free`: `missing_slot_is_not_provided_and_handles_are_freed`
    // counts those.
    let mut f = base_table();
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
    let err = backend_from(
        f,
        BackendConfig::default_for(BackendKind::Gpu),
        "/opt/qnn/libQnnGpu.so",
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
    let frees = || (CONTEXT_FREES.with(Cell::get), BACKEND_FREES.with(Cell::get));
    let before = frees();
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
    assert_eq!(frees(), before);
    drop(ctx);
    assert_eq!(frees(), (before.0 + 1, before.1 + 1));
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
    let mut f = base_table();
    f.contextCreate = Some(create);
    f.contextFree = Some(context_free);
    backend_from(f, config, "fake").unwrap()
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
