//! Reductions, arg-reductions, TopK and CumSum.

use crate::ops::OpDef;

pub mod arg;
pub mod cumsum;
// Op files are named after the ONNX op (STYLE.md), which here matches the family.
#[allow(clippy::module_inception)]
pub mod reduce;
pub mod reduce_composite;
pub mod topk;

pub const OPS: &[OpDef] = &[
    reduce::REDUCE_MEAN,
    reduce::REDUCE_SUM,
    reduce::REDUCE_MAX,
    reduce::REDUCE_MIN,
    reduce_composite::REDUCE_PROD,
    reduce_composite::REDUCE_L1,
    reduce_composite::REDUCE_L2,
    reduce_composite::REDUCE_SUM_SQUARE,
    reduce_composite::REDUCE_LOG_SUM,
    reduce_composite::REDUCE_LOG_SUM_EXP,
    arg::ARG_MAX,
    arg::ARG_MIN,
    topk::TOP_K,
    cumsum::CUM_SUM,
];
