//! Ops that only exist on the host: Shape, Size, ConstantOfShape and Range. With static input
//! shapes they fold to constants (`passes::const_fold`); what reaches lowering did not fold and
//! cannot run on QNN.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};

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

pub fn not_folded(_: &mut LowerCx, node: &Node) -> Result<()> {
    Err(node.err_op("its inputs must be constant after folding (dynamic shapes are not supported)"))
}
