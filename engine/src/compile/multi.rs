//! Several ONNX models as separately named graphs of one QNN context, and one context binary
//! for all of them: the prefill and decode graphs of one model, for instance.
//!
//! With [`MultiOptions::weight_sharing`] the context is created with the HTP's
//! `WEIGHT_SHARING_ENABLED` config, and QNN keeps static tensors whose **contents** are equal
//! once in the binary (observed on the 2.51 x86_64 library: tensor names do not matter, and
//! equal names with different data are kept apart; each graph is finalized as it is built).
//! That library cannot load the binaries it writes this way (see
//! [`qnn::BinaryInfo::uses_shared_weights`]), so on x86_64 a weight-shared compile is not
//! cached and its binary runs on a device only; the graphs of the compiling process run here.
//!
//! The graphs' I/O binding (ONNX names and dtypes, graph slots) is not part of a context
//! binary; the cache stores it with the entry as [`bindings_json`], and [`bind_graphs`] applies
//! it to a loaded context.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use lowering::LowerError;
use qnnx_types::BackendKind;

use super::{
    cache_unless_external, emit_timed, load_entry, lower_timed, store_entry, Compiled, Emitted,
    ModelIo, Stage, StageTimes,
};
use crate::cache::{Cache, CacheKey};
use crate::error::{Error, Result};
use crate::profile::NodeOrigins;
use crate::registry::{self, Runtime};
use crate::target::Target;

/// The most graphs one weight-sharing context may hold (Qualcomm's HTP backend documentation).
pub const MAX_SHARED_GRAPHS: usize = 64;

/// One model of a multi-graph compile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphSpec<'a> {
    /// The graph's name in the context; unique within the compile.
    pub name: String,
    /// The ONNX model bytes.
    pub onnx: &'a [u8],
    /// [`lowering::LowerOptions::input_shapes`] for this model.
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// [`lowering::LowerOptions::fix_inputs`] for this model.
    pub fix_inputs: BTreeMap<String, String>,
    /// Where this model's external data files are read from (as
    /// [`super::CompileOptions::base_dir`]).
    pub base_dir: Option<PathBuf>,
}

/// Settings shared by every graph of a multi-graph compile. Every field is part of the cache
/// key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MultiOptions {
    /// [`lowering::LowerOptions::fp16`].
    pub fp16: bool,
    /// HTP finalize optimization level 1 to 3.
    pub opt_level: Option<u8>,
    /// Create the context with HTP weight sharing ([`qnn::HtpContextConfig::weight_sharing`]);
    /// an HTP feature: other backends compile each graph with its own weights.
    pub weight_sharing: bool,
}

/// One graph of a [`MultiCompiled`].
pub struct MultiGraph {
    pub name: String,
    pub emitted: Emitted,
    /// Milliseconds spent lowering this model (0 on a cache hit).
    pub lower_ms: f64,
    /// Milliseconds spent building and finalizing this graph (0 on a cache hit).
    pub finalize_ms: f64,
    /// This graph's load, passes, lowering, graph build and finalize (empty on a cache hit).
    pub timings: StageTimes,
    /// The plan op behind each QNN node (empty on a cache hit).
    pub origins: NodeOrigins,
}

/// Finalized graphs of one context, compiled or loaded from the cache.
pub struct MultiCompiled {
    pub context: qnn::Context,
    /// The backend and device it runs on.
    pub runtime: Arc<Runtime>,
    /// In the order of the specs.
    pub graphs: Vec<MultiGraph>,
    /// Milliseconds spent loading the context binary from the cache (0 when compiled).
    pub load_ms: f64,
    pub from_cache: bool,
    pub cache_key: Option<CacheKey>,
    /// Whether the context was created with weight sharing (false when asked for but the
    /// library refused the config: see `warnings`). For a cache hit, what the binary says.
    pub weight_sharing: bool,
    /// Problems that cost time or memory, not correctness, for the caller to log.
    pub warnings: Vec<String>,
}

impl MultiCompiled {
    /// The graph named `name`.
    pub fn graph(&self, name: &str) -> Option<&MultiGraph> {
        self.graphs.iter().find(|g| g.name == name)
    }

    /// One [`Compiled`] per graph, each holding the shared context (a cheap clone), so any of
    /// them keeps the context alive. The warnings go with the first.
    pub fn into_compiled(self) -> Vec<Compiled> {
        let MultiCompiled {
            context,
            runtime,
            graphs,
            load_ms,
            from_cache,
            cache_key,
            mut warnings,
            ..
        } = self;
        graphs
            .into_iter()
            .map(|g| Compiled {
                emitted: g.emitted,
                context: context.clone(),
                runtime: runtime.clone(),
                lower_ms: g.lower_ms,
                finalize_ms: g.finalize_ms,
                load_ms,
                from_cache,
                timings: g.timings,
                finalize_phases: Vec::new(),
                origins: g.origins,
                cache_key: cache_key.clone(),
                warnings: std::mem::take(&mut warnings),
            })
            .collect()
    }
}

/// A failure of a multi-graph compile: which graph, when it belongs to one, and why.
#[derive(Debug)]
pub struct MultiError {
    /// The graph's name.
    pub graph: Option<String>,
    pub error: Error,
}

impl std::fmt::Display for MultiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.graph {
            Some(g) => write!(f, "graph {g:?}: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

impl std::error::Error for MultiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

fn whole(error: impl Into<Error>) -> MultiError {
    MultiError {
        graph: None,
        error: error.into(),
    }
}

fn of(graph: &str) -> impl Fn(Error) -> MultiError + '_ {
    move |error| MultiError {
        graph: Some(graph.to_string()),
        error,
    }
}

fn check_specs(specs: &[GraphSpec], opts: &MultiOptions) -> Result<(), LowerError> {
    if specs.is_empty() {
        return Err(LowerError::InvalidModel(
            "a multi-graph compile needs at least one model".into(),
        ));
    }
    let mut seen = HashSet::new();
    for s in specs {
        if s.name.is_empty() || s.name.contains('\0') {
            return Err(LowerError::InvalidModel(format!(
                "graph name {:?} is empty or contains NUL",
                s.name
            )));
        }
        if !seen.insert(s.name.as_str()) {
            return Err(LowerError::InvalidModel(format!(
                "graph name {:?} is given twice; names must be unique in a context",
                s.name
            )));
        }
    }
    if opts.weight_sharing && specs.len() > MAX_SHARED_GRAPHS {
        return Err(LowerError::InvalidModel(format!(
            "{} graphs: HTP weight sharing allows at most {MAX_SHARED_GRAPHS} per context",
            specs.len()
        )));
    }
    Ok(())
}

/// The I/O bindings of named graphs as one JSON object (name → [`Emitted::io_binding_json`]),
/// as stored with a multi-graph cache entry (`extra["io_graphs"]`).
pub fn bindings_json<'a>(graphs: impl IntoIterator<Item = (&'a str, &'a Emitted)>) -> String {
    let map: serde_json::Map<String, serde_json::Value> = graphs
        .into_iter()
        .map(|(name, e)| {
            let v = serde_json::from_str(&e.io_binding_json()).unwrap_or_default();
            (name.to_string(), v)
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Graphs `names` of `context` (loaded from a binary) bound to the model I/O in `bindings`
/// ([`bindings_json`]). `None` when a graph is missing from the context or the bindings, or a
/// binding does not fit its graph.
pub fn bind_graphs(
    context: &qnn::Context,
    names: &[&str],
    bindings: &str,
) -> Option<Vec<MultiGraph>> {
    let v: serde_json::Value = serde_json::from_str(bindings).ok()?;
    names
        .iter()
        .map(|&name| {
            let graph = context.graph(name).ok()?;
            let io = v.get(name)?.to_string();
            Some(MultiGraph {
                name: name.to_string(),
                emitted: Emitted::from_io_binding(graph, &io)?,
                lower_ms: 0.0,
                finalize_ms: 0.0,
                timings: StageTimes::default(),
                origins: NodeOrigins::default(),
            })
        })
        .collect()
}

/// Whether a binary compiled with weight sharing could be loaded back by this process's HTP
/// library: not by the x86_64 one (see the module docs).
fn shared_binaries_load_here() -> bool {
    !cfg!(target_arch = "x86_64")
}

fn load_cached_multi(
    runtime: &Arc<Runtime>,
    cache: &Cache,
    key: &CacheKey,
    specs: &[GraphSpec],
) -> std::result::Result<Option<MultiCompiled>, String> {
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    load_cached_graphs(runtime, cache, key, &names)
}

/// The graphs `names` of the multi-graph cache entry `key`, from one load of its context (a
/// warm start that skips the ONNX export too: partitions of a split graph). `Ok(None)` on a
/// miss; `Err` (the entry is bad and was removed) says why.
pub fn load_cached_graphs(
    runtime: &Arc<Runtime>,
    cache: &Cache,
    key: &CacheKey,
    names: &[&str],
) -> std::result::Result<Option<MultiCompiled>, String> {
    let loaded = load_entry(cache, key, |entry| {
        let io = entry
            .meta()
            .extra
            .get("io_graphs")
            .ok_or("its metadata has no I/O binding")?;
        let context = entry
            .load(&runtime.backend, Some(&runtime.device))
            .map_err(|e| e.to_string())?;
        let graphs =
            bind_graphs(&context, names, io).ok_or("its I/O binding does not fit the graphs")?;
        Ok((context, graphs))
    })?;
    Ok(loaded.map(|((context, graphs), load_ms)| MultiCompiled {
        weight_sharing: context
            .binary_info()
            .is_some_and(qnn::BinaryInfo::uses_shared_weights),
        context,
        runtime: runtime.clone(),
        graphs,
        load_ms,
        from_cache: true,
        cache_key: Some(key.clone()),
        warnings: Vec::new(),
    }))
}

/// [`compile_multi_with_progress`] without progress reports.
pub fn compile_multi(
    target: &Target,
    specs: &[GraphSpec],
    opts: &MultiOptions,
    cache: Option<&Cache>,
) -> std::result::Result<MultiCompiled, MultiError> {
    compile_multi_with_progress(target, specs, opts, cache, &mut |_, _| {})
}

/// Lowers every model of `specs`, then builds and finalizes each as graph `spec.name` of one new
/// context on the target's runtime (with weight sharing when `opts` asks for it and the target
/// is the HTP). Every model is lowered before QNN is called, so an unsupported model costs no
/// finalize.
///
/// With a cache, an entry for the same models, target and settings is loaded instead, and a
/// new binary is stored with the graphs' I/O bindings; not for weight-shared compiles on x86_64
/// (the library there cannot load them) nor for models with external data. `progress` is called
/// as each [`Stage`] starts, with the graph it concerns.
pub fn compile_multi_with_progress(
    target: &Target,
    specs: &[GraphSpec],
    opts: &MultiOptions,
    cache: Option<&Cache>,
    progress: &mut dyn FnMut(Stage, Option<&str>),
) -> std::result::Result<MultiCompiled, MultiError> {
    check_specs(specs, opts).map_err(whole)?;
    // An HTP context config: other backends compile as if it were off.
    let mut weight_sharing = opts.weight_sharing && target.backend == BackendKind::Htp;
    if target.lacks_float() {
        // Refused before QNN is opened, as for one model.
        for s in specs {
            let (plan, _) = lower_timed(
                target.backend,
                s.onnx,
                s.base_dir.as_deref(),
                opts.fp16 && !target.lacks_float(),
                ModelIo {
                    input_shapes: &s.input_shapes,
                    fix_inputs: &s.fix_inputs,
                    quantized_io: false,
                    observe: false,
                },
            )
            .map_err(of(&s.name))?;
            target.check_plan(&plan).map_err(of(&s.name))?;
        }
    }
    let mut runtime =
        registry::for_target(target, opts.opt_level, weight_sharing).map_err(whole)?;
    let mut warnings = Vec::new();
    let mut cache = cache;
    if cache.is_some() && weight_sharing && !shared_binaries_load_here() {
        warnings.push(
            "weight-shared context binaries cannot be loaded by this platform's HTP library, \
             so this compile is not cached (compile with weight sharing off to cache it)"
                .to_string(),
        );
        cache = None;
    }
    let models = specs.iter().map(|s| (s.onnx, s.base_dir.as_deref()));
    let cache = cache_unless_external(cache, models, "a model", &mut warnings);
    let key = match cache {
        Some(_) => Some(super::key::multi_key(&runtime.backend, specs, opts).map_err(whole)?),
        None => None,
    };
    if let (Some(cache), Some(key)) = (cache, &key) {
        progress(Stage::CacheLookup, None);
        match load_cached_multi(&runtime, cache, key, specs) {
            Ok(Some(mut c)) => {
                c.warnings.splice(0..0, warnings);
                return Ok(c);
            }
            Ok(None) => {}
            Err(w) => warnings.push(w),
        }
    }
    let mut plans = Vec::with_capacity(specs.len());
    for s in specs {
        progress(Stage::Lower, Some(&s.name));
        let lowered = lower_timed(
            target.backend,
            s.onnx,
            s.base_dir.as_deref(),
            opts.fp16,
            ModelIo {
                input_shapes: &s.input_shapes,
                fix_inputs: &s.fix_inputs,
                quantized_io: false,
                observe: false,
            },
        );
        let lowered = lowered.map_err(of(&s.name))?;
        target.check_plan(&lowered.0).map_err(of(&s.name))?;
        plans.push(lowered);
    }
    let context = match qnn::Context::new(&runtime.backend, Some(&runtime.device)) {
        Ok(c) => c,
        Err(e) if weight_sharing => {
            warnings.push(format!(
                "the QNN library refused weight sharing, so each graph keeps its own weights: {e}"
            ));
            weight_sharing = false;
            runtime = registry::for_target(target, opts.opt_level, false).map_err(whole)?;
            qnn::Context::new(&runtime.backend, Some(&runtime.device)).map_err(whole)?
        }
        Err(e) => return Err(whole(e)),
    };
    let active = registry::hold(&runtime).map_err(whole)?;
    let mut graphs = Vec::with_capacity(specs.len());
    for (s, (plan, mut timings)) in specs.iter().zip(plans) {
        progress(Stage::Finalize, Some(&s.name));
        let lower_ms = timings.total_ms();
        let (emitted, emit_times) =
            emit_timed(&context, &s.name, &plan, None).map_err(of(&s.name))?;
        let finalize_ms = emit_times.total_ms();
        timings.stages.extend(emit_times.stages);
        graphs.push(MultiGraph {
            name: s.name.clone(),
            emitted,
            lower_ms,
            finalize_ms,
            timings,
            origins: NodeOrigins::of_plan(&plan),
        });
    }
    drop(active);
    if let (Some(cache), Some(key)) = (cache, &key) {
        progress(Stage::CacheStore, None);
        let io = (
            "io_graphs",
            bindings_json(graphs.iter().map(|g| (g.name.as_str(), &g.emitted))),
        );
        // The context's serialization and store belong to no one graph; the log shows them.
        let mut shared = StageTimes::default();
        if let Err(e) = store_entry(
            &runtime.backend,
            cache,
            key,
            &context,
            vec![io],
            &mut shared,
        ) {
            warnings.push(format!(
                "could not store the compiled graphs in the cache: {e}"
            ));
        }
    }
    Ok(MultiCompiled {
        context,
        runtime,
        graphs,
        load_ms: 0.0,
        from_cache: false,
        cache_key: key,
        weight_sharing,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> GraphSpec<'static> {
        GraphSpec {
            name: name.into(),
            onnx: b"",
            ..Default::default()
        }
    }

    #[test]
    fn duplicate_graph_names_are_refused() {
        let e = check_specs(&[spec("a"), spec("a")], &MultiOptions::default()).unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
    }

    #[test]
    fn empty_and_nul_names_are_refused() {
        assert!(check_specs(&[spec("")], &MultiOptions::default()).is_err());
        assert!(check_specs(&[spec("a\0b")], &MultiOptions::default()).is_err());
        assert!(check_specs(&[], &MultiOptions::default()).is_err());
    }

    #[test]
    fn weight_sharing_is_limited_to_64_graphs() {
        let many: Vec<GraphSpec> = (0..65).map(|i| spec(&format!("g{i}"))).collect();
        let shared = MultiOptions {
            weight_sharing: true,
            ..Default::default()
        };
        let e = check_specs(&many, &shared).unwrap_err();
        assert!(e.to_string().contains("at most 64"), "{e}");
        assert!(check_specs(&many, &MultiOptions::default()).is_ok());
    }

    #[test]
    fn errors_name_their_graph() {
        let e = of("decode")(Error::Lower(LowerError::InvalidModel("bad".into())));
        assert_eq!(e.to_string(), "graph \"decode\": invalid model: bad");
        assert_eq!(
            whole(LowerError::InvalidModel("x".into())).to_string(),
            "invalid model: x"
        );
    }
}
