//! PyO3 glue for the `qnnx_backend` package: argument conversion and error mapping over the
//! compile/run core (`qnnx-engine`). The torch-facing side (FX, export, fallback policy) lives
//! in Python; targets, backends, compiling, running and the cache are the engine's, shared with
//! the `qnnx` command.

mod compiled;
mod errors;
mod llm;
mod log;

use std::collections::BTreeMap;
use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use qnnx_engine::cache::{Cache, CacheKey};
use qnnx_engine::compile::multi::{GraphSpec, MultiOptions};
use qnnx_engine::{registry, CompileOptions, Target, TargetSpec};
use qnnx_types::{BackendKind, DType, HtpArch};

use compiled::Compiled;
use errors::{engine_error, qnn_error};

fn backend_kind(device: &str) -> PyResult<BackendKind> {
    device.parse().map_err(PyValueError::new_err)
}

/// A SoC given as a number or a name.
#[derive(FromPyObject)]
enum SocArg {
    Number(u32),
    Name(String),
}

fn target(device: &str, soc_model: Option<SocArg>, htp_arch: Option<u32>) -> PyResult<Target> {
    let (soc, soc_model) = match soc_model {
        Some(SocArg::Number(n)) => (None, Some(n)),
        Some(SocArg::Name(s)) => (Some(s), None),
        None => (None, None),
    };
    let htp_arch = htp_arch
        .map(|a| {
            HtpArch::from_number(a).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "htp_arch={a}: use one of {}",
                    HtpArch::ALL
                        .iter()
                        .map(|a| a.number().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        })
        .transpose()?;
    let spec = TargetSpec {
        backend: backend_kind(device)?,
        soc,
        soc_model,
        htp_arch,
        library: None,
    };
    Target::resolve(&spec, None).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// One target and the compile options that go with it, built once from the Python settings
/// (`QnnSettings.spec`) and given to every compile and cache load instead of a keyword list:
/// `device` ("npu", "gpu", "cpu"), the HTP's SoC (a number or a name) and arch, `fp16`,
/// `opt_level`, and the cache folder (None: no cache). The target is resolved (and checked:
/// ValueError naming the valid values) when the spec is made.
#[pyclass(module = "qnnx_backend._native", frozen)]
struct Spec {
    target: Target,
    /// The SoC number asked for (the target also has the host's default when none was).
    asked_soc: Option<u32>,
    #[pyo3(get)]
    device: String,
    #[pyo3(get)]
    fp16: bool,
    #[pyo3(get)]
    opt_level: Option<u8>,
    #[pyo3(get)]
    cache_dir: Option<String>,
}

#[pymethods]
impl Spec {
    #[new]
    #[pyo3(signature = (device = "npu", soc_model = None, htp_arch = None, fp16 = false, opt_level = None, cache_dir = None))]
    fn new(
        device: &str,
        soc_model: Option<SocArg>,
        htp_arch: Option<u32>,
        fp16: bool,
        opt_level: Option<u8>,
        cache_dir: Option<PathBuf>,
    ) -> PyResult<Spec> {
        let explicit = soc_model.is_some();
        let target = target(device, soc_model, htp_arch)?;
        Ok(Spec {
            asked_soc: if explicit { target.soc_model } else { None },
            target,
            device: device.to_string(),
            fp16,
            opt_level,
            cache_dir: cache_dir.map(|d| d.to_string_lossy().into_owned()),
        })
    }

    /// The SoC number given (by number or name), or None (the host's default applies).
    #[getter]
    fn soc_model(&self) -> Option<u32> {
        self.asked_soc
    }

    /// The HTP architecture given, or None.
    #[getter]
    fn htp_arch(&self) -> Option<u32> {
        self.target.htp_arch.map(HtpArch::number)
    }

    /// The HTP architecture compiled for: `htp_arch`, else that of the SoC, else None (no SoC
    /// given: the host's default is applied at compile time).
    #[getter]
    fn arch(&self) -> Option<u32> {
        self.target.arch().map(HtpArch::number)
    }

    /// Whether the target computes float graphs (in fp16): False for a v68 HTP, which runs
    /// quantized graphs only; True where the arch is not known until compile time.
    #[getter]
    fn float_path(&self) -> bool {
        self.target.arch().is_none_or(HtpArch::has_fp16)
    }

    /// The target as errors name it: `QCS6490 (..., HTP v68)`, `SoC 60`, ...
    fn describe(&self) -> String {
        self.target.describe()
    }

    fn __repr__(&self) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "None".into());
        format!(
            "Spec(device={:?}, soc_model={}, htp_arch={}, fp16={}, opt_level={}, cache_dir={})",
            self.device,
            opt(self.soc_model().map(|n| n.to_string())),
            opt(self.htp_arch().map(|n| n.to_string())),
            if self.fp16 { "True" } else { "False" },
            opt(self.opt_level.map(|n| n.to_string())),
            opt(self.cache_dir.as_ref().map(|d| format!("{d:?}"))),
        )
    }
}

/// The spec given, or the default one (the HTP with no SoC, arch or cache).
fn spec_or_default(spec: Option<PyRef<'_, Spec>>) -> PyResult<SpecRef<'_>> {
    match spec {
        Some(s) => Ok(SpecRef::Given(s)),
        None => Ok(SpecRef::Default(Spec::new(
            "npu", None, None, false, None, None,
        )?)),
    }
}

enum SpecRef<'py> {
    Given(PyRef<'py, Spec>),
    Default(Spec),
}

impl std::ops::Deref for SpecRef<'_> {
    type Target = Spec;
    fn deref(&self) -> &Spec {
        match self {
            SpecRef::Given(s) => s,
            SpecRef::Default(s) => s,
        }
    }
}

/// Checks a target once, for the settings: the SoC number (from a name or number) and the arch.
/// Raises ValueError naming the valid values.
#[pyfunction]
#[pyo3(signature = (device, soc_model = None, htp_arch = None))]
fn resolve_target(
    device: &str,
    soc_model: Option<SocArg>,
    htp_arch: Option<u32>,
) -> PyResult<(Option<u32>, Option<u32>)> {
    let explicit = soc_model.is_some();
    let t = target(device, soc_model, htp_arch)?;
    // Only what was asked for: the host default is applied at compile time.
    let soc = if explicit { t.soc_model } else { None };
    Ok((soc, t.htp_arch.map(HtpArch::number)))
}

/// The HTP architecture a target compiles for: `htp_arch`, else that of the SoC, else None
/// (no SoC given: the host's default is applied at compile time). The quantizer reads it to
/// keep ops a v68 HTP has no 16-bit kernel for at 8 bits.
#[pyfunction]
#[pyo3(signature = (device, soc_model = None, htp_arch = None))]
fn target_arch(
    device: &str,
    soc_model: Option<SocArg>,
    htp_arch: Option<u32>,
) -> PyResult<Option<u32>> {
    Ok(target(device, soc_model, htp_arch)?
        .arch()
        .map(HtpArch::number))
}

/// Bits of a quantized storage type.
fn bits(d: DType) -> u32 {
    if d.is_sub_byte() {
        4
    } else {
        8 * d.size() as u32
    }
}

/// The quantization schemes, the lowering's (`lowering::quantize::Scheme`), in their order:
/// (name, activation bits, weight bits). Python's quantization options are read from them.
#[pyfunction]
fn quant_schemes() -> Vec<(&'static str, u32, u32)> {
    lowering::quantize::Scheme::ALL
        .iter()
        .map(|s| (s.name(), bits(s.activation()), bits(s.weight())))
        .collect()
}

/// QNN's fixed output encodings (the registry's `Quant::Fixed` ops: 16-bit Sigmoid and Tanh):
/// ONNX op -> storage dtype name -> (scale, offset), `real = scale * (q + offset)`.
#[pyfunction]
fn fixed_encodings() -> BTreeMap<&'static str, BTreeMap<&'static str, (f32, i32)>> {
    let mut out = BTreeMap::new();
    for d in lowering::ops::registry::defs() {
        if let lowering::ops::Quant::Fixed(encoding) = d.quant {
            let by_dtype: BTreeMap<_, _> = [DType::U8, DType::I8, DType::U16, DType::I16]
                .into_iter()
                .filter_map(|t| encoding(t).map(|e| (t.name(), e)))
                .collect();
            out.insert(d.op_type, by_dtype);
        }
    }
    out
}

/// QNN's log level for backends opened from now on (error, warn, info, verbose, debug).
#[pyfunction]
fn set_log_level(level: &str) -> PyResult<()> {
    let l: qnn::LogLevel = level.parse().map_err(PyValueError::new_err)?;
    registry::set_log_level(l);
    log::QNN_LOG.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// The model number of a SoC given by name (SC8380XP, SM8650, ...) or number, if known.
#[pyfunction]
fn soc_model(name: &str) -> Option<u32> {
    qnnx_types::soc::find(name).map(|s| s.model)
}

/// Known SoC names and numbers, for messages.
#[pyfunction]
fn known_socs() -> String {
    qnnx_types::soc::known_names()
}

/// HTP architecture numbers QNN knows (68, 69, 73, ...).
#[pyfunction]
fn htp_archs() -> Vec<u32> {
    HtpArch::ALL.iter().map(|a| a.number()).collect()
}

/// Element type names, as every part of qnnx spells them (`f32`, `i64`, `bool`, ...).
#[pyfunction]
fn dtype_names() -> Vec<&'static str> {
    DType::ALL.iter().map(|d| d.name()).collect()
}

/// HTP performance mode names (ONNX Runtime QNN EP's `htp_performance_mode` values), as
/// `Compiled.set_performance_mode` takes them.
#[pyfunction]
fn performance_modes() -> Vec<&'static str> {
    qnn::HtpPerformanceMode::ALL.map(|m| m.name()).to_vec()
}

fn default_runtime(device: &str) -> PyResult<Result<std::sync::Arc<registry::Runtime>, String>> {
    let t = Target::host_default(backend_kind(device)?);
    Ok(registry::for_target(&t, None, false).map_err(|e| e.to_string()))
}

/// Whether `device` ("npu" or "gpu") can be opened and initialised on this machine.
#[pyfunction]
fn is_available(py: Python<'_>, device: &str) -> PyResult<bool> {
    let t = Target::host_default(backend_kind(device)?);
    Ok(py.detach(|| registry::for_target(&t, None, false).is_ok()))
}

/// Why `device` is unavailable, or None.
#[pyfunction]
fn unavailable_reason(py: Python<'_>, device: &str) -> PyResult<Option<String>> {
    backend_kind(device)?;
    Ok(py.detach(|| default_runtime(device))?.err())
}

/// The QNN build id of `device`'s library.
#[pyfunction]
fn build_id(py: Python<'_>, device: &str) -> PyResult<String> {
    let t = Target::host_default(backend_kind(device)?);
    let r = py
        .detach(|| registry::for_target(&t, None, false))
        .map_err(|e| engine_error(py, e))?;
    r.backend.build_id().map_err(|e| qnn_error(py, e, None))
}

/// Every node of an ONNX model that `device` cannot run, as (node, op_type, reason), without
/// touching QNN: the lowering's own decision, the one `qnnx check` reports. `input_shapes` and
/// `fix_inputs` as for `compile`.
#[pyfunction]
#[pyo3(signature = (onnx, device, *, input_shapes = None, fix_inputs = None))]
fn check(
    py: Python<'_>,
    onnx: &[u8],
    device: &str,
    input_shapes: Option<BTreeMap<String, Vec<usize>>>,
    fix_inputs: Option<BTreeMap<String, String>>,
) -> PyResult<Vec<(String, String, String)>> {
    let backend = backend_kind(device)?;
    let model = py
        .detach(|| lowering::Model::from_bytes(onnx, None))
        .map_err(|e| engine_error(py, e.into()))?;
    let opts = lowering::LowerOptions {
        backend,
        input_shapes: input_shapes.unwrap_or_default(),
        fix_inputs: fix_inputs.unwrap_or_default(),
        ..Default::default()
    };
    let list = match py.detach(|| lowering::check_with(&model, &opts)) {
        Ok(list) => list,
        Err(e) => e.to_unsupported("", ""),
    };
    Ok(list
        .into_iter()
        .map(|u| (u.node, u.op_type, u.reason))
        .collect())
}

/// The op table of `device`'s backend (`lowering/op-tables/<backend>.toml`): for each ONNX op type, a
/// dict with `status`, `family`, `opset` (min, max), `dtypes`, `qnn` ops, `layout` and
/// `constraints`. For programs that plan around support (the partitioner); the per-node
/// decision for a model is [`check`].
#[pyfunction]
fn op_table<'py>(py: Python<'py>, device: &str) -> PyResult<Bound<'py, PyDict>> {
    let table = lowering::table::OpTable::get(backend_kind(device)?)
        .map_err(|e| engine_error(py, e.into()))?;
    let out = PyDict::new(py);
    for (op, e) in &table.ops {
        let d = PyDict::new(py);
        d.set_item("status", e.status.name())?;
        d.set_item("runs", e.runs())?;
        d.set_item("family", lowering::table::family(op))?;
        d.set_item("opset", (e.opset[0], e.opset[1]))?;
        d.set_item("dtypes", PyList::new(py, &e.dtypes)?)?;
        d.set_item("qnn", PyList::new(py, &e.qnn)?)?;
        d.set_item("layout", lowering::table::layout(op))?;
        d.set_item("constraints", PyList::new(py, &e.constraints)?)?;
        out.set_item(op, d)?;
    }
    Ok(out)
}

fn open_cache(py: Python<'_>, dir: Option<&str>) -> PyResult<Option<Cache>> {
    dir.map(|d| Cache::open(d, None).map_err(|e| engine_error(py, qnnx_engine::Error::Cache(e))))
        .transpose()
}

fn warn_all(warnings: &[String]) {
    for w in warnings {
        tracing::warn!(target: "qnnx", "{w}");
    }
}

/// Lowers and compiles an ONNX model for `spec`'s target (releases the GIL while working). With
/// `spec.cache_dir`, a binary compiled earlier for the same model, target and settings is loaded
/// instead (no lowering, no finalize), and a new one is stored. `input_shapes` gives inputs with
/// symbolic dims a static shape; `fix_inputs` fixes inputs to a value at compile time (name to
/// value as the `qnnx` command spells it: `3`, `0.5`, `true`, `1,2,3`). `base_dir` is where
/// the model's external data files are (the ONNX file's folder; torch's exporter writes
/// `model.onnx.data` beside `model.onnx`); such a model is never cached.
#[pyfunction]
#[pyo3(signature = (onnx, spec = None, *, name = "qnnx", input_shapes = None, fix_inputs = None, quantized_io = false, base_dir = None))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    onnx: &[u8],
    spec: Option<PyRef<'_, Spec>>,
    name: &str,
    input_shapes: Option<BTreeMap<String, Vec<usize>>>,
    fix_inputs: Option<BTreeMap<String, String>>,
    quantized_io: bool,
    base_dir: Option<PathBuf>,
) -> PyResult<Compiled> {
    let spec = spec_or_default(spec)?;
    let t = &spec.target;
    let cache = open_cache(py, spec.cache_dir.as_deref())?;
    let opts = CompileOptions {
        name: name.to_string(),
        fp16: spec.fp16,
        opt_level: spec.opt_level,
        input_shapes: input_shapes.unwrap_or_default(),
        fix_inputs: fix_inputs.unwrap_or_default(),
        quantized_io,
        base_dir,
        ..Default::default()
    };
    let compiled = py
        .detach(|| qnnx_engine::compile(t, onnx, &opts, cache.as_ref()))
        .map_err(|e| engine_error(py, e))?;
    warn_all(&compiled.warnings);
    Ok(Compiled::from(compiled))
}

/// Per-layer accuracy ([`qnnx_engine::compare::compare`]): `test` (a float model, fp16 when
/// `fp16`, or a QDQ model, where `fp16` is ignored) on the target and `reference` (a float
/// model, `test` when `None`) in exact fp32 on the SoC-less HTP emulator, both with every
/// intermediate as an output, on `inputs` (each `(dtype name, shape, little-endian bytes)`,
/// in the model's input order). Returns the report as JSON (releases the GIL while working).
/// The HTP emulator with no SoC: exact fp32, the reference of every comparison.
fn exact_target() -> Target {
    Target {
        backend: BackendKind::Htp,
        soc_model: None,
        htp_arch: None,
        library: None,
    }
}

/// (dtype name, shape, bytes) triples from Python as host tensors, checked.
fn host_inputs(
    inputs: Vec<(String, Vec<usize>, Vec<u8>)>,
) -> PyResult<Vec<qnnx_engine::HostTensor>> {
    let mut host = Vec::new();
    for (k, (dtype, shape, data)) in inputs.into_iter().enumerate() {
        let d = DType::from_name(&dtype)
            .ok_or_else(|| PyValueError::new_err(format!("input {k}: unknown dtype {dtype:?}")))?;
        if shape.iter().product::<usize>() * d.size() != data.len() {
            return Err(PyValueError::new_err(format!(
                "input {k}: {} bytes do not make a {dtype} tensor of shape {shape:?}",
                data.len()
            )));
        }
        host.push(qnnx_engine::HostTensor {
            dtype: d,
            shape,
            data,
        });
    }
    Ok(host)
}

fn check_jump_db(jump_db: f64) -> PyResult<()> {
    if jump_db.is_finite() && jump_db > 0.0 {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "jump_db={jump_db}: a positive number of dB"
        )))
    }
}

/// A float model run once on the exact reference with every model value observed, then
/// compared with any number of test builds on the same inputs (the mixed-precision search:
/// one reference run, made before any v68 backend opens, after which the emulator refuses
/// SoC-less float graphs in the process).
#[pyclass(module = "qnnx_backend._native", frozen)]
struct Reference {
    observed: qnnx_engine::compare::Observed,
    inputs: Vec<qnnx_engine::HostTensor>,
    input_shapes: BTreeMap<String, Vec<usize>>,
}

#[pymethods]
impl Reference {
    #[new]
    #[pyo3(signature = (onnx, inputs, input_shapes=None))]
    fn new(
        py: Python<'_>,
        onnx: &[u8],
        inputs: Vec<(String, Vec<usize>, Vec<u8>)>,
        input_shapes: Option<BTreeMap<String, Vec<usize>>>,
    ) -> PyResult<Reference> {
        use qnnx_engine::compare::{Build, CompareOptions, Observed};
        let inputs = host_inputs(inputs)?;
        let input_shapes = input_shapes.unwrap_or_default();
        let exact = exact_target();
        let b = Build {
            target: &exact,
            onnx,
            base_dir: None,
            fp16: false,
        };
        let opts = CompareOptions {
            input_shapes: input_shapes.clone(),
            ..CompareOptions::default()
        };
        let observed = py
            .detach(|| Observed::reference(&b, &opts, &inputs))
            .map_err(|e| engine_error(py, e))?;
        Ok(Reference {
            observed,
            inputs,
            input_shapes,
        })
    }

    /// The report (JSON) of `test` (this model quantized, or itself in fp16 with `spec.fp16`)
    /// on `spec`'s HTP, against the reference's values.
    #[pyo3(signature = (test, spec, jump_db=10.0))]
    fn compare(
        &self,
        py: Python<'_>,
        test: &[u8],
        spec: PyRef<'_, Spec>,
        jump_db: f64,
    ) -> PyResult<String> {
        use qnnx_engine::compare::{Build, CompareOptions};
        check_jump_db(jump_db)?;
        let tb = Build {
            target: &spec.target,
            onnx: test,
            base_dir: None,
            fp16: spec.fp16,
        };
        let opts = CompareOptions {
            input_shapes: self.input_shapes.clone(),
            jump_db,
        };
        let rep = py
            .detach(|| self.observed.compare_build(&tb, &self.inputs, &opts))
            .map_err(|e| engine_error(py, e))?;
        Ok(rep.json().to_string())
    }
}

#[pyfunction]
#[pyo3(signature = (test, inputs, spec = None, *, reference = None, jump_db = 10.0, input_shapes = None))]
fn compare(
    py: Python<'_>,
    test: &[u8],
    inputs: Vec<(String, Vec<usize>, Vec<u8>)>,
    spec: Option<PyRef<'_, Spec>>,
    reference: Option<&[u8]>,
    jump_db: f64,
    input_shapes: Option<BTreeMap<String, Vec<usize>>>,
) -> PyResult<String> {
    use qnnx_engine::compare::{Build, CompareOptions};
    check_jump_db(jump_db)?;
    let spec = match spec {
        Some(s) => SpecRef::Given(s),
        // The comparison's own default: the test build in fp16.
        None => SpecRef::Default(Spec::new("npu", None, None, true, None, None)?),
    };
    let t = &spec.target;
    let fp16 = spec.fp16;
    let exact = exact_target();
    let host = host_inputs(inputs)?;
    let rb = Build {
        target: &exact,
        onnx: reference.unwrap_or(test),
        base_dir: None,
        fp16: false,
    };
    let tb = Build {
        target: t,
        onnx: test,
        base_dir: None,
        fp16,
    };
    let opts = CompareOptions {
        input_shapes: input_shapes.unwrap_or_default(),
        jump_db,
    };
    let rep = py
        .detach(|| qnnx_engine::compare::compare(&rb, &tb, &host, &opts))
        .map_err(|e| engine_error(py, e))?;
    Ok(rep.json().to_string())
}

/// Lowers and compiles several ONNX models as graphs `names` of one QNN context (releases the
/// GIL while working) and returns one graph object per model, in order. The objects share the
/// context: any of them keeps it alive, and `binary()` of each is the whole context binary.
///
/// With `weight_sharing` (HTP only) weights equal in content across the models are stored once
/// in the context. The x86_64 HTP library cannot load such binaries, so there a weight-shared
/// compile is never cached (`cache_key` is None, with a warning in the log). Without weight
/// sharing, `spec.cache_dir` works as for `compile`, with one entry for all the models and settings.
/// `fix_inputs`, one map per model (empty: none), fixes inputs of that model as `compile`'s
/// `fix_inputs` does; they enter the cache key.
#[pyfunction]
#[pyo3(signature = (onnx_list, names, spec = None, *, weight_sharing = true, fix_inputs = None))]
fn compile_many(
    py: Python<'_>,
    onnx_list: Vec<pyo3::pybacked::PyBackedBytes>,
    names: Vec<String>,
    spec: Option<PyRef<'_, Spec>>,
    weight_sharing: bool,
    fix_inputs: Option<Vec<BTreeMap<String, String>>>,
) -> PyResult<Vec<Compiled>> {
    let spec = spec_or_default(spec)?;
    let t = &spec.target;
    if onnx_list.len() != names.len() {
        return Err(PyValueError::new_err(format!(
            "{} models but {} names",
            onnx_list.len(),
            names.len()
        )));
    }
    let mut fix_inputs = fix_inputs.unwrap_or_else(|| vec![BTreeMap::new(); onnx_list.len()]);
    if fix_inputs.len() != onnx_list.len() {
        return Err(PyValueError::new_err(format!(
            "{} models but {} fix_inputs maps",
            onnx_list.len(),
            fix_inputs.len()
        )));
    }
    let cache = open_cache(py, spec.cache_dir.as_deref())?;
    let specs: Vec<GraphSpec> = onnx_list
        .iter()
        .zip(&names)
        .zip(fix_inputs.iter_mut())
        .map(|((onnx, name), fixed)| GraphSpec {
            name: name.clone(),
            onnx: &onnx[..],
            fix_inputs: std::mem::take(fixed),
            ..Default::default()
        })
        .collect();
    let opts = MultiOptions {
        fp16: spec.fp16,
        opt_level: spec.opt_level,
        weight_sharing,
    };
    let compiled = py
        .detach(|| qnnx_engine::compile::multi::compile_multi(t, &specs, &opts, cache.as_ref()))
        .map_err(|f| {
            let err = engine_error(py, f.error);
            let _ = err.value(py).setattr("graph", f.graph);
            err
        })?;
    warn_all(&compiled.warnings);
    Ok(compiled
        .into_compiled()
        .into_iter()
        .map(Compiled::from)
        .collect())
}

/// A graph from `spec`'s cache folder by key, or None (also when the spec has no cache folder):
/// used on warm starts to skip the ONNX export too. A bad entry is removed (with a warning in
/// the log) and reported as a miss.
#[pyfunction]
#[pyo3(signature = (key, spec, *, name = "qnnx"))]
fn load_cached(
    py: Python<'_>,
    key: &str,
    spec: PyRef<'_, Spec>,
    name: &str,
) -> PyResult<Option<Compiled>> {
    from_cache(py, key, &spec, |rt, cache, key| {
        let hit = qnnx_engine::compile::load_cached(rt, cache, key, name)?;
        Ok(hit.map(Compiled::from))
    })
}

/// Graphs `names` of a multi-graph cache entry (`compile_many`'s), from one load of its
/// context, or None on a miss (a bad entry is removed, with a warning in the log).
#[pyfunction]
#[pyo3(signature = (key, names, spec))]
fn load_cached_many(
    py: Python<'_>,
    key: &str,
    names: Vec<String>,
    spec: PyRef<'_, Spec>,
) -> PyResult<Option<Vec<Compiled>>> {
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    from_cache(py, key, &spec, |rt, cache, key| {
        let hit = qnnx_engine::compile::multi::load_cached_graphs(rt, cache, key, &names)?;
        Ok(hit.map(|m| m.into_compiled().into_iter().map(Compiled::from).collect()))
    })
}

/// A warm-start load from cache entry `key` in `spec`'s cache folder on its runtime: `load` returns
/// the hit, or `Err` for a bad entry (the engine removed it; logged here and a miss, like an
/// unparsable key or an unusable folder).
fn from_cache<T: Send>(
    py: Python<'_>,
    key: &str,
    spec: &Spec,
    load: impl FnOnce(&std::sync::Arc<registry::Runtime>, &Cache, &CacheKey) -> Result<Option<T>, String>
        + Send,
) -> PyResult<Option<T>> {
    let Some(key) = CacheKey::parse(key) else {
        return Ok(None);
    };
    let Some(cache_dir) = spec.cache_dir.as_deref() else {
        return Ok(None);
    };
    let Some(cache) = open_cache(py, Some(cache_dir))? else {
        return Ok(None);
    };
    py.detach(|| -> qnnx_engine::Result<Option<T>> {
        let rt = registry::for_target(&spec.target, spec.opt_level, false)?;
        match load(&rt, &cache, &key) {
            Ok(hit) => Ok(hit),
            Err(w) => {
                tracing::warn!(target: "qnnx", "{w}");
                Ok(None)
            }
        }
    })
    .map_err(|e| engine_error(py, e))
}

/// The cache key alias `fingerprint` (64 hex digits) points at in `cache_dir`, if any.
#[pyfunction]
fn alias_get(py: Python<'_>, cache_dir: &str, fingerprint: &str) -> PyResult<Option<String>> {
    let Some(cache) = open_cache(py, Some(cache_dir))? else {
        return Ok(None);
    };
    Ok(cache.get_alias(fingerprint).map(|k| k.to_string()))
}

/// Points alias `fingerprint` at cache key `key` (atomically).
#[pyfunction]
fn alias_put(py: Python<'_>, cache_dir: &str, fingerprint: &str, key: &str) -> PyResult<()> {
    let Some(cache) = open_cache(py, Some(cache_dir))? else {
        return Ok(());
    };
    let key = CacheKey::parse(key)
        .ok_or_else(|| PyValueError::new_err(format!("{key:?} is not a cache key")))?;
    cache
        .put_alias(fingerprint, &key)
        .map_err(|e| engine_error(py, qnnx_engine::Error::Cache(e)))
}

/// The (key, plan JSON) split alias `fingerprint` records in `cache_dir`, if a valid one.
#[pyfunction]
fn alias_get_split(
    py: Python<'_>,
    cache_dir: &str,
    fingerprint: &str,
) -> PyResult<Option<(String, String)>> {
    let Some(cache) = open_cache(py, Some(cache_dir))? else {
        return Ok(None);
    };
    Ok(cache
        .get_split_alias(fingerprint)
        .map(|(k, plan)| (k.to_string(), plan.to_string())))
}

/// Records split alias `fingerprint`: the context `key` and `plan` (JSON text), atomically.
#[pyfunction]
fn alias_put_split(
    py: Python<'_>,
    cache_dir: &str,
    fingerprint: &str,
    key: &str,
    plan: &str,
) -> PyResult<()> {
    let Some(cache) = open_cache(py, Some(cache_dir))? else {
        return Ok(());
    };
    let key = CacheKey::parse(key)
        .ok_or_else(|| PyValueError::new_err(format!("{key:?} is not a cache key")))?;
    let plan: serde_json::Value = serde_json::from_str(plan)
        .map_err(|e| PyValueError::new_err(format!("the plan is not JSON: {e}")))?;
    cache
        .put_split_alias(fingerprint, &key, &plan)
        .map_err(|e| engine_error(py, qnnx_engine::Error::Cache(e)))
}

/// The default cache folder ($QNNX_CACHE_DIR, else the platform's cache folder).
#[pyfunction]
fn default_cache_dir() -> Option<String> {
    qnnx_engine::cache::default_dir().map(|p| p.display().to_string())
}

fn manifest_json(py: Python<'_>, m: &qnnx_engine::saved::Manifest) -> PyResult<String> {
    serde_json::to_string(m).map_err(|e| {
        engine_error(
            py,
            qnnx_engine::Error::SavedModel(format!("manifest does not serialise: {e}")),
        )
    })
}

/// Writes `compiled` to `path` as a saved model (context binary, manifest and I/O binding in one
/// file, written atomically) with the compile `options` and the caller's `extra` data in the
/// manifest; returns the manifest as JSON.
#[pyfunction]
fn save(
    py: Python<'_>,
    compiled: &Compiled,
    path: std::path::PathBuf,
    options: std::collections::BTreeMap<String, String>,
    extra: std::collections::BTreeMap<String, String>,
) -> PyResult<String> {
    let m = py
        .detach(|| qnnx_engine::saved::save(&compiled.inner, &path, options, extra))
        .map_err(|e| engine_error(py, e))?;
    manifest_json(py, &m)
}

/// Writes the graphs `graphs` of one context (from `compile_many`) to `path` as one saved model,
/// as `save` writes one graph; returns the manifest as JSON.
#[pyfunction]
fn save_many(
    py: Python<'_>,
    graphs: Vec<PyRef<'_, Compiled>>,
    path: std::path::PathBuf,
    options: std::collections::BTreeMap<String, String>,
    extra: std::collections::BTreeMap<String, String>,
) -> PyResult<String> {
    let inner: Vec<&qnnx_engine::Compiled> = graphs.iter().map(|g| &g.inner).collect();
    let m = py
        .detach(|| qnnx_engine::saved::save_many(&inner, &path, options, extra))
        .map_err(|e| engine_error(py, e))?;
    manifest_json(py, &m)
}

/// Memory-maps the saved model at `path` and loads its graphs (no ONNX, no lowering, no
/// finalize), after checking the file (SavedModelError names what is wrong). Returns the graphs
/// in manifest order and the manifest as JSON.
#[pyfunction]
fn load_saved(py: Python<'_>, path: std::path::PathBuf) -> PyResult<(Vec<Compiled>, String)> {
    let loaded = py
        .detach(|| qnnx_engine::saved::load(&path))
        .map_err(|e| engine_error(py, e))?;
    saved_to_py(py, loaded)
}

/// A loaded saved model as Python gets it: its graphs in manifest order, the manifest as JSON.
fn saved_to_py(
    py: Python<'_>,
    loaded: qnnx_engine::saved::Loaded,
) -> PyResult<(Vec<Compiled>, String)> {
    let json = manifest_json(py, &loaded.manifest)?;
    let graphs = loaded.graphs.into_iter().map(Compiled::from);
    Ok((graphs.collect(), json))
}

/// The bytes of a saved model of `compiled` (what `save` writes), for artifacts that carry it
/// inside themselves.
#[pyfunction]
fn saved_bytes<'py>(
    py: Python<'py>,
    compiled: &Compiled,
    options: std::collections::BTreeMap<String, String>,
    extra: std::collections::BTreeMap<String, String>,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    let (bytes, _) = py
        .detach(|| qnnx_engine::saved::to_bytes(&compiled.inner, options, extra))
        .map_err(|e| engine_error(py, e))?;
    Ok(pyo3::types::PyBytes::new(py, &bytes))
}

/// `load_saved` from the bytes of a saved model; `what` names them in errors.
#[pyfunction]
fn load_saved_bytes(py: Python<'_>, what: &str, data: &[u8]) -> PyResult<(Vec<Compiled>, String)> {
    let loaded = py
        .detach(|| qnnx_engine::saved::load_bytes(what, data))
        .map_err(|e| engine_error(py, e))?;
    saved_to_py(py, loaded)
}

/// A plain QNN context binary (no manifest), memory-mapped and loaded for the SoC it records,
/// graph `graph` (default the first) bound with its own tensor names, dtypes and shapes.
#[pyfunction]
#[pyo3(signature = (path, graph = None))]
fn load_context_binary(
    py: Python<'_>,
    path: std::path::PathBuf,
    graph: Option<String>,
) -> PyResult<Compiled> {
    let c = py
        .detach(|| qnnx_engine::saved::load_context_binary(&path, graph.as_deref()))
        .map_err(|e| engine_error(py, e))?;
    Ok(Compiled::from(c))
}

/// The manifest of the saved model at `path` as JSON, checked (binary hash included) without
/// opening QNN.
#[pyfunction]
fn read_manifest(py: Python<'_>, path: std::path::PathBuf) -> PyResult<String> {
    let m = py
        .detach(|| qnnx_engine::saved::read_manifest(&path))
        .map_err(|e| engine_error(py, e))?;
    manifest_json(py, &m)
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
    log::install();
    errors::add(m)?;
    m.add_class::<Compiled>()?;
    m.add_class::<Spec>()?;
    m.add_class::<Reference>()?;
    m.add_class::<llm::LlmArtifact>()?;
    m.add_function(wrap_pyfunction!(is_available, m)?)?;
    m.add_function(wrap_pyfunction!(unavailable_reason, m)?)?;
    m.add_function(wrap_pyfunction!(build_id, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(op_table, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(compile_many, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(load_cached, m)?)?;
    m.add_function(wrap_pyfunction!(load_cached_many, m)?)?;
    m.add_function(wrap_pyfunction!(alias_get, m)?)?;
    m.add_function(wrap_pyfunction!(alias_put, m)?)?;
    m.add_function(wrap_pyfunction!(alias_get_split, m)?)?;
    m.add_function(wrap_pyfunction!(alias_put_split, m)?)?;
    m.add_function(wrap_pyfunction!(versions, m)?)?;
    m.add_function(wrap_pyfunction!(save, m)?)?;
    m.add_function(wrap_pyfunction!(save_many, m)?)?;
    m.add_function(wrap_pyfunction!(load_saved, m)?)?;
    m.add_function(wrap_pyfunction!(read_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(saved_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(load_saved_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(load_context_binary, m)?)?;
    m.add_function(wrap_pyfunction!(set_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(default_cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_target, m)?)?;
    m.add_function(wrap_pyfunction!(target_arch, m)?)?;
    m.add_function(wrap_pyfunction!(soc_model, m)?)?;
    m.add_function(wrap_pyfunction!(known_socs, m)?)?;
    m.add_function(wrap_pyfunction!(htp_archs, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_names, m)?)?;
    m.add_function(wrap_pyfunction!(performance_modes, m)?)?;
    m.add_function(wrap_pyfunction!(quant_schemes, m)?)?;
    m.add_function(wrap_pyfunction!(fixed_encodings, m)?)?;
    Ok(())
}
