//! CausalConvWithState — <https://onnx.ai/onnx/operators/onnx__CausalConvWithState.html>
//! (opset 27). Expanded before lowering like its function body: `padded = Concat(past_state, input)`
//! along the length axis (zeros `[B, C, k-1]` without a past state), `output = Conv(padded,
//! weight, bias, group = C)` (1-D, so it runs as the 2-D expansion of [`super::conv1d`]), with
//! `activation` `silu`/`swish` applied as `x · Sigmoid(x)`, and `present_state` the last `k-1`
//! positions of `padded` (Slice). Constraints: kernel size > 1 (an empty state cannot be a QNN
//! tensor).

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Node};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, OpDef, ShapeInput};

pub const CAUSAL_CONV_WITH_STATE: OpDef = OpDef {
    op_type: "CausalConvWithState",
    since: 27,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(causal_conv_with_state),
    lower: None,
    quant: Quant::Float,
};

/// `output` has the input's shape (the past state pads the length), `present_state` the
/// last `k - 1` positions.
fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let (xs, ws) = (x.shape(0)?, x.shape(1)?);
    if xs.len() != 3 || ws.len() != 3 || ws[0] != xs[1] || ws[1] != 1 {
        return Err(n.err_invalid(format!(
            "input {xs:?} and weight {ws:?} are not [B, C, L] and [C, 1, k]"
        )));
    }
    let dt = x.dtype(0)?;
    let state = vec![xs[0], xs[1], ws[2].saturating_sub(1)];
    Ok(vec![(dt, xs.to_vec()), (dt, state)])
}

pub fn causal_conv_with_state(b: &mut Builder, node: &Node) -> Result<bool> {
    let x = node
        .input(0)
        .ok_or_else(|| node.err_invalid("input 'input' is missing"))?;
    let w = node
        .input(1)
        .ok_or_else(|| node.err_invalid("input 'weight' is missing"))?;
    let (xs, ws) = (b.g.shape(x).to_vec(), b.g.shape(w).to_vec());
    if xs.len() != 3 || ws.len() != 3 || ws[0] != xs[1] || ws[1] != 1 {
        return Err(node.err_invalid(format!(
            "input {xs:?} and weight {ws:?} are not [B, C, L] and [C, 1, k]"
        )));
    }
    let (batch, c, len, k) = (xs[0], xs[1], xs[2], ws[2]);
    if k < 2 {
        return Err(node.err_op("kernel size 1 gives an empty state, which QNN cannot hold"));
    }
    let act = node.attr_s("activation", "none")?.to_string();
    if !matches!(act.as_str(), "none" | "silu" | "swish") {
        return Err(node.err_attr("activation", format!("unknown value '{act}'")));
    }
    let dt = b.g.dtype(x);
    let past = match node.input(3) {
        Some(p) => p,
        None => {
            let n = batch * c * (k - 1);
            b.konst(
                "zero_state",
                Tensor::from_f64_as(dt, vec![batch, c, k - 1], &vec![0.0; n]),
            )
        }
    };
    let padded = b.op("Concat", &[past, x], vec![("axis", Attr::Int(2))]);
    let mut ins = vec![padded, w];
    if let Some(bias) = node.input(2) {
        ins.push(bias);
    }
    let y = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 'output' is missing"))?;
    let group = vec![("group", Attr::Int(c as i64))];
    if act == "none" {
        b.op_to("Conv", &ins, group, &[y]);
    } else {
        let conv = b.op("Conv", &ins, group);
        let s = b.op("Sigmoid", &[conv], vec![]);
        b.op_to("Mul", &[conv, s], vec![], &[y]);
    }
    if let Some(o) = node.output(1) {
        let total = (len + k - 1) as i64;
        let starts = b.ints(&[total - (k as i64 - 1)]);
        let ends = b.ints(&[total]);
        let axes = b.ints(&[2]);
        b.op_to("Slice", &[padded, starts, ends, axes], vec![], &[o]);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn output_and_state_are_inferred() {
        let g = graph_with(&[
            ("x", DType::F16, vec![1, 4, 8]),
            ("w", DType::F16, vec![4, 1, 3]),
        ]);
        let n = node("CausalConvWithState", &[Some(0), Some(1)], &[]);
        assert_eq!(
            infer(&g, &n).unwrap(),
            vec![(DType::F16, vec![1, 4, 8]), (DType::F16, vec![1, 4, 2])]
        );
    }

    fn model(k: i64, attrs: &[(&str, A)]) -> ModelBuilder {
        ModelBuilder::new(27)
            .input("x", DType::F32, &[1, 2, 5])
            .input("w", DType::F32, &[2, 1, k])
            .node("CausalConvWithState", &["x", "w"], &["y", "s"], attrs)
            .output("y")
            .output("s")
    }

    #[test]
    fn causal_conv_silu() {
        let p = lower(&model(3, &[("activation", A::S("silu"))]));
        let d = p.dump();
        assert!(
            d.contains(
                "Concat(static CausalConvWithState_0/zero_state:f32[1, 2, 2], x:f32[1, 2, 5])"
            ),
            "{d}"
        );
        assert!(p.op_types().contains(&"DepthWiseConv2d"), "{d}");
        assert!(p.op_types().contains(&"Sigmoid"), "{d}");
        assert!(d.contains("output s:f32[1, 2, 2]"), "{d}");
    }

    #[test]
    fn causal_conv_kernel_one_unsupported() {
        assert!(lower_err(&model(1, &[])).contains("kernel size 1"));
    }

    #[test]
    fn causal_conv_unknown_activation() {
        assert!(lower_err(&model(3, &[("activation", A::S("gelu"))]))
            .contains("attribute 'activation'"));
    }
}
