//! LpNormalization — <https://onnx.ai/onnx/operators/onnx__LpNormalization.html>, opset 1+
//! (`axis` default -1, `p` 1 or 2).
//!
//! p = 2 is QNN `L2Norm`: in[0] data; params `axes` UINT_32 `[1]` = `axis` and `epsilon`
//! FLOAT_32 scalar (QNN computes `x / sqrt(max(sum(x²), epsilon))`). ONNX has no epsilon: 1e-24
//! (`F.normalize`'s default 1e-12, squared) turns an all-zero row into 0 as the reference does,
//! and the HTP applies it in a wider type than fp16 (a row of 5e-6 values, whose squares fp16
//! flushes to zero, is normalised correctly; an fp16-sized 6e-5 gives 0.13 for 0.25). p = 1 is
//! expanded into `x / ReduceSum(|x|)` over `axis`. Other `p` are refused. `passes/fuse_l2norm.rs`
//! turns `F.normalize`'s exported pattern into this op.

use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::builder::Builder;
use crate::ir::Node;
use crate::ops::infer::{same, In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const LP_NORMALIZATION: OpDef = OpDef {
    op_type: "LpNormalization",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(lp_normalization_l1),
    lower: Some(lp_normalization),
    quant: Quant::Float,
};

/// QNN L2Norm's epsilon (see the module doc).
const EPSILON: f32 = 1e-24;

/// `p` and the normalised axis.
fn params(node: &Node, rank: usize) -> Result<(i64, usize)> {
    let p = node.attr_i("p", 2)?;
    if p != 1 && p != 2 {
        return Err(node.err_attr("p", format!("only 1 and 2 are supported, got {p}")));
    }
    Ok((p, norm_axis(node, "axis", node.attr_i("axis", -1)?, rank)?))
}

fn infer(x: &In) -> Result<Vec<Out>> {
    params(x.n, x.rank(0)?)?;
    same(x)
}

/// p = 1: `x / ReduceSum(|x|, axis)`; p = 2 is left to the rule.
pub fn lp_normalization_l1(b: &mut Builder, node: &Node) -> Result<bool> {
    let x = node
        .input(0)
        .ok_or_else(|| node.err_invalid("input 'input' is missing"))?;
    let y = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 'output' is missing"))?;
    let (p, axis) = params(node, b.g.shape(x).len())?;
    if p != 1 {
        return Ok(false);
    }
    let a = b.op("Abs", &[x], vec![]);
    let s = b.reduce("ReduceSum", a, &[axis as i64], true);
    b.op_to("Div", &[x, s], vec![], &[y]);
    Ok(true)
}

pub fn lp_normalization(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let r = cx.shape(node, 0).len();
    let (p, axis) = params(node, r)?;
    if p != 2 {
        return Err(node.err_attr("p", "p = 1 is lowered by its expansion"));
    }
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::L2_NORM,
        vec![x],
        vec![y],
        vec![
            (param::AXES, Param::u32_vec(&[axis as u32])),
            (param::EPSILON, Param::f32(EPSILON)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    fn model(attrs: &[(&str, A)]) -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .node("LpNormalization", &["x"], &["y"], attrs)
            .output("y")
    }

    #[test]
    fn l2_is_qnn_l2norm() {
        let d = lower(&model(&[("axis", A::I(1))])).dump();
        assert!(
            d.contains(
                "L2Norm(x:f32[2, 3, 4]) axes=u32[1]{1} epsilon=0.000000000000000000000001f -> y:f32[2, 3, 4]"
            ),
            "{d}"
        );
    }

    #[test]
    fn l1_is_expanded() {
        let p = lower(&model(&[("p", A::I(1))]));
        assert_eq!(
            p.op_types(),
            vec!["ElementWiseAbs", "ReduceSum", "ElementWiseDivide"],
            "{}",
            p.dump()
        );
        assert!(p.dump().contains("axes=u32[1]{2}"), "{}", p.dump());
    }

    #[test]
    fn other_p_unsupported() {
        assert!(lower_err(&model(&[("p", A::I(3))])).contains("attribute 'p': only 1 and 2"));
    }

    #[test]
    fn bad_axis_is_an_inference_error() {
        let g = graph_with(&[("x", DType::F16, vec![2, 5])]);
        let n = node(
            "LpNormalization",
            &[Some(0)],
            &[("axis", crate::ir::Attr::Int(2))],
        );
        assert!(infer(&g, &n).is_err());
        let n = node("LpNormalization", &[Some(0)], &[]);
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F16, vec![2, 5])]);
    }
}
