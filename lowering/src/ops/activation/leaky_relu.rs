//! LeakyRelu — <https://onnx.ai/onnx/operators/onnx__LeakyRelu.html>, opset 6+. QNN `Prelu`
//! with a constant one-element slope `alpha` in the input's dtype.

use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::qnn_names::op;

pub const LEAKY_RELU: OpDef = OpDef {
    op_type: "LeakyRelu",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(leaky_relu),
    quant: Quant::Direct,
};

pub fn leaky_relu(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let alpha = node.attr_f("alpha", 0.01)?;
    let dt = cx.dtype(node, 0);
    let rank = cx.shape(node, 0).len().max(1);
    let slope = Tensor::from_f64_as(dt, vec![1; rank], &[alpha as f64]);
    let s = cx.static_tensor(node, &format!("{}_alpha", node.name), &slope)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(node, op::PRELU, vec![x, s], vec![y], vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn leaky_relu_is_prelu() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 4])
            .node("LeakyRelu", &["x"], &["y"], &[("alpha", A::F(0.1))])
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("Prelu(x:f32[2, 4], static LeakyRelu_0_alpha:f32[1, 1]) -> y:f32[2, 4]"));
    }
}
