//! Softmax / LogSoftmax — <https://onnx.ai/onnx/operators/onnx__Softmax.html>.
//! Opset 13+: normalises along `axis` (default -1). Opsets 1–12: the input is coerced to 2-D
//! at `axis` (default 1) and normalised along the flattened tail, done here with Reshapes.
//! QNN `Softmax` / `LogSoftmax` with `beta` = 1.0 (FLOAT_32 scalar), which normalise the last
//! dimension; HTP's `LogSoftmax` also requires its `axis` param (UINT_32 scalar, the last axis)
//! and fails validation without it. Constraint: on HTP only the last axis is supported; a softmax over another axis
//! is rejected (rewrite the model or transpose explicitly).

use crate::attr::norm_axis;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::LowerCx;
use crate::plan::Param;
use crate::qnn_names::{op, param};
use crate::Backend;

pub fn softmax(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let q = if node.op_type == "LogSoftmax" {
        op::LOG_SOFTMAX
    } else {
        op::SOFTMAX
    };
    let shape = cx.shape(node, 0);
    let r = shape.len().max(1);
    let legacy = cx.g.opset() < 13;
    let axis = norm_axis(
        node,
        "axis",
        node.attr_i("axis", if legacy { 1 } else { -1 })?,
        r,
    )?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    let params = |rank: usize| {
        let mut p = Vec::new();
        if q == op::LOG_SOFTMAX {
            p.push((param::AXIS, Param::u32(rank as u32 - 1)));
        }
        p.push((param::BETA, Param::f32(1.0)));
        p
    };
    if axis == r - 1 {
        let params = params(r);
        cx.op(node, q, vec![x], vec![y], params);
        return Ok(());
    }
    if legacy {
        let flat = [
            shape[..axis].iter().product(),
            shape[axis..].iter().product(),
        ];
        let x2 = cx.reshape(node, x, &flat);
        let dt = cx.tensor_dtype(x);
        let s = cx.emit(node, q, vec![x2], dt, &flat, params(2));
        cx.op(node, op::RESHAPE, vec![s], vec![y], vec![]);
        return Ok(());
    }
    let b = match cx.backend {
        Backend::Htp => "HTP",
        Backend::Gpu => "GPU",
    };
    Err(node.err_attr("axis", format!("only the last axis is supported on {b}")))
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn softmax_last_axis() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 5])
            .node("Softmax", &["x"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower(&b).dump(),
            "input x:f32[2, 5]\nSoftmax(x:f32[2, 5]) beta=1f -> y:f32[2, 5]\noutput y:f32[2, 5]\n"
        );
    }

    #[test]
    fn log_softmax_has_the_axis_param() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 5])
            .node("LogSoftmax", &["x"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("LogSoftmax(x:f32[2, 3, 5]) axis=2u beta=1f -> y:f32[2, 3, 5]"),
            "{d}"
        );
    }

    #[test]
    fn softmax_legacy_axis_flattens() {
        let b = ModelBuilder::new(11)
            .input("x", DType::F32, &[2, 3, 4])
            .node("Softmax", &["x"], &["y"], &[("axis", A::I(1))])
            .output("y");
        assert_eq!(lower(&b).op_types(), vec!["Reshape", "Softmax", "Reshape"]);
    }

    #[test]
    fn softmax_non_last_axis_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .named_node(
                "blk3/Softmax",
                "Softmax",
                &["x"],
                &["y"],
                &[("axis", A::I(1))],
            )
            .output("y");
        assert_eq!(
            lower_err(&b),
            "Node \"blk3/Softmax\" (Softmax), attribute 'axis': only the last axis is supported on HTP"
        );
    }
}
