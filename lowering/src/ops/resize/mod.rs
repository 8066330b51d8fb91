//! Spatial resampling and rearrangement (NHWC ops).

use crate::ops::OpDef;

pub mod depth_space;
pub mod grid_sample;
// Op files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod resize;

pub const OPS: &[OpDef] = &[
    resize::RESIZE,
    resize::UPSAMPLE,
    depth_space::DEPTH_TO_SPACE,
    depth_space::SPACE_TO_DEPTH,
    grid_sample::GRID_SAMPLE,
];
