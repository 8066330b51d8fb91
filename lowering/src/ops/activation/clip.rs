//! Clip — <https://onnx.ai/onnx/operators/onnx__Clip.html>, opsets 6 (attributes) and 11+
//! (inputs). QNN `ReluMinMax` with `min_value`/`max_value` (FLOAT_32 scalars); `[0, inf)`
//! becomes `Relu`. Constraints: min and max must be constant.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{LowerCx, OpDef};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const CLIP: OpDef = OpDef {
    op_type: "Clip",
    infer: same,
    fold: None,
    expand: None,
    lower: Some(clip),
    quant: Quant::Direct,
};

pub fn clip(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let bound = |cx: &LowerCx, i: usize, attr: &str, default: f32| -> Result<f32> {
        if cx.g.opset() < 11 {
            return node.attr_f(attr, default);
        }
        match node.input(i) {
            None => Ok(default),
            Some(_) => match cx.konst(node, i) {
                Some(t) if t.numel() == 1 => Ok(t.get_f64(0) as f32),
                _ => Err(node.err_attr(attr, "must be a constant scalar")),
            },
        }
    };
    let lo = bound(cx, 1, "min", f32::MIN)?;
    let hi = bound(cx, 2, "max", f32::MAX)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    if lo == 0.0 && hi == f32::MAX {
        cx.op(node, op::RELU, vec![x], vec![y], vec![]);
    } else {
        cx.op(
            node,
            op::RELU_MIN_MAX,
            vec![x],
            vec![y],
            vec![
                (param::MIN_VALUE, Param::f32(lo)),
                (param::MAX_VALUE, Param::f32(hi)),
            ],
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::ModelBuilder;

    #[test]
    fn relu6_is_relu_min_max() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("lo", Tensor::scalar_f32(0.0))
            .init("hi", Tensor::scalar_f32(6.0))
            .node("Clip", &["x", "lo", "hi"], &["y"], &[])
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("ReluMinMax(x:f32[4]) min_value=0f max_value=6f -> y:f32[4]"));
    }

    #[test]
    fn clip_min_only_is_relu() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("lo", Tensor::scalar_f32(0.0))
            .node("Clip", &["x", "lo"], &["y"], &[])
            .output("y");
        assert_eq!(lower(&b).op_types(), vec!["Relu"]);
    }

    #[test]
    fn clip_dynamic_bound_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .input("hi", DType::F32, &[])
            .node("Clip", &["x", "", "hi"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower_err(&b),
            "Node \"Clip_0\" (Clip), attribute 'max': must be a constant scalar"
        );
    }
}
