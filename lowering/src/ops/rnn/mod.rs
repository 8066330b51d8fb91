//! Recurrent networks: RNN, GRU and LSTM, unrolled over their static sequence length into
//! MatMul, Add, Slice and activation ops (`lstm.rs`, `gru.rs`, `rnn.rs`), which every backend
//! lowers; LSTM is one QNN Lstm per step where the backend has it (`lstm.rs`). What the three
//! share is here: the attributes and shapes, the per-direction weights and the input
//! projection of all time steps at once, the activations, and the outputs.

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::{Attr, Graph, Node, ValueId};
use crate::ops::infer::{In, Out};
use crate::ops::OpDef;

pub mod gru;
pub mod lstm;
#[allow(clippy::module_inception)]
pub mod rnn;

pub const OPS: &[OpDef] = &[lstm::LSTM, gru::GRU, rnn::RNN];

/// One activation of `activations`, with its alpha and beta.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Act {
    Sigmoid,
    Tanh,
    Relu,
    LeakyRelu(f32),
    HardSigmoid(f32, f32),
    Affine(f32, f32),
    ScaledTanh(f32, f32),
    Elu(f32),
    Softsign,
    Softplus,
    ThresholdedRelu(f32),
}

/// What the three ops share, resolved against the shapes.
pub(crate) struct Spec {
    /// Per direction: whether it runs backwards in time.
    pub reverse: Vec<bool>,
    pub hidden: usize,
    /// `layout` 1: X is `[B, T, I]` and the outputs batch-major.
    pub batch_major: bool,
    pub seq: usize,
    pub batch: usize,
    /// `activations_per_direction` entries per direction.
    pub acts: Vec<Act>,
    pub clip: Option<f32>,
}

fn parse_acts(node: &Node, names: &[String]) -> Result<Vec<Act>> {
    let mut alpha = node
        .attr_floats_opt("activation_alpha")?
        .unwrap_or_default()
        .into_iter();
    let mut beta = node
        .attr_floats_opt("activation_beta")?
        .unwrap_or_default()
        .into_iter();
    let mut a = |d: f32| alpha.next().unwrap_or(d);
    let mut b = |d: f32| beta.next().unwrap_or(d);
    names
        .iter()
        .map(|n| {
            Ok(match n.to_ascii_lowercase().as_str() {
                "sigmoid" => Act::Sigmoid,
                "tanh" => Act::Tanh,
                "relu" => Act::Relu,
                "leakyrelu" => Act::LeakyRelu(a(0.01)),
                "hardsigmoid" => {
                    let x = a(0.2);
                    Act::HardSigmoid(x, b(0.5))
                }
                "affine" => {
                    let x = a(1.0);
                    Act::Affine(x, b(0.0))
                }
                "scaledtanh" => {
                    let x = a(1.0);
                    Act::ScaledTanh(x, b(1.0))
                }
                "elu" => Act::Elu(a(1.0)),
                "softsign" => Act::Softsign,
                "softplus" => Act::Softplus,
                "thresholdedrelu" => Act::ThresholdedRelu(a(1.0)),
                _ => {
                    return Err(
                        node.err_attr("activations", format!("activation '{n}' is not supported"))
                    )
                }
            })
        })
        .collect()
}

/// Checks the node against its op's input shapes (`gates` gates per direction, `defaults` the
/// activations of one direction) and resolves the attributes. Refused: a `sequence_lens` that
/// is not constant and equal to the sequence length, `input_forget` (LSTM).
pub(crate) fn spec(g: &Graph, node: &Node, gates: usize, defaults: &[&str]) -> Result<Spec> {
    let x = In { g, n: node };
    let xs = x.shape(0)?;
    let ws = x.shape(1)?;
    let rs = x.shape(2)?;
    let batch_major = match node.attr_i("layout", 0)? {
        0 => false,
        1 => true,
        l => return Err(node.err_attr("layout", format!("{l} is not 0 or 1"))),
    };
    let reverse = match node.attr_s("direction", "forward")? {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        d => return Err(node.err_attr("direction", format!("'{d}' is not a direction"))),
    };
    let h = node.attr_i("hidden_size", 0)?;
    let (seq, batch, input) = match xs {
        [t, b, i] if !batch_major => (*t, *b, *i),
        [b, t, i] => (*t, *b, *i),
        _ => return Err(node.err_invalid(format!("X has shape {xs:?}, not rank 3"))),
    };
    let d = reverse.len();
    let h = if h > 0 {
        h as usize
    } else {
        ws.get(1).copied().unwrap_or(0) / gates
    };
    if ws != [d, gates * h, input] || rs != [d, gates * h, h] {
        return Err(node.err_invalid(format!(
            "W {ws:?} and R {rs:?} do not match {d} direction(s), hidden size {h} and input size {input}"
        )));
    }
    if seq == 0 || batch == 0 {
        return Err(node.err_op("an empty sequence or batch is not supported"));
    }
    if x.has(4) {
        match x.konst(4) {
            Some(t) if t.to_i64().iter().all(|&l| l == seq as i64) => {}
            Some(_) => {
                return Err(node.err_op(
                    "input 'sequence_lens' with lengths other than the sequence length is not supported",
                ))
            }
            None => {
                return Err(node.err_op(
                    "input 'sequence_lens' must be constant (and equal to the sequence length)",
                ))
            }
        }
    }
    if node.attr_i("input_forget", 0)? != 0 {
        return Err(node.err_attr(
            "input_forget",
            "coupled input and forget gates are not supported",
        ));
    }
    let names = match node.attr_strings_opt("activations")? {
        Some(v) => v,
        None => (0..d)
            .flat_map(|_| defaults.iter().map(|s| s.to_string()))
            .collect(),
    };
    if names.len() != defaults.len() * d {
        return Err(node.err_attr(
            "activations",
            format!("{} given, {} expected", names.len(), defaults.len() * d),
        ));
    }
    let acts = parse_acts(node, &names)?;
    let clip = node.attr_f_opt("clip")?;
    Ok(Spec {
        reverse,
        hidden: h,
        batch_major,
        seq,
        batch,
        acts,
        clip,
    })
}

/// `Y` (`[T, D, B, H]`, or `[B, T, D, H]` batch-major) and the final states (`[D, B, H]`, or
/// `[B, D, H]`), `states` of them.
pub(crate) fn infer(x: &In, gates: usize, defaults: &[&str], states: usize) -> Result<Vec<Out>> {
    let s = spec(x.g, x.n, gates, defaults)?;
    let dt = x.dtype(0)?;
    let d = s.reverse.len();
    let (y, st) = if s.batch_major {
        (
            vec![s.batch, s.seq, d, s.hidden],
            vec![s.batch, d, s.hidden],
        )
    } else {
        (
            vec![s.seq, d, s.batch, s.hidden],
            vec![d, s.batch, s.hidden],
        )
    };
    let mut v = vec![(dt, y)];
    for _ in 0..states {
        v.push((dt, st.clone()));
    }
    Ok(v)
}

/// `a(x)`.
pub(crate) fn activate(b: &mut Builder, a: &Act, x: ValueId) -> ValueId {
    let dt = b.g.dtype(x);
    let f = |v: f32| Attr::Float(v);
    match *a {
        Act::Sigmoid => b.op("Sigmoid", &[x], vec![]),
        Act::Tanh => b.op("Tanh", &[x], vec![]),
        Act::Relu => b.op("Relu", &[x], vec![]),
        Act::LeakyRelu(al) => b.op("LeakyRelu", &[x], vec![("alpha", f(al))]),
        Act::HardSigmoid(al, be) => {
            b.op("HardSigmoid", &[x], vec![("alpha", f(al)), ("beta", f(be))])
        }
        Act::Affine(al, be) => {
            let a = b.scalar(dt, al as f64);
            let m = b.op("Mul", &[x, a], vec![]);
            let c = b.scalar(dt, be as f64);
            b.op("Add", &[m, c], vec![])
        }
        Act::ScaledTanh(al, be) => {
            let c = b.scalar(dt, be as f64);
            let m = b.op("Mul", &[x, c], vec![]);
            let t = b.op("Tanh", &[m], vec![]);
            let a = b.scalar(dt, al as f64);
            b.op("Mul", &[t, a], vec![])
        }
        Act::Elu(al) => b.op("Elu", &[x], vec![("alpha", f(al))]),
        Act::Softsign => {
            let a = b.op("Abs", &[x], vec![]);
            let one = b.scalar(dt, 1.0);
            let d = b.op("Add", &[a, one], vec![]);
            b.op("Div", &[x, d], vec![])
        }
        Act::Softplus => b.op("Softplus", &[x], vec![]),
        Act::ThresholdedRelu(al) => b.op("ThresholdedRelu", &[x], vec![("alpha", f(al))]),
    }
}

/// `Clip(x, -c, c)` when `clip` is set (the gates' inputs).
pub(crate) fn clipped(b: &mut Builder, clip: Option<f32>, x: ValueId) -> ValueId {
    let Some(c) = clip else { return x };
    let dt = b.g.dtype(x);
    let hi = b.scalar(dt, c as f64);
    let lo = b.scalar(dt, -c as f64);
    let m = b.op("Min", &[x, hi], vec![]);
    b.op("Max", &[m, lo], vec![])
}

/// Input `i` (`[D, ...]`) of direction `d`, with the direction axis dropped; `None` when absent.
pub(crate) fn direction_slice(b: &mut Builder, node: &Node, i: usize, d: usize) -> Option<ValueId> {
    let v = node.input(i)?;
    let s = b.g.shape(v).to_vec();
    let t = b.slice(v, 0, d, d + 1);
    Some(b.reshape(t, &s[1..]))
}

/// `W` or `R` of direction `d`, transposed to `[in, gates·H]` for `x @ w`.
pub(crate) fn weights_t(b: &mut Builder, node: &Node, i: usize, d: usize) -> Result<ValueId> {
    let w = direction_slice(b, node, i, d)
        .ok_or_else(|| node.err_invalid(format!("input {i} is missing")))?;
    Ok(b.transpose(w, &[1, 0]))
}

/// `x [T·B, I] @ W_dᵀ + bias`: the input projection of every time step at once,
/// `[T·B, gates·H]`.
pub(crate) fn project(
    b: &mut Builder,
    node: &Node,
    x: ValueId,
    d: usize,
    bias: Option<ValueId>,
) -> Result<ValueId> {
    let wt = weights_t(b, node, 1, d)?;
    let p = b.op("MatMul", &[x, wt], vec![]);
    Ok(match bias {
        Some(c) => b.op("Add", &[p, c], vec![]),
        None => p,
    })
}

/// Step `t` (`[B, n]`) of a `[T·B, n]` value. Steps and states are 2-D so that the
/// recurrent MatMuls with constant weights become FullyConnected ops with no Reshapes.
pub(crate) fn step(b: &mut Builder, s: &Spec, v: ValueId, t: usize) -> ValueId {
    b.slice(v, 0, t * s.batch, (t + 1) * s.batch)
}

/// Columns `k·w .. (k+1)·w` of a `[B, n]` value (one gate).
pub(crate) fn gate(b: &mut Builder, v: ValueId, k: usize, w: usize) -> ValueId {
    b.slice(v, 1, k * w, (k + 1) * w)
}

/// X as `[T·B, I]`, time-major.
pub(crate) fn time_major(b: &mut Builder, node: &Node, s: &Spec) -> Result<ValueId> {
    let x = node
        .input(0)
        .ok_or_else(|| node.err_invalid("input 'X' is missing"))?;
    let i = b.g.shape(x)[2];
    let x = if s.batch_major {
        b.transpose(x, &[1, 0, 2])
    } else {
        x
    };
    Ok(b.reshape(x, &[s.seq * s.batch, i]))
}

/// The initial state input `i` (`[D, B, H]`, or `[B, D, H]` batch-major) of direction `d` as
/// `[B, H]`; `None` (zeros) when absent.
pub(crate) fn initial(
    b: &mut Builder,
    node: &Node,
    s: &Spec,
    i: usize,
    d: usize,
) -> Option<ValueId> {
    let v = node.input(i)?;
    let axis = usize::from(s.batch_major);
    let t = b.slice(v, axis, d, d + 1);
    Some(b.reshape(t, &[s.batch, s.hidden]))
}

/// Writes `Y` from the per-direction hidden states (`hs[d][t]`, each `[B, H]`, in time order)
/// and the final states (`finals[k][d]`, `[B, H]`) into the node's outputs 0 and `1 + k`, those
/// that are read.
pub(crate) fn write_outputs(
    b: &mut Builder,
    node: &Node,
    s: &Spec,
    hs: Vec<Vec<ValueId>>,
    finals: Vec<Vec<ValueId>>,
) {
    let h = s.hidden;
    let bt = s.batch;
    let axis = |a: i64| vec![("axis", Attr::Int(a))];
    if let Some(y) = node.output(0) {
        let per_dir: Vec<ValueId> = hs
            .iter()
            .map(|steps| {
                let c = if steps.len() == 1 {
                    steps[0]
                } else {
                    b.op("Concat", steps, axis(0))
                };
                b.reshape(c, &[s.seq, 1, bt, h])
            })
            .collect();
        let all = if per_dir.len() == 1 {
            per_dir[0]
        } else {
            b.op("Concat", &per_dir, axis(1))
        };
        if s.batch_major {
            b.op_to(
                "Transpose",
                &[all],
                vec![("perm", Attr::Ints(vec![2, 0, 1, 3]))],
                &[y],
            );
        } else {
            b.op_to("Identity", &[all], vec![], &[y]);
        }
    }
    for (k, f) in finals.iter().enumerate() {
        let Some(o) = node.output(1 + k) else {
            continue;
        };
        let c = if f.len() == 1 {
            f[0]
        } else {
            b.op("Concat", f, axis(0))
        };
        let all = b.reshape(c, &[f.len(), bt, h]);
        if s.batch_major {
            b.op_to(
                "Transpose",
                &[all],
                vec![("perm", Attr::Ints(vec![1, 0, 2]))],
                &[o],
            );
        } else {
            b.op_to("Identity", &[all], vec![], &[o]);
        }
    }
}

/// The time steps of a direction in the order it visits them.
pub(crate) fn order(seq: usize, reverse: bool) -> Vec<usize> {
    if reverse {
        (0..seq).rev().collect()
    } else {
        (0..seq).collect()
    }
}
