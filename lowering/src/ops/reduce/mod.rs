//! Reductions, arg-reductions, TopK and CumSum.

use crate::ops::Rule;

pub mod arg;
pub mod cumsum;
// Rule files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod reduce;
pub mod topk;

pub const RULES: &[(&str, Rule)] = &[
    ("ReduceMean", reduce::reduce),
    ("ReduceSum", reduce::reduce),
    ("ReduceMax", reduce::reduce),
    ("ReduceMin", reduce::reduce),
    ("ArgMax", arg::arg),
    ("ArgMin", arg::arg),
    ("TopK", topk::topk),
    ("CumSum", cumsum::cumsum),
];
