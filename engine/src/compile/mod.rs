//! The compile driver: ONNX bytes to a finalized graph, through the persistent context-binary
//! cache, with progress stages. The same path serves the `qnnx` command and the Python package.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use lowering::{LowerOptions, Plan};
use qnnx_types::BackendKind;

use crate::cache::{Cache, CacheKey, Entry, NewEntry};
use crate::emit::{emit_with, Emitted};
use crate::error::Result;
use crate::profile::NodeOrigins;
use crate::registry::{self, Runtime};
use crate::target::Target;

pub mod key;
pub mod multi;

/// What [`compile`] builds besides the model. Every field but `base_dir` and
/// `profile_finalize` is part of the cache key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompileOptions {
    /// The graph's name in the context (the Python package uses `qnnx`).
    pub name: String,
    /// [`LowerOptions::fp16`]: float weights and activations stored as f16 in the graph.
    pub fp16: bool,
    /// [`LowerOptions::input_shapes`]: static shapes for inputs with symbolic dims.
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// [`LowerOptions::fix_inputs`]: inputs fixed to a value at compile time (name to value as
    /// written, `3`, `0.5`, `true`, `1,2,3`).
    pub fix_inputs: BTreeMap<String, String>,
    /// HTP finalize optimization level 1 to 3 ([`qnn::HtpGraphConfig::opt_level`]); an HTP
    /// setting, refused for other backends.
    pub opt_level: Option<u8>,
    /// [`LowerOptions::quantized_io`]: a quantized model's float I/O passed as its integers.
    pub quantized_io: bool,
    /// [`LowerOptions::observe`]: intermediates holding model values are outputs too.
    pub observe: bool,
    /// Where external data files are read from. Without it a model with external data is
    /// rejected; with it such a model is never cached (the key covers the ONNX bytes only).
    pub base_dir: Option<PathBuf>,
    /// Record the finalize with a detailed QNN profile, for [`Compiled::finalize_phases`]. Not
    /// in the cache key either: it changes what is measured, not the binary.
    pub profile_finalize: bool,
}

impl CompileOptions {
    /// What the model is lowered with besides the backend and precision.
    pub(crate) fn model_io(&self) -> ModelIo<'_> {
        ModelIo {
            input_shapes: &self.input_shapes,
            fix_inputs: &self.fix_inputs,
            quantized_io: self.quantized_io,
            observe: self.observe,
        }
    }
}

/// The steps of [`compile_with_progress`], reported as each one starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Looking the model up in the cache.
    CacheLookup,
    /// ONNX to a QNN plan ([`lowering::lower`]).
    Lower,
    /// Building and finalizing the QNN graph: the long part for large models.
    Finalize,
    /// Serialising the context and storing it in the cache.
    CacheStore,
}

/// A timed stage of a compile, as `qnnx compile --timings` and the `info` log name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Timed {
    /// Opening the QNN backend and device (once per process and target: later compiles reuse
    /// them and record almost nothing here).
    BackendOpen,
    /// The cache key (hashing the model and settings) and the entry lookup.
    CacheLookup,
    /// Loading a cached context binary (`contextCreateFromBinary`) and binding its graph.
    CacheLoad,
    /// Decoding the ONNX protobuf and building the IR, external data included.
    Load,
    /// Shape inference, folding, expansion, layout and the other IR passes.
    Passes,
    /// The op rules: prepared IR to a QNN plan.
    Lowering,
    /// Creating the QNN graph and its tensors, validating and adding its nodes.
    GraphBuild,
    /// `graphFinalize`.
    Finalize,
    /// `contextGetBinary` and reading its binary info back.
    Serialization,
    /// Writing the cache entry.
    CacheStore,
}

impl Timed {
    pub fn name(self) -> &'static str {
        match self {
            Timed::BackendOpen => "backend open",
            Timed::CacheLookup => "cache lookup",
            Timed::CacheLoad => "cache load",
            Timed::Load => "load",
            Timed::Passes => "passes",
            Timed::Lowering => "lowering",
            Timed::GraphBuild => "QNN graph build",
            Timed::Finalize => "finalize",
            Timed::Serialization => "serialization",
            Timed::CacheStore => "cache store",
        }
    }
}

/// The timed stages of one compile, in the order they ran, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageTimes {
    pub stages: Vec<(Timed, f64)>,
}

impl StageTimes {
    /// Appends a stage and logs it at `info` (target `qnnx::compile`), so `QNNX_LOG=info`
    /// shows where a compile's time went as it goes.
    pub fn record(&mut self, stage: Timed, ms: f64) {
        tracing::info!(target: "qnnx::compile", "{}: {ms:.1} ms", stage.name());
        self.stages.push((stage, ms));
    }

    /// The milliseconds of `stage` (summed, if it ran more than once; 0 if it did not run).
    pub fn get(&self, stage: Timed) -> f64 {
        self.stages
            .iter()
            .filter(|(s, _)| *s == stage)
            .map(|(_, ms)| ms)
            .sum()
    }

    /// All stages together.
    pub fn total_ms(&self) -> f64 {
        self.stages.iter().map(|(_, ms)| ms).sum()
    }

    fn extend(&mut self, other: StageTimes) {
        self.stages.extend(other.stages);
    }
}

/// A finalized graph and its context, compiled or loaded from the cache.
pub struct Compiled {
    pub emitted: Emitted,
    pub context: qnn::Context,
    /// The backend and device it runs on.
    pub runtime: Arc<Runtime>,
    /// Milliseconds spent lowering: load, passes and lowering (0 on a cache hit).
    pub lower_ms: f64,
    /// Milliseconds spent building and finalizing the QNN graph (0 on a cache hit).
    pub finalize_ms: f64,
    /// Milliseconds spent loading the context binary from the cache (0 when compiled).
    pub load_ms: f64,
    /// Whether the graph came from the cache.
    pub from_cache: bool,
    /// Every timed stage of this compile (or cache load).
    pub timings: StageTimes,
    /// With [`CompileOptions::profile_finalize`], the phases of QNN's preparer during finalize
    /// (name, milliseconds) as its detailed profile reports them ("Graph Optimizations", ...);
    /// empty otherwise and on a cache hit.
    pub finalize_phases: Vec<(String, f64)>,
    /// The plan op behind each QNN node, for profiles; a cache entry keeps them (one stored
    /// before they were recorded has none: [`node_origins`] finds them again).
    pub origins: NodeOrigins,
    /// The cache key, when a cache was used.
    pub cache_key: Option<CacheKey>,
    /// Cache problems that cost time, not correctness (an entry that could not be loaded and
    /// was dropped, an entry that could not be stored), for the caller to log.
    pub warnings: Vec<String>,
}

/// The origins of the graph `onnx` compiles to with `opts` on `backend`, by lowering it again
/// (a graph loaded from the cache or a binary has no plan; lowering is deterministic, so the node
/// names are the ones the binary was built with).
pub fn node_origins(
    backend: BackendKind,
    onnx: &[u8],
    opts: &CompileOptions,
) -> Result<NodeOrigins> {
    let model = lowering::Model::from_bytes(onnx, opts.base_dir.as_deref())?;
    let lower_opts = opts.model_io().lower_options(backend, opts.fp16);
    Ok(NodeOrigins::of_plan(&lowering::lower(model, &lower_opts)?))
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// Loads cache entry `key` with `bind` (its context and I/O binding), timed in milliseconds.
/// `Ok(None)` is a miss. `Err` carries a warning and is a miss too: the lookup failed, or `bind`
/// refused the entry, which is then removed so the next compile replaces it.
fn load_entry<T>(
    cache: &Cache,
    key: &CacheKey,
    bind: impl FnOnce(&Entry) -> std::result::Result<T, String>,
) -> std::result::Result<Option<(T, f64)>, String> {
    let entry = match cache.get(key) {
        Ok(Some(e)) => e,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("cache lookup failed, compiling instead: {e}")),
    };
    let t = Instant::now();
    match bind(&entry) {
        Ok(loaded) => Ok(Some((loaded, ms_since(t)))),
        Err(why) => {
            let _ = cache.invalidate(key);
            Err(format!(
                "cache entry {key} could not be loaded ({why}); rebuilding it"
            ))
        }
    }
}

/// Serialises `context` and stores it in `cache` as entry `key`, with `io` (the metadata name
/// and JSON of the graphs' I/O binding); `Err` says why it could not.
fn store_entry(
    backend: &qnn::Backend,
    cache: &Cache,
    key: &CacheKey,
    context: &qnn::Context,
    extra: Vec<(&str, String)>,
    times: &mut StageTimes,
) -> std::result::Result<(), String> {
    let start = Instant::now();
    let binary = context.to_binary().map_err(|e| e.to_string())?;
    let system = backend.system().map_err(|e| e.to_string())?;
    let info = qnn::binary_info(&system, &binary).map_err(|e| e.to_string())?;
    times.record(Timed::Serialization, ms_since(start));
    let start = Instant::now();
    let mut entry = NewEntry::from_binary_info(backend.kind().name(), &info);
    for (k, v) in extra {
        entry.extra.insert(k.into(), v);
    }
    cache.put(key, &binary, entry).map_err(|e| e.to_string())?;
    times.record(Timed::CacheStore, ms_since(start));
    Ok(())
}

/// `cache`, unless one of `models` (ONNX bytes and base dir) keeps weights in external data
/// files, which the cache key does not cover: then `None`, with a warning naming the model as
/// `which`.
fn cache_unless_external<'c, 'm>(
    cache: Option<&'c Cache>,
    mut models: impl Iterator<Item = (&'m [u8], Option<&'m Path>)>,
    which: &str,
    warnings: &mut Vec<String>,
) -> Option<&'c Cache> {
    let external = cache.is_some()
        && models.any(|(onnx, base_dir)| base_dir.is_some() && uses_external_data(onnx));
    if external {
        warnings.push(format!(
            "{which} keeps weights in external data files, which the cache key does not cover: \
             compiled without the cache"
        ));
    }
    cache.filter(|_| !external)
}

/// What one model is lowered with besides the backend and precision.
pub(crate) struct ModelIo<'a> {
    pub input_shapes: &'a BTreeMap<String, Vec<usize>>,
    pub fix_inputs: &'a BTreeMap<String, String>,
    /// [`LowerOptions::quantized_io`].
    pub quantized_io: bool,
    /// [`LowerOptions::observe`].
    pub observe: bool,
}

impl ModelIo<'_> {
    /// The lowering options for `backend` and precision `fp16`.
    pub(crate) fn lower_options(&self, backend: BackendKind, fp16: bool) -> LowerOptions {
        LowerOptions {
            backend,
            fp16,
            input_shapes: self.input_shapes.clone(),
            fix_inputs: self.fix_inputs.clone(),
            quantized_io: self.quantized_io,
            observe: self.observe,
        }
    }
}

/// Lowers one model for `backend`, timing its load, passes and lowering.
fn lower_timed(
    backend: BackendKind,
    onnx: &[u8],
    base_dir: Option<&Path>,
    fp16: bool,
    io: ModelIo,
) -> Result<(Plan, StageTimes)> {
    let start = Instant::now();
    let lower_opts = io.lower_options(backend, fp16);
    // Parsed from the caller's bytes: copying them first cost 30 ms for resnet18's 46 MB.
    let model = lowering::Model::from_bytes(onnx, base_dir)?;
    let mut times = StageTimes::default();
    times.record(Timed::Load, ms_since(start));
    let (plan, t) = lowering::lower_timed(&model, &lower_opts)?;
    times.record(Timed::Passes, t.passes_ms);
    times.record(Timed::Lowering, t.rules_ms);
    Ok((plan, times))
}

/// [`emit`], timing the graph build and the finalize (recorded in `profile` when given).
fn emit_timed(
    context: &qnn::Context,
    name: &str,
    plan: &Plan,
    profile: Option<&qnn::Profile>,
) -> Result<(Emitted, StageTimes)> {
    let (emitted, t) = emit_with(context, name, plan, profile)?;
    let mut times = StageTimes::default();
    times.record(Timed::GraphBuild, t.build_ms);
    times.record(Timed::Finalize, t.finalize_ms);
    Ok((emitted, times))
}

/// Loads graph `name` of the cache entry `key` on `runtime`. `Ok(None)` is a miss. `Err`
/// carries a warning for the caller to log and is a miss too: the lookup failed, or QNN rejected
/// the entry's binary or its I/O binding, in which case the entry has been removed so the next
/// compile replaces it.
pub fn load_cached(
    runtime: &Arc<Runtime>,
    cache: &Cache,
    key: &CacheKey,
    name: &str,
) -> std::result::Result<Option<Compiled>, String> {
    let loaded = load_entry(cache, key, |entry| {
        let io = entry
            .meta()
            .extra
            .get("io")
            .ok_or("its metadata has no I/O binding")?;
        let context = entry
            .load(&runtime.backend, Some(&runtime.device))
            .map_err(|e| e.to_string())?;
        let graph = context.graph(name).map_err(|e| e.to_string())?;
        let emitted =
            Emitted::from_io_binding(graph, io).ok_or("its I/O binding does not fit the graph")?;
        // Entries stored before origins were recorded have none: profiles then lower again.
        let origins = entry
            .meta()
            .extra
            .get("origins")
            .and_then(|o| NodeOrigins::from_json(o))
            .unwrap_or_default();
        Ok((emitted, context, origins))
    })?;
    Ok(
        loaded.map(|((emitted, context, origins), load_ms)| Compiled {
            emitted,
            context,
            runtime: runtime.clone(),
            lower_ms: 0.0,
            finalize_ms: 0.0,
            load_ms,
            from_cache: true,
            timings: {
                let mut t = StageTimes::default();
                t.record(Timed::CacheLoad, load_ms);
                t
            },
            finalize_phases: Vec::new(),
            origins,
            cache_key: Some(key.clone()),
            warnings: Vec::new(),
        }),
    )
}

/// [`compile_with_progress`] without progress reports.
pub fn compile(
    target: &Target,
    onnx: &[u8],
    opts: &CompileOptions,
    cache: Option<&Cache>,
) -> Result<Compiled> {
    compile_with_progress(target, onnx, opts, cache, &mut |_| {})
}

/// Lowers `onnx` for `target` and builds and finalizes graph `opts.name` in a new context on
/// the target's runtime (from the process-wide [`registry`]). With a cache, an entry for the
/// same key is loaded instead (no lowering, no finalize), and a newly compiled graph is stored
/// with its I/O binding; a cache that cannot be read or written costs time, not correctness,
/// and is reported in [`Compiled::warnings`]. `progress` is called as each [`Stage`] starts.
pub fn compile_with_progress(
    target: &Target,
    onnx: &[u8],
    opts: &CompileOptions,
    cache: Option<&Cache>,
    progress: &mut dyn FnMut(Stage),
) -> Result<Compiled> {
    // A target without a float path refuses float models before QNN is opened (its library
    // need not even be present to say so).
    let lowered = if target.lacks_float() {
        progress(Stage::Lower);
        // No float path, so no fp16 either: the float tensors left are a quantized model's
        // boundary conversions.
        let l = lower_timed(
            target.backend,
            onnx,
            opts.base_dir.as_deref(),
            false,
            opts.model_io(),
        )?;
        target.check_plan(&l.0)?;
        Some(l)
    } else {
        None
    };
    let start = Instant::now();
    let runtime = registry::for_target(target, opts.opt_level, false)?;
    let mut timings = StageTimes::default();
    timings.record(Timed::BackendOpen, ms_since(start));
    compile_lowered(&runtime, onnx, opts, cache, lowered, timings, progress)
}

/// [`compile_with_progress`] on a given runtime.
pub fn compile_on(
    runtime: &Arc<Runtime>,
    onnx: &[u8],
    opts: &CompileOptions,
    cache: Option<&Cache>,
    progress: &mut dyn FnMut(Stage),
) -> Result<Compiled> {
    compile_lowered(
        runtime,
        onnx,
        opts,
        cache,
        None,
        StageTimes::default(),
        progress,
    )
}

fn compile_lowered(
    runtime: &Arc<Runtime>,
    onnx: &[u8],
    opts: &CompileOptions,
    cache: Option<&Cache>,
    lowered: Option<(Plan, StageTimes)>,
    mut timings: StageTimes,
    progress: &mut dyn FnMut(Stage),
) -> Result<Compiled> {
    let backend = &runtime.backend;
    let mut warnings = Vec::new();
    let models = std::iter::once((onnx, opts.base_dir.as_deref()));
    let cache = cache_unless_external(cache, models, "the model", &mut warnings);
    let lookup = Instant::now();
    let key = match cache {
        Some(_) => Some(key::model_key(backend, onnx, opts)?),
        None => None,
    };
    if let (Some(cache), Some(key)) = (cache, &key) {
        progress(Stage::CacheLookup);
        match load_cached(runtime, cache, key, &opts.name) {
            Ok(Some(mut c)) => {
                // The lookup's time is what is left once the load's is taken out.
                timings.record(Timed::CacheLookup, ms_since(lookup) - c.load_ms);
                timings.extend(c.timings);
                c.timings = timings;
                return Ok(c);
            }
            Ok(None) => {}
            Err(w) => warnings.push(w),
        }
        timings.record(Timed::CacheLookup, ms_since(lookup));
    }
    let (plan, lower_times) = match lowered {
        Some(l) => l,
        None => {
            progress(Stage::Lower);
            lower_timed(
                backend.kind(),
                onnx,
                opts.base_dir.as_deref(),
                opts.fp16,
                opts.model_io(),
            )?
        }
    };
    let lower_ms = lower_times.total_ms();
    timings.extend(lower_times);
    Target::of_config(backend.config()).check_plan(&plan)?;
    progress(Stage::Finalize);
    let active = registry::hold(runtime)?;
    let context = qnn::Context::new(backend, Some(&runtime.device))?;
    let profile = match opts.profile_finalize {
        true => Some(qnn::Profile::new(backend, qnn::ProfileLevel::Detailed)?),
        false => None,
    };
    let (emitted, emit_times) = emit_timed(&context, &opts.name, &plan, profile.as_ref())?;
    drop(active);
    let finalize_ms = emit_times.total_ms();
    timings.extend(emit_times);
    let finalize_phases = match &profile {
        Some(p) => finalize_phases(&p.events()?),
        None => Vec::new(),
    };
    let origins = NodeOrigins::of_plan(&plan);
    if let (Some(cache), Some(key)) = (cache, &key) {
        progress(Stage::CacheStore);
        let extra = vec![
            ("io", emitted.io_binding_json()),
            ("origins", origins.to_json()),
        ];
        if let Err(e) = store_entry(backend, cache, key, &context, extra, &mut timings) {
            warnings.push(format!(
                "could not store the compiled graph in the cache: {e}"
            ));
        }
    }
    Ok(Compiled {
        emitted,
        context,
        runtime: runtime.clone(),
        lower_ms,
        finalize_ms,
        load_ms: 0.0,
        from_cache: false,
        timings,
        finalize_phases,
        origins,
        cache_key: key,
        warnings,
    })
}

/// The sub-events of the FINALIZE event of a detailed profile, in milliseconds (QNN gives
/// microseconds).
fn finalize_phases(events: &[qnn::Event]) -> Vec<(String, f64)> {
    let finalize = qnn::qnn_sys::profile::event_type::FINALIZE;
    events
        .iter()
        .filter(|e| e.event_type == finalize)
        .flat_map(|e| &e.sub_events)
        .filter(|s| s.unit == qnn::EventUnit::Microseconds)
        .map(|s| (s.identifier.clone(), s.value as f64 / 1e3))
        .collect()
}

/// Whether any initializer of the model keeps its data in an external file (or the bytes do
/// not decode, in which case lowering reports the problem). Decodes only where each initializer's
/// data lives ([`lowering::onnx::placement`]), skipping the weights instead of copying them.
fn uses_external_data(onnx: &[u8]) -> bool {
    use prost::Message;
    let Ok(m) = lowering::onnx::placement::ModelProto::decode(onnx) else {
        return true;
    };
    m.graph.iter().flat_map(|g| &g.initializer).any(|t| {
        t.data_location == Some(lowering::onnx::data_location::EXTERNAL)
            || !t.external_data.is_empty()
    })
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::uses_external_data;
    use lowering::onnx;
    use lowering::tensor::Tensor;
    use lowering::testing::{rand_f32, ModelBuilder};
    use lowering::DType;

    #[test]
    fn external_data_is_found_without_decoding_the_weights() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 8])
            .init("w", Tensor::from_f32(vec![8, 3], &rand_f32(1, 24)))
            .node("MatMul", &["x", "w"], &["y"], &[])
            .output("y");
        let bytes = b.bytes();
        assert!(!uses_external_data(&bytes));
        let with = |f: &dyn Fn(&mut onnx::TensorProto)| {
            let mut m = onnx::ModelProto::decode(&bytes[..]).unwrap();
            let t = &mut m.graph.as_mut().unwrap().initializer[0];
            t.raw_data = None;
            f(t);
            m.encode_to_vec()
        };
        assert!(uses_external_data(&with(&|t| {
            t.data_location = Some(onnx::data_location::EXTERNAL)
        })));
        assert!(uses_external_data(&with(&|t| {
            t.external_data = vec![onnx::StringStringEntryProto {
                key: Some("location".into()),
                value: Some("w.bin".into()),
            }]
        })));
        assert!(uses_external_data(b"\xff\xff not a model"));
    }
}
