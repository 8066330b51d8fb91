//! Softmax / LogSoftmax — <https://onnx.ai/onnx/operators/onnx__Softmax.html>.
//! Opset 13+: normalises along `axis` (default -1). Opsets 1–12: the input is coerced to 2-D
//! at `axis` (default 1) and normalised along the flattened tail, done here with Reshapes.
//! QNN `Softmax` / `LogSoftmax` with `beta` (FLOAT_32 scalar: 1.0, or the scale of the input
//! that the `fuse_softmax_scale` pass folded into the attribute `BETA`), which normalise the last
//! dimension; HTP's `LogSoftmax` also requires its `axis` param (UINT_32 scalar, the last axis)
//! and fails validation without it. QNN normalises the last axis only: a softmax over another
//! axis (opset 13+) reaches this rule already moved last between two `Transpose`s by the layout
//! pass (`passes/layout.rs`), where they compose with the transposes around it.

use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

/// Internal (non-ONNX) attribute: QNN's `beta`, the input's scale, set by a fusion pass.
pub const BETA: &str = "qnnx_beta";

pub const SOFTMAX: OpDef = OpDef {
    op_type: "Softmax",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(softmax),
    quant: Quant::Direct,
};

pub const LOG_SOFTMAX: OpDef = OpDef {
    op_type: "LogSoftmax",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(softmax),
    quant: Quant::Direct,
};

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
    let beta = node.attr_f(BETA, 1.0)?;
    let params = |rank: usize| {
        let mut p = Vec::new();
        if q == op::LOG_SOFTMAX {
            p.push((param::AXIS, Param::u32(rank as u32 - 1)));
        }
        p.push((param::BETA, Param::f32(beta)));
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
    // The layout pass writes a softmax over another axis as one over the last between two
    // Transposes (passes/layout.rs, softmax_axis_last), where they compose with their
    // neighbours; every node with a known shape reaches this rule that way.
    Err(node.err_attr(
        "axis",
        format!("axis {axis} of rank {r} is not the last: the layout pass moves it last, and did not run"),
    ))
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
    fn softmax_non_last_axis_transposes() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .node("Softmax", &["x"], &["y"], &[("axis", A::I(1))])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains(
                "Transpose(x:f32[2, 3, 4]) perm=u32[3]{0,2,1} -> x_last:f32[2, 4, 3]\n\
                        Softmax(x_last:f32[2, 4, 3]) beta=1f -> y_pre:f32[2, 4, 3]\n\
                        Transpose(y_pre:f32[2, 4, 3]) perm=u32[3]{0,2,1} -> y:f32[2, 3, 4]"
            ),
            "{d}"
        );
    }

    #[test]
    fn softmax_axis_out_of_range_is_invalid() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .named_node(
                "blk3/Softmax",
                "Softmax",
                &["x"],
                &["y"],
                &[("axis", A::I(3))],
            )
            .output("y");
        assert!(lower_err(&b).contains("axis 3 is out of range"));
    }
}
