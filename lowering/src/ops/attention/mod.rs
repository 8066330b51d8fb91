//! Attention ops, lowered by expanding them into MatMul/Softmax graphs.

use crate::ops::{Expander, Rule};
use crate::passes::expand::not_expanded;

// Rule files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod attention;

pub const RULES: &[(&str, Rule)] = &[("Attention", not_expanded)];

pub const EXPANSIONS: &[(&str, Expander)] = &[("Attention", attention::attention)];
