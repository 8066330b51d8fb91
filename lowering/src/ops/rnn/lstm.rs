//! LSTM — <https://onnx.ai/onnx/operators/onnx__LSTM.html>, opsets 7, 14 (`layout`) and 22.
//!
//! Unrolled over the static sequence length: the input projection of every step is one MatMul
//! (`X @ Wᵀ + Wb + Rb`, `[T, B, 4H]`); each step adds `H₋₁ @ Rᵀ` (one MatMul, skipped for a
//! zero initial state), slices the i, o, f, c gates and computes `C = f ⊙ C₋₁ + i ⊙ g(c)`,
//! `H = o ⊙ h(C)` with the peepholes `P` when given. Directions forward, reverse and
//! bidirectional, `layout` 0 and 1, initial states, `clip` (of the gates' inputs),
//! `activations` (Sigmoid, Tanh, Relu, LeakyRelu, HardSigmoid, Affine, ScaledTanh, Elu,
//! Softsign, Softplus, ThresholdedRelu) with `activation_alpha`/`beta`. Refused:
//! `input_forget`, `sequence_lens` other than all equal to the sequence length.
//!
//! QNN has an `Lstm` op and the HTP lists it, but it takes its optional inputs (the input gate's
//! weights among them, after the unused layer-norm weights) as NULL tensors, which plans do
//! not express; the unrolled form runs in fp16 with the ops below.

use super::{
    activate, clipped, direction_slice, gate, initial, order, project, spec, step, time_major,
    weights_t, write_outputs,
};
use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::OpDef;
use crate::ops::Quant;

pub const LSTM: OpDef = OpDef {
    op_type: "LSTM",
    infer,
    fold: None,
    expand: Some(lstm),
    lower: None,
    quant: Quant::Float,
};

/// f (the gates), g (the cell input), h (the cell output).
const DEFAULTS: [&str; 3] = ["Sigmoid", "Tanh", "Tanh"];

fn infer(x: &In) -> Result<Vec<Out>> {
    super::infer(x, 4, &DEFAULTS, 2)
}

pub fn lstm(b: &mut Builder, node: &Node) -> Result<bool> {
    let s = spec(b.g, node, 4, &DEFAULTS)?;
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

    #[test]
    fn lstm_is_unrolled() {
        let p = lower(&model("forward", None, &[]));
        let t = p.op_types();
        // One input projection; a recurrent MatMul for the 3 steps after the first.
        assert_eq!(
            t.iter().filter(|o| **o == "FullyConnected").count(),
            1 + 3,
            "{t:?}"
        );
        assert_eq!(
            t.iter().filter(|o| **o == "Sigmoid").count(),
            3 * 4 - 1,
            "{t:?}"
        );
        assert!(p.dump().contains("-> y:f32[4, 1, 1, 3]"), "{}", p.dump());
        assert!(p.dump().contains("-> yh:f32[1, 1, 3]"), "{}", p.dump());
    }

    #[test]
    fn bidirectional_concatenates_directions() {
        let d = lower(&model("bidirectional", Some(&[4]), &[])).dump();
        assert!(d.contains("axis=1u -> y:f32[4, 2, 1, 3]"), "{d}");
        assert!(d.contains("-> yh:f32[2, 1, 3]"), "{d}");
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
