//! The in-memory compile that `qnnx compile`, `check`, `run model.onnx`, `compare` and
//! `quantize` share: the build flags ([`BuildArgs`]), reading an ONNX model and its input shape
//! and fixed-input flags, turning engine errors into failures with hints, the cache, [`build`]
//! (one model compiled in memory), and the I/O and timing reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lowering::{LowerError, Model, Unsupported};
use qnnx_engine::cache::{Cache, CacheKey};
use qnnx_engine::profile::{sidecar, NodeOrigins};
use qnnx_engine::{CompileOptions, Compiled, Error, Stage, Target};
use qnnx_types::{tensor_type_name, BackendKind};
use serde_json::{json, Value};

use crate::progress::Progress;
use crate::target::TargetArgs;
use crate::{read_file, Cli, Failure};

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

pub(crate) fn unsupported_json(list: &[Unsupported]) -> Value {
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
            let hint = qnn_hint(source, backend).unwrap_or(if e.is_finalize_mem_alloc() {
                "every op validated, but the HTP's memory planner could not place the graph's \
                 tensors (about 2 GB at most live at once, graph outputs for the whole \
                 execute): fewer or smaller outputs, or a smaller input shape (--input-shape), \
                 make it fit; QNNX_LOG=qnn=info shows QNN's log"
            } else {
                "QNN refused the graph; QNNX_LOG=qnn=info shows QNN's log"
            });
            return Failure::new(format!("{}: {e}\nhint: {hint}", model.display()));
        }
        Error::Target(m) => return Failure::usage(m),
        Error::TargetLacks(m) => {
            return Failure::unsupported(format!("{}: {m}", model.display()), None)
        }
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
