//! PRelu — <https://onnx.ai/onnx/operators/onnx__PRelu.html>, opset 9+ (unidirectional
//! broadcast of `slope` to `X`). QNN `Prelu`; the slope is brought to the input's rank.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::elementwise::infer_binary;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::ops::{Quant, Weighted};
use crate::qnn_names::op;

pub const PRELU: OpDef = OpDef {
    op_type: "PRelu",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: infer_binary,
    fold: None,
    expand: None,
    lower: Some(prelu),
    // The slope is a weight: UFIXED_POINT_8 (a 16-bit slope finds no HTP kernel at finalize).
    quant: Quant::Weighted(Weighted {
        weight: 1,
        channel: None,
        bias: None,
        weight_storage: Some(DType::U8),
        symmetric_u16: false,
    }),
};

pub fn prelu(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let rank = cx.shape(node, 0).len();
    let x = cx.input(node, 0)?;
    let s = cx.input_at_rank(node, 1, rank)?;
    let y = cx.output(node, 0)?;
    cx.op(node, op::PRELU, vec![x, s], vec![y], vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::ModelBuilder;

    #[test]
    fn prelu_slope_reshaped() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .init("s", Tensor::from_f32(vec![3], &[0.1, 0.2, 0.3]))
            .node("PRelu", &["x", "s"], &["y"], &[])
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("Prelu(x:f32[2, 3], static s_r2:f32[1, 3]) -> y:f32[2, 3]"));
    }
}
