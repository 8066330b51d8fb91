//! Normalisations.

use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};
use crate::plan::{Param, TensorId};
use crate::qnn_names::{op, param};

pub mod batch_norm;
pub mod group_norm;
pub mod instance_norm;
pub mod layer_norm;
pub mod lp_normalization;
pub mod lrn;
pub mod rms_norm;

pub const OPS: &[OpDef] = &[
    batch_norm::BATCH_NORMALIZATION,
    group_norm::GROUP_NORMALIZATION,
    instance_norm::INSTANCE_NORMALIZATION,
    layer_norm::LAYER_NORMALIZATION,
    lp_normalization::LP_NORMALIZATION,
    rms_norm::RMS_NORMALIZATION,
    lrn::LRN,
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

/// Normalises `x`, a plan tensor viewed as `[n, k, s]` (`rows`), over its last axis with QNN
/// LayerNorm (unit gamma, zero beta), then, viewed as `view` (`[n, c, t]`), scales by input
/// `scale` and shifts by input `bias` (`c` elements each, applied as `[1, c, 1]`; constant ones
/// and zeros are skipped), writing `y`: the instance and group normalisations of the ranks
/// QNN's InstanceNorm and GroupNorm do not take, with no transposes. Reshapes go between the
/// views (and to `y`'s shape) only where they differ.
pub(crate) fn normalize_rows(
    cx: &mut LowerCx,
    node: &Node,
    x: TensorId,
    rows: [usize; 3],
    eps: f32,
    (scale, bias, view): (usize, usize, [usize; 3]),
    y: TensorId,
) -> Result<()> {
    let s = rows[2];
    let gamma = vec_tensor(cx, node, "ones", &vec![1.0; s])?;
    let beta = vec_tensor(cx, node, "zeros", &vec![0.0; s])?;
    let ln_params = vec![
        (param::EPSILON, Param::f32(eps)),
        (param::AXES, Param::u32_vec(&[2])),
    ];
    // (op, inputs after the running value, params, the shape it works in)
    let mut steps = vec![(op::LAYER_NORM, vec![gamma, beta], ln_params, rows)];
    for (i, q, skip) in [
        (scale, op::ELEMENT_WISE_MULTIPLY, 1.0),
        (bias, op::ELEMENT_WISE_ADD, 0.0),
    ] {
        if cx.konst(node, i).is_some_and(|c| c.all_eq(skip)) {
            continue;
        }
        let v = cx.input(node, i)?;
        let v = cx.reshape(node, v, &[1, view[1], 1]);
        steps.push((q, vec![v], vec![], view));
    }
    let dt = cx.tensor_dtype(x);
    let y_shape = cx.tshape(y);
    let mut t = x;
    let n = steps.len();
    for (k, (q, mut ins, params, shape)) in steps.into_iter().enumerate() {
        if cx.tshape(t) != shape {
            t = cx.reshape(node, t, &shape);
        }
        ins.insert(0, t);
        if k + 1 == n && y_shape == shape {
            cx.op(node, q, ins, vec![y], params);
            return Ok(());
        }
        t = cx.emit(node, q, ins, dt, &shape, params);
    }
    cx.op(node, op::RESHAPE, vec![t], vec![y], vec![]);
    Ok(())
}
