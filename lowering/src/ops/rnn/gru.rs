//! GRU — <https://onnx.ai/onnx/operators/onnx__GRU.html>, opsets 7, 14 (`layout`) and 22.
//!
//! Unrolled over the static sequence length: the input projection of every step is one MatMul
//! (`X @ Wᵀ + Wb`, plus `Rb` of the z and r gates, and of h unless `linear_before_reset`);
//! each step computes z and r from one `H₋₁ @ R_zrᵀ` MatMul, then
//! `n = g(x_h + r ⊙ (H₋₁ @ R_hᵀ + Rb_h))` (`linear_before_reset` 1, PyTorch's) or
//! `n = g(x_h + (r ⊙ H₋₁) @ R_hᵀ)` (0), and `H = n + z ⊙ (H₋₁ - n)`. Directions, `layout`,
//! initial state, `clip`, `activations` as for LSTM (`lstm.rs`); `sequence_lens` must be absent
//! or all equal to the sequence length.
//!
//! QNN's `Gru` is on the HTP list, but how it orders and splits its weights is not documented
//! where this was written, so it is not used.

use super::{
    activate, clipped, direction_slice, gate, initial, order, project, spec, step, time_major,
    weights_t, write_outputs,
};
use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Node};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, OpDef, ShapeInput};

pub const GRU: OpDef = OpDef {
    op_type: "GRU",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(gru),
    lower: None,
    quant: Quant::Float,
};

/// f (z and r), g (the new gate).
const DEFAULTS: [&str; 2] = ["Sigmoid", "Tanh"];

fn infer(x: &In) -> Result<Vec<Out>> {
    super::infer(x, 3, &DEFAULTS, 1)
}

pub fn gru(b: &mut Builder, node: &Node) -> Result<bool> {
    let s = spec(b.g, node, 3, &DEFAULTS)?;
    let h = s.hidden;
    let lbr = node.attr_i("linear_before_reset", 0)? != 0;
    let x = time_major(b, node, &s)?;
    let dt = b.g.dtype(x);
    let (mut hs, mut h_fin) = (Vec::new(), Vec::new());
    for (d, &rev) in s.reverse.iter().enumerate() {
        let [fa, ga] = [&s.acts[2 * d], &s.acts[2 * d + 1]];
        let mut rb_h = None;
        let bias = direction_slice(b, node, 3, d).map(|v| {
            let w = b.slice(v, 0, 0, 3 * h);
            let r = if lbr {
                // Rb_h stays inside the reset product.
                rb_h = Some(b.slice(v, 0, 5 * h, 6 * h));
                let zr = b.slice(v, 0, 3 * h, 5 * h);
                let zero = b.konst("zeros", Tensor::from_f64_as(dt, vec![h], &vec![0.0; h]));
                b.op("Concat", &[zr, zero], vec![("axis", Attr::Int(0))])
            } else {
                b.slice(v, 0, 3 * h, 6 * h)
            };
            b.op("Add", &[w, r], vec![])
        });
        let xw = project(b, node, x, d, bias)?;
        let rt = weights_t(b, node, 2, d)?;
        let r_zr = b.slice(rt, 1, 0, 2 * h);
        let r_h = b.slice(rt, 1, 2 * h, 3 * h);
        let mut hp = initial(b, node, &s, 5, d);
        let mut out = vec![None; s.seq];
        for t in order(s.seq, rev) {
            let g = step(b, &s, xw, t);
            let mut zr = b.slice(g, 1, 0, 2 * h);
            if let Some(hv) = hp {
                let m = b.op("MatMul", &[hv, r_zr], vec![]);
                zr = b.op("Add", &[zr, m], vec![]);
            }
            let [gz, gr] = [0, 1].map(|k| gate(b, zr, k, h));
            let gz = clipped(b, s.clip, gz);
            let z = activate(b, fa, gz);
            let gr = clipped(b, s.clip, gr);
            let r = activate(b, fa, gr);
            let xh = gate(b, g, 2, h);
            let rec = match (lbr, hp) {
                (true, Some(hv)) => {
                    let m = b.op("MatMul", &[hv, r_h], vec![]);
                    Some(match rb_h {
                        Some(c) => b.op("Add", &[m, c], vec![]),
                        None => m,
                    })
                }
                (true, None) => rb_h,
                (false, Some(hv)) => {
                    let rh = b.op("Mul", &[r, hv], vec![]);
                    Some(b.op("MatMul", &[rh, r_h], vec![]))
                }
                (false, None) => None,
            };
            let n_in = match (lbr, rec) {
                (true, Some(v)) => {
                    let m = b.op("Mul", &[r, v], vec![]);
                    b.op("Add", &[xh, m], vec![])
                }
                (false, Some(v)) => b.op("Add", &[xh, v], vec![]),
                (_, None) => xh,
            };
            let n_in = clipped(b, s.clip, n_in);
            let n = activate(b, ga, n_in);
            let hv = match hp {
                Some(h0) => {
                    let diff = b.op("Sub", &[h0, n], vec![]);
                    let zd = b.op("Mul", &[z, diff], vec![]);
                    b.op("Add", &[n, zd], vec![])
                }
                None => {
                    let zn = b.op("Mul", &[z, n], vec![]);
                    b.op("Sub", &[n, zn], vec![])
                }
            };
            out[t] = Some(hv);
            hp = Some(hv);
        }
        hs.push(
            out.into_iter()
                .map(|v| v.expect("every step ran"))
                .collect(),
        );
        h_fin.push(hp.expect("a non-empty sequence"));
    }
    write_outputs(b, node, &s, hs, vec![h_fin]);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{rand_f32, ModelBuilder, A};

    fn model(lbr: i64, layout: i64, clip: Option<f32>) -> ModelBuilder {
        let (h, i) = (4, 3);
        let x = if layout == 1 { [2, 3, i] } else { [3, 2, i] };
        let mut a = vec![
            ("hidden_size", A::I(h as i64)),
            ("linear_before_reset", A::I(lbr)),
            ("layout", A::I(layout)),
        ];
        if let Some(c) = clip {
            a.push(("clip", A::F(c)));
        }
        ModelBuilder::new(14)
            .input("x", DType::F32, &x.map(|v| v as i64))
            .init(
                "w",
                Tensor::from_f32(vec![1, 3 * h, i], &rand_f32(1, 3 * h * i)),
            )
            .init(
                "r",
                Tensor::from_f32(vec![1, 3 * h, h], &rand_f32(2, 3 * h * h)),
            )
            .init("b", Tensor::from_f32(vec![1, 6 * h], &rand_f32(3, 6 * h)))
            .node("GRU", &["x", "w", "r", "b"], &["", "yh"], &a)
            .output("yh")
    }

    #[test]
    fn gru_is_unrolled() {
        let t = lower(&model(1, 0, None)).op_types();
        // One projection; the z/r and h recurrent MatMuls for the 2 steps after the first.
        assert_eq!(
            t.iter().filter(|o| **o == "FullyConnected").count(),
            1 + 2 * 2,
            "{t:?}"
        );
        assert_eq!(t.iter().filter(|o| **o == "Tanh").count(), 3, "{t:?}");
        let t = lower(&model(0, 0, Some(2.0))).op_types();
        assert!(t.contains(&"ElementWiseMinimum"), "{t:?}");
    }

    #[test]
    fn batch_major_state_is_transposed() {
        let d = lower(&model(1, 1, None)).dump();
        assert!(d.contains("-> yh:f32[2, 1, 4]"), "{d}");
    }

    #[test]
    fn mismatched_weights_are_invalid() {
        let b = ModelBuilder::new(14)
            .input("x", DType::F32, &[3, 2, 3])
            .init("w", Tensor::from_f32(vec![1, 12, 3], &[0.0; 36]))
            .init("r", Tensor::from_f32(vec![1, 12, 3], &[0.0; 36]))
            .node("GRU", &["x", "w", "r"], &["y"], &[("hidden_size", A::I(4))])
            .output("y");
        assert!(lower_err(&b).contains("do not match"));
    }

    #[test]
    fn gru_is_inferred() {
        let g = graph_with(&[
            ("x", DType::F32, vec![5, 2, 4]),
            ("w", DType::F32, vec![2, 9, 4]),
            ("r", DType::F32, vec![2, 9, 3]),
        ]);
        let n = node(
            "GRU",
            &[Some(0), Some(1), Some(2)],
            &[("direction", crate::ir::Attr::String("bidirectional".into()))],
        );
        assert_eq!(
            infer(&g, &n).unwrap(),
            vec![(DType::F32, vec![5, 2, 2, 3]), (DType::F32, vec![2, 2, 3])]
        );
    }
}
