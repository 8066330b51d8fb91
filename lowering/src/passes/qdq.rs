//! Quantized (QDQ) models: the model's QuantizeLinear/DequantizeLinear nodes become encodings on
//! the values between ops ([`absorb`]), and every node is then settled as running on quantized
//! tensors or in float ([`settle`]).
//!
//! The IR keeps float semantics throughout: a quantized value keeps its real dtype (f32) and,
//! for a constant, its real values; [`Value::quant`](crate::ir::Value) says how the plan stores
//! it. So shape inference, folding and the fusions see the float graph the QDQ model describes,
//! and the rules of ops that run quantized are their float rules (`LowerCx` stores what they
//! emit fixed-point).
//!
//! [`absorb`] (right after the first inference sweep):
//! - `DequantizeLinear(constant)` becomes the dequantized constant with the DequantizeLinear's
//!   encoding: a quantized op stores the model's integers, a float op reads the reals.
//! - `QuantizeLinear(x) -> DequantizeLinear` with one constant encoding makes `x` quantized and
//!   the readers of the DequantizeLinear read `x`. A graph input so quantized is converted in
//!   the graph (QNN `Quantize`) unless `quantized_io`; a value that already has another
//!   encoding gets a QNN `Convert`; a graph output that is a DequantizeLinear's is dequantized
//!   in the graph.
//! - An integer graph input read by a DequantizeLinear, and a QuantizeLinear that writes a graph
//!   output, are raw quantized I/O: the caller passes and receives the integers.
//!
//! [`settle`] (after the layout pass) decides per node from its registry entry's
//! [`Quant`]: an op that runs quantized has every float input and output encoded (a
//! data-moving op's output takes its input's encoding; QNN's fixed encodings are applied; the
//! weights and the int32 bias of a weighted op are derived when the model gives none); any
//! other node touching quantized values becomes a float island with QNN `Dequantize` before and
//! `Quantize` after it.

use qnnx_types::Encoding;

use crate::dtype::DType;
use crate::error::LowerError;
use crate::ir::quant::{dequantize_tensor, derive_per_tensor, derive_symmetric};
use crate::ir::tensor::Tensor;
use crate::ir::{Graph, Node, ValueId};
use crate::ops::quant::{is_internal, node_encoding, DEQUANTIZE, QUANTIZE, REQUANTIZE};
use crate::ops::{Quant, Weighted};

/// Values already given an encoding by [`encoded_as`]: (source, encoding, encoded value).
type Encoded = Vec<(ValueId, Encoding, ValueId)>;

fn conversion(g: &mut Graph, op_type: &str, from: ValueId, to: ValueId) -> Node {
    let hint = format!(
        "{}_{}",
        g.value(to).name,
        op_type.trim_start_matches("qnnx.")
    );
    let mut n = Node::new(g.unique_node_name(&hint), op_type);
    n.inputs = vec![Some(from)];
    n.outputs = vec![Some(to)];
    n
}

/// A new value with `v`'s dtype and shape.
fn like(g: &mut Graph, v: ValueId, suffix: &str) -> ValueId {
    let (name, dt, shape) = {
        let x = g.value(v);
        (format!("{}{suffix}", x.name), x.dtype, x.shape.clone())
    };
    g.add_typed(&name, dt, shape)
}

/// The value holding `a` stored with `enc`: `a` itself when it can take the encoding, else a
/// converted copy (made once per encoding).
fn encoded_as(
    g: &mut Graph,
    a: ValueId,
    enc: &Encoding,
    quantized_io: bool,
    added: &mut Vec<Node>,
    cache: &mut Encoded,
) -> ValueId {
    if let Some((_, _, v)) = cache.iter().find(|(s, e, _)| *s == a && e == enc) {
        return *v;
    }
    let v = if let Some(t) = g.konst(a).cloned() {
        let name = format!("{}_q", g.value(a).name);
        let v = g.add_const(&name, t);
        g.values[v].quant = Some(enc.clone());
        v
    } else if let Some(p) = float_output_producer(g, a) {
        // A float graph output that the model also quantizes for a reader (the pooled features
        // a classifier reads, as PT2E exports them): its producer writes the quantized value and
        // the caller's copy is dequantized. Left float, the producer would be a float island,
        // which a v68 HTP refuses.
        let v = like(g, a, "_q");
        g.values[v].quant = Some(enc.clone());
        for o in g.nodes[p].outputs.iter_mut() {
            if *o == Some(a) {
                *o = Some(v);
            }
        }
        let d = conversion(g, DEQUANTIZE, v, a);
        added.push(d);
        v
    } else {
        let boundary = (g.inputs.contains(&a) && !quantized_io) || g.is_output(a);
        if g.values[a].quant.is_none() && !boundary {
            g.values[a].quant = Some(enc.clone());
            a
        } else {
            let v = like(g, a, "_q");
            g.values[v].quant = Some(enc.clone());
            let op = if g.values[a].quant.is_some() {
                REQUANTIZE
            } else {
                QUANTIZE
            };
            let n = conversion(g, op, a, v);
            added.push(n);
            v
        }
    };
    cache.push((a, enc.clone(), v));
    v
}

/// The node that computes `a` when `a` is a float graph output (not an input, no encoding).
fn float_output_producer(g: &Graph, a: ValueId) -> Option<usize> {
    if !g.is_output(a) || g.inputs.contains(&a) || g.values[a].quant.is_some() {
        return None;
    }
    g.nodes.iter().position(|n| n.outputs.contains(&Some(a)))
}

/// Makes `v` (a node's output, not graph I/O) the graph output `out` in its place, under
/// `out`'s name, so that the caller's output keeps its name.
fn take_output(g: &mut Graph, v: ValueId, out: ValueId) -> bool {
    let produced = g.nodes.iter().any(|n| n.outputs.contains(&Some(v)));
    if !produced || g.is_output(v) || g.inputs.contains(&v) {
        return false;
    }
    let name = std::mem::take(&mut g.values[out].name);
    g.values[out].name = std::mem::replace(&mut g.values[v].name, name);
    for o in g.outputs.iter_mut() {
        if *o == out {
            *o = v;
        }
    }
    true
}

/// Turns the model's QuantizeLinear/DequantizeLinear nodes into encodings (see the module
/// docs). Returns the errors of nodes whose encoding QNN cannot express; nodes it leaves are
/// refused by their rules.
// Node indices address `dead` and `g.nodes` while the graph is edited.
#[allow(clippy::needless_range_loop)]
pub fn absorb(g: &mut Graph, quantized_io: bool) -> Vec<LowerError> {
    let mut errors = Vec::new();
    if !g
        .nodes
        .iter()
        .any(|n| n.op_type == "DequantizeLinear" || n.op_type == "QuantizeLinear")
    {
        return errors;
    }
    let mut dead = vec![false; g.nodes.len()];
    // Constants first: their encodings are per tensor or per channel.
    for idx in 0..g.nodes.len() {
        let n = &g.nodes[idx];
        if n.op_type != "DequantizeLinear" {
            continue;
        }
        let (Some(x), Some(y)) = (n.input(0), n.output(0)) else {
            continue;
        };
        let Some(t) = g.konst(x).cloned() else {
            continue;
        };
        if !g.values[y].known {
            continue;
        }
        match node_encoding(g, n, t.dtype, &t.shape) {
            Ok(enc) => {
                let real = dequantize_tensor(&t, &enc, g.values[y].dtype);
                g.set_const(y, real);
                g.values[y].quant = Some(enc);
                dead[idx] = true;
            }
            Err(e) => errors.push(e),
        }
    }
    let producers = g.producers();
    let mut added = Vec::new();
    let mut cache: Encoded = Vec::new();
    for idx in 0..g.nodes.len() {
        if dead[idx] || g.nodes[idx].op_type != "DequantizeLinear" {
            continue;
        }
        let n = g.nodes[idx].clone();
        let (Some(x), Some(y)) = (n.input(0), n.output(0)) else {
            continue;
        };
        if g.konst(x).is_some() || !g.values[x].known || !g.values[y].known {
            continue;
        }
        let shape = g.values[x].shape.clone();
        // One error per QDQ edge: the QuantizeLinear before a refused DequantizeLinear goes.
        let pair = producers[x].filter(|&p| g.nodes[p].op_type == "QuantizeLinear");
        let mut refuse = |e: LowerError, dead: &mut Vec<bool>| {
            errors.push(e);
            if let Some(p) = pair {
                dead[p] = true;
            }
        };
        let enc = match node_encoding(g, &n, g.values[x].dtype, &shape) {
            Ok(e) => e,
            Err(e) => {
                refuse(e, &mut dead);
                continue;
            }
        };
        if enc.is_per_axis() {
            let e = n.err_dtype(format!(
                "'{}' is quantized per channel; QNN quantizes activations per tensor (quantize \
                 it per tensor)",
                g.value(x).name
            ));
            refuse(e, &mut dead);
            continue;
        }
        let target = match producers[x] {
            Some(p) if g.nodes[p].op_type == "QuantizeLinear" => {
                let q = g.nodes[p].clone();
                let Some(a) = q.input(0) else { continue };
                match node_encoding(g, &q, g.values[x].dtype, &shape) {
                    Ok(eq) if eq == enc => {}
                    Ok(_) => {
                        let e = n.err_op(format!(
                            "its scale and zero point differ from those of QuantizeLinear '{}' \
                             that writes its input; give both the same encoding",
                            q.name
                        ));
                        refuse(e, &mut dead);
                        continue;
                    }
                    Err(e) => {
                        refuse(e, &mut dead);
                        continue;
                    }
                }
                encoded_as(g, a, &enc, quantized_io, &mut added, &mut cache)
            }
            None if g.inputs.contains(&x) && g.values[x].dtype.is_int() => {
                // Raw quantized input: the caller passes the integers.
                let real = g.values[y].dtype;
                let v = &mut g.values[x];
                v.dtype = real;
                v.quant = Some(enc.clone());
                x
            }
            _ => continue,
        };
        if g.is_output(y) {
            // Readers in the graph read the quantized value; only the caller's copy is
            // dequantized (a classifier reading features that are also an output stayed a float
            // island, which v68 refuses).
            g.replace_uses(y, target);
            if quantized_io && take_output(g, target, y) {
                g.quantized_outputs.push(target);
            } else {
                let d = conversion(g, DEQUANTIZE, target, y);
                added.push(d);
            }
        } else {
            g.replace_uses(y, target);
        }
        dead[idx] = true;
    }
    // A QuantizeLinear writing a graph output: the caller receives the integers.
    let readers = g.consumers();
    for idx in 0..g.nodes.len() {
        if dead[idx] || g.nodes[idx].op_type != "QuantizeLinear" {
            continue;
        }
        let n = g.nodes[idx].clone();
        let (Some(a), Some(xq)) = (n.input(0), n.output(0)) else {
            continue;
        };
        let live_readers = readers[xq].iter().any(|&r| !dead[r]);
        if !g.is_output(xq) || live_readers || g.konst(a).is_some() || !g.values[xq].known {
            continue;
        }
        let enc = match node_encoding(g, &n, g.values[xq].dtype, &g.values[a].shape.clone()) {
            Ok(e) => e,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if enc.is_per_axis() {
            continue;
        }
        let target = encoded_as(g, a, &enc, quantized_io, &mut added, &mut cache);
        if take_output(g, target, xq) {
            g.quantized_outputs.push(target);
            dead[idx] = true;
        } else if let Some(k) = added.iter().rposition(|l| l.outputs == vec![Some(target)]) {
            // A converted copy: it writes the output itself, which the copy's other readers
            // then read (a QDQ pair at the output's encoding beside it: the 8-bit KV cache's
            // new rows, also read by an 8-bit MatMul below v73).
            g.values[xq].dtype = g.values[target].dtype;
            g.values[xq].quant = g.values[target].quant.clone();
            added[k].outputs = vec![Some(xq)];
            g.replace_uses(target, xq);
            for r in added.iter_mut() {
                for i in r.inputs.iter_mut().flatten() {
                    if *i == target {
                        *i = xq;
                    }
                }
            }
            for c in cache.iter_mut().filter(|c| c.2 == target) {
                c.2 = xq;
            }
            g.quantized_outputs.push(xq);
            dead[idx] = true;
        }
    }
    let mut i = 0;
    g.nodes.retain(|_| {
        i += 1;
        !dead[i - 1]
    });
    g.nodes.extend(added);
    if let Err(e) = g.toposort() {
        errors.push(e);
    }
    errors
}

/// Float inputs of `n` that are not constants, by slot.
fn float_acts(g: &Graph, n: &Node) -> Vec<(usize, ValueId)> {
    n.inputs
        .iter()
        .enumerate()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .filter(|&(_, v)| g.values[v].dtype.is_float() && g.konst(v).is_none())
        .collect()
}

fn float_outs(g: &Graph, n: &Node) -> Vec<(usize, ValueId)> {
    n.outputs
        .iter()
        .enumerate()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .filter(|&(_, v)| g.values[v].dtype.is_float())
        .collect()
}

/// Points output `slot` of node `idx` at a new value with `enc`, converted to the old value
/// (which keeps its own encoding) by a Convert.
fn requantize_output(g: &mut Graph, idx: usize, slot: usize, enc: Encoding) -> Node {
    let out = g.nodes[idx].outputs[slot].expect("slot holds a value");
    let v = like(g, out, "_fixed");
    g.values[v].quant = Some(enc);
    g.nodes[idx].outputs[slot] = Some(v);
    conversion(g, REQUANTIZE, v, out)
}

/// Sets `n`'s input `slot` to a new constant `t` with `enc` (a derived weight or bias: the
/// original constant may have other readers).
fn set_const_input(g: &mut Graph, idx: usize, slot: usize, t: Tensor, enc: Encoding, hint: &str) {
    let name = format!("{}_{hint}", g.nodes[idx].name);
    let c = g.add_const(&name, t);
    g.values[c].quant = Some(enc);
    let n = &mut g.nodes[idx];
    if n.inputs.len() <= slot {
        n.inputs.resize(slot + 1, None);
    }
    n.inputs[slot] = Some(c);
}

/// Rewrites quantized BatchNormalization `idx` to its affine form `[x, weights, bias]`
/// (`ops::norm::batch_norm::affine`), whose weights and bias [`settle_weights`] encodes. Its
/// parameters must be constants (the reals: an encoded one is read dequantized).
fn batch_norm_affine(g: &mut Graph, idx: usize) -> Result<(), LowerError> {
    use crate::ops::norm::batch_norm::{affine, AFFINE_INPUTS};
    let n = g.nodes[idx].clone();
    if n.inputs.len() == AFFINE_INPUTS {
        return Ok(());
    }
    let mut p: Vec<Vec<f64>> = Vec::with_capacity(4);
    for (k, what) in [(1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")] {
        match n.input(k).and_then(|v| g.konst(v)) {
            Some(t) => p.push(t.to_f64()),
            None => {
                return Err(n.err_op(format!(
                    "its {what} must be a constant to run quantized (a per-channel scale and \
                     offset)"
                )))
            }
        }
    }
    let eps = n.attr_f("epsilon", 1e-5)? as f64;
    let (w, b) = affine(eps, &p[0], &p[1], &p[2], &p[3]);
    let c = w.len();
    let wv = g.add_const(
        &format!("{}_affine_w", n.name),
        Tensor::from_f64_as(DType::F32, vec![c], &w),
    );
    let bv = g.add_const(
        &format!("{}_affine_b", n.name),
        Tensor::from_f64_as(DType::F32, vec![c], &b),
    );
    g.nodes[idx].inputs = vec![n.inputs[0], Some(wv), Some(bv)];
    Ok(())
}

/// The weight and bias encodings of weighted node `idx` (see [`Weighted`]); a conversion the
/// weight input needs goes to `added`.
fn settle_weights(
    g: &mut Graph,
    idx: usize,
    w: Weighted,
    added: &mut Vec<Node>,
) -> Result<(), LowerError> {
    let n = g.nodes[idx].clone();
    let Some(wv) = n.input(w.weight) else {
        return Ok(());
    };
    if let Some(e) = g.values[wv].quant.clone().filter(|_| g.konst(wv).is_none()) {
        if w.symmetric_u16 && e.storage == DType::U16 && e.offsets[0] != -32768 {
            // The same reals, symmetric around the middle code.
            let (s, o) = (e.scales[0] as f64, e.offsets[0] as f64);
            let amax = (s * o).abs().max(s * (65535.0 + o));
            let sym = Encoding::per_tensor(DType::U16, (amax / 32767.0) as f32, -32768);
            let v = like(g, wv, "_sym");
            g.values[v].quant = Some(sym);
            let c = conversion(g, REQUANTIZE, wv, v);
            added.push(c);
            g.nodes[idx].inputs[w.weight] = Some(v);
        }
    }
    let axis = w.channel.map(|f| f(&n));
    if let Some(t) = g.konst(wv).cloned() {
        match g.values[wv].quant.clone() {
            Some(e)
                if w.weight_storage.is_some_and(|s| s != e.storage)
                    || e.is_per_axis() && w.weight_storage.is_some() =>
            {
                let s = w.weight_storage.expect("checked");
                set_const_input(g, idx, w.weight, t.clone(), derive_per_tensor(&t, s), "w_q");
            }
            None => {
                let enc = match w.weight_storage {
                    Some(s) => derive_per_tensor(&t, s),
                    None => derive_symmetric(&t, DType::I8, axis),
                };
                set_const_input(g, idx, w.weight, t, enc, "w_q");
            }
            Some(e) if e.axis.is_some() && e.axis != axis => {
                return Err(n.err_dtype(format!(
                    "weight '{}' is quantized per channel along axis {}, but QNN quantizes \
                     weights along the output-channel axis{}",
                    g.value(wv).name,
                    e.axis.unwrap_or(0),
                    axis.map(|a| format!(" ({a})")).unwrap_or_default()
                )));
            }
            Some(_) => {}
        }
    }
    let Some(b) = w.bias else { return Ok(()) };
    let wv = g.nodes[idx].input(w.weight).expect("checked above");
    if g.values[wv].quant.as_ref().is_some_and(|e| e.is_blocked()) {
        // Added after the product by the op's rule (QNN's MatMul has no bias input), stored
        // like an activation.
        return Ok(());
    }
    let (Some(x), Some(we)) = (
        n.input(0).and_then(|x| g.values[x].quant.clone()),
        g.values[wv].quant.clone(),
    ) else {
        return Ok(());
    };
    let sx = x.scales[0] as f64;
    let channels = match (axis, we.axis) {
        (Some(a), _) => g.values[wv].shape[a],
        (None, _) => 1,
    };
    let real = match n.input(b).and_then(|v| g.konst(v)) {
        Some(t) => t.clone(),
        None if n.input(b).is_some() => {
            return Err(n.err_op(
                "its bias must be a constant to be quantized (int32, scale = input scale × \
                 weight scale)",
            ))
        }
        None => {
            let c = g.values[n.output(0).expect("weighted ops have an output")]
                .shape
                .get(if n.nhwc { 3 } else { 1 })
                .copied()
                .unwrap_or(channels);
            Tensor::from_f32(vec![c], &vec![0.0; c])
        }
    };
    // QNN's biases are 1-D ([Cout] of a conv, [N] of a FullyConnected, the normalized size of a
    // LayerNorm).
    let real = real.with_shape(vec![real.numel()]);
    let scales: Vec<f32> = match we.axis {
        Some(_) => we.scales.iter().map(|&s| (sx * s as f64) as f32).collect(),
        None => vec![(sx * we.scales[0] as f64) as f32],
    };
    let enc = if scales.len() > 1 && real.numel() == scales.len() {
        Encoding::per_axis(DType::I32, 0, scales)
    } else if scales.len() == 1 {
        Encoding::per_tensor(DType::I32, scales[0], 0)
    } else {
        return Err(n.err_invalid(format!(
            "bias has {} elements but the weight has {} channel scales",
            real.numel(),
            scales.len()
        )));
    };
    set_const_input(g, idx, b, real, enc, "bias_q");
    Ok(())
}

/// Settles node `idx` of [`Quant::Shared`]: every float input (constants included) and output
/// gets the one encoding, through a Convert or an encoded copy of a constant where an input has
/// another. False, leaving the node as it is, when it has no encoding to share or reads an
/// unencoded value.
fn settle_shared(
    g: &mut Graph,
    idx: usize,
    acts: &[(usize, ValueId)],
    outs: &[(usize, ValueId)],
    quantized_io: bool,
    added: &mut Vec<Node>,
    cache: &mut Encoded,
) -> bool {
    let enc = outs
        .iter()
        .chain(acts)
        .find_map(|&(_, v)| g.values[v].quant.clone());
    let Some(enc) = enc else { return false };
    if acts.iter().any(|&(_, v)| g.values[v].quant.is_none()) {
        return false;
    }
    let inputs = g.nodes[idx].inputs.clone();
    for (k, v) in inputs.iter().enumerate() {
        let Some(v) = *v else { continue };
        if !g.values[v].dtype.is_float() || g.values[v].quant.as_ref() == Some(&enc) {
            continue;
        }
        let w = encoded_as(g, v, &enc, quantized_io, added, cache);
        g.nodes[idx].inputs[k] = Some(w);
    }
    for &(_, o) in outs {
        if g.values[o].quant.is_none() {
            g.values[o].quant = Some(enc.clone());
        }
    }
    g.nodes[idx].quantized = true;
    true
}

/// Whether `n`, of [`Quant::FromInt`], casts an integer to one output with a non-negative
/// per-tensor encoding.
fn from_int(g: &Graph, n: &Node, outs: &[(usize, ValueId)]) -> bool {
    let int_in = n.input(0).is_some_and(|x| g.values[x].dtype.is_int());
    let enc = match outs {
        [(_, o)] => g.values[*o].quant.as_ref(),
        _ => None,
    };
    int_in && enc.is_some_and(|e| !e.is_per_axis() && e.offsets[0] >= 0)
}

/// Encodings flow back through data movement: a value the model leaves unencoded whose only
/// reader is a data-moving op ([`Quant::Same`]: Reshape, Gather, Transpose...) with an encoded
/// output takes that encoding, so that its producer runs quantized. The ONNX exporter writes
/// `adaptive_avg_pool2d(x, 1).flatten(1)` as ReduceMean, Reshape and Gather, with PT2E's
/// QuantizeLinear after the Gather only: the ReduceMean was a float island, which v68 refuses.
/// The reader moves or selects the value's elements, so the encoding of what it writes holds
/// every element that reaches a reader.
fn encode_back(g: &mut Graph) {
    let readers = g.consumers();
    let produced: Vec<bool> = {
        let p = g.producers();
        p.iter().map(Option::is_some).collect()
    };
    for idx in (0..g.nodes.len()).rev() {
        let n = &g.nodes[idx];
        if !matches!(
            crate::ops::def(&n.op_type).map(|d| d.quant),
            Some(Quant::Same)
        ) {
            continue;
        }
        let (acts, outs) = (float_acts(g, n), float_outs(g, n));
        let ([(_, x)], [(_, o)]) = (acts.as_slice(), outs.as_slice()) else {
            continue;
        };
        let (x, o) = (*x, *o);
        let Some(enc) = g.values[o].quant.clone() else {
            continue;
        };
        let boundary = g.is_output(x) || g.inputs.contains(&x);
        if g.values[x].quant.is_none() && !boundary && produced[x] && readers[x].len() == 1 {
            g.values[x].quant = Some(enc);
        }
    }
}

/// Decides for every node whether it runs quantized (see the module docs). A graph without
/// encodings is left as it is.
pub fn settle(g: &mut Graph, quantized_io: bool) -> Vec<LowerError> {
    let mut errors = Vec::new();
    if !g.values.iter().any(|v| v.quant.is_some()) {
        return errors;
    }
    encode_back(g);
    let mut added: Vec<Node> = Vec::new();
    // Dequantized copies shared by the float readers of a quantized value.
    let mut dequantized: Vec<(ValueId, ValueId)> = Vec::new();
    // Inputs of `Quant::Shared` nodes converted to their node's encoding.
    let mut shared: Encoded = Vec::new();
    for idx in 0..g.nodes.len() {
        let n = g.nodes[idx].clone();
        if is_internal(&n.op_type) {
            continue;
        }
        let Some(def) = crate::ops::def(&n.op_type) else {
            continue;
        };
        let mut acts = float_acts(g, &n);
        // A data-moving op reading an encoded constant (an embedding table behind its
        // DequantizeLinear, gathered by token ids) moves its integers: the table is its data.
        if matches!(def.quant, Quant::Same) {
            if let Some(&Some(v0)) = n.inputs.first() {
                let encoded_const = g.konst(v0).is_some() && g.values[v0].quant.is_some();
                if encoded_const && !acts.iter().any(|&(k, _)| k == 0) {
                    acts.insert(0, (0, v0));
                }
            }
        }
        let outs = float_outs(g, &n);
        let any_q = acts
            .iter()
            .chain(&outs)
            .any(|&(_, v)| g.values[v].quant.is_some());
        if !any_q {
            continue;
        }
        if matches!(def.quant, Quant::Shared)
            && settle_shared(g, idx, &acts, &outs, quantized_io, &mut added, &mut shared)
        {
            continue;
        }
        if matches!(def.quant, Quant::FromInt) && from_int(g, &n, &outs) {
            g.nodes[idx].quantized = true;
            continue;
        }
        let all_in = !acts.is_empty() && acts.iter().all(|&(_, v)| g.values[v].quant.is_some());
        let mut quantized = all_in && !matches!(def.quant, Quant::Float);
        if quantized {
            match def.quant {
                Quant::Same => {
                    let e0 = g.values[acts[0].1]
                        .quant
                        .clone()
                        .expect("all inputs encoded");
                    for &(slot, o) in &outs {
                        match &g.values[o].quant {
                            None => g.values[o].quant = Some(e0.clone()),
                            Some(e) if *e != e0 => {
                                let r = requantize_output(g, idx, slot, e0.clone());
                                added.push(r);
                            }
                            Some(_) => {}
                        }
                    }
                }
                Quant::Fixed(fixed) => {
                    // An output the model leaves unencoded (the Sigmoid inside SiLU, exported
                    // as `x * Sigmoid(x)` from one quantized op) takes QNN's fixed encoding of
                    // the input's storage, so that the op and its reader run quantized.
                    let storage = g.values[acts[0].1].quant.as_ref().map(|e| e.storage);
                    for &(_, o) in &outs {
                        if let (None, Some((s, off))) =
                            (&g.values[o].quant, storage.and_then(fixed))
                        {
                            let storage = storage.expect("checked");
                            g.values[o].quant = Some(Encoding::per_tensor(storage, s, off));
                        }
                    }
                    quantized = outs.iter().all(|&(_, o)| g.values[o].quant.is_some());
                    for &(slot, o) in outs.iter().filter(|_| quantized) {
                        let e = g.values[o].quant.clone().expect("checked");
                        if let Some((s, off)) = fixed(e.storage) {
                            let f = Encoding::per_tensor(e.storage, s, off);
                            if f != e {
                                let r = requantize_output(g, idx, slot, f);
                                added.push(r);
                            }
                        }
                    }
                }
                Quant::Direct | Quant::Weighted(_) => {
                    quantized = outs.iter().all(|&(_, o)| g.values[o].quant.is_some());
                }
                Quant::Float => unreachable!("excluded above"),
                // Not settled above: an input without an encoding.
                Quant::Shared => quantized = false,
                // A Cast of a float value.
                Quant::FromInt => quantized = false,
            }
        }
        if quantized {
            if n.op_type == "BatchNormalization" {
                if let Err(e) = batch_norm_affine(g, idx) {
                    errors.push(e);
                    continue;
                }
            }
            if let Quant::Weighted(w) = def.quant {
                if let Err(e) = settle_weights(g, idx, w, &mut added) {
                    errors.push(e);
                    continue;
                }
            }
            g.nodes[idx].quantized = true;
            continue;
        }
        // A float island: dequantize what it reads, quantize what it writes.
        for &(slot, v) in &acts {
            if g.values[v].quant.is_none() {
                continue;
            }
            let f = match dequantized.iter().find(|(s, _)| *s == v) {
                Some(&(_, f)) => f,
                None => {
                    let f = like(g, v, "_dq");
                    let d = conversion(g, DEQUANTIZE, v, f);
                    added.push(d);
                    dequantized.push((v, f));
                    f
                }
            };
            g.nodes[idx].inputs[slot] = Some(f);
        }
        for &(slot, o) in &outs {
            if g.values[o].quant.is_none() {
                continue;
            }
            let f = like(g, o, "_f");
            g.nodes[idx].outputs[slot] = Some(f);
            let q = conversion(g, QUANTIZE, f, o);
            added.push(q);
        }
    }
    // A float output of the model that ended up stored quantized (written by a data-moving op
    // after the model's last DequantizeLinear) is dequantized for the caller, unless the caller
    // takes integers.
    g.nodes.append(&mut added);
    let producers = g.producers();
    for k in 0..g.outputs.len() {
        let y = g.outputs[k];
        if g.values[y].quant.is_none() || g.quantized_outputs.contains(&y) {
            continue;
        }
        if quantized_io {
            g.quantized_outputs.push(y);
            continue;
        }
        let Some(p) = producers[y] else { continue };
        let v = like(g, y, "_q");
        g.values[v].quant = g.values[y].quant.take();
        for o in g.nodes[p].outputs.iter_mut().flatten() {
            if *o == y {
                *o = v;
            }
        }
        g.replace_uses(y, v);
        let d = conversion(g, DEQUANTIZE, v, y);
        added.push(d);
    }
    g.nodes.extend(added);
    if let Err(e) = g.toposort() {
        errors.push(e);
    }
    errors
}

/// Why node `n` runs in float in a quantized graph (for the message of a target with no float
/// path), or `None` when it runs quantized or touches no quantized value.
pub fn float_reason(g: &Graph, n: &Node) -> Option<String> {
    if n.quantized || is_internal(&n.op_type) {
        return None;
    }
    let def = crate::ops::def(&n.op_type)?;
    if matches!(def.quant, Quant::Float) {
        return Some(format!("{} has no quantized lowering", n.op_type));
    }
    let missing: Vec<&str> = float_acts(g, n)
        .iter()
        .chain(&float_outs(g, n))
        .filter(|&&(_, v)| g.values[v].quant.is_none())
        .map(|&(_, v)| g.values[v].name.as_str())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "{} has no encoding (no QuantizeLinear/DequantizeLinear pair on it)",
            missing.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err, lower_with};
    use crate::plan::Plan;
    use crate::testing::{ModelBuilder, A};
    use crate::LowerOptions;
    use qnnx_types::Encoding;

    /// `x -> QuantizeLinear -> DequantizeLinear -> out` with one encoding (a QDQ edge).
    fn qdq(b: ModelBuilder, x: &str, out: &str, scale: f32, zp: Tensor) -> ModelBuilder {
        let (s, z, q) = (format!("{x}_s"), format!("{x}_zp"), format!("{x}_q"));
        b.init(&s, Tensor::scalar_f32(scale))
            .init(&z, zp)
            .node("QuantizeLinear", &[x, &s, &z], &[&q], &[])
            .node("DequantizeLinear", &[&q, &s, &z], &[out], &[])
    }

    fn u8(v: i64) -> Tensor {
        Tensor::from_i64_as(DType::U8, vec![], &[v])
    }

    fn u16(v: i64) -> Tensor {
        Tensor::from_i64_as(DType::U16, vec![], &[v])
    }

    fn enc(p: &Plan, name: &str) -> Encoding {
        let t = p.tensors.iter().find(|t| t.name == name);
        let t = t.unwrap_or_else(|| panic!("no tensor {name} in\n{}", p.dump()));
        t.quant
            .clone()
            .unwrap_or_else(|| panic!("{name} is not quantized"))
    }

    /// The plan of [`conv_model`]: the input quantized and the output dequantized in the graph.
    const CONV_MODEL_OPS: [&str; 6] = [
        "Quantize",
        "Transpose",
        "Conv2d",
        "Relu",
        "Transpose",
        "Dequantize",
    ];

    fn conv_model() -> ModelBuilder {
        let w = Tensor::from_i64_as(DType::I8, vec![3, 2, 1, 1], &[1, -2, 3, -4, 5, 127]);
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .init("wq", w)
            .init("ws", Tensor::from_f32(vec![3], &[0.1, 0.2, 0.3]))
            .init("wz", Tensor::from_i64_as(DType::I8, vec![3], &[0, 0, 0]))
            .node(
                "DequantizeLinear",
                &["wq", "ws", "wz"],
                &["w"],
                &[("axis", A::I(0))],
            )
            .init("b", Tensor::from_f32(vec![3], &[0.5, -0.5, 1.0]));
        let b = qdq(b, "x", "xd", 0.1, u8(128));
        let b = b.node("Conv", &["xd", "w", "b"], &["c"], &[]);
        let b = qdq(b, "c", "cd", 0.05, u8(10));
        b.node("Relu", &["cd"], &["r"], &[]).output_qdq("r")
    }

    trait OutputQdq {
        fn output_qdq(self, x: &str) -> Self;
    }
    impl OutputQdq for ModelBuilder {
        fn output_qdq(self, x: &str) -> Self {
            qdq(self, x, "y", 0.05, u8(0)).output("y")
        }
    }

    /// A pre-activation BatchNorm (after an Add, before the next Conv) between QDQ edges runs
    /// quantized on its affine form: u8 weights per tensor, the int32 bias at input scale x
    /// weight scale, no float island (a v68 HTP refuses those).
    #[test]
    fn a_standalone_batchnorm_between_qdq_edges_runs_quantized() {
        let c = 3;
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 4, 4])
            .init("s", Tensor::from_f32(vec![c], &[1.0, 0.5, 2.0]))
            .init("bb", Tensor::from_f32(vec![c], &[0.1, -0.2, 0.3]))
            .init("m", Tensor::from_f32(vec![c], &[0.5, -1.0, 0.0]))
            .init("v", Tensor::from_f32(vec![c], &[4.0, 0.25, 1.0]));
        let b = qdq(b, "x", "xd", 0.1, u8(128));
        let b = b.node(
            "BatchNormalization",
            &["xd", "s", "bb", "m", "v"],
            &["n"],
            &[("epsilon", A::F(0.0))],
        );
        let p = lower(&b.output_qdq("n"));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            [
                "Quantize",
                "Transpose",
                "Batchnorm",
                "Transpose",
                "Dequantize"
            ],
            "{d}"
        );
        let w = p.tensors.iter().find(|t| t.name.ends_with("_w_q"));
        let w = w.unwrap_or_else(|| panic!("no encoded weights in\n{d}"));
        let we = w.quant.clone().expect("weights encoded");
        assert_eq!(we.storage, DType::U8, "{d}");
        assert!(we.axis.is_none(), "{d}");
        // weights = s / sqrt(v) = [0.5, 1.0, 2.0]: u8 over [0, 2.0].
        assert!((we.scales[0] - 2.0 / 255.0).abs() < 1e-6, "{:?}", we.scales);
        let b = p.tensors.iter().find(|t| t.name.ends_with("_bias_q"));
        let be = b
            .expect("encoded bias")
            .quant
            .clone()
            .expect("bias encoded");
        assert_eq!(be.storage, DType::I32);
        assert!(
            (be.scales[0] - 0.1 * we.scales[0]).abs() < 1e-9,
            "{:?}",
            be.scales
        );
    }

    #[test]
    fn qdq_conv_stores_the_model_integers_per_channel_and_derives_the_bias() {
        let p = lower(&conv_model());
        let d = p.dump();
        assert_eq!(p.op_types(), CONV_MODEL_OPS, "{d}");
        assert!(d.contains("input x:f32[1, 2, 4, 4]"), "{d}");
        assert!(d.contains("static Conv_3_w_hwio:qi8[1, 1, 2, 3]"), "{d}");
        assert!(d.contains("static Conv_3_bias_q:qi32[3]"), "{d}");
        assert!(d.contains("output y:f32[1, 3, 4, 4]"), "{d}");
        let w = enc(&p, "Conv_3_w_hwio");
        assert_eq!(w.axis, Some(3), "output channels are HWIO's last dim");
        assert_eq!(w.scales, vec![0.1, 0.2, 0.3]);
        let b = enc(&p, "Conv_3_bias_q");
        assert_eq!(b.storage, DType::I32);
        assert_eq!(b.axis, Some(0));
        for (s, want) in b.scales.iter().zip([0.01f32, 0.02, 0.03]) {
            assert!((s - want).abs() < 1e-7, "{:?}", b.scales);
        }
        let t = p
            .tensors
            .iter()
            .find(|t| t.name == "Conv_3_bias_q")
            .unwrap();
        let crate::plan::TensorKind::Static(bytes) = &t.kind else {
            panic!()
        };
        let q: Vec<i32> = bytes
            .chunks(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(q, vec![50, -25, 33], "0.5/0.01, -0.5/0.02, 1.0/0.03");
        let wt = p
            .tensors
            .iter()
            .find(|t| t.name == "Conv_3_w_hwio")
            .unwrap();
        let crate::plan::TensorKind::Static(w8) = &wt.kind else {
            panic!()
        };
        // HWIO [1, 1, 2, 3] of OIHW [[1, -2], [3, -4], [5, 127]].
        assert_eq!(
            w8.iter().map(|&b| b as i8).collect::<Vec<_>>(),
            vec![1, 3, 5, -2, -4, 127]
        );
        // The edges keep the model's encodings, offset = -zero point.
        let x = p.ops[0].outputs[0];
        assert_eq!(
            p.tensors[x].quant,
            Some(Encoding::per_tensor(DType::U8, 0.1, -128))
        );
        let conv = &p.ops[2];
        let relu_in = &p.tensors[p.ops[3].inputs[0]];
        assert_eq!(relu_in.quant, p.tensors[conv.outputs[0]].quant);
        assert_eq!(
            relu_in.quant,
            Some(Encoding::per_tensor(DType::U8, 0.05, -10))
        );
    }

    #[test]
    fn quantized_io_passes_the_integers() {
        let o = LowerOptions {
            quantized_io: true,
            ..Default::default()
        };
        let p = lower_with(&conv_model(), &o);
        assert_eq!(
            p.op_types(),
            vec!["Transpose", "Conv2d", "Relu", "Transpose"]
        );
        assert_eq!(p.inputs[0].host_dtype, DType::U8);
        assert_eq!(p.outputs[0].host_dtype, DType::U8);
        assert_eq!(p.outputs[0].onnx_name, "y");
        assert!(
            p.dump().contains("output y:qu8[1, 3, 4, 4]"),
            "{}",
            p.dump()
        );
    }

    /// `x -> Relu -> features (a graph output) -> Sigmoid -> y`, the features quantized for the
    /// Sigmoid either by the DequantizeLinear that writes the output (`dq_output`) or, as PT2E
    /// exports it, by a QDQ pair after the float output; and the sorted op types of its plan.
    fn features_then_reader(dq_output: bool) -> (ModelBuilder, Vec<&'static str>) {
        let b = ModelBuilder::new(17).input("x", DType::F32, &[1, 4]);
        let b = qdq(b, "x", "xd", 0.1, u8(128));
        let b = if dq_output {
            let b = b.node("Relu", &["xd"], &["f"], &[]);
            qdq(b, "f", "features", 0.05, u8(0)).output("features")
        } else {
            let b = b
                .node("Relu", &["xd"], &["features"], &[])
                .output("features");
            qdq(b, "features", "fd", 0.05, u8(0))
        };
        let read = if dq_output { "features" } else { "fd" };
        let b = b.node("Sigmoid", &[read], &["s"], &[]);
        let b = qdq(b, "s", "y", 1.0 / 256.0, u8(0)).output("y");
        let mut ops = lower(&b).op_types();
        ops.sort();
        (b, ops)
    }

    /// A graph output that a quantized op also reads (a feature vector, then the classifier):
    /// the op reads the quantized value and only the output is dequantized; with quantized I/O
    /// the op reads the value the caller receives.
    #[test]
    fn an_output_that_an_op_also_reads_stays_quantized_for_the_op() {
        let (b, ops) = features_then_reader(true);
        let d = lower(&b).dump();
        assert_eq!(
            ops,
            ["Dequantize", "Dequantize", "Quantize", "Relu", "Sigmoid"],
            "{d}"
        );
        assert!(d.contains("Sigmoid(f:qu8[1, 4])"), "{d}");
        let o = LowerOptions {
            quantized_io: true,
            ..Default::default()
        };
        let p = lower_with(&b, &o);
        let d = p.dump();
        assert_eq!(p.op_types(), vec!["Relu", "Sigmoid"], "{d}");
        assert!(d.contains("Sigmoid(features:qu8[1, 4])"), "{d}");
    }

    /// A float graph output that the model also quantizes for a reader (PT2E's export of pooled
    /// features that a classifier reads): its producer runs quantized and only the output is
    /// dequantized, instead of a float island.
    #[test]
    fn a_float_output_quantized_for_a_reader_is_computed_quantized() {
        let (b, ops) = features_then_reader(false);
        let d = lower(&b).dump();
        assert_eq!(
            ops,
            ["Dequantize", "Dequantize", "Quantize", "Relu", "Sigmoid"],
            "{d}"
        );
        assert!(d.contains("Relu(x_q_1:qu8[1, 4]) -> features_q"), "{d}");
        assert!(d.contains("output features:f32[1, 4]"), "{d}");
    }

    /// PT2E's export of `adaptive_avg_pool2d(x, 1).flatten(1)` before a classifier: ReduceMean,
    /// Reshape, then the QuantizeLinear. The encoding flows back through the Reshape and the
    /// ReduceMean runs quantized (it was a float island).
    #[test]
    fn an_encoding_flows_back_through_data_movement_to_the_op_before_it() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 2, 2])
            .init("shape", Tensor::from_i64(vec![2], &[1, 4]));
        let b = qdq(b, "x", "xd", 0.1, u8(128));
        let b = b
            .node(
                "ReduceMean",
                &["xd"],
                &["m"],
                &[("axes", A::Is(vec![2, 3])), ("keepdims", A::I(1))],
            )
            .node("Reshape", &["m", "shape"], &["f"], &[]);
        let b = qdq(b, "f", "y", 0.05, u8(100)).output("y");
        let p = lower(&b);
        let d = p.dump();
        assert!(
            !d.contains("_f:f32") && !d.contains("_dq:f32"),
            "a float island:\n{d}"
        );
        assert_eq!(enc(&p, "m"), enc(&p, "f"), "{d}");
    }

    #[test]
    fn fp16_leaves_the_quantized_path_and_its_f32_io_alone() {
        // ONNX Runtime's fp16 precision does not round a QDQ model's input to fp16 before
        // quantizing it: neither do we (no Cast around the Quantize and the Dequantize).
        let o = LowerOptions {
            fp16: true,
            ..Default::default()
        };
        let p = lower_with(&conv_model(), &o);
        let d = p.dump();
        assert_eq!(p.op_types(), CONV_MODEL_OPS, "{d}");
        assert!(d.contains("input x:f32[1, 2, 4, 4]"), "{d}");
        assert!(d.contains("output y:f32[1, 3, 4, 4]"), "{d}");
    }

    #[test]
    fn raw_integer_io_of_the_model_is_kept() {
        let b = ModelBuilder::new(17)
            .input("x", DType::U8, &[4])
            .init("s", Tensor::scalar_f32(0.5))
            .init("z", u8(3))
            .node("DequantizeLinear", &["x", "s", "z"], &["xd"], &[])
            .node("Relu", &["xd"], &["r"], &[])
            .node("QuantizeLinear", &["r", "s", "z"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        assert_eq!(p.op_types(), vec!["Relu"]);
        assert_eq!(p.inputs[0].host_dtype, DType::U8);
        assert_eq!(p.outputs[0].host_dtype, DType::U8);
        assert!(
            p.dump().contains("Relu(x:qu8[4]) -> y:qu8[4]"),
            "{}",
            p.dump()
        );
    }

    #[test]
    fn data_movement_takes_its_input_encoding_and_converts_to_the_models() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .init("shape", Tensor::from_i64(vec![1], &[6]));
        let b = qdq(b, "x", "xd", 0.1, u8(128));
        // No QDQ between Reshape and Relu: the Reshape output is stored like its input.
        let b = b
            .node("Reshape", &["xd", "shape"], &["r"], &[])
            .node("Relu", &["r"], &["a"], &[]);
        // A Transpose whose output the model encodes differently: Convert after it.
        let b = qdq(b, "a", "ad", 0.05, u8(0)).node(
            "Transpose",
            &["xd"],
            &["t"],
            &[("perm", A::Is(vec![1, 0]))],
        );
        let b = qdq(b, "t", "td", 0.2, u8(100))
            .node("Flatten", &["td"], &["f"], &[("axis", A::I(0))])
            .node("Add", &["ad", "f"], &["s"], &[]);
        let p = lower(&qdq(b, "s", "y", 0.1, u8(0)).output("y"));
        let d = p.dump();
        assert!(d.contains("Convert("), "{d}");
        let reshape = p.ops.iter().find(|o| o.type_name == "Reshape").unwrap();
        assert_eq!(
            p.tensors[reshape.outputs[0]].quant,
            Some(Encoding::per_tensor(DType::U8, 0.1, -128))
        );
        let conv = p.ops.iter().find(|o| o.type_name == "Convert").unwrap();
        assert_eq!(
            p.tensors[conv.inputs[0]].quant,
            Some(Encoding::per_tensor(DType::U8, 0.1, -128))
        );
        assert_eq!(
            p.tensors[conv.outputs[0]].quant,
            Some(Encoding::per_tensor(DType::U8, 0.2, -100))
        );
    }

    #[test]
    fn an_embedding_gathers_the_integers_of_its_encoded_table() {
        // DequantizeLinear(table) -> Gather(token ids) -> QDQ: what PT2E makes of
        // nn.Embedding. The Gather moves the table's integers (no float island, which a v68
        // target would refuse); the model's output encoding is reached by a Convert.
        let table = Tensor::from_i64_as(
            DType::U8,
            vec![4, 3],
            &[0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110],
        );
        let b = ModelBuilder::new(17)
            .input("ids", DType::I64, &[1, 2])
            .init("tq", table)
            .init("ts", Tensor::scalar_f32(0.5))
            .init("tz", u8(3))
            .node("DequantizeLinear", &["tq", "ts", "tz"], &["t"], &[])
            .node("Gather", &["t", "ids"], &["e"], &[]);
        let p = lower(&qdq(b, "e", "y", 0.25, u8(7)).output("y"));
        let d = p.dump();
        let gather = p.ops.iter().find(|o| o.type_name == "Gather").unwrap();
        assert_eq!(
            p.tensors[gather.inputs[0]].quant,
            Some(Encoding::per_tensor(DType::U8, 0.5, -3)),
            "{d}"
        );
        assert_eq!(
            p.tensors[gather.outputs[0]].quant,
            Some(Encoding::per_tensor(DType::U8, 0.5, -3)),
            "{d}"
        );
        assert!(d.contains("Convert("), "{d}");
        assert!(
            !p.op_types().contains(&"Cast"),
            "no Cast of fixed-point data: {d}"
        );
        assert_eq!(
            p.op_types().iter().filter(|t| **t == "Dequantize").count(),
            1,
            "{d}"
        );
    }

    #[test]
    fn an_op_without_a_quantized_lowering_is_a_float_island() {
        let b = ModelBuilder::new(17).input("x", DType::F32, &[4]);
        let b = qdq(b, "x", "xd", 0.1, u8(128)).node("Floor", &["xd"], &["e"], &[]);
        let p = lower(
            &qdq(b, "e", "ed", 0.01, u8(128))
                .node("Relu", &["ed"], &["r"], &[])
                .output_qdq("r"),
        );
        assert_eq!(
            p.op_types(),
            vec![
                "Quantize",
                "Dequantize",
                "ElementWiseFloor",
                "Quantize",
                "Relu",
                "Dequantize"
            ],
            "{}",
            p.dump()
        );
        let erf = &p.ops[2];
        assert_eq!(p.tensors[erf.inputs[0]].dtype, DType::F32);
        assert_eq!(p.tensors[erf.outputs[0]].quant, None);
    }

    #[test]
    fn a_no_op_cast_before_the_quantize_keeps_the_encoding_on_its_input() {
        // What torch.export writes for a Softmax (`Cast(to=float)` of a float) quantized at 16
        // bits, then at 8 bits for a MatMul reader below v73: the Cast goes and the Softmax
        // writes the 16-bit value the Convert reads (it used to read an unencoded value).
        let b = ModelBuilder::new(17).input("x", DType::F32, &[2, 4]);
        let b = qdq(b, "x", "xd", 0.001, u16(32768))
            .node("Softmax", &["xd"], &["p"], &[("axis", A::I(-1))])
            .node("Cast", &["p"], &["c"], &[("to", A::I(1))]);
        let b = qdq(b, "c", "c16", 1.0 / 65535.0, u16(0));
        let b = qdq(b, "c16", "c8", 1.0 / 255.0, u8(0)).node("Relu", &["c8"], &["r"], &[]);
        let p = lower(&qdq(b, "r", "y", 1.0 / 255.0, u8(0)).output("y"));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            vec!["Quantize", "Softmax", "Convert", "Relu", "Dequantize"],
            "{d}"
        );
        let softmax = p.ops.iter().find(|o| o.type_name == "Softmax").unwrap();
        assert_eq!(
            p.tensors[softmax.outputs[0]].quant,
            Some(Encoding::per_tensor(DType::U16, 1.0 / 65535.0, 0)),
            "{d}"
        );
        let convert = p.ops.iter().find(|o| o.type_name == "Convert").unwrap();
        assert_eq!(convert.inputs[0], softmax.outputs[0], "{d}");
    }

    #[test]
    fn sixteen_bit_sigmoid_gets_qnns_fixed_encoding() {
        let b = ModelBuilder::new(17).input("x", DType::F32, &[4]);
        let b = qdq(b, "x", "xd", 0.001, u16(32768)).node("Sigmoid", &["xd"], &["s"], &[]);
        let p = lower(&qdq(b, "s", "y", 1.0 / 65535.0, u16(0)).output("y"));
        let sig = p.ops.iter().find(|o| o.type_name == "Sigmoid").unwrap();
        assert_eq!(
            p.tensors[sig.outputs[0]].quant,
            Some(Encoding::per_tensor(DType::U16, 1.0 / 65536.0, 0))
        );
        assert!(p.op_types().contains(&"Convert"), "{}", p.dump());
    }

    #[test]
    fn silus_sigmoid_without_an_encoding_takes_qnns_fixed_one() {
        // SiLU quantized as one op exports as `x * Sigmoid(x)` with no QDQ between them: both
        // run quantized (a v68 HTP has no float path), the Sigmoid at QNN's 16-bit encoding.
        let b = ModelBuilder::new(17).input("x", DType::F32, &[4]);
        let b = qdq(b, "x", "xd", 0.001, u16(32768))
            .node("Sigmoid", &["xd"], &["s"], &[])
            .node("Mul", &["xd", "s"], &["m"], &[]);
        let p = lower(&qdq(b, "m", "y", 0.0005, u16(32768)).output("y"));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            vec!["Quantize", "Sigmoid", "ElementWiseMultiply", "Dequantize"],
            "{d}"
        );
        let sig = p.ops.iter().find(|o| o.type_name == "Sigmoid").unwrap();
        assert_eq!(
            p.tensors[sig.outputs[0]].quant,
            Some(Encoding::per_tensor(DType::U16, 1.0 / 65536.0, 0)),
            "{d}"
        );
    }

    #[test]
    fn where_and_comparisons_run_quantized_on_one_shared_encoding() {
        // The KV-cache write of compiling/writes.py: a one-hot Where(eq, 1, 0) quantized by its
        // reader, `hit = ReduceMax(onehot) > 0.5`, and Where(hit, new rows, cache) whose inputs
        // have different encodings and whose output the model leaves unencoded (a Reshape
        // reads it). Nothing computes in float.
        let b = ModelBuilder::new(17)
            .input("i", DType::I64, &[1, 1])
            .input("c", DType::F32, &[3, 2])
            .input("x", DType::F32, &[1, 2])
            .init("ar", Tensor::from_i64(vec![3, 1], &[0, 1, 2]))
            .init("one", Tensor::scalar_f32(1.0))
            .init("zero", Tensor::scalar_f32(0.0))
            .init("half", Tensor::scalar_f32(0.5))
            .init("shape", Tensor::from_i64(vec![1], &[6]))
            .node("Equal", &["ar", "i"], &["eq"], &[])
            .node("Where", &["eq", "one", "zero"], &["oh"], &[]);
        let b = qdq(b, "oh", "ohd", 1.0 / 255.0, u8(0))
            .node(
                "ReduceMax",
                &["ohd"],
                &["mx"],
                &[("axes", A::Is(vec![1])), ("keepdims", A::I(1))],
            )
            .node("Greater", &["mx", "half"], &["hit"], &[]);
        let b = qdq(b, "x", "xd", 0.01, u8(128)).node("MatMul", &["ohd", "xd"], &["new"], &[]);
        let b = qdq(b, "new", "newd", 0.01, u8(128));
        let b = qdq(b, "c", "cd", 0.02, u8(100))
            .node("Where", &["hit", "newd", "cd"], &["w"], &[])
            .node("Reshape", &["w", "shape"], &["r"], &[]);
        let p = lower(&qdq(b, "r", "y", 0.01, u8(128)).output("y"));
        let d = p.dump();
        let types = p.op_types();
        assert_eq!(
            types.iter().filter(|t| **t == "Dequantize").count(),
            1,
            "only the output is dequantized: {d}"
        );
        assert_eq!(types.iter().filter(|t| **t == "Quantize").count(), 2, "{d}");
        let new_enc = Encoding::per_tensor(DType::U8, 0.01, -128);
        let selects: Vec<_> = p
            .ops
            .iter()
            .filter(|o| o.type_name == "ElementWiseSelect")
            .collect();
        assert_eq!(selects.len(), 2, "{d}");
        for t in &selects[0].inputs[1..] {
            assert_eq!(
                p.tensors[*t].quant,
                Some(Encoding::per_tensor(DType::U8, 1.0 / 255.0, 0)),
                "the one-hot's constants are stored in its encoding: {d}"
            );
        }
        for t in selects[1].inputs[1..].iter().chain(&selects[1].outputs) {
            assert_eq!(p.tensors[*t].quant, Some(new_enc.clone()), "{d}");
        }
        let gt = p
            .ops
            .iter()
            .find(|o| o.type_name == "ElementWiseGreater")
            .unwrap();
        for t in &gt.inputs {
            assert_eq!(p.tensors[*t].dtype, DType::U8, "{d}");
        }
        assert!(types.contains(&"Convert"), "the cache converted: {d}");
    }

    #[test]
    fn a_raw_output_at_the_encoding_of_a_readers_pair_shares_its_convert() {
        // The 8-bit KV cache's new rows below v73: a 16-bit value requantized to 8 bits for
        // an 8-bit MatMul (a QDQ pair) and written raw at the same 8-bit encoding (a
        // QuantizeLinear to a graph output). One Convert writes the output, the Relu reads it.
        let b = ModelBuilder::new(17).input("x", DType::F32, &[4]);
        let b = qdq(b, "x", "xa", 0.001, u16(32768));
        let b = qdq(b, "xa", "xb", 0.01, u8(128))
            .node("Relu", &["xb"], &["r"], &[])
            .init("s8", Tensor::scalar_f32(0.01))
            .init("z8", u8(128))
            .node("QuantizeLinear", &["xa", "s8", "z8"], &["rows"], &[])
            .output("rows");
        let p = lower(&b.output_qdq("r"));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            vec!["Quantize", "Convert", "Relu", "Dequantize"],
            "{d}"
        );
        assert_eq!(p.outputs[0].host_dtype, DType::U8, "{d}");
        let relu = p.ops.iter().find(|o| o.type_name == "Relu").unwrap();
        assert_eq!(p.tensors[relu.inputs[0]].name, "rows", "{d}");
    }

    #[test]
    fn encodings_qnn_cannot_express_are_refused_naming_the_tensor() {
        let bad = |scale: Tensor, zp: Tensor, axis: i64| {
            let b = ModelBuilder::new(17)
                .input("x", DType::F32, &[2, 3])
                .init("s", scale)
                .init("z", zp)
                .node(
                    "QuantizeLinear",
                    &["x", "s", "z"],
                    &["q"],
                    &[("axis", A::I(axis))],
                )
                .node(
                    "DequantizeLinear",
                    &["q", "s", "z"],
                    &["d"],
                    &[("axis", A::I(axis))],
                )
                .node("Relu", &["d"], &["y"], &[])
                .output("y");
            lower_err(&b)
        };
        let e = bad(Tensor::scalar_f32(0.0), u8(0), 1);
        assert!(e.contains("the encoding of 'q' has scale 0"), "{e}");
        assert!(
            !e.contains("not part of such a pair"),
            "one error per edge: {e}"
        );
        let e = bad(Tensor::scalar_f32(f32::NAN), u8(0), 1);
        assert!(e.contains("scale NaN"), "{e}");
        let per_ch = |n| Tensor::from_i64_as(DType::U8, vec![n], &vec![0; n]);
        let e = bad(Tensor::from_f32(vec![3], &[0.1; 3]), per_ch(3), 1);
        assert!(
            e.contains("'q' is quantized per channel; QNN quantizes activations per tensor"),
            "{e}"
        );
        let e = bad(Tensor::from_f32(vec![3], &[0.1; 3]), per_ch(3), 5);
        assert!(
            e.contains("axis 5 does not exist in a rank-2 tensor"),
            "{e}"
        );
        let e = bad(Tensor::from_f32(vec![4], &[0.1; 4]), per_ch(4), 1);
        assert!(e.contains("4 scales along axis 1, which has size 3"), "{e}");
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .input("s", DType::F32, &[])
            .node("QuantizeLinear", &["x", "s"], &["q"], &[])
            .node("DequantizeLinear", &["q", "s"], &["y"], &[])
            .output("y");
        let e = lower_err(&b);
        assert!(e.contains("its scale 's' must be a constant"), "{e}");
    }

    #[test]
    fn float_models_are_unchanged() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("Relu", &["x"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        assert!(p.tensors.iter().all(|t| t.quant.is_none()));
        assert!(p.ops.iter().all(|o| o.type_name == "Relu"));
    }
}
