//! Normalisations.

use crate::ops::OpDef;

pub mod batch_norm;
pub mod group_norm;
pub mod instance_norm;
pub mod layer_norm;
pub mod rms_norm;

pub const OPS: &[OpDef] = &[
    batch_norm::BATCH_NORMALIZATION,
    group_norm::GROUP_NORMALIZATION,
    instance_norm::INSTANCE_NORMALIZATION,
    layer_norm::LAYER_NORMALIZATION,
    rms_norm::RMS_NORMALIZATION,
];

use crate::error::Result;
use crate::ir::Node;
use crate::ops::LowerCx;
use crate::plan::TensorId;

/// A per-channel parameter input that must be constant, returned as f64s.
pub(crate) fn const_vec(cx: &LowerCx, node: &Node, i: usize, what: &str) -> Result<Vec<f64>> {
    cx.konst(node, i)
        .map(|t| t.to_f64())
        .ok_or_else(|| node.err_op(format!("input '{what}' must be constant")))
}

/// Static tensor `[n]` in the node's float type.
pub(crate) fn vec_tensor(cx: &mut LowerCx, node: &Node, hint: &str, v: &[f64]) -> Result<TensorId> {
    let dt = cx.dtype(node, 0);
    let t = crate::ir::tensor::Tensor::from_f64_as(dt, vec![v.len()], v);
    cx.static_tensor(node, &format!("{}_{hint}", node.name), &t)
}
