//! Host I/O of a compiled graph: tensors in the model's own dtypes (int64 included) checked
//! against the graph and converted at the boundary, and the I/O binding a cache entry stores so
//! that a hit needs no lowering.

use std::borrow::Cow;

use lowering::plan::{Accept, AssumedInput, PlanIo, Source};
use lowering::tensor::Tensor;
use qnnx_types::DType;

use crate::emit::Emitted;
use crate::error::{Error, Result};

/// One input buffer as [`qnn::Graph::execute`] takes it: the graph tensor's dtype and bytes.
pub type GraphBuffer<'a> = (DType, Cow<'a, [u8]>);

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
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Little-endian, C order; bool is one byte per element.
    pub data: Vec<u8>,
}

impl HostTensor {
    /// A tensor from `f32` values.
    pub fn from_f32(shape: &[usize], v: &[f32]) -> HostTensor {
        HostTensor {
            dtype: DType::F32,
            shape: shape.to_vec(),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// The values as `f32`, for float32 tensors.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.dtype == DType::F32).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}

/// What a model input (in ONNX order) is to a compiled graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelInput {
    /// [`Emitted::inputs`]`[i]`, a graph tensor.
    Graph(usize),
    /// [`Emitted::assumed`]`[j]`: checked on the host, not passed to QNN.
    Assumed(usize),
}

impl Emitted {
    /// Every model input in ONNX order, graph tensors and assumed inputs alike.
    pub fn model_inputs(&self) -> Vec<ModelInput> {
        let total = self.inputs.len() + self.assumed.len();
        let mut graph = 0;
        (0..total)
            .map(|k| match self.assumed.iter().position(|a| a.index == k) {
                Some(j) => ModelInput::Assumed(j),
                None => {
                    graph += 1;
                    ModelInput::Graph(graph - 1)
                }
            })
            .collect()
    }

    /// How `n` inputs given by a caller map to the model: all of the model's inputs in ONNX
    /// order, or only the graph's (the assumed ones left out).
    pub fn bind_inputs(&self, n: usize) -> Result<Vec<ModelInput>> {
        if n == self.inputs.len() {
            return Ok((0..n).map(ModelInput::Graph).collect());
        }
        if n == self.inputs.len() + self.assumed.len() {
            return Ok(self.model_inputs());
        }
        let assumed = if self.assumed.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = self.assumed.iter().map(|a| a.onnx_name.as_str()).collect();
            format!(
                " ({} of them, {names:?}, assumed at compile time, which may be left out)",
                self.assumed.len()
            )
        };
        Err(Error::Input(format!(
            "the model takes {} inputs{assumed}, got {n}",
            self.inputs.len() + self.assumed.len()
        )))
    }

    /// Checks the bytes a caller passes for assumed input `j` (in the model's dtype and shape)
    /// against the value the graph was compiled for.
    pub fn check_assumed(
        &self,
        j: usize,
        dtype: DType,
        shape: &[usize],
        data: &[u8],
    ) -> Result<()> {
        let a = &self.assumed[j];
        let bad = Error::Input;
        if dtype != a.value.dtype {
            return Err(bad(format!(
                "input {:?} is {} but the model declares {}",
                a.onnx_name,
                dtype.name(),
                a.value.dtype.name()
            )));
        }
        if shape != a.value.shape {
            return Err(bad(format!(
                "input {:?} has shape {shape:?}; the compiled graph assumes {} of shape {:?}",
                a.onnx_name,
                lowering::plan::assumed::fmt_value(&a.value),
                a.value.shape
            )));
        }
        let given = Tensor::from_bytes(dtype, shape.to_vec(), data.to_vec())
            .map_err(|e| bad(format!("input {:?}: {e}", a.onnx_name)))?;
        a.check(&given).map_err(bad)
    }

    /// Runs the graph on host tensors in the model's dtypes, converting at the boundary where
    /// the graph narrowed int64 I/O to int32 (values outside int32 are an error, never wrapped).
    /// `inputs` are the model's in ONNX order, with or without the assumed ones
    /// ([`Emitted::bind_inputs`]).
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.run_with(inputs, None)
    }

    /// [`Emitted::run`], recording the execute in `profile`.
    pub fn run_profiled(
        &self,
        inputs: &[HostTensor],
        profile: &qnn::Profile,
    ) -> Result<Vec<HostTensor>> {
        self.run_with(inputs, Some(profile))
    }

    fn run_with(
        &self,
        inputs: &[HostTensor],
        profile: Option<&qnn::Profile>,
    ) -> Result<Vec<HostTensor>> {
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
            match profile {
                Some(p) => self.graph.execute_profiled(&ins, &mut o, p)?,
                None => self.graph.execute(&ins, &mut o)?,
            }
        }
        Ok(self.host_outputs(outs))
    }

    /// Host tensors in ONNX order checked against the graph and converted to what
    /// [`qnn::Graph::execute`] takes: one (dtype, bytes) per graph input, in graph order. Only
    /// int64 inputs narrowed to int32 are copied. Assumed inputs, when given, are checked
    /// ([`Emitted::check_assumed`]) and left out.
    pub fn graph_inputs<'a>(&self, inputs: &'a [HostTensor]) -> Result<Vec<GraphBuffer<'a>>> {
        let bad = Error::Input;
        let binding = self.bind_inputs(inputs.len())?;
        let mut converted: Vec<GraphBuffer> =
            vec![(DType::U8, Cow::Borrowed(&[][..])); self.inputs.len()];
        for (t, role) in inputs.iter().zip(binding) {
            let i = match role {
                ModelInput::Graph(i) => i,
                ModelInput::Assumed(j) => {
                    let a = &self.assumed[j];
                    if t.data.len() != t.shape.iter().product::<usize>() * t.dtype.size() {
                        return Err(bad(format!(
                            "input {:?}: {} bytes for {} {:?}",
                            a.onnx_name,
                            t.data.len(),
                            t.dtype,
                            t.shape
                        )));
                    }
                    self.check_assumed(j, t.dtype, &t.shape, &t.data)?;
                    continue;
                }
            };
            let (io, slot) = (&self.inputs[i], self.input_slots[i]);
            let info = &self.graph.inputs()[slot];
            if t.dtype != io.host_dtype {
                return Err(bad(format!(
                    "input {:?} is {} but the model declares {}",
                    io.onnx_name,
                    t.dtype.name(),
                    io.host_dtype.name()
                )));
            }
            if t.shape != io.shape {
                return Err(bad(format!(
                    "input {:?} has shape {:?}; the compiled graph takes {:?}",
                    io.onnx_name, t.shape, io.shape
                )));
            }
            if t.data.len() != t.shape.iter().product::<usize>() * t.dtype.size() {
                return Err(bad(format!(
                    "input {:?}: {} bytes for {} {:?}",
                    io.onnx_name,
                    t.data.len(),
                    t.dtype,
                    t.shape
                )));
            }
            if let Some(i) = qnn::first_nan(info.dtype, &t.data) {
                return Err(bad(nan_message(&io.onnx_name, i)));
            }
            let bytes = if io.host_dtype == DType::I64 && info.dtype == DType::I32 {
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
                let data = if io.host_dtype == DType::I64 && info.dtype == DType::I32 {
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
                    shape: io.shape.clone(),
                    data,
                }
            })
            .collect()
    }

    /// The model I/O binding stored with a cache entry (`extra["io"]`), so a hit needs no
    /// lowering: for each input and output in ONNX order, `[name, model dtype, graph slot,
    /// model shape]`.
    pub fn io_binding_json(&self) -> String {
        let side = |ios: &[PlanIo], slots: &[usize]| -> Vec<serde_json::Value> {
            ios.iter()
                .zip(slots)
                .map(|(io, s)| serde_json::json!([io.onnx_name, io.host_dtype.name(), s, io.shape]))
                .collect()
        };
        let mut v = serde_json::json!({
            "inputs": side(&self.inputs, &self.input_slots),
            "outputs": side(&self.outputs, &self.output_slots),
        });
        if !self.assumed.is_empty() {
            v["assumed"] = self.assumed.iter().map(assumed_json).collect();
        }
        v.to_string()
    }

    /// Binds `graph` (loaded from a context binary) to the model I/O described by
    /// [`Emitted::io_binding_json`]; `None` if the text does not parse ([`parse_io_binding`]) or
    /// does not fit the graph ([`IoBinding::fits`], [`IoBinding::bind_shapes`]). Entries without
    /// `assumed` have no assumed inputs.
    pub fn from_io_binding(graph: qnn::Graph, json: &str) -> Option<Emitted> {
        let mut b = parse_io_binding(json)?;
        let dtypes = |t: &[qnn::TensorInfo]| t.iter().map(|t| t.dtype).collect::<Vec<_>>();
        let shapes = |t: &[qnn::TensorInfo]| {
            t.iter()
                .map(|t| t.dims.iter().map(|&d| d as usize).collect())
                .collect::<Vec<Vec<usize>>>()
        };
        if !b.fits(&dtypes(graph.inputs()), &dtypes(graph.outputs()))
            || !b.bind_shapes(&shapes(graph.inputs()), &shapes(graph.outputs()))
        {
            return None;
        }
        Some(Emitted {
            graph,
            inputs: b.inputs,
            outputs: b.outputs,
            input_slots: b.input_slots,
            output_slots: b.output_slots,
            assumed: b.assumed,
        })
    }
}

/// A model I/O binding as a cache entry stores it ([`Emitted::io_binding_json`]), parsed but not
/// yet checked against a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct IoBinding {
    /// Model inputs in ONNX order (`tensor` is 0: a loaded graph has no plan).
    pub inputs: Vec<PlanIo>,
    /// The graph input each model input binds to.
    pub input_slots: Vec<usize>,
    /// Model outputs in ONNX order.
    pub outputs: Vec<PlanIo>,
    /// The graph output each model output binds to.
    pub output_slots: Vec<usize>,
    /// The model shape of each input and output as the entry records it (`None` in entries
    /// written before shapes were recorded: the graph tensor's shape is taken).
    pub input_shapes: Vec<Option<Vec<usize>>>,
    pub output_shapes: Vec<Option<Vec<usize>>>,
    /// Model inputs the graph assumes a value for (checked on the host, not passed to QNN).
    pub assumed: Vec<AssumedInput>,
}

/// Parses the text of [`Emitted::io_binding_json`]: `{"inputs": [[name, dtype, slot, shape],
/// ...], "outputs": [...]}` (entries of earlier versions have no shape). `None` unless it has
/// exactly that form with known dtype names. The text comes from a file in the cache folder, so
/// nothing about it is trusted.
pub fn parse_io_binding(json: &str) -> Option<IoBinding> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    type Side = (Vec<PlanIo>, Vec<usize>, Vec<Option<Vec<usize>>>);
    let side = |key: &str| -> Option<Side> {
        let mut ios = Vec::new();
        let mut slots = Vec::new();
        let mut shapes = Vec::new();
        for item in v.get(key)?.as_array()? {
            let a = item.as_array()?;
            if a.len() > 4 {
                return None;
            }
            ios.push(PlanIo {
                tensor: 0,
                onnx_name: a.first()?.as_str()?.to_string(),
                host_dtype: DType::from_name(a.get(1)?.as_str()?)?,
                shape: Vec::new(),
            });
            slots.push(usize::try_from(a.get(2)?.as_u64()?).ok()?);
            shapes.push(match a.get(3) {
                None => None,
                Some(s) => Some(
                    s.as_array()?
                        .iter()
                        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                        .collect::<Option<Vec<usize>>>()?,
                ),
            });
        }
        Some((ios, slots, shapes))
    };
    let (inputs, input_slots, input_shapes) = side("inputs")?;
    let (outputs, output_slots, output_shapes) = side("outputs")?;
    let assumed = match v.get("assumed") {
        None => Vec::new(),
        Some(a) => a
            .as_array()?
            .iter()
            .map(assumed_from_json)
            .collect::<Option<Vec<_>>>()?,
    };
    // Distinct positions among the model's inputs.
    let total = inputs.len() + assumed.len();
    let mut seen = vec![false; total];
    for a in &assumed {
        if a.index >= total || std::mem::replace(&mut seen[a.index], true) {
            return None;
        }
    }
    Some(IoBinding {
        inputs,
        input_slots,
        outputs,
        output_slots,
        input_shapes,
        output_shapes,
        assumed,
    })
}

impl IoBinding {
    /// Whether the binding fits a graph whose inputs and outputs have these dtypes: each graph
    /// tensor bound exactly once, to a model tensor it can be converted from (the same dtype, or
    /// int64 narrowed to int32).
    pub fn fits(&self, graph_inputs: &[DType], graph_outputs: &[DType]) -> bool {
        let side = |ios: &[PlanIo], slots: &[usize], tensors: &[DType]| {
            let mut seen = vec![false; tensors.len()];
            ios.len() == slots.len()
                && slots.len() == tensors.len()
                && ios.iter().zip(slots).all(|(io, &s)| {
                    let Some(&t) = tensors.get(s) else {
                        return false;
                    };
                    let fresh = !std::mem::replace(&mut seen[s], true);
                    let convertible =
                        io.host_dtype == t || (io.host_dtype == DType::I64 && t == DType::I32);
                    fresh && convertible
                })
        };
        side(&self.inputs, &self.input_slots, graph_inputs)
            && side(&self.outputs, &self.output_slots, graph_outputs)
    }

    /// Sets each model tensor's shape: the recorded one if it has as many elements as the graph
    /// tensor it binds to (a rank-0 value is `[1]` in the graph), else the graph tensor's for an
    /// entry that records none. False when a recorded shape does not fit; call after
    /// [`IoBinding::fits`] (slots in range).
    pub fn bind_shapes(
        &mut self,
        graph_inputs: &[Vec<usize>],
        graph_outputs: &[Vec<usize>],
    ) -> bool {
        fn side(
            ios: &mut [PlanIo],
            slots: &[usize],
            recorded: &[Option<Vec<usize>>],
            graph: &[Vec<usize>],
        ) -> bool {
            for ((io, &s), r) in ios.iter_mut().zip(slots).zip(recorded) {
                let Some(g) = graph.get(s) else { return false };
                let shape = r.clone().unwrap_or_else(|| g.clone());
                let n = |v: &[usize]| v.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
                if n(&shape).is_none() || n(&shape) != n(g) {
                    return false;
                }
                io.shape = shape;
            }
            true
        }
        recorded_len_ok(self)
            && side(
                &mut self.inputs,
                &self.input_slots,
                &self.input_shapes,
                graph_inputs,
            )
            && side(
                &mut self.outputs,
                &self.output_slots,
                &self.output_shapes,
                graph_outputs,
            )
    }
}

fn recorded_len_ok(b: &IoBinding) -> bool {
    b.input_shapes.len() == b.inputs.len() && b.output_shapes.len() == b.outputs.len()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// An assumed input as the cache entry's I/O binding stores it: its value exactly (bytes in
/// hex), where it comes from and how a passed value is compared.
fn assumed_json(a: &AssumedInput) -> serde_json::Value {
    use serde_json::json;
    let origin = match &a.origin {
        Source::Fixed => json!({ "fixed": true }),
        Source::Declared { node, value } => json!({ "node": node, "value": value }),
    };
    let accept: Vec<serde_json::Value> = a
        .accept
        .iter()
        .map(|c| match c {
            Accept::Equal => json!({ "kind": "equal" }),
            Accept::Reshape {
                input,
                allowzero,
                output,
            } => json!({ "kind": "reshape", "input": input, "allowzero": allowzero, "output": output }),
            Accept::Unsqueeze { input, output } => {
                json!({ "kind": "unsqueeze", "input": input, "output": output })
            }
            Accept::Squeeze { input, output } => {
                json!({ "kind": "squeeze", "input": input, "output": output })
            }
            Accept::Expand { input, output } => {
                json!({ "kind": "expand", "input": input, "output": output })
            }
            Accept::Reduce {
                input,
                keepdims,
                noop_with_empty_axes,
            } => json!({
                "kind": "reduce",
                "input": input,
                "keepdims": keepdims,
                "noop_with_empty_axes": noop_with_empty_axes,
            }),
        })
        .collect();
    json!({
        "name": a.onnx_name,
        "index": a.index,
        "dtype": a.value.dtype.name(),
        "shape": a.value.shape,
        "data": hex(a.value.bytes()),
        "origin": origin,
        "accept": accept,
    })
}

fn assumed_from_json(v: &serde_json::Value) -> Option<AssumedInput> {
    let dims = |v: &serde_json::Value| -> Option<Vec<usize>> {
        v.as_array()?
            .iter()
            .map(|d| usize::try_from(d.as_u64()?).ok())
            .collect()
    };
    let dtype = DType::from_name(v.get("dtype")?.as_str()?)?;
    let shape = dims(v.get("shape")?)?;
    let data = unhex(v.get("data")?.as_str()?)?;
    let value = Tensor::from_bytes(dtype, shape, data).ok()?;
    let o = v.get("origin")?;
    let origin = match o.get("node") {
        Some(node) => Source::Declared {
            node: node.as_str()?.to_string(),
            value: o.get("value")?.as_str()?.to_string(),
        },
        None => Source::Fixed,
    };
    let accept = v
        .get("accept")?
        .as_array()?
        .iter()
        .map(|c| {
            let io = || Some((dims(c.get("input")?)?, dims(c.get("output")?)?));
            let flag = |k: &str| c.get(k)?.as_bool();
            Some(match c.get("kind")?.as_str()? {
                "equal" => Accept::Equal,
                "reshape" => {
                    let (input, output) = io()?;
                    Accept::Reshape {
                        input,
                        allowzero: flag("allowzero")?,
                        output,
                    }
                }
                "unsqueeze" => {
                    let (input, output) = io()?;
                    Accept::Unsqueeze { input, output }
                }
                "squeeze" => {
                    let (input, output) = io()?;
                    Accept::Squeeze { input, output }
                }
                "expand" => {
                    let (input, output) = io()?;
                    Accept::Expand { input, output }
                }
                "reduce" => Accept::Reduce {
                    input: dims(c.get("input")?)?,
                    keepdims: flag("keepdims")?,
                    noop_with_empty_axes: flag("noop_with_empty_axes")?,
                },
                _ => return None,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(AssumedInput {
        onnx_name: v.get("name")?.as_str()?.to_string(),
        index: usize::try_from(v.get("index")?.as_u64()?).ok()?,
        value,
        origin,
        accept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BINDING: &str = r#"{"inputs":[["ids","i64",1],["x","f32",0]],"outputs":[["y","f32",0]]}"#;

    #[test]
    fn io_binding_parses_and_fits_its_graph() {
        let b = parse_io_binding(BINDING).unwrap();
        assert_eq!(b.input_slots, [1, 0]);
        assert_eq!(b.inputs[0].onnx_name, "ids");
        assert_eq!(b.inputs[0].host_dtype, DType::I64);
        assert!(b.fits(&[DType::F32, DType::I32], &[DType::F32]));
        assert!(b.fits(&[DType::F32, DType::I64], &[DType::F32]));
    }

    #[test]
    fn io_binding_shapes_are_the_recorded_ones_or_the_graphs() {
        let text = r#"{"inputs":[["s","f32",0,[]],["x","f32",1,[2,3]]],"outputs":[["y","f32",0]]}"#;
        let mut b = parse_io_binding(text).unwrap();
        assert!(b.bind_shapes(&[vec![1], vec![6]], &[vec![4, 1]]));
        assert_eq!(
            b.inputs[0].shape,
            Vec::<usize>::new(),
            "rank 0 is [1] in the graph"
        );
        assert_eq!(b.inputs[1].shape, vec![2, 3]);
        assert_eq!(
            b.outputs[0].shape,
            vec![4, 1],
            "an old entry takes the graph's shape"
        );
        let mut b = parse_io_binding(text).unwrap();
        assert!(
            !b.bind_shapes(&[vec![1], vec![5]], &[vec![4, 1]]),
            "6 elements into 5"
        );
        let bad = r#"{"inputs":[["x","f32",0,[2,-1]]],"outputs":[]}"#;
        assert_eq!(parse_io_binding(bad), None);
        let long = r#"{"inputs":[["x","f32",0,[2],"extra"]],"outputs":[]}"#;
        assert_eq!(parse_io_binding(long), None);
    }

    #[test]
    fn io_binding_that_does_not_fit_is_refused() {
        let b = parse_io_binding(BINDING).unwrap();
        // Too few or too many graph tensors, a slot past the end, a dtype it cannot convert.
        assert!(!b.fits(&[DType::F32], &[DType::F32]));
        assert!(!b.fits(&[DType::F32, DType::I32, DType::F32], &[DType::F32]));
        assert!(!b.fits(&[DType::F32, DType::F16], &[DType::F32]));
        let twice = r#"{"inputs":[["a","f32",0],["b","f32",0]],"outputs":[]}"#;
        assert!(!parse_io_binding(twice)
            .unwrap()
            .fits(&[DType::F32, DType::F32], &[]));
        let past = r#"{"inputs":[["a","f32",5]],"outputs":[]}"#;
        assert!(!parse_io_binding(past).unwrap().fits(&[DType::F32], &[]));
    }

    #[test]
    fn io_binding_of_another_shape_does_not_parse() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"inputs":[]}"#,
            r#"{"inputs":[["x","float99",0]],"outputs":[]}"#,
            r#"{"inputs":[["x","f32",-1]],"outputs":[]}"#,
            r#"{"inputs":[["x","f32"]],"outputs":[]}"#,
            r#"{"inputs":[[0,"f32",0]],"outputs":[]}"#,
            r#"{"inputs":{"x":0},"outputs":[]}"#,
        ] {
            assert_eq!(parse_io_binding(bad), None, "{bad}");
        }
    }
}
