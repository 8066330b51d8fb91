//! Convolutions. Both rules need the layout pass to have marked the node `nhwc`.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};
use crate::plan::TensorId;

// Op files are named after the ONNX op (STYLE.md), which here matches the family.
pub mod causal_conv;
#[allow(clippy::module_inception)]
pub mod conv;
pub mod conv1d;
pub mod conv_transpose;

pub const OPS: &[OpDef] = &[
    conv::CONV,
    conv_transpose::CONV_TRANSPOSE,
    causal_conv::CAUSAL_CONV_WITH_STATE,
];

/// The weights (input 1, rank 4) permuted by `perm` into QNN's HWIO / HWOI layout: folded into a
/// static tensor when constant, else a Transpose on the device (weights computed in the graph
/// or given as graph inputs).
pub(crate) fn permuted_weights(
    cx: &mut LowerCx,
    node: &Node,
    perm: [usize; 4],
) -> Result<TensorId> {
    if let Some(w) = cx.permuted_const(node, 1, &perm, &format!("{}_w_hwio", node.name))? {
        return Ok(w);
    }
    let w = cx.input(node, 1)?;
    Ok(cx.transpose(node, w, &perm))
}
