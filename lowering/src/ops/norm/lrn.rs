//! LRN — <https://onnx.ai/onnx/operators/onnx__LRN.html>, opsets 1 and 13:
//! `y = x / (bias + alpha / size · Σ x²)^beta`, the sum over the `size` channels around each.
//! QNN `Lrn` (run NHWC by the layout pass, across the channel axis): params `alpha` FLOAT_32
//! (ONNX's `alpha / size`: QNN does not divide by the window), `beta`, `bias` FLOAT_32,
//! `radius` INT_32 (`(size - 1) / 2`), `region` UINT_32 across-channel. Constraints: 4-D input,
//! odd `size` (an even window is not centred, which QNN's radius cannot express).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{lrn_region, op, param};

pub const LRN: OpDef = OpDef {
    op_type: "LRN",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(lrn),
    quant: Quant::Float,
};

pub fn lrn(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let r = cx.shape(node, 0).len();
    if r != 4 || !node.nhwc {
        return Err(node.err_op(format!(
            "rank-{r} input is not supported (needs a 4-D input)"
        )));
    }
    let size = node.attr_i("size", 0)?;
    if size < 1 || size % 2 == 0 {
        return Err(node.err_attr("size", format!("{size} is not a positive odd window")));
    }
    let alpha = node.attr_f("alpha", 1e-4)?;
    let beta = node.attr_f("beta", 0.75)?;
    let bias = node.attr_f("bias", 1.0)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::LRN,
        vec![x],
        vec![y],
        vec![
            (param::ALPHA, Param::f32(alpha / size as f32)),
            (param::BETA, Param::f32(beta)),
            (param::BIAS, Param::f32(bias)),
            (param::RADIUS, Param::i32(((size - 1) / 2) as i32)),
            (param::REGION, Param::u32(lrn_region::ACROSS_CHANNEL)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    fn model(shape: &[i64], size: i64) -> ModelBuilder {
        ModelBuilder::new(13)
            .input("x", DType::F32, shape)
            .node(
                "LRN",
                &["x"],
                &["y"],
                &[("size", A::I(size)), ("alpha", A::F(0.5))],
            )
            .output("y")
    }

    #[test]
    fn lrn_snapshot() {
        let d = lower(&model(&[1, 5, 3, 3], 5)).dump();
        assert!(d.contains("Lrn(x_nhwc:f32[1, 3, 3, 5]) alpha=0.1f beta=0.75f bias=1f radius=2i region=0u -> y_nhwc:f32[1, 3, 3, 5]"), "{d}");
    }

    #[test]
    fn even_size_unsupported() {
        assert!(lower_err(&model(&[1, 5, 3, 3], 4))
            .contains("attribute 'size': 4 is not a positive odd window"));
    }

    #[test]
    fn rank3_unsupported() {
        assert!(lower_err(&model(&[1, 5, 3], 3)).contains("rank-3 input is not supported"));
    }
}
