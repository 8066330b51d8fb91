//! Plan → QNN graph: the only module of this crate that calls into `qnn` (qnn-rs). It follows
//! the steps documented in [`crate::plan`]: tensors in plan order, tensor params registered by
//! the builder, every op validated by the backend before it is added (a failure names the ONNX
//! node it came from), then finalize.
//!
//! [`compile`] is the whole path from ONNX bytes to a finalized graph through the persistent
//! context-binary cache ([`qnn::cache`]), shared by the `qnnx` command and the Python package so
//! both compute the same keys and read each other's entries.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::plan::{DType, Param, Plan, PlanIo, Scalar, TensorKind};
use crate::{LowerError, LowerOptions};

pub mod multi;

/// A finalized QNN graph and the model I/O it binds.
pub struct Emitted {
    pub graph: qnn::Graph,
    /// Model inputs in ONNX order.
    pub inputs: Vec<PlanIo>,
    /// Model outputs in ONNX order.
    pub outputs: Vec<PlanIo>,
    /// `graph.inputs()[input_slots[i]]` is the QNN tensor of `inputs[i]`: the graph lists its
    /// I/O in tensor creation order, which need not be the ONNX order.
    pub input_slots: Vec<usize>,
    /// Likewise for outputs.
    pub output_slots: Vec<usize>,
}

fn data_type(d: DType) -> qnn::DataType {
    match d {
        DType::F32 => qnn::DataType::F32,
        DType::F16 => qnn::DataType::F16,
        DType::I8 => qnn::DataType::I8,
        DType::U8 => qnn::DataType::U8,
        DType::I16 => qnn::DataType::I16,
        DType::U16 => qnn::DataType::U16,
        DType::I32 => qnn::DataType::I32,
        DType::U32 => qnn::DataType::U32,
        DType::Bool => qnn::DataType::Bool,
        DType::I64 => qnn::DataType::I64,
        DType::U64 => qnn::DataType::U64,
        // Plan::validate refuses them before emit runs.
        DType::F64 | DType::BF16 => qnn::DataType::F32,
    }
}

fn scalar(s: Scalar) -> qnn::Scalar {
    match s {
        Scalar::F32(v) => qnn::Scalar::F32(v),
        Scalar::U32(v) => qnn::Scalar::U32(v),
        Scalar::I32(v) => qnn::Scalar::I32(v),
        Scalar::Bool(v) => qnn::Scalar::Bool(v),
    }
}

/// Builds and finalizes graph `name` of `plan` in `ctx`.
pub fn emit(
    ctx: &qnn::Context,
    name: &str,
    plan: &Plan,
    options: &qnn::GraphOptions,
) -> Result<Emitted, LowerError> {
    plan.validate()
        .map_err(|e| LowerError::InvalidModel(format!("internal plan error: {e}")))?;
    let qnn_err = |node: Option<&str>| {
        let node = node.map(str::to_string);
        move |source: qnn::Error| LowerError::Qnn {
            node: node.clone(),
            source: Box::new(source),
        }
    };
    let mut g = ctx.build_graph(name, options).map_err(qnn_err(None))?;
    let mut refs = Vec::with_capacity(plan.tensors.len());
    for t in &plan.tensors {
        let (kind, data) = match &t.kind {
            TensorKind::Input => (qnn::TensorKind::Input, None),
            TensorKind::Output => (qnn::TensorKind::Output, None),
            TensorKind::Native => (qnn::TensorKind::Native, None),
            TensorKind::Static(bytes) => (qnn::TensorKind::Static, Some(&bytes[..])),
        };
        let r = g
            .tensor(
                &t.name,
                kind,
                data_type(t.dtype),
                &t.shape,
                qnn::Quantization::None,
                data,
            )
            .map_err(qnn_err(None))?;
        refs.push(r);
    }
    for op in &plan.ops {
        let mut node = qnn::Node::new(&op.name, op.type_name)
            .inputs(&op.inputs.iter().map(|&i| refs[i]).collect::<Vec<_>>())
            .outputs(&op.outputs.iter().map(|&i| refs[i]).collect::<Vec<_>>());
        for (pname, p) in &op.params {
            let value = match p {
                Param::Scalar(s) => qnn::ParamValue::Scalar(scalar(*s)),
                Param::Tensor { dtype, shape, data } => qnn::ParamValue::Tensor {
                    dtype: data_type(*dtype),
                    dims: shape.clone(),
                    data: data.clone(),
                },
            };
            node.params.push((pname.to_string(), value));
        }
        g.add_node(&node).map_err(qnn_err(Some(&op.onnx_node)))?;
    }
    let graph = g.finalize().map_err(qnn_err(None))?;
    let slots = |ios: &[PlanIo], kind: fn(&TensorKind) -> bool| -> Vec<usize> {
        let order: Vec<usize> = (0..plan.tensors.len())
            .filter(|&t| kind(&plan.tensors[t].kind))
            .collect();
        ios.iter()
            .map(|io| {
                order
                    .iter()
                    .position(|&t| t == io.tensor)
                    .expect("plan I/O is a graph tensor")
            })
            .collect()
    };
    let input_slots = slots(&plan.inputs, |k| matches!(k, TensorKind::Input));
    let output_slots = slots(&plan.outputs, |k| matches!(k, TensorKind::Output));
    Ok(Emitted {
        graph,
        inputs: plan.inputs.clone(),
        outputs: plan.outputs.clone(),
        input_slots,
        output_slots,
    })
}

/// One input buffer as [`qnn::Graph::execute`] takes it: the graph tensor's dtype and bytes.
pub type GraphBuffer<'a> = (qnn::DataType, Cow<'a, [u8]>);

/// Why a NaN input is refused (see [`qnn::first_nan`]).
pub fn nan_message(input: &str, index: usize) -> String {
    format!(
        "input {input:?}: element {index} is NaN; the HTP computes in saturating fp16 and would \
         return a finite number instead of NaN"
    )
}

/// A host tensor in the model's own dtype (int64 included): what callers pass and receive.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub dtype: crate::DType,
    pub shape: Vec<usize>,
    /// Little-endian, C order; bool is one byte per element.
    pub data: Vec<u8>,
}

impl HostTensor {
    /// A tensor from `f32` values.
    pub fn from_f32(shape: &[usize], v: &[f32]) -> HostTensor {
        HostTensor {
            dtype: crate::DType::F32,
            shape: shape.to_vec(),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// The values as `f32`, for float32 tensors.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.dtype == crate::DType::F32).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}

impl Emitted {
    /// Runs the graph on host tensors in the model's dtypes, converting at the boundary where
    /// the graph narrowed int64 I/O to int32 (values outside int32 are an error, never wrapped).
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, LowerError> {
        let converted = self.graph_inputs(inputs)?;
        let mut outs: Vec<Vec<u8>> = self
            .graph
            .outputs()
            .iter()
            .map(|t| vec![0u8; t.num_bytes()])
            .collect();
        {
            let ins: Vec<qnn::Input> = converted
                .iter()
                .map(|(d, b)| qnn::Input::from_bytes(*d, b))
                .collect();
            let mut o: Vec<qnn::Output> = self
                .graph
                .outputs()
                .iter()
                .zip(outs.iter_mut())
                .map(|(t, b)| qnn::Output::from_bytes(t.dtype, b))
                .collect();
            self.graph
                .execute(&ins, &mut o)
                .map_err(|e| LowerError::Qnn {
                    node: None,
                    source: Box::new(e),
                })?;
        }
        Ok(self.host_outputs(outs))
    }

    /// Host tensors in ONNX order checked against the graph and converted to what
    /// [`qnn::Graph::execute`] takes: one (dtype, bytes) per graph input, in graph order. Only
    /// int64 inputs narrowed to int32 are copied.
    pub fn graph_inputs<'a>(
        &self,
        inputs: &'a [HostTensor],
    ) -> Result<Vec<GraphBuffer<'a>>, LowerError> {
        let bad = |m: String| LowerError::Qnn {
            node: None,
            source: Box::new(qnn::Error::InvalidArgument(m)),
        };
        if inputs.len() != self.inputs.len() {
            return Err(bad(format!(
                "the model takes {} inputs, got {}",
                self.inputs.len(),
                inputs.len()
            )));
        }
        let mut converted: Vec<GraphBuffer> =
            vec![(qnn::DataType::U8, Cow::Borrowed(&[][..])); inputs.len()];
        for ((io, t), &slot) in self.inputs.iter().zip(inputs).zip(&self.input_slots) {
            let info = &self.graph.inputs()[slot];
            if t.dtype != io.host_dtype {
                return Err(bad(format!(
                    "input {:?} is {} but the model declares {}",
                    io.onnx_name,
                    t.dtype.name(),
                    io.host_dtype.name()
                )));
            }
            let want: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
            if t.shape != want && !(t.shape.is_empty() && want == [1]) {
                return Err(bad(format!(
                    "input {:?} has shape {:?}; the compiled graph takes {:?}",
                    io.onnx_name, t.shape, want
                )));
            }
            if let Some(i) = qnn::first_nan(info.dtype, &t.data) {
                return Err(bad(nan_message(&io.onnx_name, i)));
            }
            let bytes = if io.host_dtype == crate::DType::I64 && info.dtype == qnn::DataType::I32 {
                let mut out = Vec::with_capacity(t.data.len() / 2);
                for c in t.data.chunks_exact(8) {
                    let v = i64::from_le_bytes(c.try_into().expect("8 bytes"));
                    let v = i32::try_from(v).map_err(|_| {
                        bad(format!(
                            "input {:?}: value {v} does not fit the int32 the HTP computes in",
                            io.onnx_name
                        ))
                    })?;
                    out.extend_from_slice(&v.to_le_bytes());
                }
                Cow::Owned(out)
            } else {
                Cow::Borrowed(&t.data[..])
            };
            converted[slot] = (info.dtype, bytes);
        }
        Ok(converted)
    }

    /// Output buffers in graph order (as [`qnn::Graph::execute`] filled them) as host tensors in
    /// ONNX order and the model's dtypes (int32 widened back to int64 where it was narrowed).
    pub fn host_outputs(&self, outs: Vec<Vec<u8>>) -> Vec<HostTensor> {
        let mut outs: Vec<Option<Vec<u8>>> = outs.into_iter().map(Some).collect();
        self.outputs
            .iter()
            .zip(&self.output_slots)
            .map(|(io, &slot)| {
                let info = &self.graph.outputs()[slot];
                let data = outs
                    .get_mut(slot)
                    .and_then(Option::take)
                    .unwrap_or_default();
                let data = if io.host_dtype == crate::DType::I64 && info.dtype == qnn::DataType::I32
                {
                    data.chunks_exact(4)
                        .flat_map(|c| {
                            (i32::from_le_bytes(c.try_into().expect("4 bytes")) as i64)
                                .to_le_bytes()
                        })
                        .collect()
                } else {
                    data
                };
                HostTensor {
                    dtype: io.host_dtype,
                    shape: info.dims.iter().map(|&d| d as usize).collect(),
                    data,
                }
            })
            .collect()
    }

    /// The model I/O binding stored with a cache entry (`extra["io"]`), so a hit needs no
    /// lowering: for each input and output in ONNX order, `[name, model dtype, graph slot]`.
    pub fn io_binding_json(&self) -> String {
        let side = |ios: &[PlanIo], slots: &[usize]| -> Vec<serde_json::Value> {
            ios.iter()
                .zip(slots)
                .map(|(io, s)| serde_json::json!([io.onnx_name, io.host_dtype.name(), s]))
                .collect()
        };
        serde_json::json!({
            "inputs": side(&self.inputs, &self.input_slots),
            "outputs": side(&self.outputs, &self.output_slots),
        })
        .to_string()
    }

    /// Binds `graph` (loaded from a context binary) to the model I/O described by
    /// [`Emitted::io_binding_json`]; `None` if the text does not parse or names slots the graph
    /// does not have.
    pub fn from_io_binding(graph: qnn::Graph, json: &str) -> Option<Emitted> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let side = |key: &str| -> Option<(Vec<PlanIo>, Vec<usize>)> {
            let mut ios = Vec::new();
            let mut slots = Vec::new();
            for item in v.get(key)?.as_array()? {
                let a = item.as_array()?;
                ios.push(PlanIo {
                    tensor: 0,
                    onnx_name: a.first()?.as_str()?.to_string(),
                    host_dtype: crate::DType::from_name(a.get(1)?.as_str()?)?,
                });
                slots.push(usize::try_from(a.get(2)?.as_u64()?).ok()?);
            }
            Some((ios, slots))
        };
        let (inputs, input_slots) = side("inputs")?;
        let (outputs, output_slots) = side("outputs")?;
        if input_slots.iter().any(|&s| s >= graph.inputs().len())
            || output_slots.iter().any(|&s| s >= graph.outputs().len())
        {
            return None;
        }
        Some(Emitted {
            graph,
            inputs,
            outputs,
            input_slots,
            output_slots,
        })
    }
}

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
    /// HTP finalize optimization level 1 to 3 ([`qnn::GraphOptions::opt_level`]).
    pub opt_level: Option<u8>,
    /// Where external data files are read from. Without it a model with external data is
    /// rejected; with it such a model is never cached (the key covers the ONNX bytes only).
    pub base_dir: Option<PathBuf>,
}

/// The steps of [`compile_with_progress`], reported as each one starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Looking the model up in the cache.
    CacheLookup,
    /// ONNX to a QNN plan ([`crate::lower`]).
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
    /// Milliseconds spent lowering (0 on a cache hit).
    pub lower_ms: f64,
    /// Milliseconds spent building and finalizing the QNN graph (0 on a cache hit).
    pub finalize_ms: f64,
    /// Milliseconds spent loading the context binary from the cache (0 when compiled).
    pub load_ms: f64,
    /// Whether the graph came from the cache.
    pub from_cache: bool,
    /// The cache key, when a cache was used.
    pub cache_key: Option<qnn::cache::CacheKey>,
    /// Cache problems that cost time, not correctness (an entry that could not be loaded and
    /// was dropped, an entry that could not be stored), for the caller to log.
    pub warnings: Vec<String>,
}

fn qnn_failure(source: qnn::Error) -> LowerError {
    LowerError::Qnn {
        node: None,
        source: Box::new(source),
    }
}

fn backend_name(backend: &qnn::Backend) -> &'static str {
    match backend.kind() {
        qnn::BackendKind::Gpu => "gpu",
        _ => "htp",
    }
}

/// The cache key of `onnx` compiled on `backend`/`device` with `opts`: the model bytes, backend,
/// SoC and arch of the device, QNN build id, and the settings `graph_name`, `fp16`, `opt_level`
/// (and `input_shapes` when given).
pub fn cache_key(
    backend: &qnn::Backend,
    device: &qnn::Device,
    onnx: &[u8],
    opts: &CompileOptions,
) -> Result<qnn::cache::CacheKey, LowerError> {
    let mut b = target_key(backend, device, opts.fp16, opts.opt_level)?
        .model(onnx)
        .setting("graph_name", &opts.name);
    if !opts.input_shapes.is_empty() {
        b = b.setting("input_shapes", &shapes_setting(&opts.input_shapes));
    }
    Ok(b.build())
}

/// What single- and multi-model cache keys share: the backend, its QNN build id, the SoC and
/// arch of the device, and the settings `fp16` and `opt_level`.
fn target_key(
    backend: &qnn::Backend,
    device: &qnn::Device,
    fp16: bool,
    opt_level: Option<u8>,
) -> Result<qnn::cache::KeyBuilder, LowerError> {
    let build = backend.build_id().map_err(qnn_failure)?;
    let dev = device.options();
    let mut b = qnn::cache::CacheKey::builder()
        .backend(backend_name(backend))
        .qnn_build_id(&build)
        .setting("fp16", &fp16.to_string())
        .setting("opt_level", &format!("{opt_level:?}"));
    if let Some(s) = dev.soc_model {
        b = b.soc_model(s);
    }
    if let Some(a) = dev.arch {
        b = b.arch(a);
    }
    Ok(b)
}

/// Input shapes as a cache-key setting: `name=d,d;name=d` in name order.
fn shapes_setting(shapes: &BTreeMap<String, Vec<usize>>) -> String {
    let shapes: Vec<String> = shapes
        .iter()
        .map(|(name, dims)| {
            let dims: Vec<String> = dims.iter().map(usize::to_string).collect();
            format!("{name}={}", dims.join(","))
        })
        .collect();
    shapes.join(";")
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// Loads cache entry `key` with `bind` (its context and I/O binding), timed in milliseconds.
/// `Ok(None)` is a miss. `Err` carries a warning and is a miss too: the lookup failed, or `bind`
/// refused the entry, which is then removed so the next compile replaces it.
fn load_entry<T>(
    cache: &qnn::cache::Cache,
    key: &qnn::cache::CacheKey,
    bind: impl FnOnce(&qnn::cache::Entry) -> Option<T>,
) -> Result<Option<(T, f64)>, String> {
    let entry = match cache.get(key) {
        Ok(Some(e)) => e,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("cache lookup failed, compiling instead: {e}")),
    };
    let t = Instant::now();
    match bind(&entry) {
        Some(loaded) => Ok(Some((loaded, ms_since(t)))),
        None => {
            let _ = cache.invalidate(key);
            Err(format!(
                "cache entry {key} could not be loaded; rebuilding it"
            ))
        }
    }
}

/// Serialises `context` and stores it in `cache` as entry `key`, with `io` (the metadata name
/// and JSON of the graphs' I/O binding); `Err` says why it could not.
fn store_entry(
    backend: &qnn::Backend,
    cache: &qnn::cache::Cache,
    key: &qnn::cache::CacheKey,
    context: &qnn::Context,
    io: (&str, String),
) -> Result<(), String> {
    let binary = context.to_binary().map_err(|e| e.to_string())?;
    let system = backend.system().map_err(|e| e.to_string())?;
    let info = qnn::binary_info(&system, &binary).map_err(|e| e.to_string())?;
    let mut entry = qnn::cache::NewEntry::from_binary_info(backend_name(backend), &info);
    entry.extra.insert(io.0.into(), io.1);
    cache.put(key, &binary, entry).map_err(|e| e.to_string())?;
    Ok(())
}

/// `cache`, unless one of `models` (ONNX bytes and base dir) keeps weights in external data
/// files, which the cache key does not cover: then `None`, with a warning naming the model as
/// `which`.
fn cache_unless_external<'c, 'm>(
    cache: Option<&'c qnn::cache::Cache>,
    mut models: impl Iterator<Item = (&'m [u8], Option<&'m Path>)>,
    which: &str,
    warnings: &mut Vec<String>,
) -> Option<&'c qnn::cache::Cache> {
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
    backend: &qnn::Backend,
    onnx: &[u8],
    base_dir: Option<&Path>,
    fp16: bool,
    input_shapes: &BTreeMap<String, Vec<usize>>,
) -> Result<(Plan, f64), LowerError> {
    let start = Instant::now();
    let lower_opts = LowerOptions {
        backend: match backend.kind() {
            qnn::BackendKind::Gpu => crate::Backend::Gpu,
            _ => crate::Backend::Htp,
        },
        fp16,
        input_shapes: input_shapes.clone(),
    };
    // Parsed from the caller's bytes: copying them first cost 30 ms for resnet18's 46 MB.
    let model = crate::Model::from_bytes(onnx, base_dir)?;
    let plan = crate::lower(model, &lower_opts)?;
    Ok((plan, ms_since(start)))
}

/// [`emit`] with finalize optimization level `opt_level`, timed in milliseconds.
fn emit_timed(
    context: &qnn::Context,
    name: &str,
    plan: &Plan,
    opt_level: Option<u8>,
) -> Result<(Emitted, f64), LowerError> {
    let start = Instant::now();
    let graph_options = qnn::GraphOptions {
        opt_level,
        ..Default::default()
    };
    let emitted = emit(context, name, plan, &graph_options)?;
    Ok((emitted, ms_since(start)))
}

/// Loads graph `name` of the cache entry `key`. `Ok(None)` is a miss. `Err` carries a warning
/// for the caller to log and is a miss too: the lookup failed, or QNN rejected the entry's
/// binary or its I/O binding, in which case the entry has been removed so the next compile
/// replaces it.
pub fn load_cached(
    backend: &qnn::Backend,
    device: &qnn::Device,
    cache: &qnn::cache::Cache,
    key: &qnn::cache::CacheKey,
    name: &str,
) -> Result<Option<Compiled>, String> {
    let loaded = load_entry(cache, key, |entry| {
        let io = entry.meta().extra.get("io")?;
        let context = entry.load(backend, Some(device)).ok()?;
        let graph = context.graph(name).ok()?;
        Some((Emitted::from_io_binding(graph, io)?, context))
    })?;
    Ok(loaded.map(|((emitted, context), load_ms)| Compiled {
        emitted,
        context,
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
    backend: &qnn::Backend,
    device: &qnn::Device,
    onnx: &[u8],
    opts: &CompileOptions,
    cache: Option<&qnn::cache::Cache>,
) -> Result<Compiled, LowerError> {
    compile_with_progress(backend, device, onnx, opts, cache, &mut |_| {})
}

/// Lowers `onnx` for `backend` and builds and finalizes graph `opts.name` in a new context on
/// `device`. With a cache, an entry for the same key is loaded instead (no lowering, no
/// finalize), and a newly compiled graph is stored with its I/O binding; a cache that cannot be
/// read or written costs time, not correctness, and is reported in [`Compiled::warnings`].
/// `progress` is called as each [`Stage`] starts.
pub fn compile_with_progress(
    backend: &qnn::Backend,
    device: &qnn::Device,
    onnx: &[u8],
    opts: &CompileOptions,
    cache: Option<&qnn::cache::Cache>,
    progress: &mut dyn FnMut(Stage),
) -> Result<Compiled, LowerError> {
    let mut warnings = Vec::new();
    let models = std::iter::once((onnx, opts.base_dir.as_deref()));
    let cache = cache_unless_external(cache, models, "the model", &mut warnings);
    let key = match cache {
        Some(_) => Some(cache_key(backend, device, onnx, opts)?),
        None => None,
    };
    if let (Some(cache), Some(key)) = (cache, &key) {
        progress(Stage::CacheLookup);
        match load_cached(backend, device, cache, key, &opts.name) {
            Ok(Some(c)) => return Ok(c),
            Ok(None) => {}
            Err(w) => warnings.push(w),
        }
    }
    progress(Stage::Lower);
    let (plan, lower_ms) = lower_timed(
        backend,
        onnx,
        opts.base_dir.as_deref(),
        opts.fp16,
        &opts.input_shapes,
    )?;
    progress(Stage::Finalize);
    let context = qnn::Context::new(backend, Some(device)).map_err(qnn_failure)?;
    let (emitted, finalize_ms) = emit_timed(&context, &opts.name, &plan, opts.opt_level)?;
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
/// data lives ([`crate::onnx::placement`]), skipping the weights instead of copying them.
fn uses_external_data(onnx: &[u8]) -> bool {
    use prost::Message;
    let Ok(m) = crate::onnx::placement::ModelProto::decode(onnx) else {
        return true;
    };
    m.graph.iter().flat_map(|g| &g.initializer).any(|t| {
        t.data_location == Some(crate::onnx::data_location::EXTERNAL) || !t.external_data.is_empty()
    })
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::uses_external_data;
    use crate::dtype::DType;
    use crate::onnx;
    use crate::tensor::Tensor;
    use crate::testing::{rand_f32, ModelBuilder};

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
