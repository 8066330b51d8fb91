//! Pooling.

use crate::ops::OpDef;

pub mod global_pool;
// Op files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod pool;
pub mod roi_align;

pub const OPS: &[OpDef] = &[
    pool::MAX_POOL,
    pool::AVERAGE_POOL,
    pool::LP_POOL,
    global_pool::GLOBAL_AVERAGE_POOL,
    global_pool::GLOBAL_MAX_POOL,
    roi_align::ROI_ALIGN,
];
