//! ConstantOfShape — <https://onnx.ai/onnx/operators/onnx__ConstantOfShape.html>, opset 9+:
//! a tensor of the constant shape `input` filled with `value` (a one-element tensor attribute,
//! float 0 by default). Folded to a constant; no QNN op.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::attr::to_usizes;
use crate::ops::folded::not_folded;
use crate::ops::infer::{In, Out};
use crate::ops::OpDef;

pub const CONSTANT_OF_SHAPE: OpDef = OpDef {
    op_type: "ConstantOfShape",
    infer,
    expand: None,
    lower: Some(not_folded),
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let s = to_usizes(n, "input", &x.const_ints(0, "input")?)?;
    let dt = n.attr_t_opt("value")?.map_or(DType::F32, |t| t.dtype);
    Ok(vec![(dt, s)])
}
