//! Loss functions, lowered by expanding them into elementwise ops and reductions.

use crate::ops::{Expander, Rule};
use crate::passes::expand::not_expanded;

pub mod nll_loss;
pub mod softmax_cross_entropy;

pub const RULES: &[(&str, Rule)] = &[
    ("NegativeLogLikelihoodLoss", not_expanded),
    ("SoftmaxCrossEntropyLoss", not_expanded),
];

pub const EXPANSIONS: &[(&str, Expander)] = &[
    ("NegativeLogLikelihoodLoss", nll_loss::nll_loss),
    (
        "SoftmaxCrossEntropyLoss",
        softmax_cross_entropy::softmax_cross_entropy,
    ),
];
