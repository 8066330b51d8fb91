//! Pooling.

use crate::ops::Rule;

pub mod global_pool;
// Rule files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod pool;

pub const RULES: &[(&str, Rule)] = &[
    ("MaxPool", pool::pool),
    ("AveragePool", pool::pool),
    ("GlobalAveragePool", global_pool::global_pool),
    ("GlobalMaxPool", global_pool::global_pool),
];
