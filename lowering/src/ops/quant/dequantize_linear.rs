//! DequantizeLinear — <https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html>, opset 10+
//! (per-axis `axis` since 13): `(x - zero_point) · scale` in the scale's dtype. Constant inputs
//! (quantized weights) fold to float weights; a dynamic input is refused (quantized activations
//! are not in the plan yet).

use crate::error::Result;
use crate::ops::infer::{In, Out};
use crate::ops::quant::quantized;
use crate::ops::OpDef;

pub const DEQUANTIZE_LINEAR: OpDef = OpDef {
    op_type: "DequantizeLinear",
    infer,
    expand: None,
    lower: Some(quantized),
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let dt = x.dtype(1)?;
    Ok(vec![(dt, x.shape(0)?.to_vec())])
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
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
}
