//! Size — <https://onnx.ai/onnx/operators/onnx__Size.html>: the element count of the input
//! as an int64 scalar. Folded to a constant from the input's static shape; no QNN op.

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::folded::not_folded;
use crate::ops::infer::{In, Out};
use crate::ops::OpDef;

pub const SIZE: OpDef = OpDef {
    op_type: "Size",
    infer,
    expand: None,
    lower: Some(not_folded),
};

fn infer(_: &In) -> Result<Vec<Out>> {
    Ok(vec![(DType::I64, vec![])])
}
