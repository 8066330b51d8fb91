//! The compile driver: ONNX bytes to a finalized graph, through the persistent context-binary
//! cache, with progress stages. The same path serves the `qnnx` command and the Python package.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use lowering::{LowerOptions, Plan};
use qnnx_types::BackendKind;

use crate::cache::{Cache, CacheKey, Entry, NewEntry};
use crate::emit::{emit, Emitted};
use crate::error::Result;
use crate::registry::{self, Runtime};
use crate::target::Target;

pub mod multi;

/// What [`compile`] builds besides the model. Every field but `base_dir` is part of the cache
/// key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompileOptions {
    /// The graph's name in the context (the Python package uses `qnnx`).
    pub name: String,
    /// [`LowerOptions::fp16`]: float weights and activations stored as f16 in the graph.
    pub fp16: bool,
    /// [`LowerOptions::input_shapes`]: static shapes for inputs with symbolic dims.
    pub input_shapes: BTreeMap<String, Vec<usize>>,
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

/// A finalized graph and its context, compiled or loaded from the cache.
pub struct Compiled {
    pub emitted: Emitted,
    pub context: qnn::Context,
    /// The backend and device it runs on.
    pub runtime: Arc<Runtime>,
    /// Milliseconds spent lowering (0 on a cache hit).
    pub lower_ms: f64,
    /// Milliseconds spent building and finalizing the QNN graph (0 on a cache hit).
    pub finalize_ms: f64,
    /// Milliseconds spent loading the context binary from the cache (0 when compiled).
    pub load_ms: f64,
    /// Whether the graph came from the cache.
    pub from_cache: bool,
    /// The cache key, when a cache was used.
    pub cache_key: Option<CacheKey>,
    /// Cache problems that cost time, not correctness (an entry that could not be loaded and
    /// was dropped, an entry that could not be stored), for the caller to log.
    pub warnings: Vec<String>,
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
    io: (&str, String),
) -> std::result::Result<(), String> {
    let binary = context.to_binary().map_err(|e| e.to_string())?;
    let system = backend.system().map_err(|e| e.to_string())?;
    let info = qnn::binary_info(&system, &binary).map_err(|e| e.to_string())?;
    let mut entry = NewEntry::from_binary_info(backend.kind().name(), &info);
    entry.extra.insert(io.0.into(), io.1);
    cache.put(key, &binary, entry).map_err(|e| e.to_string())?;
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

/// Lowers one model for `backend`, timed in milliseconds.
fn lower_timed(
    backend: BackendKind,
    onnx: &[u8],
    base_dir: Option<&Path>,
    fp16: bool,
    input_shapes: &BTreeMap<String, Vec<usize>>,
    quantized_io: bool,
    observe: bool,
) -> Result<(Plan, f64)> {
    let start = Instant::now();
    let lower_opts = LowerOptions {
        backend,
        fp16,
        input_shapes: input_shapes.clone(),
        quantized_io,
        observe,
    };
    // Parsed from the caller's bytes: copying them first cost 30 ms for resnet18's 46 MB.
    let model = lowering::Model::from_bytes(onnx, base_dir)?;
    let plan = lowering::lower(model, &lower_opts)?;
    Ok((plan, ms_since(start)))
}

/// [`emit`], timed in milliseconds.
fn emit_timed(context: &qnn::Context, name: &str, plan: &Plan) -> Result<(Emitted, f64)> {
    let start = Instant::now();
    let emitted = emit(context, name, plan)?;
    Ok((emitted, ms_since(start)))
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
        Ok((emitted, context))
    })?;
    Ok(loaded.map(|((emitted, context), load_ms)| Compiled {
        emitted,
        context,
        runtime: runtime.clone(),
        lower_ms: 0.0,
        finalize_ms: 0.0,
        load_ms,
        from_cache: true,
        cache_key: Some(key.clone()),
        warnings: Vec::new(),
    }))
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
            &opts.input_shapes,
            opts.quantized_io,
            opts.observe,
        )?;
        target.check_plan(&l.0)?;
        Some(l)
    } else {
        None
    };
    let runtime = registry::for_target(target, opts.opt_level, false)?;
    compile_lowered(&runtime, onnx, opts, cache, lowered, progress)
}

/// [`compile_with_progress`] on a given runtime.
pub fn compile_on(
    runtime: &Arc<Runtime>,
    onnx: &[u8],
    opts: &CompileOptions,
    cache: Option<&Cache>,
    progress: &mut dyn FnMut(Stage),
) -> Result<Compiled> {
    compile_lowered(runtime, onnx, opts, cache, None, progress)
}

fn compile_lowered(
    runtime: &Arc<Runtime>,
    onnx: &[u8],
    opts: &CompileOptions,
    cache: Option<&Cache>,
    lowered: Option<(Plan, f64)>,
    progress: &mut dyn FnMut(Stage),
) -> Result<Compiled> {
    let backend = &runtime.backend;
    let mut warnings = Vec::new();
    let models = std::iter::once((onnx, opts.base_dir.as_deref()));
    let cache = cache_unless_external(cache, models, "the model", &mut warnings);
    let key = match cache {
        Some(_) => Some(crate::cache::model_key(backend, onnx, opts)?),
        None => None,
    };
    if let (Some(cache), Some(key)) = (cache, &key) {
        progress(Stage::CacheLookup);
        match load_cached(runtime, cache, key, &opts.name) {
            Ok(Some(c)) => return Ok(c),
            Ok(None) => {}
            Err(w) => warnings.push(w),
        }
    }
    let (plan, lower_ms) = match lowered {
        Some(l) => l,
        None => {
            progress(Stage::Lower);
            lower_timed(
                backend.kind(),
                onnx,
                opts.base_dir.as_deref(),
                opts.fp16,
                &opts.input_shapes,
                opts.quantized_io,
                opts.observe,
            )?
        }
    };
    Target::of_config(backend.config()).check_plan(&plan)?;
    progress(Stage::Finalize);
    let context = qnn::Context::new(backend, Some(&runtime.device))?;
    let (emitted, finalize_ms) = emit_timed(&context, &opts.name, &plan)?;
    if let (Some(cache), Some(key)) = (cache, &key) {
        progress(Stage::CacheStore);
        let io = ("io", emitted.io_binding_json());
        if let Err(e) = store_entry(backend, cache, key, &context, io) {
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
        cache_key: key,
        warnings,
    })
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
