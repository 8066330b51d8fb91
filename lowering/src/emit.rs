//! Plan → QNN graph: the only module of this crate that calls into `qnn` (qnn-rs). It follows
//! the steps documented in [`crate::plan`]: tensors in plan order, tensor params registered by
//! the builder, every op validated by the backend before it is added (a failure names the ONNX
//! node it came from), then finalize.

use crate::plan::{DType, Param, Plan, PlanIo, Scalar, TensorKind};
use crate::LowerError;

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
        let mut converted: Vec<(qnn::DataType, std::borrow::Cow<[u8]>)> =
            vec![(qnn::DataType::U8, std::borrow::Cow::Borrowed(&[][..])); inputs.len()];
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
                std::borrow::Cow::Owned(out)
            } else {
                std::borrow::Cow::Borrowed(&t.data[..])
            };
            converted[slot] = (info.dtype, bytes);
        }
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
        let mut outs: Vec<Option<Vec<u8>>> = outs.into_iter().map(Some).collect();
        Ok(self
            .outputs
            .iter()
            .zip(&self.output_slots)
            .map(|(io, &slot)| {
                let info = &self.graph.outputs()[slot];
                let data = outs[slot].take().unwrap_or_default();
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
            .collect())
    }
}
