//! Elu — <https://onnx.ai/onnx/operators/onnx__Elu.html>, opset 6+. QNN `Elu` with `alpha`
//! (FLOAT_32 scalar).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const ELU: OpDef = OpDef {
    op_type: "Elu",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(elu),
    quant: Quant::Direct,
};

pub fn elu(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let alpha = node.attr_f("alpha", 1.0)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::ELU,
        vec![x],
        vec![y],
        vec![(param::ALPHA, Param::f32(alpha))],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn elu_alpha_param() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("Elu", &["x"], &["y"], &[("alpha", A::F(0.5))])
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("Elu(x:f32[4]) alpha=0.5f -> y:f32[4]"));
    }
}
