//! Matrix products.

use crate::ops::Rule;

pub mod einsum;
pub mod gemm;
// Rule files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod matmul;

pub const RULES: &[(&str, Rule)] = &[
    ("Gemm", gemm::gemm),
    ("MatMul", matmul::matmul),
    ("Einsum", einsum::einsum),
];
