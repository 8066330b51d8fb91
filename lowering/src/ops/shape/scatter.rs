//! ScatterElements / ScatterND — <https://onnx.ai/onnx/operators/onnx__ScatterElements.html>,
//! <https://onnx.ai/onnx/operators/onnx__ScatterND.html>. No lowering rule yet (the op tables
//! list them as planned); the output has the data input's shape and dtype, so they are inferred
//! and the nodes after one are still checked.

use crate::ops::infer::same;
use crate::ops::OpDef;
use crate::ops::Quant;

pub const SCATTER_ELEMENTS: OpDef = OpDef {
    op_type: "ScatterElements",
    infer: same,
    fold: None,
    expand: None,
    lower: None,
    quant: Quant::Float,
};

pub const SCATTER_ND: OpDef = OpDef {
    op_type: "ScatterND",
    infer: same,
    fold: None,
    expand: None,
    lower: None,
    quant: Quant::Float,
};
