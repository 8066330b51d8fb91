//! Writing a quantized (QDQ) ONNX model from a float one: the ranges its activations take on
//! calibration data (measured by the caller: `qnnx quantize` runs the float graph on the HTP
//! with its intermediates as outputs) and a [`Scheme`] become QuantizeLinear/DequantizeLinear
//! pairs on the edges of the ops that run quantized, and the weights of weighted ops become
//! integer initializers behind a DequantizeLinear. The result is a standard QDQ model (ONNX
//! Runtime and others run it too) that `passes::qdq` lowers to fixed-point tensors.
//!
//! Which ops run quantized, which input is a weight and along which axis its channels lie come
//! from each op's registry entry ([`crate::ops::Quant`]); QNN's fixed encodings (16-bit
//! Sigmoid/Tanh) and its symmetric 16-bit MatMul operand are written as such, so that the
//! lowering needs no Convert for them. The model is edited at the protobuf wire level
//! ([`wire`]): everything else in it is kept byte for byte.

pub mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use prost::Message;
use qnnx_types::Encoding;

use crate::dtype::{DType, OnnxCode};
use crate::error::{invalid, LowerError, Result};
use crate::frontend::load::Model;
use crate::ir::quant::{derive_per_tensor, derive_symmetric, quantize_tensor};
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::onnx;
use crate::ops::{Quant, Weighted};

/// Activation and weight types of a quantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// uint8 activations, int8 weights: runs on every HTP, v68 included.
    A8W8,
    /// uint16 activations, int8 weights.
    A16W8,
    /// uint16 activations, int16 weights (Conv, MatMul and FullyConnected need v73+).
    A16W16,
    /// uint16 activations, int4 weights (ONNX INT4 initializers, opset 21): half the weight
    /// bytes of 16a8w, for models whose size or bandwidth matters more than the last dB.
    A16W4,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [Scheme::A8W8, Scheme::A16W8, Scheme::A16W16, Scheme::A16W4];

    /// The one spelling (`8a8w`), as the CLI and the Python options take it.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::A8W8 => "8a8w",
            Scheme::A16W8 => "16a8w",
            Scheme::A16W16 => "16a16w",
            Scheme::A16W4 => "16a4w",
        }
    }

    pub fn from_name(s: &str) -> Option<Scheme> {
        Scheme::ALL.into_iter().find(|x| x.name() == s)
    }

    pub fn activation(self) -> DType {
        match self {
            Scheme::A8W8 => DType::U8,
            Scheme::A16W8 | Scheme::A16W16 | Scheme::A16W4 => DType::U16,
        }
    }

    pub fn weight(self) -> DType {
        match self {
            Scheme::A8W8 | Scheme::A16W8 => DType::I8,
            Scheme::A16W16 => DType::I16,
            Scheme::A16W4 => DType::I4,
        }
    }
}

/// The range a tensor took over the calibration data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub lo: f32,
    pub hi: f32,
}

/// What a `--keep` entry asks for its nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Compute in float (an fp16 island; impossible on v68).
    Float,
    /// 16-bit activations whatever the scheme.
    Bits16,
}

#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    pub scheme: Scheme,
    /// Weights per output channel (the default) or per tensor.
    pub per_channel: bool,
    /// Node names or op types, and what to keep them at.
    pub keep: Vec<(String, Keep)>,
}

/// What [`write_qdq`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Activation tensors given a QuantizeLinear/DequantizeLinear pair.
    pub activations: usize,
    /// Weights stored as integers.
    pub weights: usize,
    /// Edges also read at the other activation width, through a requantize.
    pub requantized: usize,
    /// Nodes left in float, with why.
    pub float_nodes: Vec<(String, String)>,
    /// `--keep` entries that matched no node.
    pub unmatched_keep: Vec<String>,
}

/// The encoding of one activation edge.
fn activation_encoding(r: Range, storage: DType) -> Encoding {
    let lo = r.lo.min(0.0) as f64;
    let hi = r.hi.max(0.0) as f64;
    let t = Tensor::from_f64_as(DType::F64, vec![2], &[lo, hi]);
    derive_per_tensor(&t, storage)
}

/// The symmetric u16 encoding QNN requires of a 16-bit MatMul's second operand.
fn symmetric_u16(r: Range) -> Encoding {
    let amax = (r.lo.abs().max(r.hi.abs()) as f64).max(1e-12);
    Encoding::per_tensor(DType::U16, (amax / 32767.0) as f32, -32768)
}

fn scalar_or_vec(dtype: DType, v: &[i64]) -> Tensor {
    if v.len() == 1 {
        Tensor::from_i64_as(dtype, vec![], v)
    } else {
        Tensor::from_i64_as(dtype, vec![v.len()], v)
    }
}

fn tensor_proto(name: &str, t: &Tensor) -> onnx::TensorProto {
    onnx::TensorProto {
        name: Some(name.to_string()),
        dims: t.shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype.to_onnx()),
        raw_data: Some(t.onnx_raw_data()),
        ..Default::default()
    }
}

/// The scale and zero point initializers of `enc`, named `{base}_scale` / `{base}_zero_point`.
fn encoding_protos(base: &str, enc: &Encoding) -> [onnx::TensorProto; 2] {
    let scales: Vec<f64> = enc.scales.iter().map(|&s| s as f64).collect();
    let scale = if scales.len() == 1 {
        Tensor::from_f64_as(DType::F32, vec![], &scales)
    } else {
        Tensor::from_f64_as(DType::F32, vec![scales.len()], &scales)
    };
    let zps: Vec<i64> = enc.offsets.iter().map(|&o| -(o as i64)).collect();
    [
        tensor_proto(&format!("{base}_scale"), &scale),
        tensor_proto(
            &format!("{base}_zero_point"),
            &scalar_or_vec(enc.storage, &zps),
        ),
    ]
}

fn qdq_node(
    op: &str,
    base: &str,
    input: &str,
    output: &str,
    domain: &str,
    axis: Option<usize>,
) -> onnx::NodeProto {
    onnx::NodeProto {
        input: vec![
            input.to_string(),
            format!("{base}_scale"),
            format!("{base}_zero_point"),
        ],
        output: vec![output.to_string()],
        name: Some(format!("{base}_{op}")),
        op_type: Some(op.to_string()),
        domain: (!domain.is_empty()).then(|| domain.to_string()),
        attribute: axis
            .map(|a| onnx::AttributeProto {
                name: Some("axis".into()),
                i: Some(a as i64),
                r#type: Some(2),
                ..Default::default()
            })
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

/// The second encodings of edges read at another activation width than they are stored at.
#[derive(Default)]
struct Requant {
    /// (node index in the graph, input) -> the requantized value it reads instead.
    readers: HashMap<(usize, String), String>,
    /// Requantized value -> (the edge it is made from, its encoding).
    pairs: BTreeMap<String, (String, Encoding)>,
}

/// How one node of the model runs after quantization.
struct Plan<'a> {
    node: &'a onnx::NodeProto,
    quantized: bool,
    bits16: bool,
}

fn keep_of(opts: &QuantizeOptions, n: &onnx::NodeProto, used: &mut HashSet<usize>) -> Option<Keep> {
    let name = n.name.as_deref().unwrap_or("");
    let op = n.op_type.as_deref().unwrap_or("");
    let mut keep = None;
    for (i, (pat, k)) in opts.keep.iter().enumerate() {
        if pat == name || pat == op {
            used.insert(i);
            // Float wins over 16-bit when both match.
            if keep != Some(Keep::Float) {
                keep = Some(*k);
            }
        }
    }
    keep
}

/// The QDQ model of `onnx` (whose loaded form is `model`, for its constants) with `ranges` for
/// its activations. Tensors without a range (never computed on calibration data) stay float, and
/// so do the ops they touch: the report lists them.
pub fn write_qdq(
    onnx_bytes: &[u8],
    model: &Model,
    input_shapes: &BTreeMap<String, Vec<usize>>,
    ranges: &HashMap<String, Range>,
    opts: &QuantizeOptions,
) -> Result<(Vec<u8>, Report)> {
    let lower_opts = crate::LowerOptions {
        input_shapes: input_shapes.clone(),
        ..Default::default()
    };
    let dtypes = crate::passes::value_dtypes(model, &lower_opts)?;
    let proto = onnx::ModelProto::decode(onnx_bytes)
        .map_err(|e| invalid(format!("the model does not parse as ONNX: {e}")))?;
    let graph = proto
        .graph
        .as_ref()
        .ok_or_else(|| invalid("the model has no graph"))?;
    let opset = proto
        .opset_import
        .iter()
        .find(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
        .and_then(|o| o.version)
        .unwrap_or(1);
    if opset < 13 {
        return Err(invalid(format!(
            "the model is opset {opset}; per-channel QuantizeLinear/DequantizeLinear need opset \
             13 or newer: export it again at a newer opset"
        )));
    }
    let names = model.graph.name_map();
    let konst = |name: &str| names.get(name).and_then(|&v| model.graph.konst(v));
    // Constants folded from a Constant node's value are not activations; the folded results of
    // shape arithmetic are not either (the inference sweep folds them, so they have no range).
    let is_float_act = |name: &str| {
        dtypes
            .get(name)
            .is_some_and(|&(d, folded)| d.is_float() && !folded)
    };
    let mut report = Report::default();
    let mut used_keep = HashSet::new();
    let mut plans: Vec<Plan> = Vec::new();
    for n in &graph.node {
        let op = n.op_type.as_deref().unwrap_or("");
        let foreign = !matches!(n.domain.as_deref(), None | Some("") | Some("ai.onnx"));
        let def = (!foreign).then(|| crate::ops::def(op)).flatten();
        let keep = keep_of(opts, n, &mut used_keep);
        let name = n.name.clone().unwrap_or_else(|| op.to_string());
        let why = match (def.map(|d| d.quant), keep) {
            (_, Some(Keep::Float)) => Some("kept in float".to_string()),
            (None, _) => Some(format!("{op} is not an op qnnx lowers")),
            (Some(Quant::Float), _) if op != "Constant" => {
                Some(format!("{op} has no quantized lowering"))
            }
            (Some(Quant::Float), _) => None,
            (Some(Quant::FromInt), _) if n.input.iter().any(|t| is_float_act(t)) => {
                Some(format!("{op} of a float value has no quantized lowering"))
            }
            _ => {
                let missing: Vec<&str> = n
                    .input
                    .iter()
                    .chain(&n.output)
                    .filter(|t| is_float_act(t) && !ranges.contains_key(t.as_str()))
                    .map(String::as_str)
                    .collect();
                (!missing.is_empty())
                    .then(|| format!("no calibration range for {}", missing.join(", ")))
            }
        };
        let quantized = why.is_none() && !matches!(def.map(|d| d.quant), Some(Quant::Float) | None);
        if let Some(w) = why.filter(|_| op != "Constant") {
            report.float_nodes.push((name, w));
        }
        plans.push(Plan {
            node: n,
            quantized,
            bits16: keep == Some(Keep::Bits16) || opts.scheme.activation() == DType::U16,
        });
    }
    report.unmatched_keep = opts
        .keep
        .iter()
        .enumerate()
        .filter(|(i, _)| !used_keep.contains(i))
        .map(|(_, (p, _))| p.clone())
        .collect();
    // Activation edges: every float input and output of a quantized node. An edge is stored as
    // its producer computes it (16 bits when the producer runs at 16); one that no quantized
    // node produces (a graph input, a float island's output) at 16 bits if any quantized
    // reader is. A reader at the other precision reads it through a requantize (below).
    let producer_bits: HashMap<&str, bool> = plans
        .iter()
        .filter(|p| p.quantized)
        .flat_map(|p| p.node.output.iter().map(move |o| (o.as_str(), p.bits16)))
        .collect();
    let mut edges: BTreeMap<String, bool> = BTreeMap::new();
    for p in plans.iter().filter(|p| p.quantized) {
        for t in p.node.input.iter().chain(&p.node.output) {
            if is_float_act(t) && ranges.contains_key(t.as_str()) {
                let e = edges.entry(t.clone()).or_insert(false);
                *e = match producer_bits.get(t.as_str()) {
                    Some(&b) => b,
                    None => *e || p.bits16,
                };
            }
        }
    }
    // Weights: constant weight inputs of quantized weighted nodes, read by nothing else.
    let mut readers: HashMap<&str, usize> = HashMap::new();
    for n in &graph.node {
        for i in &n.input {
            *readers.entry(i.as_str()).or_default() += 1;
        }
    }
    let mut weights: BTreeMap<String, Encoding> = BTreeMap::new();
    for p in plans.iter().filter(|p| p.quantized) {
        let op = p.node.op_type.as_deref().unwrap_or("");
        let Some(Quant::Weighted(w)) = crate::ops::def(op).map(|d| d.quant) else {
            continue;
        };
        let Some(wname) = p.node.input.get(w.weight).filter(|s| !s.is_empty()) else {
            continue;
        };
        let Some(t) = konst(wname).filter(|t| t.dtype.is_float()) else {
            continue;
        };
        if readers.get(wname.as_str()) != Some(&1) || weights.contains_key(wname) {
            continue;
        }
        let enc = weight_encoding(&w, &node_of(p.node), t, opts);
        weights.insert(wname.clone(), enc);
    }
    // Encodings of the edges; QNN's fixed ones where it has them.
    let mut encodings: BTreeMap<String, Encoding> = BTreeMap::new();
    for (t, &bits16) in &edges {
        let storage = if bits16 { DType::U16 } else { DType::U8 };
        encodings.insert(t.clone(), activation_encoding(ranges[t.as_str()], storage));
    }
    for p in plans.iter().filter(|p| p.quantized) {
        let op = p.node.op_type.as_deref().unwrap_or("");
        match crate::ops::def(op).map(|d| d.quant) {
            Some(Quant::Fixed(f)) => {
                for o in &p.node.output {
                    if let Some(e) = encodings.get_mut(o) {
                        if let Some((s, off)) = f(e.storage) {
                            *e = Encoding::per_tensor(e.storage, s, off);
                        }
                    }
                }
            }
            Some(Quant::Weighted(w)) if w.symmetric_u16 => {
                if let Some(i) = p.node.input.get(w.weight) {
                    if let Some(e) = encodings.get_mut(i) {
                        if e.storage == DType::U16 && p.bits16 {
                            *e = symmetric_u16(ranges[i.as_str()]);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // Requantizes: a quantized reader whose activations have the other width than the edge
    // it reads (a 16-bit island in an 8-bit graph, or the 8-bit node after it) reads a second
    // QuantizeLinear/DequantizeLinear pair at its own width, which the lowering makes a QNN
    // Convert: every node sees one activation width on all its edges, as QNN's elementwise
    // ops require, and promoting one node promotes nothing else.
    let mut requant = Requant::default();
    for (idx, p) in plans.iter().enumerate().filter(|(_, p)| p.quantized) {
        let sym_input = match crate::ops::def(p.node.op_type.as_deref().unwrap_or("")) {
            Some(d) => match d.quant {
                Quant::Weighted(w) if w.symmetric_u16 => Some(w.weight),
                _ => None,
            },
            None => None,
        };
        for (k, t) in p.node.input.iter().enumerate() {
            let Some(e) = encodings.get(t) else { continue };
            let want = if p.bits16 { DType::U16 } else { DType::U8 };
            if e.storage == want {
                continue;
            }
            let enc = if want == DType::U16 && sym_input == Some(k) {
                symmetric_u16(ranges[t.as_str()])
            } else {
                activation_encoding(ranges[t.as_str()], want)
            };
            let alt = format!("{t}__as{}", want.size() * 8);
            requant.readers.insert((idx, t.clone()), alt.clone());
            requant.pairs.entry(alt).or_insert((t.clone(), enc));
        }
    }
    report.activations = encodings.len();
    report.weights = weights.len();
    report.requantized = requant.pairs.len();
    // Before opset 21 ONNX's QuantizeLinear/DequantizeLinear take neither 16-bit nor 4-bit
    // types: ONNX Runtime's com.microsoft ones do.
    let contrib = encodings
        .values()
        .chain(requant.pairs.values().map(|(_, e)| e))
        .chain(weights.values())
        .any(needs_contrib)
        && opset < 21;
    let bytes = rewrite(onnx_bytes, model, &encodings, &weights, &requant, contrib)?;
    Ok((bytes, report))
}

/// Whether an encoding's type needs opset 21's QuantizeLinear/DequantizeLinear (or ONNX
/// Runtime's com.microsoft ones before it): 16-bit activations and 4-bit weights.
fn needs_contrib(e: &Encoding) -> bool {
    e.storage == DType::U16 || e.is_sub_byte()
}

/// The IR node of a NodeProto, for the registry's per-node questions (attributes only).
fn node_of(n: &onnx::NodeProto) -> Node {
    let mut node = Node::new(
        n.name.clone().unwrap_or_default(),
        n.op_type.clone().unwrap_or_default(),
    );
    for a in &n.attribute {
        if let (Some(name), Some(i)) = (&a.name, a.i) {
            node.attrs.insert(name.clone(), crate::ir::Attr::Int(i));
        }
    }
    node
}

fn weight_encoding(w: &Weighted, node: &Node, t: &Tensor, opts: &QuantizeOptions) -> Encoding {
    if let Some(s) = w.weight_storage {
        return derive_per_tensor(t, s);
    }
    let axis = w
        .channel
        .map(|f| f(node))
        .filter(|&a| opts.per_channel && a < t.shape.len() && t.shape[a] > 1);
    derive_symmetric(t, opts.scheme.weight(), axis)
}

/// The model with the pairs and integer weights written in (see [`write_qdq`]).
fn rewrite(
    onnx_bytes: &[u8],
    model: &Model,
    encodings: &BTreeMap<String, Encoding>,
    weights: &BTreeMap<String, Encoding>,
    requant: &Requant,
    contrib: bool,
) -> Result<Vec<u8>> {
    let bad = |e: String| invalid(format!("the model's protobuf: {e}"));
    let names = model.graph.name_map();
    let graph_inputs: HashSet<&str> = model
        .graph
        .inputs
        .iter()
        .map(|&v| model.graph.values[v].name.as_str())
        .collect();
    let mut out = Vec::with_capacity(onnx_bytes.len());
    for f in wire::fields(onnx_bytes).map_err(bad)? {
        match f.number {
            7 if f.wire_type == 2 => {
                let g = rewrite_graph(
                    f.value,
                    model,
                    &names,
                    &graph_inputs,
                    encodings,
                    weights,
                    requant,
                    contrib,
                )?;
                wire::put_bytes(&mut out, 7, &g);
            }
            _ => out.extend_from_slice(f.raw),
        }
    }
    if contrib {
        let already = onnx::ModelProto::decode(onnx_bytes)
            .map(|m| {
                m.opset_import
                    .iter()
                    .any(|o| o.domain.as_deref() == Some("com.microsoft"))
            })
            .unwrap_or(false);
        if !already {
            let o = onnx::OperatorSetIdProto {
                domain: Some("com.microsoft".into()),
                version: Some(1),
            };
            wire::put_message(&mut out, 8, &o);
        }
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn rewrite_graph(
    graph: &[u8],
    model: &Model,
    names: &HashMap<&str, usize>,
    graph_inputs: &HashSet<&str>,
    encodings: &BTreeMap<String, Encoding>,
    weights: &BTreeMap<String, Encoding>,
    requant: &Requant,
    contrib: bool,
) -> Result<Vec<u8>> {
    let bad = |e: String| invalid(format!("the model's protobuf: {e}"));
    let domain = |e: &Encoding| {
        if contrib && needs_contrib(e) {
            "com.microsoft"
        } else {
            ""
        }
    };
    let base = |t: &str| format!("{t}__q");
    let mut out = Vec::with_capacity(graph.len() + 4096);
    let mut new_inits: Vec<onnx::TensorProto> = Vec::new();
    // The pairs of graph inputs, and the DequantizeLinear of each weight, come first.
    let mut head = Vec::new();
    let mut input_renames: HashMap<String, String> = HashMap::new();
    for (t, e) in encodings
        .iter()
        .filter(|(t, _)| graph_inputs.contains(t.as_str()))
    {
        let b = base(t);
        new_inits.extend(encoding_protos(&b, e));
        let (q, dq) = (format!("{t}__quantized"), format!("{t}__dequantized"));
        head.push(qdq_node("QuantizeLinear", &b, t, &q, domain(e), None));
        head.push(qdq_node("DequantizeLinear", &b, &q, &dq, domain(e), None));
        input_renames.insert(t.clone(), dq);
    }
    for (w, e) in weights {
        let real = names
            .get(w.as_str())
            .and_then(|&v| model.graph.konst(v))
            .expect("weights are constants of the model");
        let b = base(w);
        let ints = quantize_tensor(real, e);
        new_inits.push(tensor_proto(&format!("{b}_int"), &ints));
        new_inits.extend(encoding_protos(&b, e));
        let mut dq = qdq_node(
            "DequantizeLinear",
            &b,
            &format!("{b}_int"),
            w,
            domain(e),
            e.axis,
        );
        dq.input[0] = format!("{b}_int");
        head.push(dq);
    }
    let mut wrote_head = false;
    let mut requantized: HashSet<&str> = HashSet::new();
    let mut idx = 0usize;
    for f in wire::fields(graph).map_err(bad)? {
        match (f.number, f.wire_type) {
            (1, 2) => {
                let n = onnx::NodeProto::decode(f.value)
                    .map_err(|e| invalid(format!("a node does not parse: {e}")))?;
                let this = idx;
                idx += 1;
                // A Constant node that defined a weight is replaced by its DequantizeLinear.
                if n.op_type.as_deref() == Some("Constant")
                    && n.output.iter().any(|o| weights.contains_key(o))
                {
                    continue;
                }
                if !wrote_head {
                    for h in head.drain(..) {
                        wire::put_message(&mut out, 1, &h);
                    }
                    wrote_head = true;
                }
                let produced: Vec<&String> = n
                    .output
                    .iter()
                    .filter(|o| encodings.contains_key(*o))
                    .collect();
                // The requantizes this node reads, each written once, before its first reader.
                for i in &n.input {
                    let Some(alt) = requant.readers.get(&(this, i.clone())) else {
                        continue;
                    };
                    if !requantized.insert(alt.as_str()) {
                        continue;
                    }
                    let (src, e) = &requant.pairs[alt];
                    let from = input_renames.get(src).unwrap_or(src);
                    new_inits.extend(encoding_protos(alt, e));
                    let q = format!("{alt}_quantized");
                    wire::put_message(
                        &mut out,
                        1,
                        &qdq_node("QuantizeLinear", alt, from, &q, domain(e), None),
                    );
                    wire::put_message(
                        &mut out,
                        1,
                        &qdq_node("DequantizeLinear", alt, &q, alt, domain(e), None),
                    );
                }
                let renamed = wire::rename_node_io(f.value, &|is_out, s| {
                    if is_out {
                        encodings.contains_key(s).then(|| format!("{s}__float"))
                    } else {
                        requant
                            .readers
                            .get(&(this, s.to_string()))
                            .or_else(|| input_renames.get(s))
                            .cloned()
                    }
                })
                .map_err(bad)?;
                wire::put_bytes(&mut out, 1, &renamed);
                for t in produced {
                    let e = &encodings[t];
                    let b = base(t);
                    new_inits.extend(encoding_protos(&b, e));
                    let q = format!("{t}__quantized");
                    let qn = qdq_node(
                        "QuantizeLinear",
                        &b,
                        &format!("{t}__float"),
                        &q,
                        domain(e),
                        None,
                    );
                    wire::put_message(&mut out, 1, &qn);
                    wire::put_message(
                        &mut out,
                        1,
                        &qdq_node("DequantizeLinear", &b, &q, t, domain(e), None),
                    );
                }
            }
            (5, 2) => {
                let name = initializer_name(f.value);
                if name.as_deref().is_some_and(|n| weights.contains_key(n)) {
                    continue;
                }
                out.extend_from_slice(f.raw);
            }
            (11, 2) => {
                // Initializers listed as graph inputs (IR < 4) go with their initializer.
                let vi = onnx::ValueInfoProto::decode(f.value)
                    .map_err(|e| invalid(format!("a graph input does not parse: {e}")))?;
                if vi.name.as_deref().is_some_and(|n| weights.contains_key(n)) {
                    continue;
                }
                out.extend_from_slice(f.raw);
            }
            _ => out.extend_from_slice(f.raw),
        }
    }
    for h in head.drain(..) {
        wire::put_message(&mut out, 1, &h);
    }
    let mut seen = BTreeSet::new();
    for t in new_inits {
        if seen.insert(t.name.clone()) {
            wire::put_message(&mut out, 5, &t);
        }
    }
    Ok(out)
}

fn initializer_name(t: &[u8]) -> Option<String> {
    wire::fields(t)
        .ok()?
        .into_iter()
        .find(|f| f.number == 8 && f.wire_type == 2)
        .map(|f| String::from_utf8_lossy(f.value).into_owned())
}

/// An error for the caller's options (an unknown scheme name...).
pub fn options_error(msg: impl Into<String>) -> LowerError {
    invalid(msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{rand_f32, ModelBuilder};

    fn model() -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .init("w", Tensor::from_f32(vec![3, 2, 1, 1], &rand_f32(1, 6)))
            .node("Conv", &["x", "w"], &["c"], &[])
            .node("Sigmoid", &["c"], &["s"], &[])
            .node("Relu", &["s"], &["y"], &[])
            .output("y")
    }

    fn ranges() -> HashMap<String, Range> {
        ["x", "c", "s", "y"]
            .iter()
            .map(|n| (n.to_string(), Range { lo: -2.0, hi: 3.0 }))
            .collect()
    }

    fn write(scheme: Scheme, keep: Vec<(String, Keep)>) -> (onnx::ModelProto, Report) {
        let b = model();
        let opts = QuantizeOptions {
            scheme,
            per_channel: true,
            keep,
        };
        let (bytes, r) =
            write_qdq(&b.bytes(), &b.load(), &BTreeMap::new(), &ranges(), &opts).unwrap();
        (onnx::ModelProto::decode(&bytes[..]).unwrap(), r)
    }

    #[test]
    fn every_edge_gets_a_pair_and_the_weight_int8_per_channel() {
        let (m, r) = write(Scheme::A8W8, vec![]);
        assert_eq!((r.activations, r.weights), (4, 1), "{r:?}");
        let g = m.graph.unwrap();
        let ops: Vec<&str> = g
            .node
            .iter()
            .map(|n| n.op_type.as_deref().unwrap())
            .collect();
        assert_eq!(ops.iter().filter(|o| **o == "QuantizeLinear").count(), 4);
        assert_eq!(ops.iter().filter(|o| **o == "DequantizeLinear").count(), 5);
        let w = g
            .initializer
            .iter()
            .find(|t| t.name.as_deref() == Some("w__q_int"))
            .unwrap();
        assert_eq!(w.data_type, Some(DType::I8.to_onnx()));
        assert!(
            !g.initializer.iter().any(|t| t.name.as_deref() == Some("w")),
            "float weight gone"
        );
        let dq = g
            .node
            .iter()
            .find(|n| n.output == vec!["w".to_string()])
            .unwrap();
        assert_eq!(
            dq.attribute[0].i,
            Some(0),
            "per channel along Conv's output channels"
        );
        // It lowers to a fully quantized plan.
        let model = crate::Model::from_proto(
            &onnx::ModelProto {
                graph: Some(g),
                ..m
            },
            None,
        )
        .unwrap();
        let plan = crate::lower(model, &crate::LowerOptions::default()).unwrap();
        let float_ops: Vec<&str> = plan
            .ops
            .iter()
            .filter(|o| !matches!(o.type_name, "Quantize" | "Dequantize"))
            .filter(|o| o.outputs.iter().any(|&t| plan.tensors[t].quant.is_none()))
            .map(|o| o.type_name)
            .collect();
        assert!(float_ops.is_empty(), "{float_ops:?}\n{}", plan.dump());
    }

    #[test]
    fn sixteen_bits_before_opset_21_use_the_contrib_ops_and_qnns_fixed_encodings() {
        let (m, _) = write(Scheme::A16W8, vec![]);
        assert!(m
            .opset_import
            .iter()
            .any(|o| o.domain.as_deref() == Some("com.microsoft")));
        let g = m.graph.unwrap();
        let q = g
            .node
            .iter()
            .find(|n| n.op_type.as_deref() == Some("QuantizeLinear") && n.input[0] == "s__float")
            .unwrap();
        assert_eq!(q.domain.as_deref(), Some("com.microsoft"));
        let scale = g
            .initializer
            .iter()
            .find(|t| t.name.as_deref() == Some("s__q_scale"))
            .unwrap();
        let v = f32::from_le_bytes(scale.raw_data.as_ref().unwrap()[..4].try_into().unwrap());
        assert_eq!(v, 1.0 / 65536.0, "16-bit Sigmoid's fixed output scale");
    }

    #[test]
    fn four_bit_weights_are_packed_int4_behind_a_contrib_dequantize_before_opset_21() {
        let (m, r) = write(Scheme::A16W4, vec![]);
        assert!(r.weights >= 1, "{r:?}");
        let g = m.graph.clone().unwrap();
        let w = g
            .initializer
            .iter()
            .find(|t| t.data_type == Some(DType::I4.to_onnx()))
            .expect("an INT4 weight");
        let n: i64 = w.dims.iter().product();
        assert_eq!(
            w.raw_data.as_ref().unwrap().len() as i64,
            (n + 1) / 2,
            "packed"
        );
        let name = w.name.clone().unwrap();
        let dq = g.node.iter().find(|n| n.input[0] == name).unwrap();
        assert_eq!(dq.domain.as_deref(), Some("com.microsoft"));
        // The lowering reads it back as 4-bit fixed point.
        let model = crate::Model::from_proto(&m, None).unwrap();
        let plan = crate::lower(model, &crate::LowerOptions::default()).unwrap();
        assert!(
            plan.tensors.iter().any(|t| t.dtype == DType::I4),
            "{}",
            plan.dump()
        );
    }

    #[test]
    fn a_16_bit_node_in_an_8_bit_graph_reads_and_is_read_through_requantizes() {
        let (m, r) = write(Scheme::A8W8, vec![("Sigmoid".into(), Keep::Bits16)]);
        // c (Conv's output, 8 bits) is read by the 16-bit Sigmoid as c__as16; s (the Sigmoid's
        // 16-bit output) by the 8-bit Relu as s__as8. Nothing else changes width.
        assert_eq!(r.requantized, 2, "{r:?}");
        let g = m.graph.clone().unwrap();
        let reads = |op: &str| {
            g.node
                .iter()
                .find(|n| n.op_type.as_deref() == Some(op))
                .unwrap()
                .input[0]
                .clone()
        };
        assert_eq!(reads("Sigmoid"), "c__as16");
        assert_eq!(reads("Relu"), "s__as8");
        let model = crate::Model::from_proto(&m, None).unwrap();
        let plan = crate::lower(model, &crate::LowerOptions::default()).unwrap();
        let storage = |op: &str| {
            let o = plan.ops.iter().find(|o| o.type_name == op).unwrap();
            let t = |i: usize| plan.tensors[i].quant.as_ref().map(|q| q.storage);
            (t(o.inputs[0]), t(o.outputs[0]))
        };
        assert_eq!(
            storage("Sigmoid"),
            (Some(DType::U16), Some(DType::U16)),
            "{}",
            plan.dump()
        );
        assert_eq!(
            storage("Relu"),
            (Some(DType::U8), Some(DType::U8)),
            "{}",
            plan.dump()
        );
        assert_eq!(storage("Conv2d").1, Some(DType::U8), "{}", plan.dump());
        let converts = plan.op_types().iter().filter(|t| **t == "Convert").count();
        assert_eq!(converts, 2, "{}", plan.dump());
    }

    #[test]
    fn kept_nodes_stay_float_and_unknown_names_are_reported() {
        let (_, r) = write(
            Scheme::A8W8,
            vec![
                ("Sigmoid".into(), Keep::Float),
                ("nope".into(), Keep::Bits16),
            ],
        );
        assert_eq!(r.float_nodes.len(), 1, "{r:?}");
        assert_eq!(r.unmatched_keep, vec!["nope".to_string()]);
    }
}
