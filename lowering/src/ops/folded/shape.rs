//! Shape — <https://onnx.ai/onnx/operators/onnx__Shape.html>, `start` / `end` since opset 15
//! (clamped to the rank, negative values counting from the end). Folded to an int64 constant
//! from the input's static shape; no QNN op.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, OpDef, ShapeInput};

pub const SHAPE: OpDef = OpDef {
    op_type: "Shape",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: Some(Fold::Shapes(fold)),
    expand: None,
    lower: None,
    quant: Quant::Float,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let r = x.rank(0)? as i64;
    let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
    let s = clamp(n.attr_i("start", 0)?);
    let e = clamp(n.attr_i("end", r)?);
    Ok(vec![(DType::I64, vec![(e - s).max(0) as usize])])
}

/// The dims `start..end` of the input's shape.
fn fold(x: &In, _outs: &[Out]) -> Result<Vec<Tensor>> {
    let node = x.n;
    let s = x.shape(0)?;
    let r = s.len() as i64;
    let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) } as usize;
    let (a, b) = (
        clamp(node.attr_i("start", 0)?),
        clamp(node.attr_i("end", r)?),
    );
    let v: Vec<i64> = s[a..b.max(a)].iter().map(|&d| d as i64).collect();
    Ok(vec![Tensor::from_i64(vec![v.len()], &v)])
}
