//! DequantizeLinear — <https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html>, opset 10+
//! (per-axis `axis` since 13): `(x - zero_point) · scale` in the scale's dtype. Not folded here:
//! the `qdq` pass turns a constant input into a float constant that keeps its encoding (so a
//! quantized op stores the model's integers) and an activation's into the encoding of the
//! value; one it could not is refused (see [`super`]).

use crate::error::Result;
use crate::ops::infer::{In, Out};
use crate::ops::quant::unpaired;
use crate::ops::{OpDef, Quant};

pub const DEQUANTIZE_LINEAR: OpDef = OpDef {
    op_type: "DequantizeLinear",
    infer,
    fold: None,
    expand: None,
    lower: Some(unpaired),
    quant: Quant::Float,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let dt = match x.n.attr_i("output_dtype", 0)? {
        0 => x.dtype(1)?,
        c => <crate::dtype::DType as crate::dtype::OnnxCode>::from_onnx(c as i32).ok_or_else(
            || {
                x.n.err_attr("output_dtype", format!("element type {c} is not supported"))
            },
        )?,
    };
    Ok(vec![(dt, x.shape(0)?.to_vec())])
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::ModelBuilder;

    #[test]
    fn dequantized_constant_weights_of_a_float_op_are_float() {
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
        assert!(
            p.dump().contains("static MatMul_1_w:f32[2, 2]"),
            "{}",
            p.dump()
        );
    }
}
