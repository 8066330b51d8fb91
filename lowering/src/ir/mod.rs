//! The lowering IR: a topologically ordered list of nodes over values with static shapes, the
//! constant [`tensor::Tensor`]s they may hold, typed attribute getters ([`attr`]), shape
//! arithmetic ([`shape`]) and the [`builder::Builder`] that expansions write nodes with.

pub mod attr;
pub mod builder;
pub mod quant;
pub mod shape;
pub mod tensor;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use crate::dtype::DType;
use crate::error::{invalid, Result};
use crate::ir::tensor::Tensor;
use qnnx_types::Encoding;

pub type ValueId = usize;
pub type NodeId = usize;

#[derive(Clone, Debug)]
pub struct Value {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// False until shape inference has produced `dtype` and `shape`, and for values downstream
    /// of a node whose shape could not be inferred.
    pub known: bool,
    pub konst: Option<Tensor>,
    /// Stored fixed-point with this encoding (set by the `qdq` pass from the model's
    /// QuantizeLinear/DequantizeLinear nodes, or derived for constants). `dtype` stays the
    /// value's real (float) type and `konst` its real values: the IR keeps float semantics, and
    /// the plan stores the integers.
    pub quant: Option<Encoding>,
    /// The model value whose elements this value holds, if any (see [`Origin`]).
    pub origin: Option<Origin>,
}

/// Which ONNX value a value holds the elements of, and in which order: the loader's values are
/// their own origin; the layout pass's NHWC copies hold their NCHW value permuted. Calibration
/// and per-layer comparisons find a model value in a plan through it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub name: String,
    /// This value is the ONNX value transposed by `perm` (dim `i` is the ONNX value's dim
    /// `perm[i]`); `None` for the same order.
    pub perm: Option<Vec<usize>>,
}

impl Origin {
    pub fn of(name: &str) -> Origin {
        Origin {
            name: name.to_string(),
            perm: None,
        }
    }

    /// The origin of this value transposed by `perm`.
    pub fn permuted(&self, perm: &[usize]) -> Origin {
        let composed: Vec<usize> = match &self.perm {
            None => perm.to_vec(),
            Some(p) => perm.iter().map(|&i| p[i]).collect(),
        };
        let identity = composed.iter().enumerate().all(|(i, &p)| i == p);
        Origin {
            name: self.name.clone(),
            perm: (!identity).then_some(composed),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Float(f32),
    Int(i64),
    String(String),
    Tensor(Tensor),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<String>),
    /// A subgraph: an If branch, a Loop or Scan body.
    Graph(std::sync::Arc<SubGraph>),
    /// Kinds we do not lower (lists of graphs or tensors, types), and subgraphs that did not
    /// load; kept so that the attribute's presence can be reported.
    Other(&'static str),
}

/// A subgraph attribute as loaded: its own values and nodes. Its `graph.inputs` are its formal
/// inputs (a Loop or Scan body's; an If branch has none), then one placeholder per value of an
/// enclosing graph that it reads. Those outer values are explicit inputs of the node that owns
/// the attribute (after the node's own inputs), so that sorting and dead-code removal see the
/// dependency; `captures[c]` is the node input of placeholder `graph.inputs[formal + c]`.
#[derive(Clone, Debug)]
pub struct SubGraph {
    pub graph: Graph,
    /// How many of `graph.inputs` are formal inputs.
    pub formal: usize,
    /// For each capture placeholder, the index of the owning node's input it stands for.
    pub captures: Vec<usize>,
}

/// Two subgraph attributes are equal when they are the same one.
impl PartialEq for SubGraph {
    fn eq(&self, other: &SubGraph) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Attr {
    pub fn kind(&self) -> &'static str {
        match self {
            Attr::Float(_) => "float",
            Attr::Int(_) => "int",
            Attr::String(_) => "string",
            Attr::Tensor(_) => "tensor",
            Attr::Floats(_) => "floats",
            Attr::Ints(_) => "ints",
            Attr::Strings(_) => "strings",
            Attr::Graph(_) => "graph",
            Attr::Other(k) => k,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<Option<ValueId>>,
    pub attrs: BTreeMap<String, Attr>,
    /// Set by the layout pass on conv-family nodes: their 4-D data inputs and outputs are NHWC.
    pub nhwc: bool,
    /// Set by the `qdq` pass: the node runs on quantized tensors (its float inputs and outputs
    /// carry encodings; constants without one get a derived one).
    pub quantized: bool,
}

impl Node {
    pub fn new(name: impl Into<String>, op_type: impl Into<String>) -> Node {
        Node {
            name: name.into(),
            op_type: op_type.into(),
            domain: String::new(),
            inputs: vec![],
            outputs: vec![],
            attrs: BTreeMap::new(),
            nhwc: false,
            quantized: false,
        }
    }

    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    pub fn output(&self, i: usize) -> Option<ValueId> {
        self.outputs.get(i).copied().flatten()
    }

    pub fn with_attr(mut self, name: &str, a: Attr) -> Node {
        self.attrs.insert(name.to_string(), a);
        self
    }

    /// Ops that only change the shape, each lowered to one QNN Reshape.
    pub fn only_reshapes(&self) -> bool {
        matches!(
            self.op_type.as_str(),
            "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten"
        )
    }
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub values: Vec<Value>,
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Opset version per domain (`""` is the default ONNX domain).
    pub opsets: BTreeMap<String, i64>,
    /// Graph outputs the caller receives as integers (a QDQ model's raw quantized outputs, set
    /// by the `qdq` pass); any other quantized output is dequantized in the graph.
    pub quantized_outputs: Vec<ValueId>,
    names: HashSet<String>,
    node_names: HashSet<String>,
}

/// A name not in `taken`, recorded there: `hint`, else `hint_1`, `hint_2`, ... The one
/// allocator of the graph's value and node names and of the plan's tensor and op names
/// ([`crate::ops::LowerCx`]).
pub fn fresh_name(taken: &mut HashSet<String>, hint: &str) -> String {
    if taken.insert(hint.to_string()) {
        return hint.to_string();
    }
    let mut i = 1;
    loop {
        let n = format!("{hint}_{i}");
        if taken.insert(n.clone()) {
            return n;
        }
        i += 1;
    }
}

impl Graph {
    pub fn opset(&self) -> i64 {
        self.opsets.get("").copied().unwrap_or(0)
    }

    /// Adds a value whose shape is not known yet.
    pub fn add_value(&mut self, name_hint: &str) -> ValueId {
        let name = fresh_name(&mut self.names, name_hint);
        self.values.push(Value {
            name,
            dtype: DType::F32,
            shape: vec![],
            known: false,
            konst: None,
            quant: None,
            origin: None,
        });
        self.values.len() - 1
    }

    pub fn add_typed(&mut self, name_hint: &str, dtype: DType, shape: Vec<usize>) -> ValueId {
        let id = self.add_value(name_hint);
        let v = &mut self.values[id];
        v.dtype = dtype;
        v.shape = shape;
        v.known = true;
        id
    }

    pub fn add_const(&mut self, name_hint: &str, t: Tensor) -> ValueId {
        let id = self.add_typed(name_hint, t.dtype, t.shape.clone());
        self.values[id].konst = Some(t);
        id
    }

    pub fn set_const(&mut self, id: ValueId, t: Tensor) {
        let v = &mut self.values[id];
        v.dtype = t.dtype;
        v.shape = t.shape.clone();
        v.known = true;
        v.konst = Some(t);
    }

    /// A Reshape of `x` to `out`'s shape, written in full (no 0 or -1 that would read `x`'s
    /// dims), named `hint` (made unique); the caller inserts it.
    pub fn reshape_node(&mut self, hint: &str, x: ValueId, out: ValueId) -> Node {
        let s: Vec<i64> = self.shape(out).iter().map(|&d| d as i64).collect();
        let c = self.add_const(
            &format!("{hint}_shape"),
            Tensor::from_i64(vec![s.len()], &s),
        );
        let mut n = Node::new(self.unique_node_name(hint), "Reshape");
        n.inputs = vec![Some(x), Some(c)];
        n.outputs = vec![Some(out)];
        n
    }

    pub fn unique_node_name(&mut self, hint: &str) -> String {
        fresh_name(&mut self.node_names, hint)
    }

    /// Appends a node (callers re-sort when inserting mid-graph).
    pub fn push_node(&mut self, mut n: Node) -> NodeId {
        n.name = self.unique_node_name(&n.name);
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id]
    }

    pub fn konst(&self, id: ValueId) -> Option<&Tensor> {
        self.values[id].konst.as_ref()
    }

    pub fn shape(&self, id: ValueId) -> &[usize] {
        &self.values[id].shape
    }

    pub fn dtype(&self, id: ValueId) -> DType {
        self.values[id].dtype
    }

    pub fn producers(&self) -> Vec<Option<NodeId>> {
        let mut p = vec![None; self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for o in n.outputs.iter().flatten() {
                p[*o] = Some(i);
            }
        }
        p
    }

    /// Number of uses of each value by node inputs and graph outputs.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.values.len()];
        for n in &self.nodes {
            for i in n.inputs.iter().flatten() {
                c[*i] += 1;
            }
        }
        for o in &self.outputs {
            c[*o] += 1;
        }
        c
    }

    pub fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut c = vec![vec![]; self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for v in n.inputs.iter().flatten() {
                if !c[*v].contains(&i) {
                    c[*v].push(i);
                }
            }
        }
        c
    }

    pub fn is_output(&self, v: ValueId) -> bool {
        self.outputs.contains(&v)
    }

    /// Points every node input that reads `old` at `new`. Graph outputs are left alone.
    pub fn replace_uses(&mut self, old: ValueId, new: ValueId) {
        for n in &mut self.nodes {
            for i in n.inputs.iter_mut().flatten() {
                if *i == old {
                    *i = new;
                }
            }
        }
    }

    /// Removes a pass-through node whose output `out` equals its input `inp`. Returns false
    /// when that would rename a graph output or make a graph input an output, or lose the
    /// encoding of a quantized model's value: `out`'s readers then read `inp`, which takes
    /// `out`'s encoding when it has none (a no-op Cast between an op and its QuantizeLinear, as
    /// the exporter writes after Softmax) and must not have another one.
    pub fn bypass(&mut self, node: NodeId, inp: ValueId, out: ValueId) -> bool {
        if self.is_output(out) {
            let producer = self.producers()[inp];
            let Some(p) = producer else { return false };
            if self.is_output(inp) {
                return false;
            }
            self.replace_uses(inp, out);
            for o in self.nodes[p].outputs.iter_mut().flatten() {
                if *o == inp {
                    *o = out;
                }
            }
            // The producer now writes `out`: it is stored as `inp` was.
            if self.values[out].quant.is_none() {
                self.values[out].quant = self.values[inp].quant.clone();
            }
        } else {
            match (&self.values[inp].quant, &self.values[out].quant) {
                (None, Some(e)) => {
                    // A graph input or a constant is stored as the caller or the model gives it.
                    let produced = self.nodes.iter().any(|n| n.outputs.contains(&Some(inp)));
                    if !produced || self.is_output(inp) {
                        return false;
                    }
                    self.values[inp].quant = Some(e.clone());
                }
                (Some(a), Some(b)) if a != b => return false,
                _ => {}
            }
            self.replace_uses(out, inp);
        }
        self.nodes.remove(node);
        true
    }

    /// Orders nodes so that every value is produced before it is read. Fails on cycles.
    pub fn toposort(&mut self) -> Result<()> {
        let producers = self.producers();
        let n = self.nodes.len();
        let mut indeg = vec![0usize; n];
        let mut users: Vec<Vec<NodeId>> = vec![vec![]; n];
        for (i, node) in self.nodes.iter().enumerate() {
            for v in node.inputs.iter().flatten() {
                if let Some(p) = producers[*v] {
                    indeg[i] += 1;
                    users[p].push(i);
                }
            }
        }
        // Stable: ready nodes are taken in their original order.
        let mut ready: std::collections::BTreeSet<NodeId> =
            (0..n).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &u in &users[i] {
                indeg[u] -= 1;
                if indeg[u] == 0 {
                    ready.insert(u);
                }
            }
        }
        if order.len() != n {
            let stuck: Vec<&str> = (0..n)
                .filter(|i| indeg[*i] > 0)
                .take(5)
                .map(|i| self.nodes[i].name.as_str())
                .collect();
            return Err(invalid(format!(
                "graph has a cycle through node(s) {}",
                stuck.join(", ")
            )));
        }
        let mut old: Vec<Option<Node>> = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(Some)
            .collect();
        self.nodes = order.into_iter().map(|i| old[i].take().unwrap()).collect();
        Ok(())
    }

    /// Human-readable listing used by pass tests: one line per node, then the outputs.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        let name = |v: &Option<ValueId>| match v {
            Some(v) => self.values[*v].name.clone(),
            None => "_".to_string(),
        };
        for n in &self.nodes {
            let ins: Vec<String> = n.inputs.iter().map(name).collect();
            let outs: Vec<String> = n
                .outputs
                .iter()
                .map(|o| match o {
                    Some(v) => {
                        let val = &self.values[*v];
                        format!("{}:{}{:?}", val.name, val.dtype, val.shape)
                    }
                    None => "_".to_string(),
                })
                .collect();
            let mut attrs = String::new();
            for (k, a) in &n.attrs {
                let _ = write!(attrs, " {k}={}", fmt_attr(a));
            }
            let nhwc = if n.nhwc { " nhwc" } else { "" };
            let _ = writeln!(
                s,
                "{}({}){}{} -> {}",
                n.op_type,
                ins.join(", "),
                attrs,
                nhwc,
                outs.join(", ")
            );
        }
        let outs: Vec<String> = self
            .outputs
            .iter()
            .map(|v| self.values[*v].name.clone())
            .collect();
        let _ = writeln!(s, "outputs: {}", outs.join(", "));
        s
    }

    pub fn name_map(&self) -> HashMap<&str, ValueId> {
        self.values
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.as_str(), i))
            .collect()
    }

    /// Registers names used by values created outside `add_value` (the loader).
    pub(crate) fn reserve_names(&mut self) {
        for v in &self.values {
            self.names.insert(v.name.clone());
        }
        for n in &self.nodes {
            self.node_names.insert(n.name.clone());
        }
    }

    pub(crate) fn push_value_raw(&mut self, v: Value) -> ValueId {
        self.values.push(v);
        self.values.len() - 1
    }
}

fn fmt_attr(a: &Attr) -> String {
    match a {
        Attr::Float(f) => format!("{f}"),
        Attr::Int(i) => format!("{i}"),
        Attr::String(s) => format!("{s:?}"),
        Attr::Tensor(t) => format!("{t:?}"),
        Attr::Floats(v) => format!("{v:?}"),
        Attr::Ints(v) => format!("{v:?}"),
        Attr::Strings(v) => format!("{v:?}"),
        Attr::Graph(sg) => format!("<graph of {} nodes>", sg.graph.nodes.len()),
        Attr::Other(k) => format!("<{k}>"),
    }
}
