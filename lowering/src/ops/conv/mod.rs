//! Convolutions. Both rules need the layout pass to have marked the node `nhwc`.

use crate::ops::Rule;

// Rule files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod conv;
pub mod conv_transpose;

pub const RULES: &[(&str, Rule)] = &[
    ("Conv", conv::conv),
    ("ConvTranspose", conv_transpose::conv_transpose),
];
