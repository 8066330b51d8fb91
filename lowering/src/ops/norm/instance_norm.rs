//! InstanceNormalization — <https://onnx.ai/onnx/operators/onnx__InstanceNormalization.html>,
//! opset 6+. QNN `InstanceNorm`: in[0] NHWC, in[1] gamma `[C]`, in[2] beta `[C]`; param
//! `epsilon` FLOAT_32 scalar (mode mu-sigma, region across spatial: the defaults).
//! Constraint: 4-D input (run NHWC by the layout pass).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{LowerCx, OpDef};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const INSTANCE_NORMALIZATION: OpDef = OpDef {
    op_type: "InstanceNormalization",
    infer: same,
    fold: None,
    expand: None,
    lower: Some(instance_norm),
    quant: Quant::Float,
};

pub fn instance_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let r = cx.shape(node, 0).len();
    if r != 4 || !node.nhwc {
        return Err(node.err_op(format!(
            "rank-{r} input is not supported (needs a 4-D input)"
        )));
    }
    let eps = node.attr_f("epsilon", 1e-5)?;
    let x = cx.input(node, 0)?;
    let g = cx.input(node, 1)?;
    let b = cx.input(node, 2)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::INSTANCE_NORM,
        vec![x, g, b],
        vec![y],
        vec![(param::EPSILON, Param::f32(eps))],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::ModelBuilder;

    fn model(shape: &[i64]) -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, shape)
            .init("g", Tensor::from_f32(vec![2], &[1.0; 2]))
            .init("b", Tensor::from_f32(vec![2], &[0.0; 2]))
            .node("InstanceNormalization", &["x", "g", "b"], &["y"], &[])
            .output("y")
    }

    #[test]
    fn instance_norm_nhwc() {
        assert_eq!(
            lower(&model(&[1, 2, 4, 4])).op_types(),
            vec!["Transpose", "InstanceNorm", "Transpose"]
        );
    }

    #[test]
    fn instance_norm_3d_unsupported() {
        assert!(lower_err(&model(&[1, 2, 4])).contains("rank-3 input is not supported"));
    }
}
