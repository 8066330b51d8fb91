//! RNN — <https://onnx.ai/onnx/operators/onnx__RNN.html>, opsets 7, 14 (`layout`) and 22:
//! `H = f(X @ Wᵀ + H₋₁ @ Rᵀ + Wb + Rb)`, unrolled over the static sequence length as LSTM and
//! GRU are (`lstm.rs`): one MatMul for the input projection of every step, one per step after
//! the first for the recurrence. Directions, `layout`, initial state, `clip`, `activations`
//! (default Tanh) as for LSTM.

use super::{
    activate, clipped, direction_slice, initial, order, project, spec, step, time_major, weights_t,
    write_outputs,
};
use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, OpDef, ShapeInput};

pub const RNN: OpDef = OpDef {
    op_type: "RNN",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(rnn),
    lower: None,
    quant: Quant::Float,
};

const DEFAULTS: [&str; 1] = ["Tanh"];

fn infer(x: &In) -> Result<Vec<Out>> {
    super::infer(x, 1, &DEFAULTS, 1)
}

pub fn rnn(b: &mut Builder, node: &Node) -> Result<bool> {
    let s = spec(b.g, node, 1, &DEFAULTS)?;
    let h = s.hidden;
    let x = time_major(b, node, &s)?;
    let (mut hs, mut h_fin) = (Vec::new(), Vec::new());
    for (d, &rev) in s.reverse.iter().enumerate() {
        let bias = direction_slice(b, node, 3, d).map(|v| {
            let w = b.slice(v, 0, 0, h);
            let r = b.slice(v, 0, h, 2 * h);
            b.op("Add", &[w, r], vec![])
        });
        let xw = project(b, node, x, d, bias)?;
        let rt = weights_t(b, node, 2, d)?;
        let mut hp = initial(b, node, &s, 5, d);
        let mut out = vec![None; s.seq];
        for t in order(s.seq, rev) {
            let mut g = step(b, &s, xw, t);
            if let Some(hv) = hp {
                let m = b.op("MatMul", &[hv, rt], vec![]);
                g = b.op("Add", &[g, m], vec![]);
            }
            let g = clipped(b, s.clip, g);
            let hv = activate(b, &s.acts[d], g);
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
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{rand_f32, ModelBuilder, A};

    fn model(acts: Option<Vec<String>>) -> ModelBuilder {
        let mut a = vec![("hidden_size", A::I(3))];
        if let Some(v) = acts {
            a.push(("activations", A::Ss(v)));
        }
        ModelBuilder::new(14)
            .input("x", DType::F32, &[2, 1, 2])
            .init("w", Tensor::from_f32(vec![1, 3, 2], &rand_f32(1, 6)))
            .init("r", Tensor::from_f32(vec![1, 3, 3], &rand_f32(2, 9)))
            .node("RNN", &["x", "w", "r"], &["y"], &a)
            .output("y")
    }

    #[test]
    fn rnn_is_unrolled() {
        let t = lower(&model(None)).op_types();
        assert_eq!(t.iter().filter(|o| **o == "Tanh").count(), 2, "{t:?}");
        let t = lower(&model(Some(vec!["Relu".into()]))).op_types();
        assert_eq!(t.iter().filter(|o| **o == "Relu").count(), 2, "{t:?}");
    }

    #[test]
    fn wrong_activation_count_unsupported() {
        let e = lower_err(&model(Some(vec!["Relu".into(), "Tanh".into()])));
        assert!(
            e.contains("attribute 'activations': 2 given, 1 expected"),
            "{e}"
        );
    }
}
