//! SoftmaxCrossEntropyLoss — <https://onnx.ai/onnx/operators/onnx__SoftmaxCrossEntropyLoss.html>
//! (opset 12, 13). Expanded before lowering: `log_prob = LogSoftmax(scores)` over the class
//! axis 1 (moved last with Transposes when there are spatial dims), then the
//! NegativeLogLikelihoodLoss expansion ([`super::nll_loss`]) with the same `weights`,
//! `ignore_index` and `reduction`. QNN ops: LogSoftmax, Transpose and those of the NLL loss.

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::Node;
use crate::ops::Quant;
use crate::ops::{Layout, OpDef, ShapeInput};

use super::nll_loss::{loss_shape, nll_into};
use crate::ops::infer::{In, Out};

pub const SOFTMAX_CROSS_ENTROPY_LOSS: OpDef = OpDef {
    op_type: "SoftmaxCrossEntropyLoss",
    since: 12,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(softmax_cross_entropy),
    lower: None,
    quant: Quant::Float,
};

/// The loss, and the log-probabilities (`log_prob`, the shape of the scores).
fn infer(x: &In) -> Result<Vec<Out>> {
    let xs = x.shape(0)?;
    let loss = loss_shape(x.n, xs, x.shape(1)?)?;
    let dt = x.dtype(0)?;
    Ok(vec![(dt, loss), (dt, xs.to_vec())])
}

pub fn softmax_cross_entropy(b: &mut Builder, node: &Node) -> Result<bool> {
    let x = node
        .input(0)
        .ok_or_else(|| node.err_invalid("input 'scores' is missing"))?;
    let t = node
        .input(1)
        .ok_or_else(|| node.err_invalid("input 'labels' is missing"))?;
    let out = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 'output' is missing"))?;
    if !b.g.dtype(t).is_int() {
        return Err(node.err_dtype("labels must be an integer tensor"));
    }
    let r = b.g.shape(x).len();
    if r < 2 {
        return Err(node.err_invalid("scores must have rank >= 2"));
    }
    let lp = if r == 2 {
        b.softmax_last("LogSoftmax", x, 2)
    } else {
        let mut perm: Vec<i64> = vec![0];
        perm.extend(2..r as i64);
        perm.push(1);
        let mut inv = vec![0i64; r];
        for (i, &p) in perm.iter().enumerate() {
            inv[p as usize] = i as i64;
        }
        let xt = b.transpose(x, &perm);
        let l = b.softmax_last("LogSoftmax", xt, r);
        b.transpose(l, &inv)
    };
    if let Some(o) = node.output(1) {
        b.op_to("Identity", &[lp], vec![], &[o]);
    }
    nll_into(b, node, (lp, x), t, node.input(2), out)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn loss_and_log_prob_are_inferred() {
        let g = graph_with(&[
            ("x", DType::F32, vec![3, 5, 2]),
            ("t", DType::I64, vec![3, 2]),
        ]);
        let n = node("SoftmaxCrossEntropyLoss", &[Some(0), Some(1)], &[]);
        assert_eq!(
            infer(&g, &n).unwrap(),
            vec![(DType::F32, vec![]), (DType::F32, vec![3, 5, 2])]
        );
    }

    #[test]
    fn sce_spatial_moves_classes_last() {
        let b = ModelBuilder::new(13)
            .input("x", DType::F32, &[2, 3, 4])
            .input("t", DType::I64, &[2, 4])
            .node(
                "SoftmaxCrossEntropyLoss",
                &["x", "t"],
                &["y", "lp"],
                &[("reduction", A::S("sum"))],
            )
            .output("y")
            .output("lp");
        let d = lower(&b).dump();
        assert!(
            d.contains(
                "LogSoftmax(SoftmaxCrossEntropyLoss_0/Transpose:f32[2, 4, 3]) axis=2u beta=1f"
            ),
            "{d}"
        );
        assert!(d.contains("output lp:f32[2, 3, 4]"), "{d}");
        assert!(d.contains("-> y:f32[1]"), "{d}");
    }

    #[test]
    fn sce_float_labels_rejected() {
        let b = ModelBuilder::new(13)
            .input("x", DType::F32, &[2, 3])
            .input("t", DType::F32, &[2])
            .node("SoftmaxCrossEntropyLoss", &["x", "t"], &["y"], &[])
            .output("y");
        let e = lower_err(&b);
        assert!(e.contains("labels must be an integer tensor"), "{e}");
    }
}
