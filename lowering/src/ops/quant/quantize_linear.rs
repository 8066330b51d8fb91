//! QuantizeLinear — <https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html>: output in
//! the zero point's dtype (uint8 without one). Refused: the op tables list it as planned.

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::infer::{In, Out};
use crate::ops::quant::quantized;
use crate::ops::OpDef;

pub const QUANTIZE_LINEAR: OpDef = OpDef {
    op_type: "QuantizeLinear",
    infer,
    fold: None,
    expand: None,
    lower: Some(quantized),
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let dt = if x.has(2) { x.dtype(2)? } else { DType::U8 };
    Ok(vec![(dt, x.shape(0)?.to_vec())])
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower_err;
    use crate::testing::ModelBuilder;

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
}
