//! `qnnx run`: a context binary, or an ONNX model compiled in memory, with given or random
//! inputs; outputs as .npy, latency as min / median / p95.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use qnn::Context;
use qnnx_types::DType;
use serde_json::json;

use qnnx_engine::profile::{ExecutionProfile, NodeOrigins};

use crate::compile::BuildArgs;
use crate::npy;
use crate::{emit, Cli, Failure};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// A context binary, a saved model (`qnnx_backend.export`), or an ONNX model (`.onnx`),
    /// which is compiled in memory first.
    pub model: PathBuf,
    /// The graph to run in a context binary (default: the first).
    #[arg(long)]
    pub graph: Option<String>,
    /// An input as NAME=FILE.npy (repeatable); inputs not given are random (deterministic per
    /// input name).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// How many timed executions (after one untimed first execution).
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// Write the outputs into this folder as NAME.npy [default: none are written; a summary of
    /// each (dtype, shape, range, mean) is printed].
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Profile one more execute (after the timed ones, which stay unprofiled) with QNN's
    /// profiler and print a per-op table: QNN op, the ONNX node it came from, cycles and
    /// share. `basic` gives whole-graph times only [default level: detailed].
    #[arg(long, value_name = "LEVEL", num_args = 0..=1, default_missing_value = "detailed")]
    pub profile: Option<qnn::ProfileLevel>,
    /// Write the profiled execute (and, for an ONNX model, the compile's stages) as a Chrome
    /// trace, for Perfetto or chrome://tracing; implies --profile.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Backend, target and build settings. For a context binary only --backend and the
    /// target flags apply [default target: the SoC the binary was compiled for].
    #[command(flatten)]
    pub build: BuildArgs,
}

/// One graph input or output as the user sees it.
pub(crate) struct Io {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

fn name_seed(name: &str) -> u64 {
    // FNV-1a: the same input gets the same random values whatever the graph's input order.
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn random_array(io: &Io) -> npy::Array {
    let mut s = name_seed(&io.name)
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    let mut next = move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 33) as u32
    };
    let n: usize = io.shape.iter().product();
    let mut data = Vec::with_capacity(n * io.dtype.size());
    for _ in 0..n {
        let u = next();
        let unit = u as f32 / u32::MAX as f32 * 2.0 - 1.0;
        match io.dtype {
            DType::F32 => data.extend_from_slice(&unit.to_le_bytes()),
            DType::F16 => data.extend_from_slice(&half::f16::from_f32(unit).to_le_bytes()),
            DType::F64 => data.extend_from_slice(&f64::from(unit).to_le_bytes()),
            DType::BF16 => data.extend_from_slice(&half::bf16::from_f32(unit).to_le_bytes()),
            DType::Bool => data.push((u & 1) as u8),
            // Small non-negative integers: valid as indices for most index inputs.
            d => {
                let v = (u % 8) as u64;
                data.extend_from_slice(&v.to_le_bytes()[..d.size()]);
            }
        }
    }
    npy::Array {
        dtype: io.dtype,
        shape: io.shape.clone(),
        data,
    }
}

/// The `--input NAME=FILE.npy` arrays by name.
fn given_arrays(specs: &[String]) -> Result<HashMap<String, npy::Array>, Failure> {
    let mut given = HashMap::new();
    for spec in specs {
        let (n, file) = spec
            .split_once('=')
            .ok_or_else(|| Failure::usage(format!("--input {spec:?}: expected NAME=FILE.npy")))?;
        given.insert(n.to_string(), npy::read(Path::new(file))?);
    }
    Ok(given)
}

/// The input arrays, in `ios` order: from `--input` files or random.
pub(crate) fn input_arrays(
    specs: &[String],
    ios: &[Io],
    what: &str,
) -> Result<Vec<npy::Array>, Failure> {
    let given = given_arrays(specs)?;
    let (arrays, given) = arrays_for(given, ios, what)?;
    if let Some(extra) = given.keys().next() {
        let names: Vec<_> = ios.iter().map(|t| t.name.clone()).collect();
        return Err(Failure::new(format!(
            "{what} has no input {extra:?}; its inputs are {names:?}"
        )));
    }
    Ok(arrays)
}

/// The arrays of `ios` taken from `given` (checked against `ios`) or random; returns what is
/// left of `given`.
fn arrays_for(
    mut given: HashMap<String, npy::Array>,
    ios: &[Io],
    what: &str,
) -> Result<(Vec<npy::Array>, HashMap<String, npy::Array>), Failure> {
    let mut arrays = Vec::new();
    for io in ios {
        let a = match given.remove(&io.name) {
            Some(a) => {
                if a.dtype != io.dtype || a.shape != io.shape {
                    return Err(Failure::new(format!(
                        "input {:?}: the file holds {} {:?}, {what} takes {} {:?}",
                        io.name, a.dtype, a.shape, io.dtype, io.shape
                    )));
                }
                a
            }
            None => random_array(io),
        };
        arrays.push(a);
    }
    Ok((arrays, given))
}

struct Timing {
    first_ms: f64,
    /// Sorted.
    times: Vec<f64>,
}

/// Executes `graph` once untimed and `runs` times timed on inputs in graph order; returns the
/// output buffers in graph order.
fn execute(
    graph: &qnn::Graph,
    ins: &[(DType, Cow<[u8]>)],
    runs: usize,
) -> Result<(Timing, Vec<Vec<u8>>), Failure> {
    let mut outs: Vec<Vec<u8>> = graph
        .outputs()
        .iter()
        .map(|t| vec![0u8; t.num_bytes()])
        .collect();
    let inputs: Vec<qnn::Input> = ins
        .iter()
        .map(|(d, b)| qnn::Input::from_bytes(*d, b))
        .collect();
    let once = |outs: &mut Vec<Vec<u8>>| -> Result<f64, Failure> {
        let mut o: Vec<qnn::Output> = graph
            .outputs()
            .iter()
            .zip(outs.iter_mut())
            .map(|(t, b)| qnn::Output::from_bytes(t.dtype, b))
            .collect();
        let t = Instant::now();
        graph.execute(&inputs, &mut o)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let first_ms = once(&mut outs)?;
    let mut times = (0..runs)
        .map(|_| once(&mut outs))
        .collect::<Result<Vec<_>, _>>()?;
    times.sort_by(f64::total_cmp);
    Ok((Timing { first_ms, times }, outs))
}

/// One profiled execute of `graph` at `level` (its own profile handle, freed after).
fn profiled(
    backend: &qnn::Backend,
    graph: &qnn::Graph,
    ins: &[(DType, Cow<[u8]>)],
    level: qnn::ProfileLevel,
    origins: &NodeOrigins,
) -> Result<ExecutionProfile, Failure> {
    let profile = qnn::Profile::new(backend, level)?;
    let mut outs: Vec<Vec<u8>> = graph
        .outputs()
        .iter()
        .map(|t| vec![0u8; t.num_bytes()])
        .collect();
    let inputs: Vec<qnn::Input> = ins
        .iter()
        .map(|(d, b)| qnn::Input::from_bytes(*d, b))
        .collect();
    let mut o: Vec<qnn::Output> = graph
        .outputs()
        .iter()
        .zip(outs.iter_mut())
        .map(|(t, b)| qnn::Output::from_bytes(t.dtype, b))
        .collect();
    graph.execute_profiled(&inputs, &mut o, &profile)?;
    Ok(ExecutionProfile::from_events(
        level,
        profile.events()?,
        origins,
    ))
}

/// The profile's table: the whole-graph times, then the ops, most expensive first.
fn profile_text(p: &ExecutionProfile) -> String {
    let us = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} us"));
    let mut s = format!(
        "profile ({}): execute {}, accelerator {}",
        p.level.name(),
        us(p.execute_us),
        us(p.accel_us)
    );
    if let Some(c) = p.accel_cycles {
        s += &format!(" / {c} cycles");
    }
    s += "\n";
    if p.ops.is_empty() {
        if p.level == qnn::ProfileLevel::Basic {
            s += "(per-op times need --profile detailed)\n";
        }
        return s;
    }
    let unit = p.ops[0].unit.suffix();
    let mut ops: Vec<_> = p.ops.iter().collect();
    ops.sort_by_key(|o| std::cmp::Reverse(o.value));
    let rows: Vec<(String, String, &qnnx_engine::profile::OpTime)> = ops
        .into_iter()
        .map(|o| match &o.origin {
            Some(x) => (x.qnn_op.clone(), x.onnx_node.clone(), o),
            // The HTP's I/O pseudo-nodes.
            None if o.qnn_node == "Input" || o.qnn_node == "Output" => {
                (format!("[{}]", o.qnn_node), "-".to_string(), o)
            }
            // A node of a binary, whose plan is unknown: QNN's node name is all there is.
            None => ("?".to_string(), format!("{} (QNN node)", o.qnn_node), o),
        })
        .collect();
    let unnamed = rows.iter().any(|r| r.0 == "?");
    let op_w = rows
        .iter()
        .map(|r| r.0.len())
        .max()
        .unwrap_or(6)
        .clamp(6, 32);
    let node_w = rows
        .iter()
        .map(|r| r.1.len())
        .max()
        .unwrap_or(9)
        .clamp(9, 64);
    s += &format!(
        "  {:<op_w$} {:<node_w$} {:>10} {:>6} {:>8}\n",
        "QNN op", "ONNX node", unit, "share", "~us"
    );
    for (op, node, o) in rows {
        let est = o.est_us.map_or("-".to_string(), |v| format!("{v:.1}"));
        s += &format!(
            "  {op:<op_w$} {node:<node_w$} {:>10} {:>5.1}% {est:>8}\n",
            o.value,
            o.share * 100.0
        );
    }
    s += "(~us: each op's share of the accelerator time; the HTP reports node cycles)\n";
    if unnamed {
        s += "(?: a QNN node of a binary without the .nodes.json file that `qnnx compile` \
              writes beside it, which names each node's QNN op and ONNX node)\n";
    }
    s
}

/// The ONNX node and QNN op of each node of graph `graph` of the context binary at `path`
/// (whose bytes are `binary`), from the sidecar `qnnx compile` wrote beside it; none without
/// one, or with one written for another binary (said once on stderr).
fn binary_origins(path: &Path, binary: &[u8], graph: &str) -> NodeOrigins {
    use qnnx_engine::profile::sidecar::{self, Found};
    match sidecar::read(path, binary) {
        Found::Graphs(mut g) => g.remove(graph).unwrap_or_default(),
        Found::Missing => NodeOrigins::default(),
        Found::Stale(why) => {
            eprintln!(
                "qnnx: warning: {} is not used: {why}; ops are named by QNN node only",
                sidecar::path(path).display()
            );
            NodeOrigins::default()
        }
    }
}

/// Prints or reports the profile and writes the trace, when asked for.
fn profile_and_trace(
    args: &RunArgs,
    run: impl FnOnce(qnn::ProfileLevel) -> Result<ExecutionProfile, Failure>,
    graph: &str,
    stages: &[(&str, f64)],
) -> Result<Option<ExecutionProfile>, Failure> {
    let Some(level) = args
        .profile
        .or(args.trace.as_ref().map(|_| qnn::ProfileLevel::Detailed))
    else {
        return Ok(None);
    };
    let p = run(level)?;
    if let Some(path) = &args.trace {
        let trace = p.chrome_trace(graph, stages);
        let text = serde_json::to_string(&trace).unwrap_or_default();
        std::fs::write(path, text)
            .map_err(|e| Failure::new(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(Some(p))
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
}

fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One output: its summary, and the file it was written to (with `-o`).
struct Written {
    name: String,
    summary: npy::Summary,
    file: Option<PathBuf>,
}

fn write_outputs(
    dir: Option<&Path>,
    outs: Vec<npy::Array>,
    names: &[String],
) -> Result<Vec<Written>, Failure> {
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut written = Vec::new();
    for (a, name) in outs.into_iter().zip(names) {
        let file = match dir {
            Some(dir) => {
                let path = dir.join(format!("{}.npy", file_name(name)));
                npy::write(&path, &a)?;
                Some(path)
            }
            None => None,
        };
        written.push(Written {
            name: name.clone(),
            summary: a.summary(),
            file,
        });
    }
    Ok(written)
}

fn is_onnx(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Whether the file starts as a saved model does (`qnnx_engine::saved::MAGIC`).
pub fn is_saved(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| &head == qnnx_engine::saved::MAGIC)
}

/// The hint for a context binary that QNN cannot read at all (so `inspect` cannot either).
pub const DAMAGED_BINARY: &str = "QNN cannot read this file as a context binary (truncated, \
     damaged, or another format): compile the model again (`qnnx compile MODEL.onnx -o FILE`) \
     or copy the file again";

/// The hint for a saved model whose file does not check (so `inspect` cannot read it either).
pub const DAMAGED_SAVED: &str = "the saved model is truncated or damaged: save it again \
     (`qnnx_backend.export`) or copy the file again";

pub fn run(cli: &Cli, args: &RunArgs) -> Result<ExitCode, Failure> {
    if is_saved(&args.model) {
        run_saved(cli, args)
    } else if is_onnx(&args.model) {
        run_onnx(cli, args)
    } else {
        run_binary(cli, args)
    }
}

fn refuse_build_flags(args: &RunArgs) -> Result<(), Failure> {
    let b = &args.build;
    if b.cache
        || b.opt_level.is_some()
        || !b.input_shapes.is_empty()
        || !b.fix_inputs.is_empty()
        || b.precision != Default::default()
    {
        return Err(Failure::usage(
            "--cache, --opt-level, --precision, --input-shape and --fix-input apply to ONNX models; a context binary is already compiled",
        ));
    }
    Ok(())
}

fn run_saved(cli: &Cli, args: &RunArgs) -> Result<ExitCode, Failure> {
    refuse_build_flags(args)?;
    let loaded = qnnx_engine::saved::load(&args.model).map_err(|e| {
        // `inspect` reads the same manifest: send the user there only if it can.
        let hint = if qnnx_engine::saved::read_manifest(&args.model).is_ok() {
            format!("`qnnx inspect {}` shows the manifest", args.model.display())
        } else {
            DAMAGED_SAVED.to_string()
        };
        Failure::new(format!("{e}\nhint: {hint}"))
    })?;
    let c = match &args.graph {
        Some(name) => loaded
            .graphs
            .iter()
            .find(|g| g.emitted.graph.name() == name)
            .ok_or_else(|| Failure::new(format!("no graph {name:?} in the saved model")))?,
        None => &loaded.graphs[0],
    };
    let name = c.emitted.graph.name().to_string();
    let text = format!("loaded in {:.1} ms", c.load_ms);
    let prepare = json!({ "load_ms": c.load_ms, "soc_model": loaded.manifest.soc_model });
    let stages = [("load", c.load_ms)];
    // A saved model carries no ONNX: profiled ops are named by QNN only.
    run_compiled(cli, args, c, &name, prepare, text, &stages, &|| {
        Ok(NodeOrigins::default())
    })
}

#[allow(clippy::too_many_arguments)]
fn report(
    cli: &Cli,
    args: &RunArgs,
    graph: &str,
    prepare: serde_json::Value,
    prepare_text: String,
    timing: &Timing,
    written: &[Written],
    profile: Option<&ExecutionProfile>,
) {
    let t = &timing.times;
    let mut report = json!({
        "model": args.model,
        "graph": graph,
        "prepare": prepare,
        "first_execute_ms": timing.first_ms,
        "runs": args.runs,
        "min_ms": t.first(),
        "median_ms": percentile(t, 0.5),
        "p95_ms": percentile(t, 0.95),
        "outputs": written.iter().map(|w| json!({
            "name": w.name,
            "dtype": w.summary.dtype.name(),
            "shape": w.summary.shape,
            "min": w.summary.min,
            "max": w.summary.max,
            "mean": w.summary.mean,
            "file": w.file,
        })).collect::<Vec<_>>(),
    });
    if let Some(p) = profile {
        let mut v = p.to_json();
        v["by_onnx_node"] = p
            .by_onnx_node()
            .into_iter()
            .map(|(node, value, share)| json!({"onnx_node": node, "value": value, "share": share}))
            .collect();
        report["profile"] = v;
        report["trace"] = json!(args.trace);
    }
    emit(cli, &report, || {
        let mut s = format!(
            "graph {graph:?}: {prepare_text}, first execute {:.2} ms\n",
            timing.first_ms
        );
        if !t.is_empty() {
            s += &format!(
                "latency over {} runs: min {:.3} ms, median {:.3} ms, p95 {:.3} ms\n",
                args.runs,
                t[0],
                percentile(t, 0.5).unwrap_or(0.0),
                percentile(t, 0.95).unwrap_or(0.0)
            );
        }
        for w in written {
            s += &format!("output {:?}: {}", w.name, w.summary);
            match &w.file {
                Some(p) => s += &format!(", wrote {}\n", p.display()),
                None => s += "\n",
            }
        }
        if written.iter().all(|w| w.file.is_none()) {
            s += "(pass -o DIR to write the outputs as .npy)\n";
        }
        if let Some(p) = profile {
            s += &profile_text(p);
        }
        if let Some(path) = &args.trace {
            s += &format!("wrote the trace to {}\n", path.display());
        }
        s
    });
}

fn run_binary(cli: &Cli, args: &RunArgs) -> Result<ExitCode, Failure> {
    let b = &args.build;
    refuse_build_flags(args)?;
    let bytes = crate::read_file(&args.model)?;
    // On the emulator, emulate the SoC the binary was compiled for unless told otherwise.
    let info = crate::system_library(cli)
        .ok()
        .and_then(|s| qnn::binary_info(&s, &bytes).ok());
    let default_soc = info
        .as_ref()
        .and_then(|i| i.soc_model)
        .filter(|_| qnn::HtpDeviceConfig::host_default().soc_model.is_some());
    let target = crate::target::resolve(cli, &b.target, default_soc)?;
    let rt = qnnx_engine::registry::for_target(&target, None, false).map_err(|e| {
        let hint = match &e {
            qnnx_engine::Error::Qnn { source, .. } => {
                crate::compile::qnn_hint(source, target.backend)
            }
            _ => None,
        };
        let hint = hint.unwrap_or("`qnnx doctor` shows where QNN libraries are looked for");
        Failure::new(format!("{e}\nhint: {hint}"))
    })?;
    // A SoC named on the command line is the target the binary must be for: the emulator would
    // run it anyway (docs/qnn-notes.md gotcha 12), and a device may not.
    let named_soc = b.target.soc.is_some() || b.target.soc_model.is_some();
    let expected = qnn::ExpectedBinary {
        soc_model: target.soc_model.filter(|_| named_soc),
        build_id: None,
    };
    let binary_soc = info.as_ref().and_then(|i| i.soc_model).filter(|&s| s != 0);
    let t = Instant::now();
    let ctx = Context::from_binary_expecting(&rt.backend, Some(&rt.device), &bytes, &expected)
        .map_err(|e| {
            let path = args.model.display();
            match binary_soc {
                Some(soc) if expected.soc_model.is_some_and(|want| want != soc) => {
                    let name = qnn::soc::by_model(soc)
                        .map(|s| format!("--soc {}", s.name))
                        .unwrap_or_else(|| format!("--soc-model {soc}"));
                    Failure::unsupported(
                        format!(
                            "{path}: {e}\nhint: compile the model again for the target, or run \
                             the binary as what it was compiled for ({name}, the default)"
                        ),
                        None,
                    )
                }
                // QNN read the binary's header (what `inspect` shows) but cannot load it.
                _ if info.is_some() => Failure::new(format!(
                    "{path}: {e}\nhint: `qnnx inspect {path}` shows what the binary is for"
                )),
                _ => Failure::new(format!("{path}: {e}\nhint: {DAMAGED_BINARY}")),
            }
        })?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let names = ctx.graph_names();
    let name = match &args.graph {
        Some(n) => n.clone(),
        None => names
            .first()
            .cloned()
            .ok_or_else(|| Failure::new("the context binary has no graphs"))?,
    };
    let graph = ctx
        .graph(&name)
        .map_err(|e| Failure::new(format!("{e}\nhint: the binary's graphs are {names:?}")))?;
    let ios: Vec<Io> = graph
        .inputs()
        .iter()
        .map(|t| Io {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: t.dims.iter().map(|&d| d as usize).collect(),
        })
        .collect();
    let arrays = input_arrays(&args.inputs, &ios, &format!("graph {name:?}"))?;
    let ins: Vec<(DType, Cow<[u8]>)> = arrays
        .iter()
        .map(|a| (a.dtype, Cow::Borrowed(&a.data[..])))
        .collect();
    let (timing, outs) = execute(&graph, &ins, args.runs)?;
    // A binary carries QNN node names only: the ONNX nodes and QNN ops are in the sidecar
    // `qnnx compile` wrote beside it, when there is one for this binary.
    let profile = profile_and_trace(
        args,
        |level| {
            let origins = binary_origins(&args.model, &bytes, &name);
            profiled(&rt.backend, &graph, &ins, level, &origins)
        },
        &name,
        &[("load", load_ms)],
    )?;
    let names: Vec<String> = graph.outputs().iter().map(|t| t.name.clone()).collect();
    let arrays = graph
        .outputs()
        .iter()
        .zip(outs)
        .map(|(t, data)| npy::Array {
            dtype: t.dtype,
            shape: t.dims.iter().map(|&d| d as usize).collect(),
            data,
        })
        .collect();
    let written = write_outputs(args.output_dir.as_deref(), arrays, &names)?;
    report(
        cli,
        args,
        &name,
        json!({ "load_ms": load_ms, "soc_model": target.soc_model }),
        format!("load {load_ms:.1} ms"),
        &timing,
        &written,
        profile.as_ref(),
    );
    Ok(ExitCode::SUCCESS)
}

fn run_onnx(cli: &Cli, args: &RunArgs) -> Result<ExitCode, Failure> {
    if args.graph.is_some() {
        return Err(Failure::usage(
            "--graph selects a graph of a context binary; an ONNX model has one",
        ));
    }
    let built = crate::compile::build(cli, &args.model, &args.build, "qnnx", false)?;
    let c = &built.compiled;
    let mut stages: Vec<(&str, f64)> = vec![("read file", built.read_ms)];
    stages.extend(c.timings.stages.iter().map(|&(t, ms)| (t.name(), ms)));
    let prepare_text = if c.from_cache {
        format!("loaded from the cache in {:.1} ms", c.load_ms)
    } else {
        format!(
            "compiled in {:.0} ms (lowering {:.0} ms, finalize {:.0} ms)",
            built.total_ms, c.lower_ms, c.finalize_ms
        )
    };
    let prepare = json!({
        "compile_ms": built.total_ms,
        "lower_ms": c.lower_ms,
        "finalize_ms": c.finalize_ms,
        "load_ms": c.load_ms,
        "from_cache": c.from_cache,
        "cache_key": c.cache_key.as_ref().map(|k| k.to_string()),
        "soc_model": built.target.soc_model,
    });
    run_compiled(
        cli,
        args,
        c,
        "qnnx",
        prepare,
        prepare_text,
        &stages,
        &|| {
            qnnx_engine::compile::node_origins(built.target.backend, &built.onnx, &built.opts)
                .map_err(|e| Failure::new(format!("naming the profiled ops: {e}")))
        },
    )
}

/// Runs a compiled model (ONNX or saved) on the inputs of `args` in the model's dtypes and
/// reports; `prepare` and `prepare_text` say how it was made ready, `stages` how long each step
/// took (for the trace), and `origins` names the ONNX nodes of profiled ops when the compile
/// did not record them.
#[allow(clippy::too_many_arguments)]
fn run_compiled(
    cli: &Cli,
    args: &RunArgs,
    c: &qnnx_engine::Compiled,
    graph: &str,
    prepare: serde_json::Value,
    prepare_text: String,
    stages: &[(&str, f64)],
    origins: &dyn Fn() -> Result<NodeOrigins, Failure>,
) -> Result<ExitCode, Failure> {
    let e = &c.emitted;
    let ios: Vec<Io> = e
        .inputs
        .iter()
        .map(|io| Io {
            name: io.onnx_name.clone(),
            dtype: io.host_dtype,
            shape: io.shape.clone(),
        })
        .collect();
    let (arrays, mut given) = arrays_for(given_arrays(&args.inputs)?, &ios, "the model")?;
    let mut arrays = arrays.into_iter();
    let host = |a: npy::Array| qnnx_engine::HostTensor {
        dtype: a.dtype,
        shape: a.shape,
        data: a.data,
    };
    // The model's inputs in ONNX order. An input the graph was compiled for one value of
    // (--fix-input, or resolved from the model's declared shapes) is checked when a file gives
    // it, and otherwise takes that value.
    let mut hosts: Vec<qnnx_engine::HostTensor> = Vec::new();
    for m in e.model_inputs() {
        hosts.push(match m {
            qnnx_engine::io::ModelInput::Graph(_) => {
                host(arrays.next().expect("one per graph input"))
            }
            qnnx_engine::io::ModelInput::Assumed(j) => {
                let a = &e.assumed[j];
                match given.remove(&a.onnx_name) {
                    Some(arr) => host(arr),
                    None => qnnx_engine::HostTensor {
                        dtype: a.value.dtype,
                        shape: a.value.shape.clone(),
                        data: a.value.bytes().to_vec(),
                    },
                }
            }
        });
    }
    if let Some(extra) = given.keys().next() {
        let names: Vec<String> = e
            .model_inputs()
            .into_iter()
            .map(|m| match m {
                qnnx_engine::io::ModelInput::Graph(i) => e.inputs[i].onnx_name.clone(),
                qnnx_engine::io::ModelInput::Assumed(j) => e.assumed[j].onnx_name.clone(),
            })
            .collect();
        return Err(Failure::new(format!(
            "the model has no input {extra:?}; its inputs are {names:?}"
        )));
    }
    let ins = e
        .graph_inputs(&hosts)
        .map_err(|err| Failure::new(err.to_string()))?;
    let (timing, outs) = execute(&e.graph, &ins, args.runs)?;
    let profile = profile_and_trace(
        args,
        |level| {
            let found;
            let origins = if c.origins.is_empty() {
                found = origins()?;
                &found
            } else {
                &c.origins
            };
            profiled(&c.runtime.backend, &e.graph, &ins, level, origins)
        },
        graph,
        stages,
    )?;
    let hosts = e.host_outputs(outs);
    let mut arrays = Vec::new();
    for h in hosts {
        arrays.push(npy::Array {
            dtype: h.dtype,
            shape: h.shape,
            data: h.data,
        });
    }
    let names: Vec<String> = e.outputs.iter().map(|o| o.onnx_name.clone()).collect();
    let written = write_outputs(args.output_dir.as_deref(), arrays, &names)?;
    report(
        cli,
        args,
        graph,
        prepare,
        prepare_text,
        &timing,
        &written,
        profile.as_ref(),
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_inputs_depend_on_the_name_only() {
        let io = |name: &str| Io {
            name: name.into(),
            dtype: DType::F32,
            shape: vec![2, 3],
        };
        assert_eq!(random_array(&io("x")), random_array(&io("x")));
        assert_ne!(random_array(&io("x")).data, random_array(&io("y")).data);
    }

    #[test]
    fn percentiles_of_sorted_times() {
        let t: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&t, 0.5), Some(11.0));
        assert_eq!(percentile(&t, 0.95), Some(19.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
