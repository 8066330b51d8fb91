//! `qnnx compile` and `qnnx check`, and the in-memory compile behind `qnnx run model.onnx`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lowering::{LowerError, Model, Unsupported};
use qnnx_engine::cache::{Cache, CacheKey};
use qnnx_engine::profile::{sidecar, NodeOrigins};
use qnnx_engine::{CompileOptions, Compiled, Error, Stage, Target};
use qnnx_types::{tensor_type_name, BackendKind};
use serde_json::{json, Value};

use crate::progress::Progress;
use crate::target::TargetArgs;
use crate::{emit, read_file, Cli, Failure, EXIT_UNSUPPORTED};

/// Float precision of the compiled graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Precision {
    /// Weights and activations stored as float16 in the graph (graph I/O keeps the model's
    /// dtypes).
    Fp16,
    /// Float tensors stay float32 (FP16-capable HTPs still compute in fp16).
    #[default]
    Fp32,
}

/// How to build the graph: shared by `compile` and `run model.onnx`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BuildArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// HTP finalize optimization level: higher spends more compile time for a faster graph.
    #[arg(long, value_name = "1-3", value_parser = clap::value_parser!(u8).range(1..=3))]
    pub opt_level: Option<u8>,
    /// Precision of float weights and activations inside the graph.
    #[arg(long, value_enum, default_value_t = Precision::Fp32)]
    pub precision: Precision,
    /// Static shape for an input with symbolic dims, as NAME=D,D,... (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// For a quantized (QDQ) model: pass the float inputs it quantizes first, and receive the
    /// float outputs it dequantizes last, as their integers (uint8/uint16...) instead of
    /// converting them in the graph.
    #[arg(long)]
    pub quantized_io: bool,
    /// Fix a small input (a scalar or a short 1-D tensor: a flag, a sample rate, a shape) to a
    /// value at compile time, as NAME=VALUE with VALUE like 3, 0.5, true or 1,2,3 (the dtype is
    /// the model's); repeatable. The input leaves the compiled graph; a value passed for it at
    /// run time must be this one.
    #[arg(long = "fix-input", value_name = "NAME=VALUE")]
    pub fix_inputs: Vec<String>,
    /// Use the context-binary cache: load a binary compiled earlier for the same model, target
    /// and settings, or store the new one (see --cache-dir).
    #[arg(long)]
    pub cache: bool,
}

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

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The ONNX model.
    pub model: PathBuf,
    // The backend and target, as for `compile`: a SoC or HTP arch without a float path (v68:
    // QCS6490, SM8350) refuses a float model, or float nodes of a quantized one, as `compile`
    // does.
    #[command(flatten)]
    pub target: TargetArgs,
    /// List every tensor of the lowered graph with its dtype and, when quantized, its encoding
    /// (a quantized model lists its I/O and a summary without this).
    #[arg(long)]
    pub tensors: bool,
    /// Static shape for an input with symbolic dims, as NAME=D,D,... (repeatable). Without
    /// one for each such input, check lists them instead of guessing sizes.
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// Fix an input to a value, as NAME=VALUE (as for `compile`; repeatable).
    #[arg(long = "fix-input", value_name = "NAME=VALUE")]
    pub fix_inputs: Vec<String>,
}

/// The lowered plan's tensors for `check`: all with `all`, else a quantized plan's I/O and the
/// nodes that compute in float; `None` for a float plan without `all`.
fn plan_tensors(plan: &lowering::Plan, all: bool) -> Option<(Value, String)> {
    let quantized = plan.tensors.iter().any(|t| t.quant.is_some());
    if !quantized && !all {
        return None;
    }
    use lowering::plan::TensorKind;
    let mut rows = Vec::new();
    let mut text = String::new();
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    for t in &plan.tensors {
        let ty = qnnx_types::tensor_type_name(t.dtype, t.quant.is_some());
        *by_type.entry(ty.clone()).or_default() += 1;
        let kind = match t.kind {
            TensorKind::Input => "input",
            TensorKind::Output => "output",
            TensorKind::Native => "native",
            TensorKind::Static(_) => "static",
            TensorKind::Null => "null",
        };
        let enc = t.quant.as_ref().map(|q| q.to_string()).unwrap_or_default();
        if all || matches!(t.kind, TensorKind::Input | TensorKind::Output) {
            text += &format!("  {kind:<6} {:<32} {ty:<5} {:?} {enc}\n", t.name, t.shape);
        }
        rows.push(json!({
            "name": t.name,
            "kind": kind,
            "dtype": ty,
            "shape": t.shape,
            "encoding": t.quant.as_ref().map(|q| json!({
                "storage": q.storage.name(),
                "axis": q.axis,
                "scales": q.scales,
                "offsets": q.offsets,
            })),
        }));
    }
    let float_nodes: Vec<&str> = {
        let mut v: Vec<&str> = Vec::new();
        for o in plan
            .ops
            .iter()
            .filter(|o| !matches!(o.type_name, "Quantize" | "Dequantize"))
        {
            let float = o
                .inputs
                .iter()
                .chain(&o.outputs)
                .any(|&t| plan.tensors[t].dtype.is_float());
            if quantized && float && !v.contains(&o.onnx_node.as_str()) {
                v.push(&o.onnx_node);
            }
        }
        v
    };
    let summary: Vec<String> = by_type.iter().map(|(t, n)| format!("{n} {t}")).collect();
    let mut head = format!("tensors: {}\n", summary.join(", "));
    if quantized {
        head += &match float_nodes.len() {
            0 => "every op runs on quantized tensors\n".to_string(),
            n => format!(
                "{n} node(s) compute in float (impossible on v68 SoCs): {}\n",
                float_nodes.join(", ")
            ),
        };
    }
    Some((
        json!({ "tensors": rows, "float_nodes": float_nodes, "quantized": quantized }),
        head + &text,
    ))
}

pub(crate) fn parse_shapes(specs: &[String]) -> Result<BTreeMap<String, Vec<usize>>, Failure> {
    let mut out = BTreeMap::new();
    for spec in specs {
        let bad = || {
            Failure::usage(format!(
                "--input-shape {spec:?}: expected NAME=D,D,... such as x=1,3,224,224"
            ))
        };
        let (name, dims) = spec.split_once('=').ok_or_else(bad)?;
        let dims = dims
            .split(',')
            .map(|d| d.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad())?;
        out.insert(name.to_string(), dims);
    }
    Ok(out)
}

/// `--fix-input NAME=VALUE` flags by input name; the value is parsed against the model's
/// declared input type when the model is lowered.
pub(crate) fn parse_fixed(specs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut out = BTreeMap::new();
    for spec in specs {
        let (name, value) = spec.split_once('=').filter(|(n, _)| !n.is_empty()).ok_or_else(|| {
            Failure::usage(format!(
                "--fix-input {spec:?}: expected NAME=VALUE such as mode=1, scale=0.5, flag=true or shape=1,3,224,224"
            ))
        })?;
        if out.insert(name.to_string(), value.to_string()).is_some() {
            return Err(Failure::usage(format!("--fix-input gives {name:?} twice")));
        }
    }
    Ok(out)
}

/// A model read from disk and decoded (validated) once.
pub struct OnnxFile {
    pub bytes: Vec<u8>,
    pub model: Model,
    pub dir: PathBuf,
}

pub fn load_onnx(path: &Path) -> Result<OnnxFile, Failure> {
    let bytes = read_file(path)?;
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let model = Model::from_bytes(&bytes, Some(&dir)).map_err(|e| {
        Failure::new(format!(
            "{}: {e}\nhint: is this an ONNX model? onnx.checker.check_model(path) in Python says what is wrong with it",
            path.display()
        ))
    })?;
    Ok(OnnxFile { bytes, model, dir })
}

fn unsupported_json(list: &[Unsupported]) -> Value {
    list.iter()
        .map(|u| json!({ "node": u.node, "op_type": u.op_type, "reason": u.reason }))
        .collect()
}

/// What to do about a QNN error that is not about the graph: no library found or opened, or a
/// backend that does not start here; `None` for the graph's own errors.
pub fn qnn_hint(e: &qnn::Error, backend: BackendKind) -> Option<&'static str> {
    match e {
        qnn::Error::Load(_) => Some(
            "no usable QNN library: `qnnx doctor` shows where each is looked for; install one \
             (`pip install onnxruntime-qnn` on x86_64, or `scripts/setup-runtime` in a checkout) \
             and point at it with QNNX_RUNTIME_DIR, QNN_LIB_DIR or --qnn-lib PATH",
        ),
        qnn::Error::Api(a)
            if matches!(a.call, "logCreate" | "backendCreate" | "deviceCreate")
                && backend == BackendKind::Gpu =>
        {
            Some(
                "the QNN GPU backend did not start here; `qnnx doctor` shows which backends \
                 start, `qnnx check MODEL --backend gpu` which nodes lower to the GPU",
            )
        }
        qnn::Error::Api(a) if matches!(a.call, "logCreate" | "backendCreate" | "deviceCreate") => {
            Some("the QNN backend did not start here; `qnnx doctor` shows which backends start")
        }
        _ => None,
    }
}

/// A compile error as a failure with what to do next.
pub fn compile_failure(e: Error, model: &Path, backend: BackendKind) -> Failure {
    let check_hint = format!(
        "hint: `qnnx check {}{}` lists every node and whether it lowers",
        model.display(),
        match backend {
            BackendKind::Htp => "".to_string(),
            BackendKind::Gpu | BackendKind::Cpu => format!(" --backend {}", backend.name()),
        }
    );
    let e = match e {
        Error::Lower(e) => e,
        Error::NoFloatPath {
            message,
            float_tensors,
        } => {
            return Failure::unsupported(
                format!("{}: {message}", model.display()),
                Some(json!({ "float_tensors": float_tensors })),
            )
        }
        Error::Qnn { ref source, .. } => {
            let hint = qnn_hint(source, backend)
                .unwrap_or("QNN refused the graph; QNNX_LOG=qnn=info shows QNN's log");
            return Failure::new(format!("{}: {e}\nhint: {hint}", model.display()));
        }
        Error::Target(m) => return Failure::usage(m),
        other => return Failure::new(format!("{}: {other}", model.display())),
    };
    let list = match &e {
        LowerError::UnsupportedOp { .. }
        | LowerError::UnsupportedAttr { .. }
        | LowerError::UnsupportedDtype { .. }
        | LowerError::Unsupported(_) => Some(e.to_unsupported("", "")),
        LowerError::InvalidModel(_) => None,
    };
    if let Some(list) = list {
        let lines: Vec<String> = list.iter().map(|u| format!("  {}", u.reason)).collect();
        return Failure::unsupported(
            format!(
                "{}: {} node(s) cannot run on {}:\n{}\n{check_hint}",
                model.display(),
                list.len(),
                backend,
                lines.join("\n")
            ),
            Some(json!({ "unsupported": unsupported_json(&list) })),
        );
    }
    let text = e.to_string();
    let (text, hint) = if text.contains("LowerOptions::input_shapes") {
        (
            text.replace("in LowerOptions::input_shapes", "with --input-shape")
                .replace("LowerOptions::input_shapes", "--input-shape"),
            "\nhint: give static shapes with --input-shape NAME=D,D,... (for example x=1,3,224,224)",
        )
    } else {
        (text.replace("fix_inputs", "--fix-input"), "")
    };
    Failure::new(format!("{}: {text}{hint}", model.display()))
}

/// Opens the cache folder for `--cache`.
/// A folder someone else owns or could write is not used: the compile goes on without it,
/// with one warning.
pub fn open_cache(cli: &Cli) -> Result<Option<Cache>, Failure> {
    let dir = crate::cache::dir(cli).ok_or_else(|| {
        Failure::new("no cache folder is known: pass --cache-dir DIR or set QNNX_CACHE_DIR")
    })?;
    match Cache::open(&dir, None) {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.is_untrusted() => {
            eprintln!("qnnx: warning: {e}");
            Ok(None)
        }
        Err(e) => Err(Failure::new(format!(
            "{e}\nhint: pass a writable --cache-dir, or leave out --cache"
        ))),
    }
}

/// The context binary of a compile. QNN cannot serialise a context it deserialised, so for one
/// loaded from the cache (`from_cache`, with its `cache` and `key`) it is the entry's file.
pub(crate) fn context_binary(
    context: &qnn::Context,
    from_cache: bool,
    cache: Option<&Cache>,
    key: Option<&CacheKey>,
) -> Result<Vec<u8>, Failure> {
    if let (true, Some(cache), Some(key)) = (from_cache, cache, key) {
        let path = cache.bin_path(key);
        return std::fs::read(&path).map_err(|e| {
            Failure::new(format!(
                "cannot read the cached binary {}: {e}\nhint: it was removed meanwhile; run the command again",
                path.display()
            ))
        });
    }
    context
        .to_binary()
        .map_err(|e| Failure::new(format!("cannot serialise the compiled context: {e}")))
}

/// A context binary written to disk and what it targets.
pub(crate) struct Written {
    /// What the library reads from the binary, when it does.
    pub info: Option<qnn::BinaryInfo>,
    /// The SoC recorded in the binary, which is what a device will check, else the target's.
    pub soc_model: Option<u32>,
    pub soc: Option<&'static qnn::soc::Soc>,
}

impl Written {
    /// Writes `binary` to `output`, and beside it which ONNX node and QNN op each node of its
    /// `graphs` came from (for profiles: [`qnnx_engine::profile::sidecar`]), and reads what it
    /// targets.
    pub fn write(
        output: &Path,
        binary: &[u8],
        graphs: &[(&str, &NodeOrigins)],
        backend: &qnn::Backend,
        target: &Target,
    ) -> Result<Written, Failure> {
        qnn::write_atomic(output, binary)
            .map_err(|e| Failure::new(format!("cannot write {}: {e}", output.display())))?;
        if let Err(e) = sidecar::write(output, binary, graphs) {
            eprintln!(
                "qnnx: warning: cannot write {}: {e} (profiles of this binary will show QNN node \
                 names only)",
                sidecar::path(output).display()
            );
        }
        let info = backend
            .system()
            .ok()
            .and_then(|s| qnn::binary_info(&s, binary).ok());
        let soc_model = info.as_ref().and_then(|i| i.soc_model).or(target.soc_model);
        let soc = soc_model.and_then(qnn::soc::by_model);
        Ok(Written {
            info,
            soc_model,
            soc,
        })
    }

    /// The target for people: the SoC's name, model number and HTP version where known.
    pub fn describe(&self, target: &Target) -> String {
        match (self.soc, self.soc_model) {
            (Some(s), _) => format!("{} (SoC {}, HTP {})", s.name, s.model, s.arch),
            (None, Some(m)) => format!("SoC {m}"),
            (None, None) => target.describe(),
        }
    }
}

/// A compiled model and what it runs on.
pub struct Built {
    pub compiled: Compiled,
    pub target: Target,
    pub total_ms: f64,
    /// Milliseconds spent reading (and parsing) the model file, before the engine's stages.
    pub read_ms: f64,
    /// The model's bytes and the options it was compiled with (a profile of a cached graph
    /// lowers it again to name its nodes).
    pub onnx: Vec<u8>,
    pub opts: CompileOptions,
    /// The cache, when `--cache` was given.
    pub cache: Option<Cache>,
}

impl Built {
    /// The context binary. QNN cannot serialise a context it deserialised, so a graph loaded
    /// from the cache is taken from the cache entry's file.
    pub fn binary(&self) -> Result<Vec<u8>, Failure> {
        let c = &self.compiled;
        context_binary(
            &c.context,
            c.from_cache,
            self.cache.as_ref(),
            c.cache_key.as_ref(),
        )
    }
}

/// The progress line of a compile stage.
pub fn stage_text(stage: Stage, graph: Option<&str>) -> String {
    let graph = graph.map(|g| format!(" {g:?}")).unwrap_or_default();
    match stage {
        Stage::CacheLookup => "looking in the cache".to_string(),
        Stage::Lower => format!("lowering{graph} ONNX to QNN ops"),
        Stage::Finalize => {
            format!("building and finalizing the QNN graph{graph} (long for large models)")
        }
        Stage::CacheStore => "storing the binary in the cache".to_string(),
    }
}

/// Loads and compiles `model` (or loads it from the cache) with a progress display.
pub fn build(
    cli: &Cli,
    model: &Path,
    args: &BuildArgs,
    graph_name: &str,
    profile_finalize: bool,
) -> Result<Built, Failure> {
    let target = crate::target::resolve(cli, &args.target, None)?;
    let input_shapes = parse_shapes(&args.input_shapes)?;
    let fix_inputs = parse_fixed(&args.fix_inputs)?;
    let progress = Progress::new(cli.json);
    progress.stage("reading the model");
    let read = std::time::Instant::now();
    let file = load_onnx(model)?;
    let read_ms = read.elapsed().as_secs_f64() * 1e3;
    let cache = if args.cache { open_cache(cli)? } else { None };
    let opts = CompileOptions {
        name: graph_name.to_string(),
        fp16: args.precision == Precision::Fp16,
        input_shapes,
        fix_inputs,
        opt_level: args.opt_level,
        quantized_io: args.quantized_io,
        observe: false,
        base_dir: Some(file.dir.clone()),
        profile_finalize,
    };
    let start = std::time::Instant::now();
    progress.stage("opening the QNN backend");
    let compiled = qnnx_engine::compile_with_progress(
        &target,
        &file.bytes,
        &opts,
        cache.as_ref(),
        &mut |stage| progress.stage(&stage_text(stage, None)),
    )
    .map_err(|e| compile_failure(e, model, target.backend))?;
    progress.finish();
    for w in &compiled.warnings {
        eprintln!("qnnx: warning: {w}");
    }
    Ok(Built {
        compiled,
        target,
        total_ms: start.elapsed().as_secs_f64() * 1e3,
        read_ms,
        onnx: file.bytes,
        opts,
        cache,
    })
}

/// Model I/O of a compiled graph in ONNX order: name, graph dtype and shape, model dtype.
pub fn io_json(e: &qnnx_engine::Emitted) -> (Vec<Value>, Vec<Value>) {
    let side = |ios: &[lowering::plan::PlanIo], slots: &[usize], infos: &[qnn::TensorInfo]| {
        ios.iter()
            .zip(slots)
            .map(|(io, &s)| {
                json!({
                    "name": io.onnx_name,
                    "dtype": tensor_type_name(infos[s].dtype, infos[s].quantization.is_quantized()),
                    "shape": infos[s].dims,
                    "model_dtype": io.host_dtype.name(),
                })
            })
            .collect()
    };
    (
        side(&e.inputs, &e.input_slots, e.graph.inputs()),
        side(&e.outputs, &e.output_slots, e.graph.outputs()),
    )
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

pub fn compile(cli: &Cli, args: &CompileArgs) -> Result<ExitCode, Failure> {
    if args.each {
        return crate::compile_each::compile_each(cli, args);
    }
    if args.models.len() > 1 {
        return crate::compile_many::compile_many(cli, args);
    }
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

/// The failure of `check` for a model whose inputs `symbolic` (name, declared dims) have no
/// static shape: sizes decide whether kernels fit, concatenations agree and reshapes are valid,
/// so none is guessed.
fn symbolic_failure(model: &Path, symbolic: &[(String, String)]) -> Failure {
    let lines: Vec<String> = symbolic.iter().map(|(n, d)| format!("  {n} {d}")).collect();
    let flags: Vec<String> = symbolic
        .iter()
        .map(|(n, d)| {
            let dims = d
                .trim_start_matches('[')
                .trim_end_matches(']')
                .split(", ")
                .map(|x| {
                    if x.parse::<usize>().is_ok() {
                        x.to_string()
                    } else {
                        format!("<{x}>")
                    }
                })
                .collect::<Vec<_>>()
                .join(",");
            format!("--input-shape {n}={dims}")
        })
        .collect();
    Failure {
        code: crate::EXIT_FAILURE,
        msg: format!(
            "{}: {} input(s) have symbolic dims, and whether a node lowers depends on sizes \
             (kernels that fit, concatenations that agree), so check guesses none:\n{}\nhint: \
             give the sizes the model runs at: {}",
            model.display(),
            symbolic.len(),
            lines.join("\n"),
            flags.join(" ")
        ),
        details: Some(json!({
            "symbolic_inputs": symbolic
                .iter()
                .map(|(n, d)| json!({ "name": n, "dims": d }))
                .collect::<Vec<_>>(),
        })),
    }
}

/// Stages and their milliseconds as JSON: `[{"stage": name, "ms": ms}, ...]`.
pub fn timings_json(stages: &[(&str, f64)]) -> Value {
    stages
        .iter()
        .map(|(stage, ms)| json!({ "stage": stage, "ms": ms }))
        .collect()
}

/// The `--timings` table: one line per stage with its share of the total.
pub fn timings_text(stages: &[(&str, f64)]) -> String {
    let total: f64 = stages.iter().map(|(_, ms)| ms).sum();
    let mut s = String::from("  stage                    ms  share\n");
    for (stage, ms) in stages {
        let share = if total > 0.0 { ms / total * 100.0 } else { 0.0 };
        s += &format!("  {stage:<21} {ms:>9.1} {share:>5.1}%\n");
    }
    s += &format!("  {:<21} {total:>9.1}\n", "total");
    s
}

pub fn check(cli: &Cli, args: &CheckArgs) -> Result<ExitCode, Failure> {
    let target = crate::target::resolve(cli, &args.target, None)?;
    let backend = target.backend;
    let file = load_onnx(&args.model)?;
    let opts = lowering::LowerOptions {
        backend,
        input_shapes: parse_shapes(&args.input_shapes)?,
        fix_inputs: parse_fixed(&args.fix_inputs)?,
        ..Default::default()
    };
    let symbolic: Vec<(String, String)> = file
        .model
        .symbolic_inputs()
        .into_iter()
        .filter(|(n, _)| !opts.input_shapes.contains_key(n) && !opts.fix_inputs.contains_key(n))
        .collect();
    if !symbolic.is_empty() {
        return Err(symbolic_failure(&args.model, &symbolic));
    }
    let unsupported = lowering::check_with(&file.model, &opts)
        .map_err(|e| compile_failure(Error::Lower(e), &args.model, backend))?;
    let bad: BTreeMap<&str, &Unsupported> = unsupported
        .iter()
        .filter(|u| !u.node.is_empty())
        .map(|u| (u.node.as_str(), u))
        .collect();
    let nodes: Vec<Value> = file
        .model
        .graph
        .nodes
        .iter()
        .map(|n| {
            let why = bad.get(n.name.as_str());
            json!({
                "name": n.name,
                "op_type": n.op_type,
                "supported": why.is_none(),
                "reason": why.map(|u| u.reason.clone()),
            })
        })
        .collect();
    let mut ops: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for n in &file.model.graph.nodes {
        let e = ops.entry(n.op_type.as_str()).or_default();
        e.0 += 1;
        if bad.contains_key(n.name.as_str()) {
            e.1 += 1;
        }
    }
    let supported_count = nodes.iter().filter(|n| n["supported"] == true).count();
    let plan = unsupported
        .is_empty()
        .then(|| lowering::lower(file.model.clone(), &opts).ok())
        .flatten();
    // What `compile` refuses for the target before QNN is asked: float on a v68-class HTP.
    let no_float_path = match plan.as_ref().map(|p| target.check_plan(p)) {
        Some(Err(Error::NoFloatPath { message, .. })) => Some(message),
        Some(Err(e)) => return Err(compile_failure(e, &args.model, backend)),
        Some(Ok(())) | None => None,
    };
    let ok = unsupported.is_empty() && no_float_path.is_none();
    let tensors = plan.as_ref().and_then(|p| plan_tensors(p, args.tensors));
    let soc = target.soc();
    let report = json!({
        "model": args.model,
        "backend": backend.name(),
        "target": target.describe(),
        "soc_model": target.soc_model,
        "soc": soc.map(|s| s.name),
        "htp_arch": target.arch().map(|a| a.number()),
        "no_float_path": no_float_path,
        "supported": ok,
        "node_count": nodes.len(),
        "supported_count": supported_count,
        "ops": ops.iter().map(|(op, (n, bad))| json!({ "op_type": op, "count": n, "unsupported": bad })).collect::<Vec<_>>(),
        "unsupported": unsupported_json(&unsupported),
        "nodes": nodes,
        "plan": tensors.as_ref().map(|t| t.0.clone()),
    });
    emit(cli, &report, || {
        let name = backend.label();
        let mut s = format!(
            "{}: {supported_count} of {} nodes lower to {name}\n",
            args.model.display(),
            nodes.len()
        );
        s += &format!("  {:<28} {:>5}  {}\n", "op", "nodes", "unsupported");
        for (op, (n, bad)) in &ops {
            let bad = if *bad > 0 {
                bad.to_string()
            } else {
                String::new()
            };
            s += &format!("  {op:<28} {n:>5}  {bad}\n");
        }
        if let Some(m) = &no_float_path {
            s += &format!("cannot run on the target: {m}\n");
            if let Some((_, t)) = &tensors {
                s += t;
            }
        } else if ok {
            s += &format!("every node can run on {}\n", target.describe());
            if let Some((_, t)) = &tensors {
                s += t;
            }
        } else {
            s += &format!("cannot run on {name}:\n");
            for u in &unsupported {
                s += &format!("  {}\n", u.reason);
            }
        }
        s
    });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_UNSUPPORTED)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_shapes_parse() {
        let m = parse_shapes(&["x=1,3,224,224".into(), "ids=1, 8".into()]).unwrap();
        assert_eq!(m["x"], vec![1, 3, 224, 224]);
        assert_eq!(m["ids"], vec![1, 8]);
        let e = parse_shapes(&["x".into()]).unwrap_err();
        assert_eq!(e.code, crate::EXIT_USAGE);
        assert!(parse_shapes(&["x=1,a".into()]).is_err());
    }
}
