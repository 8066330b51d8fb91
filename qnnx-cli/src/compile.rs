//! `qnnx compile` of one model into one context binary ([`compile`]); several models go to
//! `compile_many.rs` (one context) or `compile_each.rs` (`--each`), chosen in `main.rs`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};

use crate::build::{build, io_json, timings_json, timings_text, BuildArgs, Precision, Written};
use crate::{emit, Cli, Failure};

#[derive(clap::Args, Debug)]
pub struct CompileArgs {
    /// The ONNX model (external data files are read from its folder). Several models become
    /// graphs of one context binary (the prefill and decode graphs of one model, say), which
    /// stores weights equal across them once.
    #[arg(required = true, value_name = "MODEL")]
    pub models: Vec<PathBuf>,
    /// Where to write the context binary [default: the model's path with .bin; required with
    /// several models].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Name of the graph inside the context binary, for one model [default: qnnx].
    #[arg(long, value_name = "NAME")]
    pub graph_name: Option<String>,
    /// Graph names in model order, comma-separated [default with several models: the file
    /// names without extension].
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "NAME,...",
        conflicts_with = "graph_name"
    )]
    pub names: Vec<String>,
    /// With several models, give each graph its own copy of the weights. Weight sharing (the
    /// default) makes the binary smaller, but only a device can load it: the x86_64 HTP
    /// library cannot.
    #[arg(long)]
    pub no_weight_sharing: bool,
    /// Print how long each stage took (reading, backend open, cache, load, passes, lowering,
    /// QNN graph build, finalize, serialization, writing). `QNNX_LOG=info` logs the engine's
    /// stages as they end; --json always reports them.
    #[arg(long)]
    pub timings: bool,
    /// With several models: one context binary per model (MODEL.bin, or in --out-dir) instead
    /// of one for all, built in processes of their own, --jobs at a time (finalize runs one
    /// graph at a time per process: docs/profiling.md).
    #[arg(long, conflicts_with_all = ["output", "names", "graph_name", "no_weight_sharing"])]
    pub each: bool,
    /// With --each: how many models to build at once [default: the number of CPUs].
    #[arg(long, value_name = "N", requires = "each")]
    pub jobs: Option<usize>,
    /// With --each: the folder for the binaries [default: next to each model].
    #[arg(long, value_name = "DIR", requires = "each")]
    pub out_dir: Option<PathBuf>,
    #[command(flatten)]
    pub build: BuildArgs,
}

/// `qnnx compile model.onnx`: one model, to `-o` or the model's path with `.bin`.
pub fn compile(cli: &Cli, args: &CompileArgs) -> Result<ExitCode, Failure> {
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| args.models[0].with_extension("bin"));
    compile_one(cli, args, &args.models[0], &output)
}

/// One model into one context binary at `output`.
pub(crate) fn compile_one(
    cli: &Cli,
    args: &CompileArgs,
    model: &Path,
    output: &Path,
) -> Result<ExitCode, Failure> {
    let graph_name = match (&args.graph_name, &args.names[..]) {
        (Some(n), _) => n.clone(),
        (None, [n]) => n.clone(),
        (None, []) => "qnnx".to_string(),
        (None, names) => {
            return Err(Failure::usage(format!(
                "--names gives {} names for 1 model",
                names.len()
            )))
        }
    };
    if output == model {
        return Err(Failure::usage(format!(
            "the output {} would replace the model; pass -o FILE",
            output.display()
        )));
    }
    let built = build(cli, model, &args.build, &graph_name, args.timings)?;
    let c = &built.compiled;
    let mut stages: Vec<(&str, f64)> = vec![("read file", built.read_ms)];
    stages.extend(c.timings.stages.iter().map(|&(t, ms)| (t.name(), ms)));
    let start = std::time::Instant::now();
    let binary = built.binary()?;
    // A cached graph's binary is the entry's file: QNN cannot serialise a loaded context.
    let cached = c.from_cache || c.timings.get(qnnx_engine::Timed::CacheStore) > 0.0;
    let what = if cached {
        "binary from the cache"
    } else {
        "serialization"
    };
    stages.push((what, start.elapsed().as_secs_f64() * 1e3));
    let start = std::time::Instant::now();
    // A graph loaded from a cache entry without them is lowered again to name its nodes.
    let origins = if c.origins.is_empty() {
        qnnx_engine::compile::node_origins(built.target.backend, &built.onnx, &built.opts)
            .unwrap_or_default()
    } else {
        c.origins.clone()
    };
    let written = Written::write(
        output,
        &binary,
        &[(graph_name.as_str(), &origins)],
        &c.runtime.backend,
        &built.target,
    )?;
    stages.push(("write", start.elapsed().as_secs_f64() * 1e3));
    let (info, soc_model, soc) = (&written.info, written.soc_model, written.soc);
    let (inputs, outputs) = io_json(&c.emitted);
    let assumed = assumed_json(&c.emitted);
    let report = json!({
        "model": model,
        "output": output,
        "assumed_inputs": assumed,
        "size": binary.len(),
        "backend": built.target.backend.name(),
        "soc_model": soc_model,
        "soc": soc.map(|s| s.name),
        "htp_arch": soc.map(|s| s.arch).or(built.target.arch()).map(|a| a.number()),
        "build_id": info.as_ref().map(|i| i.build_id.clone()),
        "graph": graph_name,
        "precision": if args.build.precision == Precision::Fp16 { "fp16" } else { "fp32" },
        "opt_level": args.build.opt_level,
        "inputs": inputs,
        "outputs": outputs,
        "lower_ms": c.lower_ms,
        "finalize_ms": c.finalize_ms,
        "total_ms": built.total_ms,
        "from_cache": c.from_cache,
        "cache_key": c.cache_key.as_ref().map(|k| k.to_string()),
        "timings": timings_json(&stages),
        "finalize_phases": c.finalize_phases.iter()
            .map(|(phase, ms)| json!({ "phase": phase, "ms": ms }))
            .collect::<Vec<_>>(),
    });
    emit(cli, &report, || {
        let target = written.describe(&built.target);
        let how = if c.from_cache {
            format!("loaded from the cache in {:.0} ms", c.load_ms)
        } else {
            format!(
                "lowering {:.0} ms, finalize {:.0} ms",
                c.lower_ms, c.finalize_ms
            )
        };
        let mut s = format!(
            "wrote {}: {} bytes, graph {:?} for {target} ({how})\n",
            output.display(),
            binary.len(),
            graph_name
        );
        for (what, list) in [("input ", &inputs), ("output", &outputs)] {
            for t in list {
                let (dtype, model) = (t["dtype"].as_str(), t["model_dtype"].as_str());
                let converted = if dtype != model {
                    format!(" (the model's {})", model.unwrap_or("?"))
                } else {
                    String::new()
                };
                s += &format!(
                    "  {what} {:<24} {:<5} {}{converted}\n",
                    t["name"].as_str().unwrap_or(""),
                    dtype.unwrap_or(""),
                    t["shape"]
                );
            }
        }
        s += &assumed_text(&assumed);
        if args.timings {
            s += &timings_text(&stages);
            if !c.finalize_phases.is_empty() {
                s += "  finalize, by QNN's preparer (its detailed profile):\n";
                for (phase, ms) in &c.finalize_phases {
                    s += &format!("    {phase:<30} {ms:>9.1}\n");
                }
            }
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}

/// The model inputs a compiled graph does not take (fixed, or resolved from declared shapes):
/// name, dtype, shape, value, and where the value comes from.
pub fn assumed_json(e: &qnnx_engine::Emitted) -> Vec<Value> {
    use lowering::plan::Source;
    e.assumed
        .iter()
        .map(|a| {
            json!({
                "name": a.onnx_name,
                "dtype": a.value.dtype.name(),
                "shape": a.value.shape,
                "value": lowering::plan::assumed::fmt_value(&a.value),
                "origin": match &a.origin {
                    Source::Fixed => "--fix-input".to_string(),
                    Source::Declared { node, value } => {
                        format!("the declared shape of {value:?} (node {node:?})")
                    }
                },
            })
        })
        .collect()
}

/// Text lines of [`assumed_json`].
pub fn assumed_text(list: &[Value]) -> String {
    list.iter()
        .map(|a| {
            format!(
                "  assumed {:<23} {} (from {}; not a graph input, checked when passed)\n",
                a["name"].as_str().unwrap_or(""),
                a["value"].as_str().unwrap_or(""),
                a["origin"].as_str().unwrap_or("")
            )
        })
        .collect()
}
