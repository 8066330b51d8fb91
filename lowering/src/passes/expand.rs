//! Expands ONNX function ops (Attention, the losses, ...) into the primitive ONNX ops that the
//! rules lower, as ONNX function inlining does. Each expansion lives in its op's file in `ops/`
//! and is registered in [`crate::ops::expander`]; this pass only splices the nodes it builds in
//! place of the original node.
//!
//! A node is expanded only when the op table accepts it (status, opset, input dtypes) and its
//! inputs' shapes are known. When an expansion refuses a node (an attribute variant it does not
//! cover), the node stays and the error is returned for lowering to report.

use crate::dtype::{DType, OnnxCode};
use crate::error::{LowerError, Result};
use crate::ir::{Attr, Graph, Node, ValueId};
use crate::table::OpTable;
use crate::tensor::Tensor;
use crate::Backend;

/// Builds the replacement nodes of one expanded node.
pub struct Builder<'g> {
    pub g: &'g mut Graph,
    /// Name of the node being expanded, the prefix of every new node and value.
    base: String,
    pub nodes: Vec<Node>,
}

impl<'g> Builder<'g> {
    pub fn new(g: &'g mut Graph, base: &str) -> Builder<'g> {
        Builder {
            g,
            base: base.to_string(),
            nodes: Vec::new(),
        }
    }

    pub fn opset(&self) -> i64 {
        self.g.opset()
    }

    /// Adds `op_type(inputs)` writing the given outputs.
    pub fn op_to(
        &mut self,
        op_type: &str,
        inputs: &[ValueId],
        attrs: Vec<(&str, Attr)>,
        outputs: &[ValueId],
    ) {
        let name = self
            .g
            .unique_node_name(&format!("{}/{}", self.base, op_type));
        let mut n = Node::new(name, op_type);
        n.inputs = inputs.iter().map(|&v| Some(v)).collect();
        n.outputs = outputs.iter().map(|&v| Some(v)).collect();
        for (k, a) in attrs {
            n.attrs.insert(k.to_string(), a);
        }
        self.nodes.push(n);
    }

    /// Adds `op_type(inputs)` with one fresh output.
    pub fn op(&mut self, op_type: &str, inputs: &[ValueId], attrs: Vec<(&str, Attr)>) -> ValueId {
        let out = self.g.add_value(&format!("{}/{}", self.base, op_type));
        self.op_to(op_type, inputs, attrs, &[out]);
        out
    }

    pub fn konst(&mut self, hint: &str, t: Tensor) -> ValueId {
        self.g.add_const(&format!("{}/{}", self.base, hint), t)
    }

    /// A 1-D int64 constant (shapes, axes, perms).
    pub fn ints(&mut self, v: &[i64]) -> ValueId {
        self.konst("ints", Tensor::from_i64(vec![v.len()], v))
    }

    /// A rank-0 constant of `dtype`.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> ValueId {
        self.konst("scalar", Tensor::from_f64_as(dtype, vec![], &[v]))
    }

    pub fn reshape(&mut self, x: ValueId, shape: &[usize]) -> ValueId {
        let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let s = self.ints(&s);
        self.op("Reshape", &[x, s], vec![])
    }

    pub fn transpose(&mut self, x: ValueId, perm: &[i64]) -> ValueId {
        self.op("Transpose", &[x], vec![("perm", Attr::Ints(perm.to_vec()))])
    }

    pub fn cast(&mut self, x: ValueId, to: DType) -> ValueId {
        self.op("Cast", &[x], vec![("to", Attr::Int(to.to_onnx() as i64))])
    }

    /// `op_type` (a Reduce* op) over `axes`, with the axes as an attribute or an input as the
    /// model's opset requires.
    pub fn reduce(&mut self, op_type: &str, x: ValueId, axes: &[i64], keepdims: bool) -> ValueId {
        let as_input = if op_type == "ReduceSum" {
            self.opset() >= 13
        } else {
            self.opset() >= 18
        };
        let keep = ("keepdims", Attr::Int(keepdims as i64));
        if as_input {
            let a = self.ints(axes);
            self.op(op_type, &[x, a], vec![keep])
        } else {
            self.op(
                op_type,
                &[x],
                vec![keep, ("axes", Attr::Ints(axes.to_vec()))],
            )
        }
    }

    /// Softmax or LogSoftmax over the last axis of a rank-`rank` value, valid at every opset.
    pub fn softmax_last(&mut self, op_type: &str, x: ValueId, rank: usize) -> ValueId {
        self.op(op_type, &[x], vec![("axis", Attr::Int(rank as i64 - 1))])
    }
}

/// Expands every node that has an expansion and whose inputs are known. Returns how many nodes
/// were expanded and the expansions' refusals.
pub fn run(g: &mut Graph, backend: Backend, table: &OpTable) -> (usize, Vec<LowerError>) {
    let mut errors = Vec::new();
    let mut expanded = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        let node = g.nodes[i].clone();
        let Some(expand) = crate::ops::expander(&node.op_type) else {
            i += 1;
            continue;
        };
        let known = node.inputs.iter().flatten().all(|&v| g.values[v].known);
        if !known || table.check_node(&node, g, backend).is_err() {
            i += 1;
            continue;
        }
        let mut b = Builder::new(g, &node.name);
        match expand(&mut b, &node) {
            Ok(false) => i += 1,
            Ok(true) => {
                let nodes = std::mem::take(&mut b.nodes);
                let n = nodes.len();
                g.nodes.splice(i..=i, nodes);
                i += n;
                expanded += 1;
            }
            Err(e) => {
                errors.push(e);
                i += 1;
            }
        }
    }
    (expanded, errors)
}

/// The rule registered for expanded ops: reached only when [`run`] left the node alone, which
/// it reports itself, so this names the node as a fallback.
pub fn not_expanded(_cx: &mut crate::ops::LowerCx, node: &Node) -> Result<()> {
    Err(node.err_op(format!(
        "{} is lowered by expanding it, which did not happen here",
        node.op_type
    )))
}
