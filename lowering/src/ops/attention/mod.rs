//! Attention ops, lowered by expanding them into MatMul/Softmax graphs.

use crate::ops::OpDef;

// Op files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod attention;

pub const OPS: &[OpDef] = &[attention::ATTENTION];
