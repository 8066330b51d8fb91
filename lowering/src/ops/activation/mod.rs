//! Activations with attributes or decompositions (the plain ones are rows in `elementwise`).

use crate::ops::Rule;

pub mod clip;
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
];
