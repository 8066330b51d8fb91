//! Ops that only exist on the host: Shape, Size, ConstantOfShape and Range. With static input
//! shapes they fold to constants; their entries have no rule, and one that reaches lowering
//! (a dynamic input, an output too large to evaluate) is reported as not folded.

use crate::ops::OpDef;

pub mod constant_of_shape;
pub mod range;
pub mod shape;
pub mod size;

pub const OPS: &[OpDef] = &[
    shape::SHAPE,
    size::SIZE,
    constant_of_shape::CONSTANT_OF_SHAPE,
    range::RANGE,
];
