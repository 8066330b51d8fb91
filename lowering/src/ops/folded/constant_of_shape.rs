//! ConstantOfShape — <https://onnx.ai/onnx/operators/onnx__ConstantOfShape.html>, opset 9+:
//! a tensor of the constant shape `input` filled with `value` (a one-element tensor attribute,
//! float 0 by default). Folded to a constant; no QNN op.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::attr::to_usizes;
use crate::ir::tensor::{numel, Tensor};
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::registry::{shape_i64, Resolved, ShapeQuery};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, OpDef, ShapeInput};
use crate::plan::Accept;

pub const CONSTANT_OF_SHAPE: OpDef = OpDef {
    op_type: "ConstantOfShape",
    since: 9,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_0,
        resolve: resolve_shape,
    },
    infer,
    fold: Some(Fold::Shapes(fold)),
    expand: None,
    lower: None,
    quant: Quant::Float,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let s = to_usizes(n, "input", &x.const_ints(0, "input")?)?;
    let dt = n.attr_t_opt("value")?.map_or(DType::F32, |t| t.dtype);
    Ok(vec![(dt, s)])
}

fn fold(x: &In, outs: &[Out]) -> Result<Vec<Tensor>> {
    let (dt0, shape0) = outs[0].clone();
    let v =
        x.n.attr_t_opt("value")?
            .map_or(0.0, |t| if t.numel() > 0 { t.get_f64(0) } else { 0.0 });
    Ok(vec![Tensor::from_f64_as(
        dt0,
        shape0.clone(),
        &vec![v; numel(&shape0)],
    )])
}
/// The shape is input 0.
fn slot_0(_: i64, _: &Node) -> Option<usize> {
    Some(0)
}

/// The `input` shape that gives the declared output.
fn resolve_shape(q: &ShapeQuery) -> Option<Resolved> {
    let (d, name) = q.out(0)?;
    Some((q.ints(&shape_i64(&d))?, Accept::Equal, name))
}
