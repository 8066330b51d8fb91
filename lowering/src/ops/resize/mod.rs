//! Spatial resampling and rearrangement (NHWC ops).

use crate::ops::Rule;

pub mod depth_space;
// Rule files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod resize;

pub const RULES: &[(&str, Rule)] = &[
    ("Resize", resize::resize),
    ("Upsample", resize::resize),
    ("DepthToSpace", depth_space::depth_space),
    ("SpaceToDepth", depth_space::depth_space),
];
