//! Plan → QNN graph. Follows the steps documented in [`lowering::plan`]: tensors in plan order,
//! tensor params registered by the builder, every op validated by the backend before it is
//! added (a failure names the ONNX node it came from), then finalize.

use lowering::plan::{AssumedInput, Param, Plan, PlanIo, Scalar, TensorKind};
use lowering::LowerError;

use crate::error::{Error, Result};

/// A finalized QNN graph and the model I/O it binds.
pub struct Emitted {
    pub graph: qnn::Graph,
    /// The graph's inputs in ONNX order: the model's, less `assumed`.
    pub inputs: Vec<PlanIo>,
    /// Model outputs in ONNX order.
    pub outputs: Vec<PlanIo>,
    /// `graph.inputs()[input_slots[i]]` is the QNN tensor of `inputs[i]`: the graph lists its
    /// I/O in tensor creation order, which need not be the ONNX order.
    pub input_slots: Vec<usize>,
    /// Likewise for outputs.
    pub output_slots: Vec<usize>,
    /// Model inputs the graph does not take ([`Plan::assumed_inputs`]): checked on the host
    /// when a caller passes them, never handed to QNN.
    pub assumed: Vec<AssumedInput>,
}

/// The (scale, offset) pairs of a per-axis encoding, one per slice.
fn scale_offsets(q: &qnnx_types::Encoding) -> Vec<(f32, i32)> {
    q.scales
        .iter()
        .copied()
        .zip(q.offsets.iter().copied())
        .collect()
}

fn scalar(s: Scalar) -> qnn::Scalar {
    match s {
        Scalar::F32(v) => qnn::Scalar::F32(v),
        Scalar::U32(v) => qnn::Scalar::U32(v),
        Scalar::I32(v) => qnn::Scalar::I32(v),
        Scalar::Bool(v) => qnn::Scalar::Bool(v),
    }
}

/// Builds and finalizes graph `name` of `plan` in `ctx` (with the graph configs of the context's
/// backend).
pub fn emit(ctx: &qnn::Context, name: &str, plan: &Plan) -> Result<Emitted> {
    emit_with(ctx, name, plan, None).map(|(e, _)| e)
}

/// Milliseconds [`emit_with`] spent building the graph and finalizing it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EmitTimes {
    /// Creating the graph and its tensors, validating and adding the nodes.
    pub build_ms: f64,
    /// `graphFinalize`: the QNN preparer, the long part for large models.
    pub finalize_ms: f64,
}

/// [`emit`], timing the graph build and the finalize, with finalize recorded in `profile`
/// when one is given.
pub fn emit_with(
    ctx: &qnn::Context,
    name: &str,
    plan: &Plan,
    profile: Option<&qnn::Profile>,
) -> Result<(Emitted, EmitTimes)> {
    let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e3;
    let start = std::time::Instant::now();
    plan.validate().map_err(|e| {
        Error::Lower(LowerError::InvalidModel(format!(
            "internal plan error: {e}"
        )))
    })?;
    let at = |node: Option<&str>| {
        let node = node.map(str::to_string);
        move |source: qnn::Error| Error::Qnn {
            node: node.clone(),
            source: Box::new(source),
        }
    };
    let mut g = ctx.build_graph(name).map_err(at(None))?;
    let mut refs = Vec::with_capacity(plan.tensors.len());
    for t in &plan.tensors {
        let (kind, data) = match &t.kind {
            TensorKind::Input => (qnn::TensorKind::Input, None),
            TensorKind::Output => (qnn::TensorKind::Output, None),
            TensorKind::Native => (qnn::TensorKind::Native, None),
            TensorKind::Static(bytes) => (qnn::TensorKind::Static, Some(&bytes[..])),
            TensorKind::Null => (qnn::TensorKind::Null, None),
        };
        let quant = match &t.quant {
            None => qnn::Quantization::None,
            Some(q) => match (q.axis, &q.blocks) {
                (Some(axis), Some(b)) => qnn::Quantization::BlockwiseExpansion {
                    axis: axis as i32,
                    scale_offsets: scale_offsets(q),
                    blocks: b.count(q.scales.len()) as u32,
                    block_scale_bits: b.bits,
                    block_scales: b.ints.clone(),
                },
                (None, _) => qnn::Quantization::ScaleOffset {
                    scale: q.scales[0],
                    offset: q.offsets[0],
                },
                (Some(axis), None) => qnn::Quantization::PerAxis {
                    axis: axis as i32,
                    scale_offsets: scale_offsets(q),
                },
            },
        };
        let r = g
            .tensor(&t.name, kind, t.dtype, &t.shape, quant, data)
            .map_err(at(None))?;
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
                    dtype: *dtype,
                    dims: shape.clone(),
                    data: data.clone(),
                },
            };
            node.params.push((pname.to_string(), value));
        }
        g.add_node(&node).map_err(at(Some(&op.onnx_node)))?;
    }
    let build_ms = ms(start);
    let start = std::time::Instant::now();
    let graph = match profile {
        Some(p) => g.finalize_profiled(p),
        None => g.finalize(),
    }
    .map_err(at(None))?;
    let times = EmitTimes {
        build_ms,
        finalize_ms: ms(start),
    };
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
    Ok((
        Emitted {
            graph,
            inputs: plan.inputs.clone(),
            outputs: plan.outputs.clone(),
            input_slots,
            output_slots,
            assumed: plan.assumed_inputs.clone(),
        },
        times,
    ))
}
