//! HardSigmoid — <https://onnx.ai/onnx/operators/onnx__HardSigmoid.html>, opset 6+. QNN
//! `ElementWiseNeuron` with `operation` HARD_SIGMOID (UINT_32 2) and `alpha` / `beta` FLOAT_32
//! scalars: `max(0, min(1, alpha * x + beta))` in one op (ONNX Runtime's QNN EP does the same).
//! The earlier Multiply + Add + ReluMinMax decomposition cost three dispatches per use
//! (mobilenet_v3_small has nine).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{neuron, op, param};

pub const HARD_SIGMOID: OpDef = OpDef {
    op_type: "HardSigmoid",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(hard_sigmoid),
    quant: Quant::Float,
};

pub fn hard_sigmoid(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let alpha = node.attr_f("alpha", 0.2)?;
    let beta = node.attr_f("beta", 0.5)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::ELEMENT_WISE_NEURON,
        vec![x],
        vec![y],
        vec![
            (param::OPERATION, Param::u32(neuron::HARD_SIGMOID)),
            (param::ALPHA, Param::f32(alpha)),
            (param::BETA, Param::f32(beta)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::lower;
    use crate::testing::ModelBuilder;

    #[test]
    fn hard_sigmoid_is_one_neuron_op() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("HardSigmoid", &["x"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        assert_eq!(p.op_types(), vec!["ElementWiseNeuron"]);
        assert!(
            p.dump().contains("operation=2u alpha=0.2f beta=0.5f"),
            "{}",
            p.dump()
        );
    }
}
