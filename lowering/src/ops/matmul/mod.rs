//! Matrix products.

use crate::ops::OpDef;

pub mod einsum;
pub mod gemm;
// Op files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod matmul;

pub const OPS: &[OpDef] = &[gemm::GEMM, matmul::MATMUL, einsum::EINSUM];
