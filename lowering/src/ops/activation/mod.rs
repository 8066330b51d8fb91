//! Activations with attributes or decompositions (the plain ones are rows in `elementwise`).

use crate::ops::{Expander, Rule};
use crate::passes::expand::not_expanded;

pub mod clip;
pub mod composite;
pub mod elu;
pub mod gelu;
pub mod hard_sigmoid;
pub mod leaky_relu;
pub mod prelu;
pub mod softmax;
pub mod softplus;

pub const RULES: &[(&str, Rule)] = &[
    ("Clip", clip::clip),
    ("Elu", elu::elu),
    ("Gelu", gelu::gelu),
    ("HardSigmoid", hard_sigmoid::hard_sigmoid),
    ("LeakyRelu", leaky_relu::leaky_relu),
    ("PRelu", prelu::prelu),
    ("Softmax", softmax::softmax),
    ("LogSoftmax", softmax::softmax),
    ("Softplus", softplus::softplus),
    ("Mish", softplus::mish),
    ("Selu", not_expanded),
    ("ThresholdedRelu", not_expanded),
    ("Swish", not_expanded),
    ("Tan", not_expanded),
    ("Mean", not_expanded),
    ("IsNaN", not_expanded),
    ("LpNormalization", not_expanded),
];

pub const EXPANSIONS: &[(&str, Expander)] = &[
    ("Selu", composite::selu),
    ("ThresholdedRelu", composite::thresholded_relu),
    ("Swish", composite::swish),
    ("Tan", composite::tan),
    ("Mean", composite::mean),
    ("IsNaN", composite::is_nan),
    ("LpNormalization", composite::lp_normalization),
    ("Gelu", composite::gelu_tanh),
];
