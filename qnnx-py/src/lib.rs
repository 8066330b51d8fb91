//! PyO3 glue for the `qnnx_backend` package: compile an ONNX model to a QNN graph (lowering +
//! emit), run it on tensor memory handed over by pointer, and map every Rust error to one Python
//! exception class. The torch-facing side (FX, export, fallback policy) lives in Python.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lowering::emit::CompileOptions;
use lowering::LowerError;
use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use qnn::{Backend, BackendKind, Device, DeviceOptions};

create_exception!(
    _native,
    QnnxError,
    PyRuntimeError,
    "Base class of every qnnx_backend error."
);
create_exception!(
    _native,
    LibraryLoadError,
    QnnxError,
    "A QNN library could not be found or opened."
);
create_exception!(
    _native,
    QnnApiError,
    QnnxError,
    "A QNN call failed; `.code`, `.call`, `.node` say which."
);
create_exception!(
    _native,
    UnsupportedOpError,
    QnnxError,
    "The model has nodes the backend cannot run; `.nodes` lists them."
);
create_exception!(
    _native,
    LoweringError,
    QnnxError,
    "The model could not be lowered to QNN (invalid or unsupported input)."
);
create_exception!(
    _native,
    CacheError,
    QnnxError,
    "The context-binary cache could not be used."
);

fn set_attr<'py, V: IntoPyObject<'py>>(py: Python<'py>, err: &PyErr, name: &str, value: V) {
    // Attributes are best effort: the message already carries the facts.
    let _ = err.value(py).setattr(name, value);
}

fn qnn_error(py: Python<'_>, e: qnn::Error, node: Option<String>) -> PyErr {
    let err = match &e {
        qnn::Error::Load(_) => LibraryLoadError::new_err(e.to_string()),
        qnn::Error::Api(api) => {
            let err = QnnApiError::new_err(match &node {
                Some(n) => format!("ONNX node \"{n}\": {e}"),
                None => e.to_string(),
            });
            set_attr(py, &err, "code", api.code);
            set_attr(py, &err, "call", api.call);
            err
        }
        _ => QnnApiError::new_err(e.to_string()),
    };
    set_attr(py, &err, "node", node);
    err
}

/// One exhaustive mapping from lowering errors to exception classes.
fn lower_error(py: Python<'_>, e: LowerError) -> PyErr {
    let unsupported = |list: Vec<lowering::Unsupported>, msg: String| {
        let err = UnsupportedOpError::new_err(msg);
        let nodes: Vec<(String, String, String)> = list
            .iter()
            .map(|u| (u.node.clone(), u.op_type.clone(), u.reason.clone()))
            .collect();
        let ops: std::collections::BTreeSet<String> =
            list.iter().map(|u| u.op_type.clone()).collect();
        set_attr(py, &err, "nodes", nodes);
        set_attr(py, &err, "operators", ops);
        err
    };
    match e {
        LowerError::UnsupportedOp {
            ref node,
            ref op_type,
            ref reason,
        }
        | LowerError::UnsupportedAttr {
            ref node,
            ref op_type,
            ref reason,
            ..
        }
        | LowerError::UnsupportedDtype {
            ref node,
            ref op_type,
            ref reason,
        } => {
            let u = lowering::Unsupported {
                node: node.clone(),
                op_type: op_type.clone(),
                reason: reason.clone(),
            };
            unsupported(vec![u], e.to_string())
        }
        LowerError::Unsupported(ref list) => unsupported(list.clone(), e.to_string()),
        LowerError::InvalidModel(m) => LoweringError::new_err(m),
        LowerError::Qnn { node, source } => qnn_error(py, *source, node),
        other => LoweringError::new_err(other.to_string()),
    }
}

fn backend_kind(device: &str) -> PyResult<BackendKind> {
    match device {
        "npu" | "htp" => Ok(BackendKind::Htp),
        "gpu" => Ok(BackendKind::Gpu),
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "unknown QNN device {other:?}: use \"npu\" or \"gpu\""
        ))),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct RuntimeKey {
    kind: BackendKind,
    soc: Option<u32>,
    arch: Option<u32>,
}

struct Runtime {
    backend: Backend,
    device: Device,
}

/// One backend and device per (backend, SoC, arch) for the whole process: opening the HTP
/// library and its first graph cost far more than a compile of a small model.
static RUNTIMES: Mutex<Option<HashMap<RuntimeKey, Arc<Runtime>>>> = Mutex::new(None);

fn runtime(key: RuntimeKey) -> Result<Arc<Runtime>, qnn::Error> {
    let mut map = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(r) = map.get(&key) {
        return Ok(r.clone());
    }
    let level = *LOG_LEVEL.lock().unwrap_or_else(|e| e.into_inner());
    let backend = Backend::open(
        key.kind,
        &qnn::BackendOptions {
            library: None,
            log_level: level,
        },
    )?;
    let mut options = if key.kind == BackendKind::Htp {
        DeviceOptions::host_default()
    } else {
        DeviceOptions::default()
    };
    if key.soc.is_some() {
        options.soc_model = key.soc;
    }
    if key.arch.is_some() {
        options.arch = key.arch;
    }
    let device = Device::new(&backend, &options)?;
    let r = Arc::new(Runtime { backend, device });
    map.insert(key, r.clone());
    Ok(r)
}

static LOG_LEVEL: Mutex<Option<qnn::LogLevel>> = Mutex::new(None);

/// QNN's log level for backends opened from now on (error, warn, info, verbose, debug).
#[pyfunction]
fn set_log_level(level: &str) -> PyResult<()> {
    let l: qnn::LogLevel = level
        .parse()
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    *LOG_LEVEL.lock().unwrap_or_else(|e| e.into_inner()) = Some(l);
    Ok(())
}

/// The model number of a SoC given by name (SC8380XP, SM8650, ...) or number, if known.
#[pyfunction]
fn soc_model(name: &str) -> Option<u32> {
    qnn::soc::find(name).map(|s| s.model)
}

/// Known SoC names and numbers, for messages.
#[pyfunction]
fn known_socs() -> String {
    qnn::soc::known_names()
}

/// Whether `device` ("npu" or "gpu") can be opened and initialised on this machine.
#[pyfunction]
fn is_available(py: Python<'_>, device: &str) -> PyResult<bool> {
    let kind = backend_kind(device)?;
    Ok(py.detach(|| {
        runtime(RuntimeKey {
            kind,
            soc: None,
            arch: None,
        })
        .is_ok()
    }))
}

/// Why `device` is unavailable, or None.
#[pyfunction]
fn unavailable_reason(py: Python<'_>, device: &str) -> PyResult<Option<String>> {
    let kind = backend_kind(device)?;
    Ok(py.detach(|| {
        runtime(RuntimeKey {
            kind,
            soc: None,
            arch: None,
        })
        .err()
        .map(|e| e.to_string())
    }))
}

/// The QNN build id of `device`'s library.
#[pyfunction]
fn build_id(py: Python<'_>, device: &str) -> PyResult<String> {
    let kind = backend_kind(device)?;
    let r = py
        .detach(|| {
            runtime(RuntimeKey {
                kind,
                soc: None,
                arch: None,
            })
        })
        .map_err(|e| qnn_error(py, e, None))?;
    r.backend.build_id().map_err(|e| qnn_error(py, e, None))
}

/// Every node of an ONNX model that `device` cannot run, as (node, op_type, reason), without
/// touching QNN.
#[pyfunction]
fn check(py: Python<'_>, onnx: &[u8], device: &str) -> PyResult<Vec<(String, String, String)>> {
    let backend = match backend_kind(device)? {
        BackendKind::Gpu => lowering::Backend::Gpu,
        _ => lowering::Backend::Htp,
    };
    let model = py
        .detach(|| lowering::Model::from_bytes(onnx, None))
        .map_err(|e| lower_error(py, e))?;
    Ok(py
        .detach(|| lowering::check(&model, backend))
        .into_iter()
        .map(|u| (u.node, u.op_type, u.reason))
        .collect())
}

/// A compiled graph, ready to run.
#[pyclass(frozen, module = "qnnx_backend._native")]
struct Compiled {
    inner: lowering::emit::Compiled,
}

fn dtype_name(d: qnn::DataType) -> &'static str {
    match d {
        qnn::DataType::F32 => "float32",
        qnn::DataType::F16 => "float16",
        qnn::DataType::I8 => "int8",
        qnn::DataType::U8 => "uint8",
        qnn::DataType::I16 => "int16",
        qnn::DataType::U16 => "uint16",
        qnn::DataType::I32 => "int32",
        qnn::DataType::U32 => "uint32",
        qnn::DataType::I64 => "int64",
        qnn::DataType::U64 => "uint64",
        qnn::DataType::Bool => "bool",
        _ => "quantized",
    }
}

fn host_name(d: lowering::DType) -> &'static str {
    match d {
        lowering::DType::F32 => "float32",
        lowering::DType::F16 => "float16",
        lowering::DType::BF16 => "bfloat16",
        lowering::DType::F64 => "float64",
        lowering::DType::I8 => "int8",
        lowering::DType::I16 => "int16",
        lowering::DType::I32 => "int32",
        lowering::DType::I64 => "int64",
        lowering::DType::U8 => "uint8",
        lowering::DType::U16 => "uint16",
        lowering::DType::U32 => "uint32",
        lowering::DType::U64 => "uint64",
        lowering::DType::Bool => "bool",
    }
}

type IoDesc = (String, String, Vec<u32>, String);

fn io_descs(
    ios: &[lowering::plan::PlanIo],
    slots: &[usize],
    graph: &[qnn::TensorInfo],
) -> Vec<IoDesc> {
    ios.iter()
        .zip(slots)
        .map(|(io, &s)| {
            (
                io.onnx_name.clone(),
                dtype_name(graph[s].dtype).into(),
                graph[s].dims.clone(),
                host_name(io.host_dtype).into(),
            )
        })
        .collect()
}

#[pymethods]
impl Compiled {
    /// Milliseconds spent lowering (0 on a cache hit).
    #[getter]
    fn lower_ms(&self) -> f64 {
        self.inner.lower_ms
    }

    /// Milliseconds spent building and finalizing the QNN graph (0 on a cache hit).
    #[getter]
    fn finalize_ms(&self) -> f64 {
        self.inner.finalize_ms
    }

    /// Milliseconds spent loading the context binary from the cache (0 when compiled).
    #[getter]
    fn load_ms(&self) -> f64 {
        self.inner.load_ms
    }

    /// Whether the graph came from the persistent cache.
    #[getter(from_cache)]
    fn is_from_cache(&self) -> bool {
        self.inner.from_cache
    }

    /// The cache key, when a cache was used.
    #[getter]
    fn cache_key(&self) -> Option<String> {
        self.inner.cache_key.as_ref().map(|k| k.to_string())
    }

    /// Inputs in ONNX order: (name, graph dtype, graph shape, model dtype). The caller passes
    /// buffers of the graph dtype; it converts from the model dtype where they differ (int64).
    #[getter]
    fn inputs(&self) -> Vec<IoDesc> {
        let e = &self.inner.emitted;
        io_descs(&e.inputs, &e.input_slots, e.graph.inputs())
    }

    /// Outputs in ONNX order, like `inputs`.
    #[getter]
    fn outputs(&self) -> Vec<IoDesc> {
        let e = &self.inner.emitted;
        io_descs(&e.outputs, &e.output_slots, e.graph.outputs())
    }

    /// Executes on caller memory given as (address, byte length) pairs in ONNX order, without
    /// copies and without the GIL. Lengths are checked against the graph before QNN runs.
    ///
    /// The caller (the package's Python code) guarantees each address is valid, contiguous
    /// host memory of that length that stays alive and is not otherwise written during the call.
    #[pyo3(signature = (inputs, outputs, check_nan = true))]
    fn run(
        &self,
        py: Python<'_>,
        inputs: Vec<(usize, usize)>,
        outputs: Vec<(usize, usize)>,
        check_nan: bool,
    ) -> PyResult<()> {
        let e = &self.inner.emitted;
        if inputs.len() != e.inputs.len() || outputs.len() != e.outputs.len() {
            return Err(QnnxError::new_err(format!(
                "the graph takes {} inputs and {} outputs, got {} and {}",
                e.inputs.len(),
                e.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        let gi = e.graph.inputs();
        let go = e.graph.outputs();
        let mut ins: Vec<Option<qnn::Input<'_>>> = vec![None; gi.len()];
        for ((&(addr, len), &slot), io) in inputs.iter().zip(&e.input_slots).zip(&e.inputs) {
            if addr == 0 && len != 0 {
                return Err(QnnxError::new_err("null input buffer"));
            }
            // SAFETY: the caller guarantees `addr` is valid for `len` bytes for this call
            // (see the method docs); `execute` checks `len` against the tensor before use.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            if check_nan && len == gi[slot].num_bytes() {
                if let Some(i) = qnn::first_nan(gi[slot].dtype, bytes) {
                    return Err(QnnxError::new_err(lowering::emit::nan_message(
                        &io.onnx_name,
                        i,
                    )));
                }
            }
            ins[slot] = Some(qnn::Input::from_bytes(gi[slot].dtype, bytes));
        }
        let mut outs: Vec<Option<qnn::Output<'_>>> = (0..go.len()).map(|_| None).collect();
        for (&(addr, len), &slot) in outputs.iter().zip(&e.output_slots) {
            if addr == 0 && len != 0 {
                return Err(QnnxError::new_err("null output buffer"));
            }
            // SAFETY: as above, and the caller does not read or write it during the call.
            let bytes = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            outs[slot] = Some(qnn::Output::from_bytes(go[slot].dtype, bytes));
        }
        let ins: Vec<qnn::Input<'_>> = ins
            .into_iter()
            .map(|i| i.expect("every slot filled"))
            .collect();
        let mut outs: Vec<qnn::Output<'_>> = outs
            .into_iter()
            .map(|o| o.expect("every slot filled"))
            .collect();
        let graph = &e.graph;
        let result = {
            // Raw pointers are not Send; the slices are only used inside this closure while
            // the caller's Python frame keeps the tensors alive.
            struct Unchecked<T>(T);
            // SAFETY: see the method docs: the memory outlives the call.
            unsafe impl<T> Send for Unchecked<T> {}
            let work = Unchecked((ins, &mut outs));
            py.detach(move || {
                let w = work;
                let (ins, outs) = w.0;
                graph.execute(&ins, outs)
            })
        };
        result.map_err(|err| qnn_error(py, err, None))
    }

    /// The context binary (for inspection or an offline cache).
    fn binary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let bytes = py
            .detach(|| self.inner.context.to_binary())
            .map_err(|e| qnn_error(py, e, None))?;
        Ok(pyo3::types::PyBytes::new(py, &bytes))
    }
}

enum Failure {
    Lower(LowerError),
    Qnn(qnn::Error),
    Cache(String),
}

fn failure_to_py(py: Python<'_>, f: Failure) -> PyErr {
    match f {
        Failure::Lower(e) => lower_error(py, e),
        Failure::Qnn(e) => qnn_error(py, e, None),
        Failure::Cache(m) => CacheError::new_err(m),
    }
}

struct Target {
    kind: BackendKind,
    soc: Option<u32>,
    arch: Option<u32>,
    name: String,
}

fn compile_impl(
    onnx: &[u8],
    t: &Target,
    fp16: bool,
    opt_level: Option<u8>,
    cache: Option<&qnn::cache::Cache>,
) -> Result<Compiled, Failure> {
    let rt = runtime(RuntimeKey {
        kind: t.kind,
        soc: t.soc,
        arch: t.arch,
    })
    .map_err(Failure::Qnn)?;
    let opts = CompileOptions {
        name: t.name.clone(),
        fp16,
        opt_level,
        ..Default::default()
    };
    let compiled = lowering::emit::compile(&rt.backend, &rt.device, onnx, &opts, cache)
        .map_err(Failure::Lower)?;
    for w in &compiled.warnings {
        tracing::warn!(target: "qnnx", "{w}");
    }
    Ok(Compiled { inner: compiled })
}

fn open_cache(dir: Option<&str>) -> Result<Option<qnn::cache::Cache>, Failure> {
    dir.map(|d| qnn::cache::Cache::open(d, None).map_err(|e| Failure::Cache(e.to_string())))
        .transpose()
}

/// Lowers and compiles an ONNX model for `device` (releases the GIL while working). With
/// `cache_dir`, a binary compiled earlier for the same model, target and settings is loaded
/// instead (no lowering, no finalize), and a new one is stored.
#[pyfunction]
#[pyo3(signature = (onnx, *, device = "npu", soc_model = None, htp_arch = None, fp16 = false, opt_level = None, name = "qnnx", cache_dir = None))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    onnx: &[u8],
    device: &str,
    soc_model: Option<u32>,
    htp_arch: Option<u32>,
    fp16: bool,
    opt_level: Option<u8>,
    name: &str,
    cache_dir: Option<&str>,
) -> PyResult<Compiled> {
    let t = Target {
        kind: backend_kind(device)?,
        soc: soc_model,
        arch: htp_arch,
        name: name.to_string(),
    };
    py.detach(|| {
        let cache = open_cache(cache_dir)?;
        compile_impl(onnx, &t, fp16, opt_level, cache.as_ref())
    })
    .map_err(|f| failure_to_py(py, f))
}

/// Lowers and compiles several ONNX models as graphs `names` of one QNN context (releases the
/// GIL while working) and returns one graph object per model, in order. The objects share the
/// context: any of them keeps it alive, and `binary()` of each is the whole context binary.
///
/// With `weight_sharing` (HTP only) weights equal in content across the models are stored once
/// in the context. The x86_64 HTP library cannot load such binaries, so there a weight-shared
/// compile is never cached (`cache_key` is None, with a warning in the log). Without weight
/// sharing, `cache_dir` works as for `compile`, with one entry for all the models and settings.
#[pyfunction]
#[pyo3(signature = (onnx_list, names, *, device = "npu", soc_model = None, htp_arch = None, fp16 = false, opt_level = None, weight_sharing = true, cache_dir = None))]
#[allow(clippy::too_many_arguments)]
fn compile_many(
    py: Python<'_>,
    onnx_list: Vec<pyo3::pybacked::PyBackedBytes>,
    names: Vec<String>,
    device: &str,
    soc_model: Option<u32>,
    htp_arch: Option<u32>,
    fp16: bool,
    opt_level: Option<u8>,
    weight_sharing: bool,
    cache_dir: Option<&str>,
) -> PyResult<Vec<Compiled>> {
    let kind = backend_kind(device)?;
    if onnx_list.len() != names.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{} models but {} names",
            onnx_list.len(),
            names.len()
        )));
    }
    let result = py.detach(|| -> Result<Vec<Compiled>, MultiFailure> {
        let cache = open_cache(cache_dir)?;
        let rt = runtime(RuntimeKey {
            kind,
            soc: soc_model,
            arch: htp_arch,
        })
        .map_err(Failure::Qnn)?;
        let specs: Vec<lowering::emit::multi::GraphSpec> = onnx_list
            .iter()
            .zip(&names)
            .map(|(onnx, name)| lowering::emit::multi::GraphSpec {
                name: name.clone(),
                onnx: &onnx[..],
                ..Default::default()
            })
            .collect();
        let opts = lowering::emit::multi::MultiOptions {
            fp16,
            opt_level,
            weight_sharing,
        };
        let compiled = lowering::emit::multi::compile_multi(
            &rt.backend,
            &rt.device,
            &specs,
            &opts,
            cache.as_ref(),
        )
        .map_err(|e| MultiFailure {
            graph: e.graph,
            failure: Failure::Lower(e.error),
        })?;
        for w in &compiled.warnings {
            tracing::warn!(target: "qnnx", "{w}");
        }
        Ok(compiled
            .into_compiled()
            .into_iter()
            .map(|inner| Compiled { inner })
            .collect())
    });
    result.map_err(|f| {
        let err = failure_to_py(py, f.failure);
        set_attr(py, &err, "graph", f.graph);
        err
    })
}

/// A failure of `compile_many` and the graph it belongs to, if one.
struct MultiFailure {
    graph: Option<String>,
    failure: Failure,
}

impl From<Failure> for MultiFailure {
    fn from(failure: Failure) -> MultiFailure {
        MultiFailure {
            graph: None,
            failure,
        }
    }
}

/// A graph from the cache by key, or None: used on warm starts to skip the ONNX export too.
#[pyfunction]
#[pyo3(signature = (key, cache_dir, *, device = "npu", soc_model = None, htp_arch = None, name = "qnnx"))]
fn load_cached(
    py: Python<'_>,
    key: &str,
    cache_dir: &str,
    device: &str,
    soc_model: Option<u32>,
    htp_arch: Option<u32>,
    name: &str,
) -> PyResult<Option<Compiled>> {
    let kind = backend_kind(device)?;
    let Some(key) = qnn::cache::CacheKey::parse(key) else {
        return Ok(None);
    };
    py.detach(|| {
        let cache = open_cache(Some(cache_dir))?.expect("a directory was given");
        let rt = runtime(RuntimeKey {
            kind,
            soc: soc_model,
            arch: htp_arch,
        })
        .map_err(Failure::Qnn)?;
        match lowering::emit::load_cached(&rt.backend, &rt.device, &cache, &key, name) {
            Ok(hit) => Ok(hit.map(|inner| Compiled { inner })),
            Err(w) => {
                tracing::warn!(target: "qnnx", "{w}");
                Ok(None)
            }
        }
    })
    .map_err(|f| failure_to_py(py, f))
}

/// The default cache folder ($QNNX_CACHE_DIR, else the platform's cache folder).
#[pyfunction]
fn default_cache_dir() -> Option<String> {
    qnn::cache::default_dir().map(|p| p.display().to_string())
}

/// Versions of this package and of the QNN pieces it was built with.
#[pyfunction]
fn versions(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("qnnx", env!("CARGO_PKG_VERSION"))?;
    d.set_item(
        "qnn_core_api",
        format!("{:?}", qnn::qnn_sys::consts::CORE_API_VERSION),
    )?;
    Ok(d)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("QnnxError", py.get_type::<QnnxError>())?;
    m.add("LibraryLoadError", py.get_type::<LibraryLoadError>())?;
    m.add("QnnApiError", py.get_type::<QnnApiError>())?;
    m.add("UnsupportedOpError", py.get_type::<UnsupportedOpError>())?;
    m.add("LoweringError", py.get_type::<LoweringError>())?;
    m.add("CacheError", py.get_type::<CacheError>())?;
    m.add_class::<Compiled>()?;
    m.add_function(wrap_pyfunction!(is_available, m)?)?;
    m.add_function(wrap_pyfunction!(unavailable_reason, m)?)?;
    m.add_function(wrap_pyfunction!(build_id, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(compile_many, m)?)?;
    m.add_function(wrap_pyfunction!(versions, m)?)?;
    m.add_function(wrap_pyfunction!(set_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(load_cached, m)?)?;
    m.add_function(wrap_pyfunction!(default_cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(soc_model, m)?)?;
    m.add_function(wrap_pyfunction!(known_socs, m)?)?;
    Ok(())
}
