//! Quantization ops. Quantized tensors are not in the plan yet: constant DequantizeLinear
//! inputs (quantized weights) fold to float weights, and what reaches lowering is refused.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};

pub mod dequantize_linear;
pub mod quantize_linear;

pub const OPS: &[OpDef] = &[
    quantize_linear::QUANTIZE_LINEAR,
    dequantize_linear::DEQUANTIZE_LINEAR,
];

pub fn quantized(_: &mut LowerCx, node: &Node) -> Result<()> {
    Err(node.err_dtype("quantized activations are not supported yet (only constant weights are dequantized at compile time)"))
}
