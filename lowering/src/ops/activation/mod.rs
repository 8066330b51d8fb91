//! Activations with attributes or decompositions (the plain ones are rows in `elementwise`).

use crate::ops::OpDef;

pub mod clip;
pub mod composite;
pub mod elu;
pub mod gelu;
pub mod hard_sigmoid;
pub mod leaky_relu;
pub mod prelu;
pub mod softmax;
pub mod softplus;

pub const OPS: &[OpDef] = &[
    clip::CLIP,
    elu::ELU,
    gelu::GELU,
    hard_sigmoid::HARD_SIGMOID,
    leaky_relu::LEAKY_RELU,
    prelu::PRELU,
    softmax::SOFTMAX,
    softmax::LOG_SOFTMAX,
    softplus::SOFTPLUS,
    softplus::MISH,
    composite::SELU,
    composite::THRESHOLDED_RELU,
    composite::SWISH,
    composite::TAN,
    composite::MEAN,
    composite::IS_NAN,
    composite::LP_NORMALIZATION,
];
