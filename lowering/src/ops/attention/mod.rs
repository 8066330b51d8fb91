//! Attention ops, lowered by expanding them into MatMul/Softmax graphs, and the rotary
//! position embedding.

use crate::ops::OpDef;

// Op files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod attention;
pub mod rotary_embedding;

pub const OPS: &[OpDef] = &[attention::ATTENTION, rotary_embedding::ROTARY_EMBEDDING];
