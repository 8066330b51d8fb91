//! Convolutions. Both rules need the layout pass to have marked the node `nhwc`.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};
use crate::plan::{Param, TensorId};
use crate::qnn_names::{op, param};

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
    if let Some(w) = cx.konst(node, 1) {
        let hwio = w.transpose(&perm);
        return cx.static_tensor(node, &format!("{}_w_hwio", node.name), &hwio);
    }
    let ws = cx.shape(node, 1);
    let w = cx.input(node, 1)?;
    let dt = cx.tensor_dtype(w);
    let shape: Vec<usize> = perm.iter().map(|&p| ws[p]).collect();
    let perm: Vec<u32> = perm.iter().map(|&p| p as u32).collect();
    Ok(cx.emit(
        node,
        op::TRANSPOSE,
        vec![w],
        dt,
        &shape,
        vec![(param::PERM, Param::u32_vec(&perm))],
    ))
}
