//! Dropout — <https://onnx.ai/onnx/operators/onnx__Dropout.html>, inference mode (`ratio` and
//! `training_mode` inputs since opset 12). A pass-through: `passes::simplify` removes it, and
//! one that stays (its output is a graph output fed by an input) becomes QNN `Reshape`.
//! Constraints: the mask output is unused, and `training_mode` is absent or a constant false.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::tensor::{numel, Tensor};
use crate::ir::{Graph, Node};
use crate::ops::infer::{same, In, Out};
use crate::ops::shape::reshape::reshape;
use crate::ops::Quant;
use crate::ops::{Fold, Layout, LowerCx, OpDef, ShapeInput};

pub const DROPOUT: OpDef = OpDef {
    op_type: "Dropout",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(dropout),
    quant: Quant::Same,
};

/// Whether a Dropout node may run in training mode: its `training_mode` input (opset 12+) is
/// present and not a constant false. Such a node drops values at random and is not lowered.
pub fn dropout_may_train(g: &Graph, n: &Node) -> bool {
    match n.input(2) {
        None => false,
        Some(v) => match g.konst(v) {
            Some(t) => t.numel() != 1 || t.get_f64(0) != 0.0,
            None => true,
        },
    }
}

/// The output, and the bool mask of the same shape when it is asked for.
fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let mut v = same(x)?;
    if n.outputs.len() > 1 {
        v.push((DType::Bool, v[0].1.clone()));
    }
    Ok(v)
}

/// The input, and an all-true mask when it is asked for; a Dropout that may train is not
/// folded.
fn fold(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let g = x.g;
    let shape0 = outs[0].1.clone();
    let t0 = ins[0];
    if dropout_may_train(g, node) {
        return Ok(None);
    }
    let mut v = vec![t0.clone()];
    if outs.len() > 1 {
        v.push(Tensor::from_i64_as(
            DType::Bool,
            shape0.clone(),
            &vec![1; numel(&shape0)],
        ));
    }
    Ok(Some(v))
}

pub fn dropout(cx: &mut LowerCx, node: &Node) -> Result<()> {
    if node.output(1).is_some() {
        return Err(node.err_op("the mask output is not supported"));
    }
    if dropout_may_train(cx.g, node) {
        return Err(node.err_op("training mode is not supported (inference only)"));
    }
    reshape(cx, node)
}
