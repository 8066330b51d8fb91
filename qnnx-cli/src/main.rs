//! `qnnx`: compile ONNX models to QNN context binaries ahead of time, check which nodes a
//! backend supports, inspect and run context binaries, and diagnose the QNN installation.
//!
//! Exit codes: 0 success; 1 failure (the message says what to do); 2 bad command line;
//! 3 `check` found unsupported nodes.

mod npy;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use qnn::{Backend, BackendKind, BackendOptions, Context, DataType, Device, DeviceOptions};
use serde_json::{json, Value};

#[derive(Parser)]
#[command(
    name = "qnnx",
    version,
    about = "Run and compile models for Qualcomm NPUs through QNN"
)]
struct Cli {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Path of the QNN backend library to use (otherwise the documented search order applies).
    #[arg(long, global = true, value_name = "PATH")]
    qnn_lib: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show which QNN libraries are found where, their build ids, and which backends start.
    Doctor,
    /// Describe a context binary: graphs, inputs and outputs, build id, SoC.
    Inspect {
        /// The context binary.
        model: PathBuf,
    },
    /// Run a context binary with given or random inputs and report latency.
    Run {
        /// The context binary.
        model: PathBuf,
        /// The graph to run (default: the only graph, or the first).
        #[arg(long)]
        graph: Option<String>,
        /// An input as NAME=FILE.npy; inputs not given are random.
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// How many timed executions (after one warm-up).
        #[arg(long, default_value_t = 10)]
        runs: usize,
        /// Where to write outputs as NAME.npy.
        #[arg(long, short = 'o', default_value = "qnnx-outputs")]
        output_dir: PathBuf,
        /// Target SoC by name (SC8380XP, SM8650, ...) or model number.
        #[arg(long)]
        soc: Option<String>,
    },
}

/// An error for the user: what went wrong and what to do.
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Doctor => doctor(&cli),
        Command::Inspect { model } => inspect(&cli, model),
        Command::Run {
            model,
            graph,
            inputs,
            runs,
            output_dir,
            soc,
        } => run(
            &cli,
            model,
            graph.as_deref(),
            inputs,
            *runs,
            output_dir,
            soc.as_deref(),
        ),
    };
    match result {
        Ok(code) => code,
        Err(Failure(msg)) => {
            if cli.json {
                println!("{}", json!({ "error": msg }));
            } else {
                eprintln!("qnnx: error: {msg}");
            }
            ExitCode::from(1)
        }
    }
}

fn emit(cli: &Cli, value: &Value, text: impl FnOnce() -> String) {
    if cli.json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        print!("{}", text());
    }
}

fn backend(cli: &Cli, kind: BackendKind) -> Result<Backend, Failure> {
    Backend::open(
        kind,
        &BackendOptions {
            library: cli.qnn_lib.clone(),
            log_level: None,
        },
    )
    .map_err(|e| {
        Failure(format!(
            "{e}\nhint: run `qnnx doctor` to see where QNN libraries are looked for"
        ))
    })
}

fn device_options(soc: Option<&str>) -> Result<DeviceOptions, Failure> {
    match soc {
        None => Ok(DeviceOptions::host_default()),
        Some(s) => {
            let soc = qnn::soc::find(s).ok_or_else(|| {
                Failure(format!(
                    "unknown SoC {s:?}; known: {}",
                    qnn::soc::known_names()
                ))
            })?;
            Ok(DeviceOptions {
                soc_model: Some(soc.model),
                arch: None,
            })
        }
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
        let entry = match Backend::open(
            kind,
            &BackendOptions {
                library: None,
                log_level: None,
            },
        ) {
            Ok(b) => {
                let dev = Device::new(&b, &DeviceOptions::host_default());
                let platform = b.platform_info().ok().and_then(|d| d.first().cloned());
                json!({
                    "backend": format!("{kind:?}"),
                    "ok": dev.is_ok(),
                    "library": b.library_path(),
                    "build_id": b.build_id().ok(),
                    "provider": b.provider_name(),
                    "core_api": format!("{:?}", b.api_version().core_api_version),
                    "device": dev.err().map(|e| e.to_string()).unwrap_or_else(|| "created".into()),
                    "platform_soc_model": platform.as_ref().and_then(|p| p.htp.map(|h| h.soc_model)),
                    "platform_arch": platform.as_ref().and_then(|p| p.htp.map(|h| h.arch)),
                })
            }
            Err(e) => {
                json!({ "backend": format!("{kind:?}"), "ok": false, "error": e.to_string() })
            }
        };
        backends.push(entry);
    }
    let report = json!({ "libraries": libs, "backends": backends });
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
                s += &format!(
                    "  {name:<4} ok: build {} ({}), platform SoC {} arch v{}\n",
                    b["build_id"].as_str().unwrap_or("?"),
                    b["provider"].as_str().unwrap_or("?"),
                    b["platform_soc_model"],
                    b["platform_arch"]
                );
            } else {
                let why = b["error"]
                    .as_str()
                    .or(b["device"].as_str())
                    .unwrap_or("failed");
                s += &format!("  {name:<4} unavailable: {why}\n");
            }
        }
        s += "Run `scripts/setup-runtime` (or set QNN_SDK_ROOT / QNN_LIB_DIR) if a library is missing.\n";
        s
    });
    Ok(ExitCode::SUCCESS)
}

fn dtype_name(d: DataType) -> String {
    format!("{d:?}").to_lowercase()
}

fn tensor_json(t: &qnn::TensorInfo) -> Value {
    json!({ "name": t.name, "dtype": dtype_name(t.dtype), "shape": t.dims, "id": t.id })
}

fn inspect(cli: &Cli, model: &Path) -> Result<ExitCode, Failure> {
    let bytes = std::fs::read(model).map_err(|e| Failure(format!("{}: {e}", model.display())))?;
    let system = match &cli.qnn_lib {
        Some(lib) => backend(cli, BackendKind::Htp)
            .and_then(|b| b.system().map_err(Failure::from))
            .map_err(|e| Failure(format!("{} (with --qnn-lib {})", e.0, lib.display())))?,
        None => std::sync::Arc::new(qnn::qnn_sys::SystemLibrary::find(None)?),
    };
    let info = qnn::binary_info(&system, &bytes).map_err(|e| {
        Failure(format!(
            "{}: {e}\nhint: is this a QNN context binary?",
            model.display()
        ))
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
            })
        })
        .collect();
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
        "htp_arch": soc.map(|s| s.arch),
        "graphs": graphs,
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
                s += &format!("target: SoC {m} ({}, HTP v{})\n", soc.name, soc.arch)
            }
            (Some(m), None) => s += &format!("target: SoC {m}\n"),
            _ => {}
        }
        for g in &info.graphs {
            s += &format!("graph {:?}\n", g.name);
            for (what, list) in [("input ", &g.inputs), ("output", &g.outputs)] {
                for t in list {
                    s += &format!(
                        "  {what} {:<24} {:<5} {:?}\n",
                        t.name,
                        dtype_name(t.dtype),
                        t.dims
                    );
                }
            }
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}

fn random_array(t: &qnn::TensorInfo, seed: u64) -> npy::Array {
    let mut s = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    let mut next = move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 33) as u32
    };
    let n = t.num_elements();
    let mut data = Vec::with_capacity(t.num_bytes());
    for _ in 0..n {
        let u = next();
        let unit = u as f32 / u32::MAX as f32 * 2.0 - 1.0;
        match t.dtype {
            DataType::F32 => data.extend_from_slice(&unit.to_le_bytes()),
            DataType::F16 => data.extend_from_slice(&half::f16::from_f32(unit).to_le_bytes()),
            DataType::Bool => data.push((u & 1) as u8),
            // Small non-negative integers: valid as indices for most index inputs.
            d => {
                let v = (u % 8) as u64;
                data.extend_from_slice(&v.to_le_bytes()[..d.size()]);
            }
        }
    }
    npy::Array {
        dtype: t.dtype,
        shape: t.dims.iter().map(|&d| d as usize).collect(),
        data,
    }
}

fn run(
    cli: &Cli,
    model: &Path,
    graph_name: Option<&str>,
    inputs: &[String],
    runs: usize,
    output_dir: &Path,
    soc: Option<&str>,
) -> Result<ExitCode, Failure> {
    let b = backend(cli, BackendKind::Htp)?;
    let device = Device::new(&b, &device_options(soc)?)?;
    let t = Instant::now();
    let ctx = Context::from_file(&b, Some(&device), model)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let names = ctx.graph_names();
    let name = match graph_name {
        Some(n) => n.to_string(),
        None => names
            .first()
            .cloned()
            .ok_or(Failure("the context binary has no graphs".into()))?,
    };
    let graph = ctx.graph(&name)?;
    let mut given = std::collections::HashMap::new();
    for spec in inputs {
        let (n, file) = spec
            .split_once('=')
            .ok_or_else(|| Failure(format!("--input {spec:?}: expected NAME=FILE.npy")))?;
        given.insert(n.to_string(), npy::read(Path::new(file))?);
    }
    let mut arrays = Vec::new();
    for (i, t) in graph.inputs().iter().enumerate() {
        let a = match given.remove(&t.name) {
            Some(a) => {
                let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
                if a.dtype != t.dtype || a.shape != dims {
                    return Err(Failure(format!(
                        "input {:?}: file is {:?} {:?}, the graph wants {:?} {:?}",
                        t.name, a.dtype, a.shape, t.dtype, dims
                    )));
                }
                a
            }
            None => random_array(t, i as u64 + 1),
        };
        arrays.push(a);
    }
    if let Some(extra) = given.keys().next() {
        let names: Vec<_> = graph.inputs().iter().map(|t| t.name.clone()).collect();
        return Err(Failure(format!(
            "graph {name:?} has no input {extra:?}; inputs are {names:?}"
        )));
    }
    let mut outs: Vec<Vec<u8>> = graph
        .outputs()
        .iter()
        .map(|t| vec![0u8; t.num_bytes()])
        .collect();
    let exec = |outs: &mut Vec<Vec<u8>>| -> Result<f64, Failure> {
        let ins: Vec<qnn::Input> = arrays
            .iter()
            .map(|a| qnn::Input::from_bytes(a.dtype, &a.data))
            .collect();
        let mut o: Vec<qnn::Output> = graph
            .outputs()
            .iter()
            .zip(outs.iter_mut())
            .map(|(t, b)| qnn::Output::from_bytes(t.dtype, b))
            .collect();
        let t = Instant::now();
        graph.execute(&ins, &mut o)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let first_ms = exec(&mut outs)?;
    let mut times: Vec<f64> = (0..runs)
        .map(|_| exec(&mut outs))
        .collect::<Result<_, _>>()?;
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        times
            .get(((times.len() as f64 - 1.0) * p).round() as usize)
            .copied()
    };
    std::fs::create_dir_all(output_dir)
        .map_err(|e| Failure(format!("{}: {e}", output_dir.display())))?;
    let mut written = Vec::new();
    for (t, data) in graph.outputs().iter().zip(outs) {
        let safe: String = t
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = output_dir.join(format!("{safe}.npy"));
        let shape = t.dims.iter().map(|&d| d as usize).collect();
        npy::write(
            &path,
            &npy::Array {
                dtype: t.dtype,
                shape,
                data,
            },
        )?;
        written.push(path);
    }
    let report = json!({
        "graph": name,
        "load_ms": load_ms,
        "first_execute_ms": first_ms,
        "runs": runs,
        "min_ms": times.first(),
        "median_ms": pct(0.5),
        "p95_ms": pct(0.95),
        "outputs": written,
    });
    emit(cli, &report, || {
        let mut s =
            format!("graph {name:?}: load {load_ms:.1} ms, first execute {first_ms:.2} ms\n");
        if !times.is_empty() {
            s += &format!(
                "latency over {runs} runs: min {:.3} ms, median {:.3} ms, p95 {:.3} ms\n",
                times[0],
                pct(0.5).unwrap_or(0.0),
                pct(0.95).unwrap_or(0.0)
            );
        }
        for p in &written {
            s += &format!("wrote {}\n", p.display());
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}
