//! Ops that only exist on the host: Shape, Size, ConstantOfShape, Range, and the
//! quantization ops. With static shapes the first four always fold to constants
//! (`passes::const_fold`); DequantizeLinear of constant weights folds to float weights. What
//! reaches these rules did not fold and cannot run on QNN without quantized tensors.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};

pub const SHAPE: OpDef = OpDef {
    op_type: "Shape",
    expand: None,
    lower: Some(not_folded),
};

pub const SIZE: OpDef = OpDef {
    op_type: "Size",
    expand: None,
    lower: Some(not_folded),
};

pub const CONSTANT_OF_SHAPE: OpDef = OpDef {
    op_type: "ConstantOfShape",
    expand: None,
    lower: Some(not_folded),
};

pub const RANGE: OpDef = OpDef {
    op_type: "Range",
    expand: None,
    lower: Some(not_folded),
};

pub const QUANTIZE_LINEAR: OpDef = OpDef {
    op_type: "QuantizeLinear",
    expand: None,
    lower: Some(quantized),
};

pub const DEQUANTIZE_LINEAR: OpDef = OpDef {
    op_type: "DequantizeLinear",
    expand: None,
    lower: Some(quantized),
};

pub const OPS: &[OpDef] = &[
    SHAPE,
    SIZE,
    CONSTANT_OF_SHAPE,
    RANGE,
    QUANTIZE_LINEAR,
    DEQUANTIZE_LINEAR,
];

fn not_folded(_: &mut LowerCx, node: &Node) -> Result<()> {
    Err(node.err_op("its inputs must be constant after folding (dynamic shapes are not supported)"))
}

fn quantized(_: &mut LowerCx, node: &Node) -> Result<()> {
    Err(node.err_dtype("quantized activations are not supported yet (only constant weights are dequantized at compile time)"))
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::ModelBuilder;

    #[test]
    fn dequantized_constant_weights_fold() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2])
            .init(
                "wq",
                Tensor::from_i64_as(DType::I8, vec![2, 2], &[2, -4, 6, 8]),
            )
            .init("s", Tensor::scalar_f32(0.5))
            .node("DequantizeLinear", &["wq", "s"], &["w"], &[])
            .node("MatMul", &["x", "w"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        assert_eq!(p.op_types(), vec!["FullyConnected"]);
    }

    #[test]
    fn quantize_activation_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("s", Tensor::scalar_f32(0.5))
            .node("QuantizeLinear", &["x", "s"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains(
            "QuantizeLinear is not supported on HTP (quantized tensors not in the plan yet"
        ));
    }

    #[test]
    fn dynamic_range_unsupported() {
        let b = ModelBuilder::new(17)
            .input("n", DType::I64, &[])
            .init("z", Tensor::from_i64(vec![], &[0]))
            .init("o", Tensor::from_i64(vec![], &[1]))
            .node("Range", &["z", "n", "o"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains("must be a constant scalar"));
    }
}
