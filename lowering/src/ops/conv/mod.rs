//! Convolutions. Both rules need the layout pass to have marked the node `nhwc`.

use crate::ops::{Expander, Rule};

// Rule files are named after the ONNX op (STYLE.md), which here matches the family.
pub mod causal_conv;
#[allow(clippy::module_inception)]
pub mod conv;
pub mod conv1d;
pub mod conv_transpose;

pub const RULES: &[(&str, Rule)] = &[
    ("Conv", conv::conv),
    ("ConvTranspose", conv_transpose::conv_transpose),
    ("CausalConvWithState", crate::passes::expand::not_expanded),
];

/// 1-D convolutions and pools run as 2-D ones (the pools are registered here too: one expansion
/// serves all four).
pub const EXPANSIONS: &[(&str, Expander)] = &[
    ("Conv", conv1d::as_2d),
    ("ConvTranspose", conv1d::as_2d),
    ("MaxPool", conv1d::as_2d),
    ("AveragePool", conv1d::as_2d),
    ("CausalConvWithState", causal_conv::causal_conv_with_state),
];
