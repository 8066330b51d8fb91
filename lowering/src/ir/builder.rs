//! Builds IR nodes in place of one node: the expansions in `ops/` write the primitive ops that
//! replace a function op through it.

use crate::dtype::{DType, OnnxCode};
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Graph, Node, ValueId};

/// Builds the replacement nodes of one expanded node.
pub struct Builder<'g> {
    pub g: &'g mut Graph,
    /// Name of the node being expanded, the prefix of every new node and value.
    base: String,
    pub nodes: Vec<Node>,
    /// The QNN ops the backend's op table lists for the expanded node's op type (set by the
    /// `expand` pass, empty elsewhere): an expansion that leaves some variants to the op's rule
    /// asks here whether the backend has the QNN op that rule emits (LSTM: `Lstm`).
    pub table_qnn: &'g [String],
}

impl<'g> Builder<'g> {
    pub fn new(g: &'g mut Graph, base: &str) -> Builder<'g> {
        Builder {
            g,
            base: base.to_string(),
            nodes: Vec::new(),
            table_qnn: &[],
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

    /// `x[start..end]` along `axis`, with the bounds as attributes or inputs as the model's
    /// opset requires (inputs from opset 10).
    pub fn slice(&mut self, x: ValueId, axis: usize, start: usize, end: usize) -> ValueId {
        let (a, s, e) = (axis as i64, start as i64, end as i64);
        if self.opset() >= 10 {
            let starts = self.ints(&[s]);
            let ends = self.ints(&[e]);
            let axes = self.ints(&[a]);
            self.op("Slice", &[x, starts, ends, axes], vec![])
        } else {
            self.op(
                "Slice",
                &[x],
                vec![
                    ("starts", Attr::Ints(vec![s])),
                    ("ends", Attr::Ints(vec![e])),
                    ("axes", Attr::Ints(vec![a])),
                ],
            )
        }
    }

    /// Softmax or LogSoftmax over the last axis of a rank-`rank` value, valid at every opset.
    pub fn softmax_last(&mut self, op_type: &str, x: ValueId, rank: usize) -> ValueId {
        self.op(op_type, &[x], vec![("axis", Attr::Int(rank as i64 - 1))])
    }
}
