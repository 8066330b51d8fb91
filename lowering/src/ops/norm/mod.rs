//! Normalisations.

use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{LowerCx, OpDef};
use crate::plan::TensorId;

pub mod batch_norm;
pub mod group_norm;
pub mod instance_norm;
pub mod layer_norm;
pub mod rms_norm;

/// Inferred only: no op table lists it.
pub const LRN: OpDef = OpDef {
    op_type: "LRN",
    infer: same,
    fold: None,
    expand: None,
    lower: None,
    quant: Quant::Float,
};

pub const OPS: &[OpDef] = &[
    batch_norm::BATCH_NORMALIZATION,
    group_norm::GROUP_NORMALIZATION,
    instance_norm::INSTANCE_NORMALIZATION,
    layer_norm::LAYER_NORMALIZATION,
    rms_norm::RMS_NORMALIZATION,
    LRN,
];

/// A per-channel parameter input that must be constant, returned as f64s.
pub(crate) fn const_vec(cx: &LowerCx, node: &Node, i: usize, what: &str) -> Result<Vec<f64>> {
    cx.konst(node, i)
        .map(|t| t.to_f64())
        .ok_or_else(|| node.err_op(format!("input '{what}' must be constant")))
}

/// Static tensor `[n]` in the node's float type.
pub(crate) fn vec_tensor(cx: &mut LowerCx, node: &Node, hint: &str, v: &[f64]) -> Result<TensorId> {
    let dt = cx.dtype(node, 0);
    let t = Tensor::from_f64_as(dt, vec![v.len()], v);
    cx.static_tensor(node, &format!("{}_{hint}", node.name), &t)
}
