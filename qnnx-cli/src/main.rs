//! `qnnx`: compile ONNX models to QNN context binaries ahead of time, check which nodes a
//! backend supports, inspect and run context binaries, manage the context-binary cache, and
//! diagnose the QNN installation.
//!
//! Exit codes: 0 success; 1 failure (the message says what to do); 2 bad command line (unknown
//! flag, SoC or architecture); 3 the model cannot run on the backend or target (`check` found
//! unsupported nodes, or `compile`/`run` refused the model for the same reason).

mod cache;
mod compare;
mod compile;
mod compile_each;
mod compile_many;
mod npy;
mod progress;
mod quantize;
mod run;
mod target;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use qnn::{Backend, BackendConfig, BackendOptions, Device, HtpConfig};
use qnnx_types::{tensor_type_name, BackendKind};
use serde_json::{json, Value};

/// Exit code of a failure (the message says what to do).
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a bad command line.
pub const EXIT_USAGE: u8 = 2;
/// Exit code when the model cannot run on the chosen backend or target.
pub const EXIT_UNSUPPORTED: u8 = 3;

#[derive(Parser)]
#[command(
    name = "qnnx",
    version,
    about = "Run and compile models for Qualcomm NPUs through QNN",
    after_help = "Exit codes: 0 success, 1 failure, 2 bad command line, 3 the model cannot run on \
                  the backend or target (unsupported nodes, float model on a v68-class SoC)."
)]
pub struct Cli {
    /// Print machine-readable JSON on stdout instead of text (errors too: {"error": ...}).
    #[arg(long, global = true)]
    pub json: bool,
    /// Path of the QNN backend library to use (otherwise the documented search order applies).
    #[arg(long, global = true, value_name = "PATH")]
    pub qnn_lib: Option<PathBuf>,
    /// Context-binary cache folder [default: $QNNX_CACHE_DIR, else ~/.cache/qnnx or the
    /// platform's cache folder]; the Python package uses the same one.
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show which QNN libraries are found where, their build ids, which backends start, and the
    /// cache folder.
    Doctor,
    /// Compile an ONNX model to a QNN context binary for a target SoC.
    Compile(compile::CompileArgs),
    /// List which nodes of an ONNX model lower to a backend and why the others do not, and
    /// whether the target SoC can run it (a v68 HTP runs quantized models only); exit code 3
    /// when it cannot.
    Check(compile::CheckArgs),
    /// Describe a context binary: graphs, inputs and outputs, build id, SoC.
    Inspect {
        /// The context binary, or a saved model (`qnnx_backend.export`).
        model: PathBuf,
    },
    /// Run a context binary, or an ONNX model compiled in memory, with given or random inputs;
    /// write the outputs as .npy and report latency.
    Run(run::RunArgs),
    /// Quantize a float ONNX model on calibration data into a standard QDQ ONNX model
    /// (QuantizeLinear/DequantizeLinear pairs, integer weights) that compiles for every HTP,
    /// v68 included.
    Quantize(quantize::QuantizeArgs),
    /// Per-layer accuracy on the HTP: run the model (fp16, or a QDQ model with --reference
    /// FLOAT.onnx) and its float reference in exact fp32 with every intermediate as an output,
    /// and report each value's SQNR, cosine and max error, worst first, and the first layer
    /// where the error jumps.
    Compare(compare::CompareArgs),
    /// List, clear or prune the context-binary cache.
    Cache {
        #[command(subcommand)]
        action: cache::CacheAction,
    },
}

/// An error for the user: what went wrong and what to do, and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub msg: String,
    /// Extra fields for the JSON error object (such as the unsupported nodes).
    pub details: Option<Value>,
}

impl Failure {
    pub fn new(msg: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_FAILURE,
            msg: msg.into(),
            details: None,
        }
    }

    pub fn usage(msg: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_USAGE,
            msg: msg.into(),
            details: None,
        }
    }

    pub fn unsupported(msg: impl Into<String>, details: Option<Value>) -> Failure {
        Failure {
            code: EXIT_UNSUPPORTED,
            msg: msg.into(),
            details,
        }
    }
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure::new(e.to_string())
    }
}

fn init_logging() {
    // QNN's own log (target `qnn`) has harmless ERROR lines on every graph; errors that matter
    // reach us as return codes and are in our messages. QNNX_LOG takes the same syntax
    // (`warn,qnn=info`) to see more.
    let filter: tracing_subscriber::filter::Targets = std::env::var("QNNX_LOG")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            "warn,qnn=off,qnn::cache=warn"
                .parse()
                .expect("valid default filter")
        });
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::registry().with(filter).with(
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .without_time()
            .with_target(false),
    );
    let _ = tracing::subscriber::set_global_default(subscriber);
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match &cli.command {
        Command::Doctor => doctor(&cli),
        Command::Compile(args) => compile::compile(&cli, args),
        Command::Check(args) => compile::check(&cli, args),
        Command::Inspect { model } => inspect(&cli, model),
        Command::Run(args) => run::run(&cli, args),
        Command::Compare(args) => compare::compare_cmd(&cli, args),
        Command::Quantize(args) => quantize::quantize(&cli, args),
        Command::Cache { action } => cache::cache(&cli, action),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            if cli.json {
                let mut v = json!({ "error": f.msg, "exit_code": f.code });
                if let (Some(Value::Object(extra)), Value::Object(obj)) = (f.details, &mut v) {
                    obj.extend(extra);
                }
                emit(&cli, &v, String::new);
            } else {
                eprintln!("qnnx: error: {}", f.msg);
            }
            ExitCode::from(f.code)
        }
    }
}

/// Prints the command's result: `value` as JSON with `--json`, else `text`. A closed stdout
/// (`qnnx ... | head`) is not an error.
pub fn emit(cli: &Cli, value: &Value, text: impl FnOnce() -> String) {
    let out = if cli.json {
        serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
    } else {
        text()
    };
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush());
}

/// The QnnSystem library (binary inspection): beside `--qnn-lib` when it is given, else by the
/// library search.
pub fn system_library(cli: &Cli) -> Result<std::sync::Arc<qnn::qnn_sys::SystemLibrary>, Failure> {
    match &cli.qnn_lib {
        Some(lib) => Backend::open(
            BackendConfig::default_for(BackendKind::Htp),
            &BackendOptions {
                library: Some(lib.clone()),
                log_level: None,
            },
        )
        .and_then(|b| b.system())
        .map_err(|e| Failure::new(format!("{e} (with --qnn-lib {})", lib.display()))),
        None => Ok(std::sync::Arc::new(qnn::qnn_sys::SystemLibrary::find(
            None,
        )?)),
    }
}

fn doctor(cli: &Cli) -> Result<ExitCode, Failure> {
    use qnn::qnn_sys::loader::{candidates, LibraryKind};
    let mut libs = Vec::new();
    for kind in [LibraryKind::Htp, LibraryKind::Gpu, LibraryKind::System] {
        let explicit = if kind == LibraryKind::System {
            None
        } else {
            cli.qnn_lib.as_deref()
        };
        let list: Vec<Value> = candidates(kind, explicit)
            .into_iter()
            .map(|c| json!({ "source": c.source, "path": c.path, "exists": c.path.is_file() }))
            .collect();
        let found = list
            .iter()
            .find(|c| c["exists"] == true)
            .map(|c| c["path"].clone());
        libs.push(json!({ "library": format!("{kind:?}"), "found": found, "searched": list }));
    }
    let mut backends = Vec::new();
    for kind in [BackendKind::Htp, BackendKind::Gpu] {
        let config = match kind {
            BackendKind::Htp => BackendConfig::Htp(HtpConfig::host_default()),
            BackendKind::Gpu | BackendKind::Cpu => BackendConfig::default_for(kind),
        };
        let entry = match Backend::open(
            config,
            &BackendOptions {
                library: None,
                log_level: None,
            },
        ) {
            Ok(b) => {
                let dev = Device::new(&b);
                let platform = b.platform_info().ok().and_then(|d| d.first().cloned());
                let v = b.api_version().backend_api_version;
                let backend_api = format!("{}.{}.{}", v.major, v.minor, v.patch);
                // What `compile` and `run model.onnx` target without --soc: on x86_64 SoC 60,
                // which the emulator's platform info does not report (it says SoC 30, v68).
                let target = qnnx_engine::Target::host_default(kind);
                let emulated = kind == BackendKind::Htp
                    && qnn::HtpDeviceConfig::host_default().soc_model.is_some();
                json!({
                    "backend": format!("{kind:?}"),
                    "ok": dev.is_ok(),
                    "library": b.library_path(),
                    "build_id": b.build_id().ok(),
                    "provider": b.provider_name(),
                    "core_api": format!("{:?}", b.api_version().core_api_version),
                    "backend_api": backend_api,
                    // The tested release this library is (qnn_sys::releases), by build id.
                    "qnn_release": b.release().map(|r| r.qnn),
                    "tested": b.release().is_some(),
                    "device": dev.err().map(|e| e.to_string()).unwrap_or_else(|| "created".into()),
                    "platform_soc_model": platform.as_ref().and_then(|p| p.htp.map(|h| h.soc_model)),
                    "platform_arch": platform.as_ref().and_then(|p| p.htp.map(|h| h.arch)),
                    "platform_from": if emulated { "emulator" } else { "device" },
                    "default_target": {
                        "describe": target.describe(),
                        "soc_model": target.soc_model,
                        "soc": target.soc().map(|s| s.name),
                        "htp_arch": target.arch().map(|a| a.number()),
                    },
                })
            }
            Err(e) => {
                json!({ "backend": format!("{kind:?}"), "ok": false, "error": e.to_string() })
            }
        };
        backends.push(entry);
    }
    // The HTP library in use (or the first one found) and the device's HTP arch, for the
    // device-side files (stub, skel, catalog) it needs on a Snapdragon device.
    let htp_library = backends[0]["library"]
        .as_str()
        .or(libs[0]["found"].as_str())
        .map(PathBuf::from);
    let htp_arch = backends[0]["platform_arch"]
        .as_u64()
        .map(|a| a as u32)
        .filter(|&a| a > 0);
    let (device_files, device_files_text) = htp_device_files(htp_library.as_deref(), htp_arch);
    let cache = cache::summary(cli);
    let tested: Vec<Value> = qnn::qnn_sys::releases::TESTED
        .iter()
        .map(|r| json!({ "qnn": r.qnn, "wheel": r.wheel, "build_id": r.build_id }))
        .collect();
    let report = json!({
        "libraries": libs,
        "backends": backends,
        "tested_releases": tested,
        "htp_device_files": device_files,
        "cache": cache,
    });
    emit(cli, &report, || {
        let mut s = String::from("QNN libraries:\n");
        for l in &libs {
            let found = l["found"].as_str().unwrap_or("not found");
            s += &format!("  {:<7} {found}\n", l["library"].as_str().unwrap_or(""));
        }
        s += "Backends:\n";
        for b in &backends {
            let name = b["backend"].as_str().unwrap_or("");
            if b["ok"] == true {
                let release = match b["qnn_release"].as_str() {
                    Some(q) => format!("QNN {q}, tested"),
                    None => "a release qnnx has not been tested with".to_string(),
                };
                s += &format!(
                    "  {name:<4} ok: build {} ({release}; {}, backend API {})\n",
                    b["build_id"].as_str().unwrap_or("?"),
                    b["provider"].as_str().unwrap_or("?"),
                    b["backend_api"].as_str().unwrap_or("?"),
                );
                s += &soc_lines(b);
            } else {
                let why = b["error"]
                    .as_str()
                    .or(b["device"].as_str())
                    .unwrap_or("failed");
                s += &format!("  {name:<4} unavailable: {why}\n");
            }
        }
        s += "Tested QNN releases (scripts/setup-runtime --qnn Q installs one):\n";
        for r in qnn::qnn_sys::releases::TESTED {
            let loaded = backends
                .iter()
                .any(|b| b["qnn_release"].as_str() == Some(r.qnn));
            s += &format!(
                "  QNN {:<8} onnxruntime-qnn {}  {}{}\n",
                r.qnn,
                r.wheel,
                r.build_id,
                if loaded { "  (loaded)" } else { "" }
            );
        }
        s += &device_files_text;
        s += &format!("Cache:\n  {}\n", cache::describe(&cache));
        s += "Run `scripts/setup-runtime` (or set QNN_SDK_ROOT / QNN_LIB_DIR) if a library is missing.\n";
        s
    });
    Ok(ExitCode::SUCCESS)
}

/// `doctor`'s lines on a started backend's SoC: what compiles target by default and what the
/// library's platform info reports, each labelled (on x86_64 they differ: SoC 60 against the
/// emulator's own SoC 30).
fn soc_lines(b: &Value) -> String {
    if b["backend"] != "Htp" {
        return String::new();
    }
    let t = &b["default_target"];
    let target = match (
        t["soc"].as_str(),
        t["soc_model"].as_u64(),
        t["htp_arch"].as_u64(),
    ) {
        (Some(name), Some(m), Some(a)) => format!("{name} (SoC {m}, HTP v{a})"),
        _ => t["describe"].as_str().unwrap_or("?").to_string(),
    };
    let mut s = format!("       compiles for {target} by default (--soc picks another)\n");
    if let (Some(m), Some(a)) = (
        b["platform_soc_model"].as_u64(),
        b["platform_arch"].as_u64(),
    ) {
        let name = u32::try_from(m)
            .ok()
            .and_then(qnn::soc::by_model)
            .map(|s| format!(" ({})", s.name))
            .unwrap_or_default();
        s += &match b["platform_from"].as_str() {
            Some("emulator") => format!(
                "       the emulator's platform info reports SoC {m}{name}, HTP v{a} (its own \
                 default, not the compile target)\n"
            ),
            _ => format!("       the device reports SoC {m}{name}, HTP v{a}\n"),
        };
    }
    s
}

/// `doctor`'s report of the HTP library's device-side files (`qnn-sys/README.md`): JSON and text.
/// On x86_64 the library is the emulator and needs none. Elsewhere the files of `arch` (the
/// device's, from platform info) are listed, or of every arch whose stub sits beside the
/// library when the arch is unknown.
fn htp_device_files(library: Option<&Path>, arch: Option<u32>) -> (Value, String) {
    use qnn::diagnostics::{
        htp_companions, missing_htp_companions_in, needs_device_files, stub_archs, CompanionEnv,
        Files, RealFiles,
    };
    use qnn::qnn_sys::loader::Os;
    let cpu = std::env::consts::ARCH;
    if !needs_device_files(cpu) {
        let why = format!("not needed on {cpu}: the HTP library is the emulator (no stub or skel)");
        return (
            json!({ "needed": false, "reason": why }),
            format!("HTP device-side files:\n  {why}\n"),
        );
    }
    let Some(library) = library else {
        return (
            json!({ "needed": true, "library": null, "files": [] }),
            "HTP device-side files:\n  unknown: no HTP library found\n".into(),
        );
    };
    let dir = library
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let archs = match arch {
        Some(a) => vec![a],
        None => stub_archs(Os::current(), RealFiles.names_in(dir)),
    };
    let mut files = Vec::new();
    let mut text = format!(
        "HTP device-side files (beside/for {}):\n",
        library.display()
    );
    for &a in &archs {
        for c in htp_companions(library, a).files {
            let dirs = c.search.dir_names();
            text += &format!(
                "  v{a} {:<14} {:<26} {}\n",
                c.role.describe(),
                c.name,
                match (&c.found, c.role.needed_to_start()) {
                    (Some(d), _) => format!("found in {}", d.display()),
                    (None, needed) => format!(
                        "{} (looked for {}: {})",
                        if needed {
                            "MISSING"
                        } else {
                            "missing, needed to build graphs here"
                        },
                        c.search.rule,
                        dirs.join(", ")
                    ),
                }
            );
            files.push(json!({
                "arch": a,
                "role": c.role.describe(),
                "name": c.name,
                "needed_to_start": c.role.needed_to_start(),
                "rule": c.search.rule,
                "searched": dirs,
                "found": c.found,
                "elsewhere": c.elsewhere,
            }));
        }
    }
    let missing = missing_htp_companions_in(
        library,
        Os::current(),
        arch,
        &CompanionEnv::from_process(),
        &RealFiles,
    );
    if let Some(m) = &missing {
        text += &format!("  => {m}\n");
    }
    (
        json!({
            "needed": true,
            "library": library,
            "archs": archs,
            "arch_from": if arch.is_some() { "platform info" } else { "stubs beside the library" },
            "files": files,
            "missing": missing,
        }),
        text,
    )
}

/// A tensor's element type as `inspect` and `compile` print it (`f32`, `qu8`).
pub fn dtype_name(t: &qnn::TensorInfo) -> String {
    tensor_type_name(t.dtype, t.quantization.is_quantized())
}

/// A fixed-point tensor's encoding as `inspect` prints it (`scale=0.02 offset=-128`, or per
/// axis `axis=3 x64 scale=0.001..0.02`), empty for float and plain integer tensors.
pub fn encoding_text(q: &qnn::Quantization) -> String {
    match q {
        qnn::Quantization::None => String::new(),
        qnn::Quantization::ScaleOffset { scale, offset } => {
            format!("scale={scale} offset={offset}")
        }
        qnn::Quantization::PerAxis {
            axis,
            scale_offsets,
        } => {
            let (lo, hi) = scale_offsets
                .iter()
                .fold((f32::INFINITY, 0f32), |(l, h), &(s, _)| {
                    (l.min(s), h.max(s))
                });
            format!("axis={axis} x{} scale={lo}..{hi}", scale_offsets.len())
        }
        qnn::Quantization::Unparsed { encoding } => format!("encoding {encoding} (not parsed)"),
    }
}

pub fn tensor_json(t: &qnn::TensorInfo) -> Value {
    json!({
        "name": t.name,
        "dtype": dtype_name(t),
        "shape": t.dims,
        "id": t.id,
        "encoding": qnnx_engine::saved::encoding_json(&t.quantization),
    })
}

/// `inspect` of a saved model: its manifest, checked against the file (binary hash included).
fn inspect_saved(cli: &Cli, model: &Path) -> Result<ExitCode, Failure> {
    let m = qnnx_engine::saved::read_manifest(model)
        .map_err(|e| Failure::new(format!("{e}\nhint: {}", run::DAMAGED_SAVED)))?;
    let report = json!({ "file": model, "saved_model": m });
    emit(cli, &report, || {
        let soc = m
            .soc_model
            .map(|s| match qnn::soc::by_model(s) {
                Some(k) => format!("SoC {s} ({}, HTP {})", k.name, k.arch),
                None => format!("SoC {s}"),
            })
            .unwrap_or_else(|| "no SoC".into());
        let mut s = format!(
            "{}: saved model (qnnx {}), {} backend, QNN build {}, {soc}, binary {} bytes\n",
            model.display(),
            m.qnnx_version,
            m.backend,
            m.qnn_build_id,
            m.binary_size
        );
        if !m.options.is_empty() {
            let o: Vec<String> = m.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s += &format!("options: {}\n", o.join(", "));
        }
        for g in &m.graphs {
            s += &format!("graph {:?}\n", g.name);
            for (what, list) in [("input ", &g.inputs), ("output", &g.outputs)] {
                for t in list {
                    s += &format!("  {what} {:<24} {:<5} {:?}\n", t.name, t.dtype, t.dims);
                }
            }
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}

fn inspect(cli: &Cli, model: &Path) -> Result<ExitCode, Failure> {
    if run::is_saved(model) {
        return inspect_saved(cli, model);
    }
    let bytes = read_file(model)?;
    let system = system_library(cli)?;
    let info = qnn::binary_info(&system, &bytes).map_err(|e| {
        let hint = if lowering::Model::from_bytes(&bytes, None).is_ok() {
            format!(
                "this is an ONNX model: `qnnx compile {0}` makes a context binary, `qnnx run {0}` runs it",
                model.display()
            )
        } else {
            run::DAMAGED_BINARY.into()
        };
        Failure::new(format!("{}: {e}\nhint: {hint}", model.display()))
    })?;
    let soc = info.soc_model.and_then(qnn::soc::by_model);
    let graphs: Vec<Value> = info
        .graphs
        .iter()
        .map(|g| {
            json!({
                "name": g.name,
                "inputs": g.inputs.iter().map(tensor_json).collect::<Vec<_>>(),
                "outputs": g.outputs.iter().map(tensor_json).collect::<Vec<_>>(),
                "htp_memory": g.htp.map(|h| json!({
                    "own_weights_bytes": h.const_size,
                    "shared_weights_bytes": h.shared_weights_size,
                    "io_bytes": h.io_tensor_size,
                    "op_data_bytes": h.op_data_size,
                    "spill_fill_bytes": h.spill_fill_buffer_size,
                })),
            })
        })
        .collect();
    // Every graph of a weight-sharing context reports the whole shared buffer.
    let shared_bytes = info
        .graphs
        .iter()
        .filter_map(|g| g.htp)
        .map(|h| h.shared_weights_size)
        .max()
        .unwrap_or(0);
    let report = json!({
        "file": model,
        "size": bytes.len(),
        "backend_id": info.backend_id,
        "build_id": info.build_id,
        "core_api": format!("{}.{}.{}", info.core_api_version.major, info.core_api_version.minor, info.core_api_version.patch),
        "backend_api": format!("{}.{}.{}", info.backend_api_version.major, info.backend_api_version.minor, info.backend_api_version.patch),
        "blob_version": format!("{}.{}.{}", info.blob_version.major, info.blob_version.minor, info.blob_version.patch),
        "soc_model": info.soc_model,
        "soc": soc.map(|s| s.name),
        "htp_arch": soc.map(|s| s.arch.number()),
        "graphs": graphs,
        "weight_sharing": info.uses_shared_weights(),
        "shared_weights_bytes": shared_bytes,
    });
    emit(cli, &report, || {
        let mut s = format!(
            "{}: {} bytes, QNN build {}, backend id {}, context blob {}\n",
            model.display(),
            bytes.len(),
            info.build_id,
            info.backend_id,
            report["blob_version"].as_str().unwrap_or("")
        );
        match (info.soc_model, soc) {
            (Some(m), Some(soc)) => {
                s += &format!("target: SoC {m} ({}, HTP {})\n", soc.name, soc.arch)
            }
            (Some(m), None) => s += &format!("target: SoC {m}\n"),
            _ => {}
        }
        if info.uses_shared_weights() {
            s += &format!(
                "{} graphs sharing {shared_bytes} bytes of weights (only a device can load this \
                 binary, not the x86_64 HTP library)\n",
                info.graphs.len()
            );
        }
        for g in &info.graphs {
            match g.htp {
                Some(h) => {
                    s += &format!(
                        "graph {:?}: {} bytes of its own weights\n",
                        g.name, h.const_size
                    )
                }
                None => s += &format!("graph {:?}\n", g.name),
            }
            for (what, list) in [("input ", &g.inputs), ("output", &g.outputs)] {
                for t in list {
                    s += &format!(
                        "  {what} {:<24} {:<5} {:?} {}\n",
                        t.name,
                        dtype_name(t),
                        t.dims,
                        encoding_text(&t.quantization)
                    );
                }
            }
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}

/// Reads a whole file; the error names it.
pub fn read_file(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound => "\nhint: check the path",
            _ => "",
        };
        Failure::new(format!("cannot read {}: {e}{hint}", path.display()))
    })
}
