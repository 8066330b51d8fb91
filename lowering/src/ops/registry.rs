//! The op registry: one [`OpDef`] per ONNX op type. Each op's file defines its entry and each
//! family's `mod.rs` lists them; the passes and [`crate::lower`] look ops up here and keep no
//! op lists of their own.

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::{
    activation, attention, cast, conv, elementwise, folded, loss, matmul, norm, pool, quant,
    reduce, resize, rnn, shape, LowerCx,
};
use crate::Backend;

/// Shape and dtype inference: the outputs of one node (see [`crate::ops::infer`]).
pub type InferFn = fn(&In) -> Result<Vec<Out>>;

/// A lowering rule: emits zero or more QNN ops for one ONNX node.
pub type Rule = fn(&mut LowerCx, &Node) -> Result<()>;

/// Evaluates a node from its inputs' shapes and its attributes; `outs` are its inferred outputs.
pub type ShapesFoldFn = fn(&In, outs: &[Out]) -> Result<Vec<Tensor>>;

/// Evaluates a node from the values of its given inputs, all constant; `Ok(None)` leaves the node
/// to the device.
pub type ValuesFoldFn = fn(&In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>>;

/// Constant folding: how the `const_fold` pass evaluates a node on the host at compile time.
#[derive(Clone, Copy, Debug)]
pub enum Fold {
    /// From shapes alone (Shape, Size, ConstantOfShape), whether or not the inputs are constant.
    Shapes(ShapesFoldFn),
    /// When every given input is a constant.
    Values(ValuesFoldFn),
}

/// An expansion: builds the primitive ONNX nodes that replace one node before the rules run
/// (by the `expand` pass). `Ok(false)` leaves the node to its rule (the expansion
/// covers only some of its variants).
pub type Expander = fn(&mut Builder, &Node) -> Result<bool>;

/// Everything lowering knows about one ONNX op type. Every op is inferred; a node is lowered
/// by `lower`, replaced by `expand` before lowering, or only folded (Shape, Size, ...). An
/// entry with none of the three is only inferred, so that the nodes after an op no table
/// supports are still checked.
#[derive(Clone, Copy, Debug)]
pub struct OpDef {
    pub op_type: &'static str,
    /// Output dtypes and shapes, computed for every node by the `const_fold` pass.
    pub infer: InferFn,
    /// Evaluates the node at compile time when it can.
    pub fold: Option<Fold>,
    /// Replaces the node with primitive ops, once its inputs are known and the op table accepts
    /// it.
    pub expand: Option<Expander>,
    /// Emits the node's QNN ops.
    pub lower: Option<Rule>,
}

const FAMILIES: &[&[OpDef]] = &[
    elementwise::OPS,
    activation::OPS,
    attention::OPS,
    loss::OPS,
    cast::OPS,
    conv::OPS,
    matmul::OPS,
    norm::OPS,
    pool::OPS,
    reduce::OPS,
    resize::OPS,
    rnn::OPS,
    shape::OPS,
    folded::OPS,
    quant::OPS,
];

/// Backend-specific variants that replace the common rule of the same op type.
const GPU_RULES: &[(&str, Rule)] = &[];

/// Every registry entry.
pub fn defs() -> impl Iterator<Item = &'static OpDef> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// The entry of `op_type`.
pub fn def(op_type: &str) -> Option<&'static OpDef> {
    defs().find(|d| d.op_type == op_type)
}

/// The backend-specific rules of `backend`, by op type.
pub fn variants(backend: Backend) -> &'static [(&'static str, Rule)] {
    match backend {
        Backend::Gpu => GPU_RULES,
        Backend::Htp | Backend::Cpu => &[],
    }
}

/// The rule that lowers `def` on `backend`: its backend variant if there is one, else its own.
pub fn rule(def: &OpDef, backend: Backend) -> Option<Rule> {
    variants(backend)
        .iter()
        .find(|(n, _)| *n == def.op_type)
        .map(|(_, r)| *r)
        .or(def.lower)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn op_types_are_unique() {
        let mut seen = BTreeSet::new();
        for d in defs() {
            assert!(seen.insert(d.op_type), "{} has two entries", d.op_type);
        }
    }
}
