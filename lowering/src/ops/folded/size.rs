//! Size — <https://onnx.ai/onnx/operators/onnx__Size.html>: the element count of the input
//! as an int64 scalar. Folded to a constant from the input's static shape; no QNN op.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::tensor::{numel, Tensor};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, OpDef, ShapeInput};

pub const SIZE: OpDef = OpDef {
    op_type: "Size",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: Some(Fold::Shapes(fold)),
    expand: None,
    lower: None,
    quant: Quant::Float,
};

fn infer(_: &In) -> Result<Vec<Out>> {
    Ok(vec![(DType::I64, vec![])])
}

fn fold(x: &In, _outs: &[Out]) -> Result<Vec<Tensor>> {
    Ok(vec![Tensor::from_i64(vec![], &[numel(x.shape(0)?) as i64])])
}
