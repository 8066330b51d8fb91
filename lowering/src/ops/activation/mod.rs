//! Activations with attributes or decompositions (the plain ones are rows in `elementwise`).

use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, OpDef, ShapeInput};

pub mod clip;
pub mod composite;
pub mod elu;
pub mod gelu;
pub mod hard_sigmoid;
pub mod leaky_relu;
pub mod prelu;
pub mod softmax;
pub mod softplus;

/// Inferred only: no op table lists them, so they are reported as unsupported and the nodes
/// after them are still checked.
pub const CELU: OpDef = OpDef {
    op_type: "Celu",
    since: 12,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: None,
    quant: Quant::Float,
};

pub const SOFTSIGN: OpDef = OpDef {
    op_type: "Softsign",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: None,
    quant: Quant::Float,
};

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
    CELU,
    SOFTSIGN,
];
