//! DequantizeLinear — <https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html>, opset 10+
//! (per-axis `axis` since 13): `(x - zero_point) · scale` in the scale's dtype. Constant inputs
//! (quantized weights) fold to float weights; a dynamic input is refused (quantized activations
//! are not in the plan yet).

use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::tensor::{strides, Tensor};
use crate::ops::infer::{In, Out};
use crate::ops::quant::quantized;
use crate::ops::{Fold, OpDef};

pub const DEQUANTIZE_LINEAR: OpDef = OpDef {
    op_type: "DequantizeLinear",
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(quantized),
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let dt = x.dtype(1)?;
    Ok(vec![(dt, x.shape(0)?.to_vec())])
}

fn fold(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let (dt0, shape0) = outs[0].clone();
    let t0 = ins[0];
    let scale = ins[1];
    let zp = ins.get(2).copied();
    let axis = norm_axis(node, "axis", node.attr_i("axis", 1)?, t0.shape.len().max(1))?;
    let st = strides(&t0.shape);
    let per_axis = scale.numel() > 1;
    let v: Vec<f64> = (0..t0.numel())
        .map(|k| {
            let c = if per_axis {
                (k / st[axis]) % t0.shape[axis]
            } else {
                0
            };
            let z = zp.map_or(0.0, |z| z.get_f64(c));
            (t0.get_f64(k) - z) * scale.get_f64(c)
        })
        .collect();
    Ok(Some(vec![Tensor::from_f64_as(dt0, shape0, &v)]))
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
