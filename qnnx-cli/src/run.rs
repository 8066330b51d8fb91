//! `qnnx run`: a context binary, or an ONNX model compiled in memory, with given or random
//! inputs; outputs as .npy, latency as min / median / p95.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use qnn::Context;
use qnnx_types::DType;
use serde_json::json;

use qnnx_engine::profile::{ExecutionProfile, NodeOrigins};

use crate::build::BuildArgs;
use crate::inputs::{arrays_for, given_arrays, input_arrays, Io};
use crate::npy;
use crate::run_report::{
    binary_origins, execute, percentile, profile_text, profiled, write_outputs, Timing, Written,
};
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
                crate::build::qnn_hint(source, target.backend)
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
    let built = crate::build::build(cli, &args.model, &args.build, "qnnx", false)?;
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
