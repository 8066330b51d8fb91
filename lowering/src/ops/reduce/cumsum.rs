//! CumSum — <https://onnx.ai/onnx/operators/onnx__CumSum.html>, opset 11+ (`axis` a constant
//! input). QNN `CumulativeSum`: `axis` UINT_32 scalar, `exclusive` and `reverse` BOOL_8, both
//! always false: with either set HTP 2.51 fails graphFinalize ("no properties registered for
//! QNN_CumulativeSum"). An exclusive sum is the inclusive one minus the input; reverse is
//! rejected.

use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const CUM_SUM: OpDef = OpDef {
    op_type: "CumSum",
    since: 11,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(cumsum),
    quant: Quant::Float,
};

pub fn cumsum(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let r = cx.shape(node, 0).len();
    let axis = match cx.konst(node, 1) {
        Some(t) if t.numel() == 1 => t.get_i64(0),
        _ => return Err(node.err_op("input 'axis' must be a constant scalar")),
    };
    let axis = norm_axis(node, "axis", axis, r)?;
    if node.attr_i("reverse", 0)? != 0 {
        return Err(node.err_attr(
            "reverse",
            "reverse = 1 is not supported (HTP's CumulativeSum fails to finalize with it)",
        ));
    }
    let exclusive = node.attr_i("exclusive", 0)? != 0;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    let params = vec![
        (param::AXIS, Param::u32(axis as u32)),
        (param::EXCLUSIVE, Param::bool(false)),
        (param::REVERSE, Param::bool(false)),
    ];
    if exclusive {
        let dt = cx.tensor_dtype(y);
        let shape = cx.tshape(y);
        let inclusive = cx.emit(node, op::CUMULATIVE_SUM, vec![x], dt, &shape, params);
        cx.op(
            node,
            op::ELEMENT_WISE_SUBTRACT,
            vec![inclusive, x],
            vec![y],
            vec![],
        );
    } else {
        cx.op(node, op::CUMULATIVE_SUM, vec![x], vec![y], params);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn cumsum_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 4])
            .init("ax", Tensor::from_i64(vec![], &[1]))
            .node("CumSum", &["x", "ax"], &["y"], &[])
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("CumulativeSum(x:f32[2, 4]) axis=1u exclusive=false reverse=false"));
    }

    #[test]
    fn exclusive_is_inclusive_minus_input_and_reverse_unsupported() {
        let b = |attr: &'static str| {
            ModelBuilder::new(17)
                .input("x", DType::F32, &[2, 4])
                .init("axis", Tensor::from_i64(vec![], &[1]))
                .node("CumSum", &["x", "axis"], &["y"], &[(attr, A::I(1))])
                .output("y")
        };
        assert_eq!(
            lower(&b("exclusive")).op_types(),
            ["CumulativeSum", "ElementWiseSubtract"]
        );
        assert!(lower_err(&b("reverse")).contains("reverse = 1 is not supported"));
    }

    #[test]
    fn cumsum_dynamic_axis_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 4])
            .input("ax", DType::I32, &[])
            .node("CumSum", &["x", "ax"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains("input 'axis' must be a constant"));
    }
}
