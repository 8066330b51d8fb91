//! Softplus and Mish — <https://onnx.ai/onnx/operators/onnx__Softplus.html>,
//! <https://onnx.ai/onnx/operators/onnx__Mish.html> (opset 18).
//! HTP has no `ElementWiseSoftplus` (docs/qnn-notes.md §3.4), so Softplus is decomposed in its
//! overflow-safe form `relu(x) + log(1 + exp(-|x|))` (ElementWiseAbs, ElementWiseNeg,
//! ElementWiseExp, ElementWiseAdd, ElementWiseLog, Relu, ElementWiseAdd), and Mish is
//! `x * tanh(softplus(x))`.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::TensorId;
use crate::qnn_names::op;

pub const SOFTPLUS: OpDef = OpDef {
    op_type: "Softplus",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(softplus),
    quant: Quant::Float,
};

pub const MISH: OpDef = OpDef {
    op_type: "Mish",
    since: 18,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(mish),
    quant: Quant::Float,
};

fn softplus_of(cx: &mut LowerCx, node: &Node, x: TensorId) -> Result<TensorId> {
    let shape = cx.tshape(x);
    let dt = cx.tensor_dtype(x);
    let one = cx.scalar(node, "one", 1.0, dt)?;
    let one = cx.reshape(node, one, &vec![1; shape.len()]);
    let a = cx.emit(node, op::ELEMENT_WISE_ABS, vec![x], dt, &shape, vec![]);
    let n = cx.emit(node, op::ELEMENT_WISE_NEG, vec![a], dt, &shape, vec![]);
    let e = cx.emit(node, op::ELEMENT_WISE_EXP, vec![n], dt, &shape, vec![]);
    let p = cx.emit(node, op::ELEMENT_WISE_ADD, vec![e, one], dt, &shape, vec![]);
    let l = cx.emit(node, op::ELEMENT_WISE_LOG, vec![p], dt, &shape, vec![]);
    let r = cx.emit(node, op::RELU, vec![x], dt, &shape, vec![]);
    Ok(cx.emit(node, op::ELEMENT_WISE_ADD, vec![r, l], dt, &shape, vec![]))
}

pub fn softplus(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let x = cx.input(node, 0)?;
    let s = softplus_of(cx, node, x)?;
    let y = cx.output(node, 0)?;
    cx.op(node, op::RESHAPE, vec![s], vec![y], vec![]);
    Ok(())
}

pub fn mish(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let x = cx.input(node, 0)?;
    let s = softplus_of(cx, node, x)?;
    let shape = cx.tshape(x);
    let dt = cx.tensor_dtype(x);
    let t = cx.emit(node, op::TANH, vec![s], dt, &shape, vec![]);
    let y = cx.output(node, 0)?;
    cx.op(node, op::ELEMENT_WISE_MULTIPLY, vec![x, t], vec![y], vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::lower;
    use crate::testing::ModelBuilder;

    #[test]
    fn softplus_is_stable_decomposition() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("Softplus", &["x"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower(&b).op_types(),
            vec![
                "ElementWiseAbs",
                "ElementWiseNeg",
                "ElementWiseExp",
                "ElementWiseAdd",
                "ElementWiseLog",
                "Relu",
                "ElementWiseAdd",
                "Reshape"
            ]
        );
    }

    #[test]
    fn mish_multiplies_tanh() {
        let b = ModelBuilder::new(18)
            .input("x", DType::F32, &[4])
            .node("Mish", &["x"], &["y"], &[])
            .output("y");
        let t = lower(&b).op_types();
        assert_eq!(&t[t.len() - 2..], &["Tanh", "ElementWiseMultiply"]);
    }
}
