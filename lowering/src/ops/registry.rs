//! The op registry: one [`OpDef`] per ONNX op type. Each op's file defines its entry and each
//! family's `mod.rs` lists them; the passes and [`crate::lower`] look ops up here and keep no
//! op lists of their own.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::{Graph, Node, ValueId};
use crate::ops::infer::{In, Out};
use crate::ops::{
    activation, attention, cast, conv, elementwise, folded, loss, matmul, norm, pool, quant,
    reduce, resize, rnn, shape, LowerCx,
};
use crate::plan::Accept;
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

/// How an op runs in a quantized graph: what the `qdq` pass ([`crate::passes::qdq`]) does with a
/// node whose neighbours are quantized.
#[derive(Clone, Copy, Debug)]
pub enum Quant {
    /// Float only: in a quantized graph its quantized inputs are dequantized and its outputs
    /// quantized around it (a float island, computed in fp16 where the HTP has it; none on v68).
    Float,
    /// Its rule lowers it on quantized tensors as they are: each float input and output needs an
    /// encoding (the model's; constants without one get a derived one).
    Direct,
    /// Moves or selects elements: its output has its input 0's encoding, and a different one
    /// the model gives the output is reached by a QNN Convert after it.
    Same,
    /// QNN fixes the output encoding for some storage types (16-bit Sigmoid and Tanh); a model
    /// encoding that differs is reached by a Convert after the op.
    Fixed(fn(DType) -> Option<(f32, i32)>),
    /// Conv, Gemm, LayerNorm...: see [`Weighted`].
    Weighted(Weighted),
    /// Selects or compares its float inputs (Where's data inputs, Greater's operands): they all
    /// hold one encoding, constants included, as QNN's ElementWiseSelect and comparisons need
    /// on quantized tensors: the output's when the model gives it one, else that of the first
    /// encoded input; another input encoding is reached by a Convert before the op. Quantized
    /// when that encoding exists and every non-constant float input has an encoding (a Where
    /// of two constants with an encoded output, a one-hot, included).
    Shared,
    /// Casts integers to float (Cast, CastLike): quantized when the input is an integer and the
    /// output has a per-tensor encoding whose reals start at 0 or above (offset >= 0), since
    /// QNN's Cast writes the integer itself as the code (measured on libQnnHtp 2.51): the rule
    /// casts into scale 1, offset 0 and converts. Positions and indices so become quantized
    /// values on a v68 HTP. Any other Cast near quantized values is a float island.
    FromInt,
}

/// The constant inputs of a weighted op in a quantized graph. The weight keeps the model's
/// encoding, or gets a symmetric one (int8, per channel along `channel` when given) if it has
/// none (weights folded with a BatchNorm); the bias is always derived: int32, offset 0, scale
/// input scale × weight scale (per channel with the weight), as QNN requires; a missing bias is
/// zeros.
#[derive(Clone, Copy, Debug)]
pub struct Weighted {
    pub weight: usize,
    /// The weight's output-channel axis in the ONNX layout.
    pub channel: Option<fn(&Node) -> usize>,
    pub bias: Option<usize>,
    /// The storage QNN requires of the weight, when it is not any int8 encoding: LayerNorm's
    /// gamma is UFIXED_POINT_8 (the validator lists the sets it accepts). A model encoding of
    /// another type is re-derived from the real values, asymmetric per tensor.
    pub weight_storage: Option<DType>,
    /// A weight input that is an activation stored in 16 bits must be symmetric (offset
    /// -32768): QNN's MatMul validator refuses any other u16 encoding of `in[1]`. Another one is
    /// converted first.
    pub symmetric_u16: bool,
}

/// How an op meets the layout pass ([`crate::passes::layout`]), which runs the conv family
/// channel-last with as few transposes as it can.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    /// Needs channel-last data; the layout pass converts around it.
    Sensitive,
    /// Element-wise; transposes are moved through it.
    Agnostic,
    /// Computes along the axes it names (reductions, Concat, Slice); transposes are moved
    /// through it with those axes permuted, so a squeeze-and-excitation mean, a DenseNet concat
    /// of conv outputs or a slice of a conv's channels stays channel-last. The function reads
    /// the node's axes (its input of rank `r`), or `None` when they cannot be permuted.
    Axes(fn(&Graph, &Node, usize) -> Option<AxesOp>),
    /// Works on the model's logical layout (axes, reshapes).
    Framework,
}

impl Layout {
    /// The spelling of `docs/operators.md` and of the Python `op_table`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Sensitive => "sensitive",
            Layout::Agnostic => "agnostic",
            Layout::Axes(_) => "axes",
            Layout::Framework => "framework",
        }
    }
}

/// What a [`Layout::Axes`] node computes along, read from the node as it stands.
pub enum AxesOp {
    /// A reduction over `axes` (normalized, sorted), with `keepdims`.
    Reduce { axes: Vec<usize>, keep: bool },
    /// Concat along `axis`: every input is data of the output's rank.
    Concat { axis: usize },
    /// Slice: per sliced axis (axis, start, end, step), clamped as ONNX does.
    Slice { ranges: Vec<(usize, i64, i64, i64)> },
}

/// What an op's inputs say about its output's shape, for the `declared_shapes` pass: it
/// resolves a shape-defining input given at run time from the shapes the model declares.
#[derive(Clone, Copy, Debug)]
pub enum ShapeInput {
    /// No input defines the output's shape by its value.
    None,
    /// Output 0 has input 0's shape (unary element-wise ops, Cast, Identity): a shape declared
    /// for the output is the input's too.
    Kept,
    /// The input at `slot(opset, node)` (when that opset has it) defines the output's shape;
    /// `resolve` finds its value from the declared outputs.
    Slot {
        slot: fn(i64, &Node) -> Option<usize>,
        resolve: fn(&ShapeQuery) -> Option<Resolved>,
    },
}

/// A resolved shape input: its value, how a value passed at run time is compared, and the
/// declared output it came from.
pub type Resolved = (Tensor, Accept, String);

/// A node whose shape input is a graph input of `dtype` and static `shape` (`len` values), with
/// the declared output shapes.
pub struct ShapeQuery<'a> {
    pub g: &'a Graph,
    pub n: &'a Node,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub len: usize,
    pub declared: &'a HashMap<ValueId, Vec<usize>>,
}

impl ShapeQuery<'_> {
    /// The inferred shape of input `i`.
    pub fn known(&self, i: usize) -> Option<Vec<usize>> {
        self.n
            .input(i)
            .filter(|&v| self.g.values[v].known)
            .map(|v| self.g.shape(v).to_vec())
    }

    /// The declared shape of output `i`, and its name.
    pub fn out(&self, i: usize) -> Option<(Vec<usize>, String)> {
        let o = self.n.output(i)?;
        Some((
            self.declared.get(&o)?.clone(),
            self.g.values[o].name.clone(),
        ))
    }

    /// `v` as the input's value, when it has the input's length and the input is integer.
    pub fn ints(&self, v: &[i64]) -> Option<Tensor> {
        (v.len() == self.len && self.dtype.is_int())
            .then(|| Tensor::from_i64_as(self.dtype, self.shape.to_vec(), v))
    }
}

/// A shape's dims as ONNX shape values.
pub fn shape_i64(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&d| d as i64).collect()
}

/// Input 1 at every opset.
pub fn slot_1(_: i64, _: &Node) -> Option<usize> {
    Some(1)
}

/// Input 1 from opset 13 (an attribute before).
pub fn slot_1_from_13(v: i64, _: &Node) -> Option<usize> {
    (v >= 13).then_some(1)
}

/// Everything lowering knows about one ONNX op type. Every op is inferred; a node is lowered
/// by `lower`, replaced by `expand` before lowering, or only folded (Shape, Size, ...). An
/// entry with none of the three is only inferred, so that the nodes after an op no table
/// supports are still checked.
#[derive(Clone, Copy, Debug)]
pub struct OpDef {
    pub op_type: &'static str,
    /// The first ONNX opset that defines the op (a table's opset range starts there or later).
    pub since: i64,
    /// How the layout pass treats the op.
    pub layout: Layout,
    /// The input that defines the output's shape, if any.
    pub shape_input: ShapeInput,
    /// Output dtypes and shapes, computed for every node by the `const_fold` pass.
    pub infer: InferFn,
    /// Evaluates the node at compile time when it can.
    pub fold: Option<Fold>,
    /// Replaces the node with primitive ops, once its inputs are known and the op table accepts
    /// it.
    pub expand: Option<Expander>,
    /// Emits the node's QNN ops.
    pub lower: Option<Rule>,
    /// How the node runs in a quantized graph.
    pub quant: Quant,
}

impl OpDef {
    /// This entry with another [`Quant`] (for entries made by a shared `const fn`).
    pub const fn with_quant(self, quant: Quant) -> OpDef {
        OpDef { quant, ..self }
    }

    pub const fn with_expand(self, expand: Expander) -> OpDef {
        OpDef {
            expand: Some(expand),
            ..self
        }
    }
}

/// The families, by name: an op's family is the folder of its file, `ops/<family>/`.
const FAMILIES: &[(&str, &[OpDef])] = &[
    ("elementwise", elementwise::OPS),
    ("activation", activation::OPS),
    ("attention", attention::OPS),
    ("loss", loss::OPS),
    ("cast", cast::OPS),
    ("conv", conv::OPS),
    ("matmul", matmul::OPS),
    ("norm", norm::OPS),
    ("pool", pool::OPS),
    ("reduce", reduce::OPS),
    ("resize", resize::OPS),
    ("rnn", rnn::OPS),
    ("shape", shape::OPS),
    ("folded", folded::OPS),
    ("quant", quant::OPS),
];

/// Backend-specific variants that replace the common rule of the same op type.
const GPU_RULES: &[(&str, Rule)] = &[];

/// Every registry entry.
pub fn defs() -> impl Iterator<Item = &'static OpDef> {
    FAMILIES.iter().flat_map(|(_, f)| f.iter())
}

/// The entry of `op_type`.
pub fn def(op_type: &str) -> Option<&'static OpDef> {
    static BY_NAME: OnceLock<HashMap<&'static str, &'static OpDef>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| defs().map(|d| (d.op_type, d)).collect())
        .get(op_type)
        .copied()
}

/// The family of `op_type` (the folder of its file), when it has an entry.
pub fn family(op_type: &str) -> Option<&'static str> {
    FAMILIES
        .iter()
        .find(|(_, f)| f.iter().any(|d| d.op_type == op_type))
        .map(|(name, _)| *name)
}

/// How the layout pass treats `op_type`; `None` for an op without an entry.
pub fn layout(op_type: &str) -> Option<Layout> {
    def(op_type).map(|d| d.layout)
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

    /// ONNX's shape-defining inputs (named `shape`, `axes`, `repeats`, `sizes`, `scales`, `K` or
    /// `split` in onnx.defs 1.22) of the ops with an entry: (op, first opset, slot).
    const ONNX_SHAPE_INPUTS: &[(&str, i64, usize)] = &[
        ("Expand", 8, 1),
        ("Reshape", 5, 1),
        ("Tile", 6, 1),
        ("Squeeze", 13, 1),
        ("Unsqueeze", 13, 1),
        ("Split", 13, 1),
        ("TopK", 10, 1),
        ("Upsample", 9, 1),
        ("Resize", 11, 2),
        ("Resize", 11, 3),
        ("ReduceSum", 13, 1),
        ("ReduceMean", 18, 1),
        ("ReduceMax", 18, 1),
        ("ReduceMin", 18, 1),
        ("ReduceProd", 18, 1),
        ("ReduceL1", 18, 1),
        ("ReduceL2", 18, 1),
        ("ReduceLogSum", 18, 1),
        ("ReduceLogSumExp", 18, 1),
        ("ReduceSumSquare", 18, 1),
    ];

    /// Named so but not resolved from declared shapes: Attention's `K` is the key tensor; Pad's
    /// and Slice's `axes` say which axes `pads` or `starts`/`ends` apply to, which decide the
    /// output shape with them; Resize's opset-10 `scales` (slot 1) and Split's opset-1/2
    /// `split` are older forms kept out of the resolver.
    const NOT_RESOLVED: &[(&str, i64, usize)] = &[
        ("Attention", 23, 1),
        ("Pad", 18, 3),
        ("Slice", 10, 3),
        ("Resize", 10, 1),
        ("Split", 1, 1),
    ];

    #[test]
    fn every_op_with_a_shape_input_declares_it() {
        for &(op, opset, slot) in ONNX_SHAPE_INPUTS {
            let d = def(op).unwrap_or_else(|| panic!("{op} has no entry"));
            let ShapeInput::Slot { slot: of, .. } = d.shape_input else {
                panic!("{op}: input {slot} defines the output shape; its entry declares none");
            };
            let mut n = Node::new("n", op);
            n.inputs = vec![Some(0); slot + 1];
            assert_eq!(of(opset, &n), Some(slot), "{op} at opset {opset}");
        }
        for &(op, opset, slot) in NOT_RESOLVED {
            let mut n = Node::new("n", op);
            n.inputs = vec![Some(0); slot + 1];
            if let ShapeInput::Slot { slot: of, .. } = def(op).expect("entry").shape_input {
                assert_ne!(of(opset, &n), Some(slot), "{op} at opset {opset}");
            }
        }
        // And nothing else declares one.
        for d in defs() {
            if matches!(d.shape_input, ShapeInput::Slot { .. }) {
                assert!(
                    d.op_type == "ConstantOfShape"
                        || ONNX_SHAPE_INPUTS.iter().any(|(o, ..)| *o == d.op_type),
                    "{} declares a shape input ONNX does not name",
                    d.op_type
                );
            }
        }
    }

    #[test]
    fn op_types_are_unique() {
        let mut seen = BTreeSet::new();
        for d in defs() {
            assert!(seen.insert(d.op_type), "{} has two entries", d.op_type);
        }
    }
}
