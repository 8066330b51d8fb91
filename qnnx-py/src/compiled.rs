//! `Compiled`: a finalized graph handed to Python, run on tensor memory given by pointer.

use pyo3::prelude::*;
use qnnx_types::tensor_type_name;

use qnnx_engine::io::ModelInput;

use crate::errors::{engine_error, qnn_error, with_attrs, Attrs, InputError};

/// A compiled graph, ready to run.
#[pyclass(frozen, module = "qnnx_backend._native")]
pub struct Compiled {
    pub inner: qnnx_engine::Compiled,
    /// The HTP performance mode voted for this graph's runtime (`set_performance_mode`), held
    /// while the object lives.
    performance: std::sync::Mutex<Option<qnnx_engine::power::PerformanceVote>>,
}

impl From<qnnx_engine::Compiled> for Compiled {
    fn from(inner: qnnx_engine::Compiled) -> Compiled {
        Compiled {
            inner,
            performance: std::sync::Mutex::new(None),
        }
    }
}

/// One graph input or output: (name, graph dtype, graph shape, model dtype), dtypes spelled as
/// `qnnx_types` spells them (`f32`, `i64`, `qu8` for quantized u8).
type IoDesc = (String, String, Vec<u32>, String);

fn io_descs(
    ios: &[lowering::plan::PlanIo],
    slots: &[usize],
    graph: &[qnn::TensorInfo],
) -> Vec<IoDesc> {
    ios.iter()
        .zip(slots)
        .map(|(io, &s)| {
            let t = &graph[s];
            (
                io.onnx_name.clone(),
                tensor_type_name(t.dtype, t.quantization.is_quantized()),
                t.dims.clone(),
                io.host_dtype.name().to_string(),
            )
        })
        .collect()
}

fn input_error(py: Python<'_>, msg: String) -> PyErr {
    with_attrs(py, InputError::new_err(msg), Attrs::default())
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
    /// An input the graph was compiled for one value of (fixed, or resolved from the model's
    /// declared shapes) is listed in the model's dtype and shape: `run` checks its value and
    /// does not hand it to QNN.
    #[getter]
    fn inputs(&self) -> Vec<IoDesc> {
        let e = &self.inner.emitted;
        let graph = io_descs(&e.inputs, &e.input_slots, e.graph.inputs());
        e.model_inputs()
            .into_iter()
            .map(|m| match m {
                ModelInput::Graph(i) => graph[i].clone(),
                ModelInput::Assumed(j) => {
                    let v = &e.assumed[j].value;
                    (
                        e.assumed[j].onnx_name.clone(),
                        v.dtype.name().to_string(),
                        v.shape.iter().map(|&d| d as u32).collect(),
                        v.dtype.name().to_string(),
                    )
                }
            })
            .collect()
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
        self.run_with(py, inputs, outputs, check_nan, None)
    }

    /// The compile's timed stages in order: (stage, milliseconds), as `qnnx compile --timings`
    /// names them.
    #[getter]
    fn timings(&self) -> Vec<(String, f64)> {
        self.inner
            .timings
            .stages
            .iter()
            .map(|&(t, ms)| (t.name().to_string(), ms))
            .collect()
    }

    /// `run`, with the execute recorded by QNN's profiler at `level` (`"basic"` or
    /// `"detailed"`). Returns the profile and a Chrome trace (with this graph's compile stages)
    /// as JSON text: `(profile, trace)`.
    #[pyo3(signature = (inputs, outputs, level = "detailed", check_nan = true))]
    fn run_profiled(
        &self,
        py: Python<'_>,
        inputs: Vec<(usize, usize)>,
        outputs: Vec<(usize, usize)>,
        level: &str,
        check_nan: bool,
    ) -> PyResult<(String, String)> {
        let level: qnn::ProfileLevel = level
            .parse()
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        let profile = qnn::Profile::new(&self.inner.runtime.backend, level)
            .map_err(|e| qnn_error(py, e, None))?;
        self.run_with(py, inputs, outputs, check_nan, Some(&profile))?;
        let events = profile.events().map_err(|e| qnn_error(py, e, None))?;
        let p =
            qnnx_engine::profile::ExecutionProfile::from_events(level, events, &self.inner.origins);
        let stages: Vec<(&str, f64)> = self
            .inner
            .timings
            .stages
            .iter()
            .map(|&(t, ms)| (t.name(), ms))
            .collect();
        let trace = p.chrome_trace(self.inner.emitted.graph.name(), &stages);
        Ok((p.to_json().to_string(), trace.to_string()))
    }

    /// Votes HTP performance mode `mode` (ONNX Runtime's `htp_performance_mode` names:
    /// `"burst"`, `"balanced"`, ...; an unknown one raises ValueError listing them) for as long
    /// as this object lives, replacing an earlier vote of it. Returns whether the QNN library
    /// accepted the vote: one that refuses it is warned about once (with the QNN code) and the
    /// graph runs at the default clocks.
    fn set_performance_mode(&self, py: Python<'_>, mode: &str) -> PyResult<bool> {
        let mode: qnn::HtpPerformanceMode = mode
            .parse()
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        let vote = py
            .detach(|| qnnx_engine::power::vote(&self.inner.runtime, mode))
            .map_err(|e| engine_error(py, e))?;
        let applied = vote.applied();
        let mut held = self.performance.lock().unwrap_or_else(|e| e.into_inner());
        // The new vote is made before the old one is withdrawn, so the HTP never falls back to
        // the default clocks in between.
        *held = Some(vote);
        Ok(applied)
    }

    /// The HTP performance mode voted by `set_performance_mode`, or None.
    #[getter]
    fn performance_mode(&self) -> Option<&'static str> {
        let held = self.performance.lock().unwrap_or_else(|e| e.into_inner());
        held.as_ref().map(|v| v.mode().name())
    }

    /// The context binary (for inspection or an offline cache).
    fn binary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let bytes = py
            .detach(|| self.inner.context.to_binary())
            .map_err(|e| qnn_error(py, e, None))?;
        Ok(pyo3::types::PyBytes::new(py, &bytes))
    }
}

impl Compiled {
    fn run_with(
        &self,
        py: Python<'_>,
        inputs: Vec<(usize, usize)>,
        outputs: Vec<(usize, usize)>,
        check_nan: bool,
        profile: Option<&qnn::Profile>,
    ) -> PyResult<()> {
        let e = &self.inner.emitted;
        let binding = match e.bind_inputs(inputs.len()) {
            Ok(b) if outputs.len() == e.outputs.len() => b,
            _ => {
                return Err(input_error(
                    py,
                    format!(
                        "the graph takes {} inputs ({} with the assumed ones) and {} outputs, got \
                         {} and {}",
                        e.inputs.len(),
                        e.inputs.len() + e.assumed.len(),
                        e.outputs.len(),
                        inputs.len(),
                        outputs.len()
                    ),
                ))
            }
        };
        let gi = e.graph.inputs();
        let go = e.graph.outputs();
        let mut ins: Vec<Option<qnn::Input<'_>>> = vec![None; gi.len()];
        for (&(addr, len), role) in inputs.iter().zip(binding) {
            if addr == 0 && len != 0 {
                return Err(input_error(py, "null input buffer".into()));
            }
            // SAFETY: the caller guarantees `addr` is valid for `len` bytes for this call
            // (see the method docs); `execute` checks `len` against the tensor before use.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            let i = match role {
                ModelInput::Graph(i) => i,
                ModelInput::Assumed(j) => {
                    let v = &e.assumed[j].value;
                    if len != v.bytes().len() {
                        return Err(input_error(
                            py,
                            format!(
                                "input {:?}: {len} bytes; the compiled graph assumes {} {:?} ({} \
                                 bytes)",
                                e.assumed[j].onnx_name,
                                v.dtype.name(),
                                v.shape,
                                v.bytes().len()
                            ),
                        ));
                    }
                    e.check_assumed(j, v.dtype, &v.shape, bytes)
                        .map_err(|err| input_error(py, err.to_string()))?;
                    continue;
                }
            };
            let (slot, io) = (e.input_slots[i], &e.inputs[i]);
            if check_nan && len == gi[slot].num_bytes() {
                if let Some(i) = qnn::first_nan(gi[slot].dtype, bytes) {
                    return Err(input_error(
                        py,
                        qnnx_engine::io::nan_message(&io.onnx_name, i),
                    ));
                }
            }
            ins[slot] = Some(qnn::Input::from_bytes(gi[slot].dtype, bytes));
        }
        let mut outs: Vec<Option<qnn::Output<'_>>> = (0..go.len()).map(|_| None).collect();
        for (&(addr, len), &slot) in outputs.iter().zip(&e.output_slots) {
            if addr == 0 && len != 0 {
                return Err(input_error(py, "null output buffer".into()));
            }
            // SAFETY: as above, and the caller does not read or write it during the call.
            let bytes = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            outs[slot] = Some(qnn::Output::from_bytes(go[slot].dtype, bytes));
        }
        // The binding's slots are a permutation of the graph's I/O (checked when it was made or
        // loaded), so every slot is filled; refuse rather than assume.
        let (Some(ins), Some(mut outs)) = (
            ins.into_iter().collect::<Option<Vec<_>>>(),
            outs.into_iter().collect::<Option<Vec<_>>>(),
        ) else {
            return Err(engine_error(
                py,
                qnnx_engine::Error::Input(
                    "the compiled graph's I/O binding does not cover every graph tensor".into(),
                ),
            ));
        };
        let graph = &e.graph;
        let result = {
            // Raw pointers are not Send; the slices are only used inside this closure while
            // the caller's Python frame keeps the tensors alive.
            struct Unchecked<T>(T);
            // SAFETY: see the method docs: the memory outlives the call. The profile (not Sync)
            // is used only by the detached closure, while this thread waits for it.
            unsafe impl<T> Send for Unchecked<T> {}
            let work = Unchecked((ins, &mut outs, profile));
            py.detach(move || {
                let w = work;
                let (ins, outs, profile) = w.0;
                match profile {
                    Some(p) => graph.execute_profiled(&ins, outs, p),
                    None => graph.execute(&ins, outs),
                }
            })
        };
        result.map_err(|err| qnn_error(py, err, None))
    }
}
