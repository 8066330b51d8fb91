//! ConstantOfShape — <https://onnx.ai/onnx/operators/onnx__ConstantOfShape.html>, opset 9+:
//! a tensor of the constant shape `input` filled with `value` (a one-element tensor attribute,
//! float 0 by default). Folded to a constant; no QNN op.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::attr::to_usizes;
use crate::ir::tensor::{numel, Tensor};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, OpDef};

pub const CONSTANT_OF_SHAPE: OpDef = OpDef {
    op_type: "ConstantOfShape",
    since: 9,
    layout: Layout::Framework,
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
