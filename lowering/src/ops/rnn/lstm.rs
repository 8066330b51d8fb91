//! LSTM — <https://onnx.ai/onnx/operators/onnx__LSTM.html>, opsets 7, 14 (`layout`) and 22.
//!
//! On a backend whose op table lists QNN `Lstm` (the HTP), the default activations (Sigmoid,
//! Tanh, Tanh) without `clip`, with constant `W`, `R`, `B` and peepholes `P` and no encodings
//! (a float graph) are one QNN `Lstm` per time step and direction (`lower_qnn`; the HTP takes
//! no 3-D `x`, as ONNX Runtime's QNN EP notes): `x_t` is a StridedSlice of X (a Reshape for
//! one step) on its time axis, the per-gate weights `[H, I]`, `[H, H]`, the biases `Wb + Rb`
//! and the peepholes are sliced out of W, R, B and P on the host (ONNX's gate order is i, o,
//! f, c and P's i, o, f), the initial states are sliced per direction (on the host when
//! constant, zeros when absent), and the op's unused optional inputs (layer norm, projection,
//! the peepholes without P) are NULL tensors. `Y`, `Y_h` and `Y_c` are one Concat of the
//! steps' `[B, H]` outputs in (time, direction) order and a Reshape each, for both layouts.
//! Params: `direction` 0 (each op is one step), `time_major` 0, no cell or output clip, the
//! `*_qscale` / `hidden_state_offset` of a float graph 0. silero_vad's decoder LSTM (one step)
//! and ddddocr's bidirectional one (16 steps): docs/graph-quality.md.
//!
//! Everything else is unrolled over the static sequence length (`lstm`, an expansion): the
//! input projection of every step is one MatMul (`X @ Wᵀ + Wb + Rb`, `[T, B, 4H]`); each step
//! adds `H₋₁ @ Rᵀ` (one MatMul, skipped for a zero initial state), slices the i, o, f, c gates
//! and computes `C = f ⊙ C₋₁ + i ⊙ g(c)`, `H = o ⊙ h(C)` with the peepholes `P` when given.
//! This covers `clip` (ONNX clips the gates' inputs; QNN's `cell_clip_threshold` clips the
//! cell state, not the same thing), `activations` (Sigmoid, Tanh, Relu, LeakyRelu,
//! HardSigmoid, Affine, ScaledTanh, Elu, Softsign, Softplus, ThresholdedRelu) with
//! `activation_alpha`/`beta`, weights that are graph inputs, QDQ graphs (QNN's quantized Lstm
//! is not verified) and the GPU backend (its table has no Lstm). Both forms take directions
//! forward, reverse and bidirectional, `layout` 0 and 1 and initial states. Refused:
//! `input_forget`, `sequence_lens` other than all equal to the sequence length.

use super::{
    activate, clipped, direction_slice, gate, initial, order, project, spec, step, time_major,
    weights_t, write_outputs, Act, Spec,
};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::{Graph, Node};
use crate::ops::infer::{In, Out};
use crate::ops::{Layout, LowerCx, OpDef, Quant, ShapeInput};
use crate::plan::{Param, TensorId};
use crate::qnn_names::{op, param};

pub const LSTM: OpDef = OpDef {
    op_type: "LSTM",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(lstm),
    lower: Some(lower_qnn),
    quant: Quant::Float,
};

/// f (the gates), g (the cell input), h (the cell output).
const DEFAULTS: [&str; 3] = ["Sigmoid", "Tanh", "Tanh"];

fn infer(x: &In) -> Result<Vec<Out>> {
    super::infer(x, 4, &DEFAULTS, 2)
}

/// Whether QNN `Lstm` computes the node: the default activations, no `clip` (ONNX clips the
/// gates' inputs, QNN's `cell_clip_threshold` the cell state), constant `W`, `R`, `B` and `P`
/// (the peepholes, which QNN applies as ONNX does: `C₋₁` to the input and forget gates, `C` to
/// the output gate), a float X and outputs without encodings (a QDQ graph keeps the unrolled
/// form).
fn qnn_lstm_applies(g: &Graph, node: &Node, s: &Spec) -> bool {
    let default = [Act::Sigmoid, Act::Tanh, Act::Tanh];
    let konst = |i: usize| node.input(i).map_or(true, |v| g.konst(v).is_some());
    let float = node
        .input(0)
        .is_some_and(|v| matches!(g.dtype(v), DType::F16 | DType::F32));
    let unquantized = node
        .inputs
        .iter()
        .chain(&node.outputs)
        .flatten()
        .all(|&v| g.value(v).quant.is_none());
    s.clip.is_none()
        && s.acts.chunks(3).all(|a| a == default)
        && node.input(1).is_some()
        && node.input(2).is_some()
        && [1, 2, 3, 7].into_iter().all(konst)
        && float
        && unquantized
}

pub fn lstm(b: &mut Builder, node: &Node) -> Result<bool> {
    let s = spec(b.g, node, 4, &DEFAULTS)?;
    if b.table_qnn.iter().any(|o| o == op::LSTM) && qnn_lstm_applies(b.g, node, &s) {
        // Left to `lower_qnn`.
        return Ok(false);
    }
    let h = s.hidden;
    let x = time_major(b, node, &s)?;
    let (mut hs, mut h_fin, mut c_fin) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &rev) in s.reverse.iter().enumerate() {
        let [fa, ga, ha] = [&s.acts[3 * d], &s.acts[3 * d + 1], &s.acts[3 * d + 2]];
        let bias = direction_slice(b, node, 3, d).map(|v| {
            let w = b.slice(v, 0, 0, 4 * h);
            let r = b.slice(v, 0, 4 * h, 8 * h);
            b.op("Add", &[w, r], vec![])
        });
        let xw = project(b, node, x, d, bias)?;
        let rt = weights_t(b, node, 2, d)?;
        let peep = direction_slice(b, node, 7, d)
            .map(|p| [0, 1, 2].map(|k| b.slice(p, 0, k * h, (k + 1) * h)));
        let mut hp = initial(b, node, &s, 5, d);
        let mut cp = initial(b, node, &s, 6, d);
        let mut out = vec![None; s.seq];
        for t in order(s.seq, rev) {
            let mut g = step(b, &s, xw, t);
            if let Some(hv) = hp {
                let r = b.op("MatMul", &[hv, rt], vec![]);
                g = b.op("Add", &[g, r], vec![]);
            }
            let [mut gi, mut go, mut gf, gc] = [0, 1, 2, 3].map(|k| gate(b, g, k, h));
            if let (Some([pi, _, pf]), Some(c)) = (peep, cp) {
                let a = b.op("Mul", &[pi, c], vec![]);
                gi = b.op("Add", &[gi, a], vec![]);
                let a = b.op("Mul", &[pf, c], vec![]);
                gf = b.op("Add", &[gf, a], vec![]);
            }
            let gi = clipped(b, s.clip, gi);
            let i = activate(b, fa, gi);
            let gc = clipped(b, s.clip, gc);
            let cand = activate(b, ga, gc);
            let ic = b.op("Mul", &[i, cand], vec![]);
            let c = match cp {
                Some(c0) => {
                    let gf = clipped(b, s.clip, gf);
                    let f = activate(b, fa, gf);
                    let fc = b.op("Mul", &[f, c0], vec![]);
                    b.op("Add", &[fc, ic], vec![])
                }
                None => ic,
            };
            if let Some([_, po, _]) = peep {
                let a = b.op("Mul", &[po, c], vec![]);
                go = b.op("Add", &[go, a], vec![]);
            }
            let go = clipped(b, s.clip, go);
            let o = activate(b, fa, go);
            let hc = activate(b, ha, c);
            let hv = b.op("Mul", &[o, hc], vec![]);
            out[t] = Some(hv);
            hp = Some(hv);
            cp = Some(c);
        }
        hs.push(
            out.into_iter()
                .map(|v| v.expect("every step ran"))
                .collect(),
        );
        h_fin.push(hp.expect("a non-empty sequence"));
        c_fin.push(cp.expect("a non-empty sequence"));
    }
    write_outputs(b, node, &s, hs, vec![h_fin, c_fin]);
    Ok(true)
}

// ONNX's gate order in W, R and B: i, o, f, c.
const GI: usize = 0;
const GO: usize = 1;
const GF: usize = 2;
const GC: usize = 3;

/// Rows `k·H .. (k+1)·H` of direction `d` of a constant `[D, 4H, n]` (W or R), as `[H, n]`.
fn gate_rows(t: &Tensor, d: usize, k: usize, h: usize, dt: DType) -> Tensor {
    let n = t.shape[2];
    let start = (d * 4 * h + k * h) * n;
    let idx: Vec<usize> = (start..start + h * n).collect();
    t.gather_flat(vec![h, n], &idx).cast(dt)
}

/// Gate `k`'s bias of direction `d`, `Wb + Rb` (`[H]`), added on the host; zeros without B.
fn gate_bias(b: Option<&Tensor>, d: usize, k: usize, h: usize, dt: DType) -> Tensor {
    let v: Vec<f64> = match b {
        Some(b) => {
            let row = d * 8 * h;
            (0..h)
                .map(|j| b.get_f64(row + k * h + j) + b.get_f64(row + 4 * h + k * h + j))
                .collect()
        }
        None => vec![0.0; h],
    };
    Tensor::from_f64_as(dt, vec![h], &v)
}

/// Peephole `k` (ONNX's order in P: i, o, f) of direction `d` of a constant `[D, 3H]`, `[H]`.
fn peephole(p: &Tensor, d: usize, k: usize, h: usize, dt: DType) -> Tensor {
    let start = d * 3 * h + k * h;
    let idx: Vec<usize> = (start..start + h).collect();
    p.gather_flat(vec![h], &idx).cast(dt)
}

/// `StridedSlice` of `src` at `index` of `axis`, that axis dropped (`shrink_axes`).
fn take(cx: &mut LowerCx, node: &Node, src: TensorId, axis: usize, index: usize) -> TensorId {
    let shape = cx.tshape(src);
    let ranges: Vec<[i32; 3]> = shape
        .iter()
        .enumerate()
        .map(|(a, &n)| {
            if a == axis {
                [index as i32, index as i32 + 1, 1]
            } else {
                [0, n as i32, 1]
            }
        })
        .collect();
    let mut out_shape = shape;
    out_shape.remove(axis);
    let hint = format!("{}_take{axis}_{index}", cx.plan.tensors[src].name);
    let out = cx.native_like(&hint, src, &out_shape);
    cx.strided_slice(node, src, out, &ranges, 0, 1 << axis);
    out
}

/// Entry `index` of `axis` of input `i` as `[B, H]` (an initial state of one direction): sliced
/// on the host when constant, a Reshape when the axis has one entry, else a StridedSlice; the
/// node's zero state when the input is absent.
fn state(
    cx: &mut LowerCx,
    node: &Node,
    i: usize,
    axis: usize,
    index: usize,
    zeros: &mut ZeroState,
) -> Result<TensorId> {
    if node.input(i).is_none() {
        return zeros.get(cx, node);
    }
    let shape = cx.shape(node, i);
    let bh: Vec<usize> = shape
        .iter()
        .enumerate()
        .filter(|(a, _)| *a != axis)
        .map(|(_, &n)| n)
        .collect();
    if let Some(t) = cx.konst(node, i) {
        let st = crate::ir::tensor::strides(&shape);
        let idx = crate::ir::tensor::map_indices(&bh, |ix| {
            let (b, h) = (ix[0], ix[1]);
            let mut full = [0; 3];
            full[axis] = index;
            full[usize::from(axis == 0)] = b;
            full[2] = h;
            full.iter().zip(&st).map(|(a, s)| a * s).sum()
        });
        let t = t.gather_flat(bh, &idx).cast(zeros.dtype);
        let hint = format!("{}_state{i}_{index}", node.name);
        return cx.static_tensor(node, &hint, &t);
    }
    let src = cx.input(node, i)?;
    Ok(if shape[axis] == 1 {
        cx.reshape(node, src, &bh)
    } else {
        take(cx, node, src, axis, index)
    })
}

/// The `[B, H]` zero tensor of an LSTM node's absent initial states: made on first use and
/// shared by the node's states, so none is added to the graph when every state is given.
struct ZeroState {
    dtype: DType,
    shape: [usize; 2],
    tensor: Option<TensorId>,
}

impl ZeroState {
    fn get(&mut self, cx: &mut LowerCx, node: &Node) -> Result<TensorId> {
        if let Some(t) = self.tensor {
            return Ok(t);
        }
        let [b, h] = self.shape;
        let zero = Tensor::from_f64_as(self.dtype, vec![b, h], &vec![0.0; b * h]);
        let t = cx.static_tensor(node, &format!("{}_zero_state", node.name), &zero)?;
        self.tensor = Some(t);
        Ok(t)
    }
}

/// `parts` (each `[B, H]`) concatenated along `axis` and reshaped into output `k` of the node
/// (when it is read).
fn assemble(
    cx: &mut LowerCx,
    node: &Node,
    k: usize,
    parts: &[TensorId],
    axis: usize,
    used: &[usize],
) -> Result<()> {
    let Some(v) = node.output(k) else {
        return Ok(());
    };
    if used[v] == 0 && !cx.g.is_output(v) {
        return Ok(());
    }
    let y = cx.output(node, k)?;
    let joined = if parts.len() == 1 {
        parts[0]
    } else {
        let mut shape = cx.tshape(parts[0]);
        shape[axis] *= parts.len();
        let hint = format!("{}_Concat", node.name);
        let c = cx.native_like(&hint, parts[0], &shape);
        cx.op(
            node,
            op::CONCAT,
            parts.to_vec(),
            vec![c],
            vec![(param::AXIS, Param::u32(axis as u32))],
        );
        c
    };
    cx.op(node, op::RESHAPE, vec![joined], vec![y], vec![]);
    Ok(())
}

/// One QNN `Lstm` per time step and direction (the HTP has no 3-D Lstm input), inputs in the
/// op definition's order: `x_t [B, I]`; the input-to-forget, -cell and -output weights
/// `[H, I]`; the recurrent ones `[H, H]`; the forget, cell and output biases `[H]`; the hidden
/// and cell states `[B, H]`; four NULLs (layer norm); the input gate's input and recurrent
/// weights; the cell-to-input, -forget and -output peepholes (NULLs without P); the input
/// gate's bias; two NULLs (projection). Weights and
/// biases are sliced (and the two ONNX biases added) on the host, once per direction. Outputs
/// `[B, H]`: all hidden states, the cell state, the hidden state. `Y` is one Concat of the
/// steps' hidden states in `(t, d)` order (axis 0 time-major, axis 1 batch-major) and a
/// Reshape; `Y_h` and `Y_c` likewise.
fn lower_qnn(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let s = spec(cx.g, node, 4, &DEFAULTS)?;
    if !qnn_lstm_applies(cx.g, node, &s) {
        return Err(node.err_op(
            "this variant is unrolled before lowering (clip, activations, dynamic weights, quantized)",
        ));
    }
    let (h, bt, seq) = (s.hidden, s.batch, s.seq);
    let dt = cx.pdtype(node, 0)?;
    let used = cx.g.use_counts();
    let (w, r) = match (cx.konst(node, 1), cx.konst(node, 2)) {
        (Some(w), Some(r)) => (w, r),
        _ => return Err(node.err_invalid("W and R must be constant")),
    };
    let bias = cx.konst(node, 3);
    let peep = cx.konst(node, 7);
    let x = cx.input(node, 0)?;
    // The time axis of X, and of the states the batch-major layout's direction axis.
    let (t_axis, d_axis) = if s.batch_major { (1, 1) } else { (0, 0) };
    let steps: Vec<TensorId> = if seq == 1 {
        let i = cx.shape(node, 0)[2];
        vec![cx.reshape(node, x, &[bt, i])]
    } else {
        (0..seq).map(|t| take(cx, node, x, t_axis, t)).collect()
    };
    let null = cx.null(&format!("{}_null", node.name), dt);
    let mut zeros = ZeroState {
        dtype: dt,
        shape: [bt, h],
        tensor: None,
    };
    let params = || {
        vec![
            (param::DIRECTION, Param::u32(0)),
            (param::CELL_CLIP_THRESHOLD, Param::f32(0.0)),
            (param::OUTPUT_CLIP_THRESHOLD, Param::f32(0.0)),
            (param::TIME_MAJOR, Param::bool(false)),
            (param::INPUT_GATE_QSCALE, Param::f32(0.0)),
            (param::FORGET_GATE_QSCALE, Param::f32(0.0)),
            (param::CELL_GATE_QSCALE, Param::f32(0.0)),
            (param::OUTPUT_GATE_QSCALE, Param::f32(0.0)),
            (param::HIDDEN_STATE_OFFSET, Param::f32(0.0)),
            (param::HIDDEN_STATE_QSCALE, Param::f32(0.0)),
        ]
    };
    let d_n = s.reverse.len();
    // hs[t][d], and the final hidden and cell states per direction.
    let mut hs = vec![vec![None; d_n]; seq];
    let (mut h_fin, mut c_fin) = (Vec::new(), Vec::new());
    for (d, &rev) in s.reverse.iter().enumerate() {
        let mut konst = |name: &str, t: &Tensor| {
            let hint = format!("{}_{name}_d{d}", node.name);
            cx.static_tensor(node, &hint, t)
        };
        let [wi, wo, wf, wc] = [GI, GO, GF, GC].map(|k| gate_rows(w, d, k, h, dt));
        let [ri, ro, rf, rc] = [GI, GO, GF, GC].map(|k| gate_rows(r, d, k, h, dt));
        let [bi, bo, bf, bc] = [GI, GO, GF, GC].map(|k| gate_bias(bias, d, k, h, dt));
        let wf = konst("w_forget", &wf)?;
        let wc = konst("w_cell", &wc)?;
        let wo = konst("w_output", &wo)?;
        let rf = konst("r_forget", &rf)?;
        let rc = konst("r_cell", &rc)?;
        let ro = konst("r_output", &ro)?;
        let bf = konst("b_forget", &bf)?;
        let bc = konst("b_cell", &bc)?;
        let bo = konst("b_output", &bo)?;
        let wi = konst("w_input", &wi)?;
        let ri = konst("r_input", &ri)?;
        let bi = konst("b_input", &bi)?;
        // The cell-to-input, -forget and -output weights, NULL without P.
        let [pi, pf, po] = match peep {
            Some(p) => [
                konst("p_input", &peephole(p, d, 0, h, dt))?,
                konst("p_forget", &peephole(p, d, 2, h, dt))?,
                konst("p_output", &peephole(p, d, 1, h, dt))?,
            ],
            None => [null; 3],
        };
        let mut hp = state(cx, node, 5, d_axis, d, &mut zeros)?;
        let mut cp = state(cx, node, 6, d_axis, d, &mut zeros)?;
        for t in order(seq, rev) {
            let ins = vec![
                steps[t], wf, wc, wo, rf, rc, ro, bf, bc, bo, hp, cp, null, null, null, null, wi,
                ri, pi, pf, po, bi, null, null,
            ];
            let outs: Vec<TensorId> = ["all_h", "c", "h"]
                .iter()
                .map(|o| {
                    let hint = format!("{}_{o}_t{t}_d{d}", node.name);
                    cx.native(&hint, dt, &[bt, h])
                })
                .collect();
            cx.op(node, op::LSTM, ins, outs.clone(), params());
            cp = outs[1];
            hp = outs[2];
            hs[t][d] = Some(hp);
        }
        h_fin.push(hp);
        c_fin.push(cp);
    }
    let hs: Vec<TensorId> = hs
        .into_iter()
        .flatten()
        .map(|v| v.expect("every step ran"))
        .collect();
    // [B, H] parts in (t, d) order: axis 0 gives [T·D·B, H] (time-major Y [T, D, B, H]), axis 1
    // gives [B, T·D·H] (batch-major Y [B, T, D, H]); the same for the final states.
    let axis = usize::from(s.batch_major);
    assemble(cx, node, 0, &hs, axis, &used)?;
    assemble(cx, node, 1, &h_fin, axis, &used)?;
    assemble(cx, node, 2, &c_fin, axis, &used)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{rand_f32, ModelBuilder, A};

    fn model(dir: &'static str, seq_lens: Option<&[i64]>, attrs: &[(&str, A)]) -> ModelBuilder {
        let d = if dir == "bidirectional" { 2 } else { 1 };
        let (h, i) = (3, 2);
        let mut b = ModelBuilder::new(14)
            .input("x", DType::F32, &[4, 1, i as i64])
            .init(
                "w",
                Tensor::from_f32(vec![d, 4 * h, i], &rand_f32(1, d * 4 * h * i)),
            )
            .init(
                "r",
                Tensor::from_f32(vec![d, 4 * h, h], &rand_f32(2, d * 4 * h * h)),
            )
            .init(
                "b",
                Tensor::from_f32(vec![d, 8 * h], &rand_f32(3, d * 8 * h)),
            );
        let mut ins = vec!["x", "w", "r", "b"];
        if let Some(l) = seq_lens {
            b = b.init("l", Tensor::from_i64(vec![1], l));
            ins.push("l");
        }
        let mut a: Vec<(&str, A)> = vec![("hidden_size", A::I(h as i64)), ("direction", A::S(dir))];
        a.extend(attrs.iter().map(|(k, v)| (*k, v.clone())));
        b.node("LSTM", &ins, &["y", "yh"], &a)
            .output("y")
            .output("yh")
    }

    fn count(p: &crate::plan::Plan, op: &str) -> usize {
        p.op_types().iter().filter(|o| **o == op).count()
    }

    #[test]
    fn lstm_is_one_qnn_lstm_per_step() {
        let p = lower(&model("forward", None, &[]));
        let d = p.dump();
        assert_eq!(count(&p, "Lstm"), 4, "{d}");
        assert_eq!(count(&p, "FullyConnected") + count(&p, "Sigmoid"), 0, "{d}");
        // Step 1: x_t sliced out of X; the gate weights and the summed biases sliced on the
        // host, once; zero initial states; NULL layer-norm, peephole and projection inputs.
        assert!(
            d.contains(
                "StridedSlice(x:f32[4, 1, 2]) ranges=i32[3, 3]{1,2,1,0,1,1,0,2,1} begin_mask=0u \
                 end_mask=0u shrink_axes=1u -> x_take0_1:f32[1, 2]"
            ),
            "{d}"
        );
        assert!(
            d.contains(
                "Lstm(x_take0_1:f32[1, 2], static LSTM_0_w_forget_d0:f32[3, 2], \
                 static LSTM_0_w_cell_d0:f32[3, 2], static LSTM_0_w_output_d0:f32[3, 2], \
                 static LSTM_0_r_forget_d0:f32[3, 3], static LSTM_0_r_cell_d0:f32[3, 3], \
                 static LSTM_0_r_output_d0:f32[3, 3], static LSTM_0_b_forget_d0:f32[3], \
                 static LSTM_0_b_cell_d0:f32[3], static LSTM_0_b_output_d0:f32[3], \
                 LSTM_0_h_t0_d0:f32[1, 3], LSTM_0_c_t0_d0:f32[1, 3], \
                 null LSTM_0_null:f32[0], null LSTM_0_null:f32[0], null LSTM_0_null:f32[0], \
                 null LSTM_0_null:f32[0], static LSTM_0_w_input_d0:f32[3, 2], \
                 static LSTM_0_r_input_d0:f32[3, 3], null LSTM_0_null:f32[0], \
                 null LSTM_0_null:f32[0], null LSTM_0_null:f32[0], static LSTM_0_b_input_d0:f32[3], \
                 null LSTM_0_null:f32[0], null LSTM_0_null:f32[0]) direction=0u \
                 cell_clip_threshold=0f output_clip_threshold=0f time_major=false \
                 input_gate_qscale=0f forget_gate_qscale=0f cell_gate_qscale=0f \
                 output_gate_qscale=0f hidden_state_offset=0f hidden_state_qscale=0f \
                 -> LSTM_0_all_h_t1_d0:f32[1, 3], LSTM_0_c_t1_d0:f32[1, 3], LSTM_0_h_t1_d0:f32[1, 3]"
            ),
            "{d}"
        );
        assert!(
            d.contains("static LSTM_0_zero_state:f32[1, 3], static LSTM_0_zero_state"),
            "{d}"
        );
        assert!(
            d.contains(
                "Concat(LSTM_0_h_t0_d0:f32[1, 3], LSTM_0_h_t1_d0:f32[1, 3], \
                 LSTM_0_h_t2_d0:f32[1, 3], LSTM_0_h_t3_d0:f32[1, 3]) axis=0u -> LSTM_0_Concat:f32[4, 3]\n\
                 Reshape(LSTM_0_Concat:f32[4, 3]) -> y:f32[4, 1, 1, 3]\n\
                 Reshape(LSTM_0_h_t3_d0:f32[1, 3]) -> yh:f32[1, 1, 3]"
            ),
            "{d}"
        );
    }

    #[test]
    fn gate_weights_and_biases_are_sliced_in_qnn_order() {
        // W rows 0..4H are gates i, o, f, c; B is Wb then Rb.
        let (h, i) = (1, 1);
        let b = ModelBuilder::new(14)
            .input("x", DType::F32, &[1, 1, 1])
            .init(
                "w",
                Tensor::from_f32(vec![1, 4 * h, i], &[1.0, 2.0, 3.0, 4.0]),
            )
            .init(
                "r",
                Tensor::from_f32(vec![1, 4 * h, h], &[5.0, 6.0, 7.0, 8.0]),
            )
            .init(
                "b",
                Tensor::from_f32(
                    vec![1, 8 * h],
                    &[10.0, 20.0, 30.0, 40.0, 1.0, 2.0, 3.0, 4.0],
                ),
            )
            .node(
                "LSTM",
                &["x", "w", "r", "b"],
                &["y"],
                &[("hidden_size", A::I(1))],
            )
            .output("y");
        let p = lower(&b);
        let value = |name: &str| -> f32 {
            let t = p.tensors.iter().find(|t| t.name == name).expect(name);
            match &t.kind {
                crate::plan::TensorKind::Static(b) => {
                    f32::from_le_bytes(b[..4].try_into().unwrap())
                }
                k => panic!("{name} is {k:?}"),
            }
        };
        let got: Vec<f32> = [
            "w_input", "w_output", "w_forget", "w_cell", "r_input", "r_output", "r_forget",
            "r_cell", "b_input", "b_output", "b_forget", "b_cell",
        ]
        .iter()
        .map(|n| value(&format!("LSTM_0_{n}_d0")))
        .collect();
        assert_eq!(
            got,
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 11.0, 22.0, 33.0, 44.0]
        );
        // One step: x_t is X reshaped.
        assert!(
            p.dump()
                .contains("Reshape(x:f32[1, 1, 1]) -> x_reshaped:f32[1, 1]"),
            "{}",
            p.dump()
        );
    }

    #[test]
    fn bidirectional_steps_are_concatenated_in_time_then_direction_order() {
        let p = lower(&model("bidirectional", Some(&[4]), &[]));
        let d = p.dump();
        assert_eq!(count(&p, "Lstm"), 8, "{d}");
        // The reverse direction starts at the last step, from zero states.
        assert!(
            d.contains("Lstm(x_take0_3:f32[1, 2], static LSTM_0_w_forget_d1:f32[3, 2]"),
            "{d}"
        );
        assert!(
            d.contains(
                "Concat(LSTM_0_h_t0_d0:f32[1, 3], LSTM_0_h_t0_d1:f32[1, 3], LSTM_0_h_t1_d0:f32[1, 3]"
            ),
            "{d}"
        );
        assert!(
            d.contains(
                "-> LSTM_0_Concat:f32[8, 3]\nReshape(LSTM_0_Concat:f32[8, 3]) -> y:f32[4, 2, 1, 3]"
            ),
            "{d}"
        );
        assert!(
            d.contains(
                "Concat(LSTM_0_h_t3_d0:f32[1, 3], LSTM_0_h_t0_d1:f32[1, 3]) axis=0u \
                 -> LSTM_0_Concat_1:f32[2, 3]\nReshape(LSTM_0_Concat_1:f32[2, 3]) -> yh:f32[2, 1, 3]"
            ),
            "{d}"
        );
    }

    #[test]
    fn batch_major_steps_and_states_are_sliced_on_axis_1() {
        let (d, b, t, i, h) = (2, 2, 3, 2, 3);
        let m = ModelBuilder::new(14)
            .input("x", DType::F32, &[b, t, i])
            .input("c0", DType::F32, &[b, d, h])
            .init("w", Tensor::from_f32(vec![2, 12, 2], &rand_f32(1, 48)))
            .init("r", Tensor::from_f32(vec![2, 12, 3], &rand_f32(2, 72)))
            .init("h0", Tensor::from_f32(vec![2, 2, 3], &rand_f32(3, 12)))
            .node(
                "LSTM",
                &["x", "w", "r", "", "", "h0", "c0"],
                &["y", "yh", "yc"],
                &[
                    ("hidden_size", A::I(3)),
                    ("direction", A::S("bidirectional")),
                    ("layout", A::I(1)),
                ],
            )
            .output("y")
            .output("yc");
        let p = lower(&m);
        let dump = p.dump();
        assert_eq!(count(&p, "Lstm"), 6, "{dump}");
        assert_eq!(count(&p, "Transpose"), 0, "{dump}");
        // x_t on axis 1; c0 of direction 1 on axis 1; h0 sliced on the host; no B: zero biases.
        assert!(
            dump.contains("shrink_axes=2u -> x_take1_2:f32[2, 2]"),
            "{dump}"
        );
        assert!(
            dump.contains("shrink_axes=2u -> c0_take1_1:f32[2, 3]"),
            "{dump}"
        );
        assert!(dump.contains("static LSTM_0_state5_1:f32[2, 3]"), "{dump}");
        assert!(dump.contains("axis=1u -> LSTM_0_Concat:f32[2, 18]\nReshape(LSTM_0_Concat:f32[2, 18]) -> y:f32[2, 3, 2, 3]"), "{dump}");
        assert!(dump.contains("axis=1u -> LSTM_0_Concat_1:f32[2, 6]\nReshape(LSTM_0_Concat_1:f32[2, 6]) -> yc:f32[2, 2, 3]"), "{dump}");
        // Y_h is not read: no ops for it.
        assert!(!dump.contains("yh"), "{dump}");
        // Both initial states given: no zero state in the graph.
        assert!(
            !p.tensors.iter().any(|t| t.name.contains("zero_state")),
            "{:?}",
            p.tensors.iter().map(|t| &t.name).collect::<Vec<_>>()
        );
    }

    #[test]
    fn peepholes_are_the_cell_to_gate_inputs() {
        let b =
            model("forward", None, &[]).init("p", Tensor::from_f32(vec![1, 9], &rand_f32(4, 9)));
        let b = b
            .node(
                "LSTM",
                &["x", "w", "r", "b", "", "", "", "p"],
                &["y2"],
                &[("hidden_size", A::I(3))],
            )
            .output("y2");
        let d = lower(&b).dump();
        assert!(
            d.contains(
                "static LSTM_1_r_input_d0:f32[3, 3], static LSTM_1_p_input_d0:f32[3], \
                 static LSTM_1_p_forget_d0:f32[3], static LSTM_1_p_output_d0:f32[3], \
                 static LSTM_1_b_input_d0:f32[3]"
            ),
            "{d}"
        );
    }

    #[test]
    fn clip_activations_and_dynamic_weights_stay_unrolled() {
        let acts = A::Ss(vec!["Sigmoid".into(), "Relu".into(), "Tanh".into()]);
        for attrs in [vec![("clip", A::F(0.5))], vec![("activations", acts)]] {
            let p = lower(&model("forward", None, &attrs));
            assert_eq!(count(&p, "Lstm"), 0, "{attrs:?}: {}", p.dump());
            assert_eq!(
                count(&p, "FullyConnected"),
                1 + 3,
                "{attrs:?}: {}",
                p.dump()
            );
        }
        let p = lower(&model("forward", None, &[]));
        assert_eq!(count(&p, "Lstm"), 4);
        // R as a graph input: unrolled.
        let m = ModelBuilder::new(14)
            .input("x", DType::F32, &[4, 1, 2])
            .input("r", DType::F32, &[1, 12, 3])
            .init("w", Tensor::from_f32(vec![1, 12, 2], &rand_f32(1, 24)))
            .node(
                "LSTM",
                &["x", "w", "r"],
                &["y"],
                &[("hidden_size", A::I(3))],
            )
            .output("y");
        let p = lower(&m);
        assert_eq!(count(&p, "Lstm"), 0, "{}", p.dump());
        // (The first step's forget gate multiplies a zero state: not computed.)
        assert_eq!(count(&p, "Sigmoid"), 3 * 4 - 1, "{}", p.dump());
    }

    #[test]
    fn unrolled_without_lstm_in_the_op_table() {
        // The expansion leaves the node to the Lstm rule only when the backend's op table lists
        // QNN Lstm (the HTP's does; the GPU's does not).
        let mut g = graph_with(&[("x", DType::F32, vec![4, 1, 2])]);
        let w = g.add_const("w", Tensor::from_f32(vec![1, 12, 2], &rand_f32(1, 24)));
        let r = g.add_const("r", Tensor::from_f32(vec![1, 12, 3], &rand_f32(2, 36)));
        let y = g.add_value("y");
        let mut n = node("LSTM", &[Some(0), Some(w), Some(r)], &[]);
        n.attrs
            .insert("hidden_size".into(), crate::ir::Attr::Int(3));
        n.outputs = vec![Some(y)];
        let gpu = crate::table::OpTable::get(crate::Backend::Gpu).unwrap();
        let htp = crate::table::OpTable::get(crate::Backend::Htp).unwrap();
        for (table, expanded) in [
            (&[][..], true),
            (&htp.entry("LSTM").unwrap().qnn[..], false),
        ] {
            let mut b = crate::ir::builder::Builder::new(&mut g, "n");
            b.table_qnn = table;
            assert_eq!(super::lstm(&mut b, &n).unwrap(), expanded, "{table:?}");
        }
        assert!(!gpu.entry("LSTM").unwrap().qnn.iter().any(|o| o == "Lstm"));
    }

    #[test]
    fn partial_sequence_lens_unsupported() {
        let e = lower_err(&model("forward", Some(&[2]), &[]));
        assert!(e.contains("input 'sequence_lens'"), "{e}");
    }

    #[test]
    fn input_forget_and_unknown_activation_unsupported() {
        let e = lower_err(&model("forward", None, &[("input_forget", A::I(1))]));
        assert!(e.contains("attribute 'input_forget'"), "{e}");
        let acts = A::Ss(vec!["Sigmoid".into(), "Gelu".into(), "Tanh".into()]);
        let e = lower_err(&model("reverse", None, &[("activations", acts)]));
        assert!(
            e.contains("attribute 'activations': activation 'Gelu'"),
            "{e}"
        );
    }

    #[test]
    fn lstm_is_inferred_batch_major() {
        let g = graph_with(&[
            ("x", DType::F16, vec![2, 5, 4]),
            ("w", DType::F16, vec![1, 12, 4]),
            ("r", DType::F16, vec![1, 12, 3]),
        ]);
        let n = node(
            "LSTM",
            &[Some(0), Some(1), Some(2)],
            &[
                ("hidden_size", crate::ir::Attr::Int(3)),
                ("layout", crate::ir::Attr::Int(1)),
            ],
        );
        assert_eq!(
            infer(&g, &n).unwrap(),
            vec![
                (DType::F16, vec![2, 5, 1, 3]),
                (DType::F16, vec![2, 1, 3]),
                (DType::F16, vec![2, 1, 3])
            ]
        );
    }
}
