//! CumSum — <https://onnx.ai/onnx/operators/onnx__CumSum.html>, opset 11+ (`axis` a constant
//! input). QNN `CumulativeSum`: `axis` UINT_32 scalar, `exclusive` and `reverse` BOOL_8.

use crate::attr::norm_axis;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::LowerCx;
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub fn cumsum(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let r = cx.shape(node, 0).len();
    let axis = match cx.konst(node, 1) {
        Some(t) if t.numel() == 1 => t.get_i64(0),
        _ => return Err(node.err_op("input 'axis' must be a constant scalar")),
    };
    let axis = norm_axis(node, "axis", axis, r)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::CUMULATIVE_SUM,
        vec![x],
        vec![y],
        vec![
            (param::AXIS, Param::u32(axis as u32)),
            (
                param::EXCLUSIVE,
                Param::bool(node.attr_i("exclusive", 0)? != 0),
            ),
            (param::REVERSE, Param::bool(node.attr_i("reverse", 0)? != 0)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::tensor::Tensor;
    use crate::testing::ModelBuilder;

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
    fn cumsum_dynamic_axis_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 4])
            .input("ax", DType::I32, &[])
            .node("CumSum", &["x", "ax"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains("input 'axis' must be a constant"));
    }
}
