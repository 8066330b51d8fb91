//! GroupNormalization — <https://onnx.ai/onnx/operators/onnx__GroupNormalization.html>.
//! Opset 21: scale/bias are per channel `[C]`; opset 18–20: per group `[G]`, expanded here to
//! `[C]`. QNN `GroupNorm`: in[0] NHWC, in[1] gamma `[C]`, in[2] beta `[C]`; params `epsilon`
//! FLOAT_32 scalar, `group` UINT_32 scalar. Constraints: 4-D input, constant scale and bias.

use super::{const_vec, vec_tensor};
use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{LowerCx, OpDef};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const GROUP_NORMALIZATION: OpDef = OpDef {
    op_type: "GroupNormalization",
    infer: same,
    fold: None,
    expand: None,
    lower: Some(group_norm),
    quant: Quant::Float,
};

pub fn group_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let shape = cx.shape(node, 0);
    if shape.len() != 4 || !node.nhwc {
        return Err(node.err_op(format!(
            "rank-{} input is not supported (needs a 4-D input)",
            shape.len()
        )));
    }
    let c = shape[3];
    let groups = node.attr_i("num_groups", 0)?;
    if groups <= 0 || c % groups as usize != 0 {
        return Err(node.err_attr(
            "num_groups",
            format!("{groups} does not divide {c} channels"),
        ));
    }
    let g = groups as usize;
    let expand = |v: Vec<f64>| -> Vec<f64> {
        if v.len() == g && g != c {
            (0..c).map(|k| v[k / (c / g)]).collect()
        } else {
            v
        }
    };
    let scale = expand(const_vec(cx, node, 1, "scale")?);
    let bias = expand(const_vec(cx, node, 2, "bias")?);
    if scale.len() != c || bias.len() != c {
        return Err(node.err_invalid("scale and bias must have C or num_groups elements"));
    }
    let eps = node.attr_f("epsilon", 1e-5)?;
    let st = vec_tensor(cx, node, "gamma", &scale)?;
    let bt = vec_tensor(cx, node, "beta", &bias)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::GROUP_NORM,
        vec![x, st, bt],
        vec![y],
        vec![
            (param::EPSILON, Param::f32(eps)),
            (param::GROUP, Param::u32(g as u32)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    fn model(groups: i64, n: usize) -> ModelBuilder {
        ModelBuilder::new(18)
            .input("x", DType::F32, &[1, 4, 2, 2])
            .init("s", Tensor::from_f32(vec![n], &vec![1.0; n]))
            .init("b", Tensor::from_f32(vec![n], &vec![0.0; n]))
            .node(
                "GroupNormalization",
                &["x", "s", "b"],
                &["y"],
                &[("num_groups", A::I(groups))],
            )
            .output("y")
    }

    #[test]
    fn group_norm_expands_per_group_scale() {
        let d = lower(&model(2, 2)).dump();
        assert!(
            d.contains(
                "GroupNorm(x_nhwc:f32[1, 2, 2, 4], static GroupNormalization_0_gamma:f32[4]"
            ),
            "{d}"
        );
        assert!(d.contains("group=2u"), "{d}");
    }

    #[test]
    fn bad_group_count_unsupported() {
        assert!(lower_err(&model(3, 3))
            .contains("attribute 'num_groups': 3 does not divide 4 channels"));
    }
}
