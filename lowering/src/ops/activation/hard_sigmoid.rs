//! HardSigmoid — <https://onnx.ai/onnx/operators/onnx__HardSigmoid.html>, opset 6+.
//! Decomposed: `ReluMinMax(x * alpha + beta, 0, 1)` (ElementWiseMultiply, ElementWiseAdd,
//! ReluMinMax).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::LowerCx;
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub fn hard_sigmoid(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let alpha = node.attr_f("alpha", 0.2)?;
    let beta = node.attr_f("beta", 0.5)?;
    let dt = cx.dtype(node, 0);
    let shape = cx.shape(node, 0);
    let x = cx.input(node, 0)?;
    let pdt = cx.tensor_dtype(x);
    let rank = shape.len().max(1);
    let a = cx.scalar(node, "alpha", alpha as f64, dt)?;
    let a = cx.reshape(node, a, &vec![1; rank]);
    let b = cx.scalar(node, "beta", beta as f64, dt)?;
    let b = cx.reshape(node, b, &vec![1; rank]);
    let m = cx.emit(
        node,
        op::ELEMENT_WISE_MULTIPLY,
        vec![x, a],
        pdt,
        &shape,
        vec![],
    );
    let s = cx.emit(node, op::ELEMENT_WISE_ADD, vec![m, b], pdt, &shape, vec![]);
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::RELU_MIN_MAX,
        vec![s],
        vec![y],
        vec![
            (param::MIN_VALUE, Param::f32(0.0)),
            (param::MAX_VALUE, Param::f32(1.0)),
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
    fn hard_sigmoid_decomposes() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("HardSigmoid", &["x"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        assert_eq!(
            p.op_types(),
            vec![
                "Reshape",
                "Reshape",
                "ElementWiseMultiply",
                "ElementWiseAdd",
                "ReluMinMax"
            ]
        );
    }
}
