//! Loss functions, lowered by expanding them into elementwise ops and reductions.

use crate::ops::OpDef;

pub mod nll_loss;
pub mod softmax_cross_entropy;

pub const OPS: &[OpDef] = &[
    nll_loss::NEGATIVE_LOG_LIKELIHOOD_LOSS,
    softmax_cross_entropy::SOFTMAX_CROSS_ENTROPY_LOSS,
];
