//! InstanceNormalization — <https://onnx.ai/onnx/operators/onnx__InstanceNormalization.html>,
//! opset 6+.
//!
//! 4-D input: QNN `InstanceNorm` (run NHWC by the layout pass): in[0] NHWC, in[1] gamma `[C]`,
//! in[2] beta `[C]`; param `epsilon` FLOAT_32 scalar (mode mu-sigma, region across spatial: the
//! defaults).
//!
//! Other ranks (3, the form `nn.GroupNorm` and `nn.InstanceNorm1d` export, and 5): the input is
//! viewed as `[N, C, S]` (S the product of the spatial dims), normalised over S by QNN
//! `LayerNorm` (`axes = [2]`, unit gamma, zero beta), scaled and shifted per channel by
//! ElementWiseMultiply/Add with scale and bias as `[1, C, 1]` (skipped for constant ones and
//! zeros, as `nn.GroupNorm` exports them) and viewed back, with no transposes (ONNX Runtime's
//! QNN EP transposes a rank-3 input to channel-last and refuses rank 5).

use super::normalize_rows;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::{same, In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const INSTANCE_NORMALIZATION: OpDef = OpDef {
    op_type: "InstanceNormalization",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(instance_norm),
    quant: Quant::Float,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let r = x.rank(0)?;
    if r < 3 {
        return Err(x.n.err_invalid(format!("input rank {r} is below 3")));
    }
    same(x)
}

pub fn instance_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let shape = cx.shape(node, 0);
    let eps = node.attr_f("epsilon", 1e-5)?;
    if shape.len() == 4 && node.nhwc {
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
        return Ok(());
    }
    if shape.len() < 3 {
        return Err(node.err_op(format!("rank-{} input is not supported", shape.len())));
    }
    let rows = [shape[0], shape[1], shape[2..].iter().product()];
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    normalize_rows(cx, node, x, rows, eps, (1, 2, rows), y)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{graph_with, infer, lower, node};
    use crate::testing::ModelBuilder;

    fn model(shape: &[i64], scale: f32) -> ModelBuilder {
        let c = shape[1] as usize;
        ModelBuilder::new(17)
            .input("x", DType::F32, shape)
            .init("g", Tensor::from_f32(vec![c], &vec![scale; c]))
            .init("b", Tensor::from_f32(vec![c], &vec![0.0; c]))
            .node("InstanceNormalization", &["x", "g", "b"], &["y"], &[])
            .output("y")
    }

    #[test]
    fn instance_norm_nhwc() {
        assert_eq!(
            lower(&model(&[1, 2, 4, 4], 1.0)).op_types(),
            vec!["Transpose", "InstanceNorm", "Transpose"]
        );
    }

    #[test]
    fn rank3_is_a_layer_norm_over_the_last_axis() {
        // nn.GroupNorm's export: unit scale, zero bias.
        let p = lower(&model(&[2, 2, 6], 1.0));
        assert_eq!(p.op_types(), ["LayerNorm"]);
        assert!(p.dump().contains("LayerNorm(x:f32[2, 2, 6], static InstanceNormalization_0_ones:f32[6], static InstanceNormalization_0_zeros:f32[6]) epsilon=0.00001f axes=u32[1]{2} -> y:f32[2, 2, 6]"), "{}", p.dump());
    }

    #[test]
    fn rank5_with_a_scale_is_viewed_as_rows() {
        let p = lower(&model(&[1, 2, 2, 3, 4], 0.5));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            ["Reshape", "LayerNorm", "ElementWiseMultiply", "Reshape"],
            "{d}"
        );
        assert!(d.contains("-> x_reshaped:f32[1, 2, 24]"), "{d}");
        assert!(d.contains("static g_reshaped:f32[1, 2, 1]"), "{d}");
    }

    #[test]
    fn rank2_is_invalid() {
        let g = graph_with(&[("x", DType::F32, vec![2, 3])]);
        let n = node("InstanceNormalization", &[Some(0)], &[]);
        assert!(infer(&g, &n).unwrap_err().to_string().contains("rank 2"));
    }
}
