//! Shape — <https://onnx.ai/onnx/operators/onnx__Shape.html>, `start` / `end` since opset 15
//! (clamped to the rank, negative values counting from the end). Folded to an int64 constant
//! from the input's static shape; no QNN op.

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::folded::not_folded;
use crate::ops::infer::{In, Out};
use crate::ops::OpDef;

pub const SHAPE: OpDef = OpDef {
    op_type: "Shape",
    infer,
    expand: None,
    lower: Some(not_folded),
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let r = x.rank(0)? as i64;
    let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
    let s = clamp(n.attr_i("start", 0)?);
    let e = clamp(n.attr_i("end", r)?);
    Ok(vec![(DType::I64, vec![(e - s).max(0) as usize])])
}
