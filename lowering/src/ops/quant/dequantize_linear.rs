//! DequantizeLinear — <https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html>, opset 10+
//! (per-axis `axis` since 13): `(x - zero_point) · scale` in the scale's dtype. Not folded here:
//! the `qdq` pass turns a constant input into a float constant that keeps its encoding (so a
//! quantized op stores the model's integers) and an activation's into the encoding of the
//! value; one it could not is refused (see [`super`]).

use crate::error::Result;
use crate::ops::infer::{In, Out};
use crate::ops::quant::unpaired;
use crate::ops::{Layout, OpDef, Quant, ShapeInput};

pub const DEQUANTIZE_LINEAR: OpDef = OpDef {
    op_type: "DequantizeLinear",
    since: 10,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
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
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    /// x (uint8) -> DequantizeLinear -> MatMul with `w` (DequantizeLinear of the constant `wq`,
    /// zero point `wz`) -> QuantizeLinear/DequantizeLinear to `act` -> y.
    /// The values of the plan's (first) static int4 tensor.
    fn int4_values(p: &crate::plan::Plan) -> Vec<i8> {
        let i4 = p.tensors.iter().find(|t| t.dtype == DType::I4).unwrap();
        match &i4.kind {
            crate::plan::TensorKind::Static(b) => b.iter().map(|&x| x as i8).collect(),
            k => panic!("{k:?}"),
        }
    }

    fn qdq_matmul(wq: Tensor, wz: Tensor, act_zp: Tensor) -> ModelBuilder {
        ModelBuilder::new(21)
            .input("x", DType::F32, &[1, 2])
            .init("wq", wq)
            .init("ws", Tensor::from_f32(vec![2], &[0.5, 0.25]))
            .init("wz", wz)
            .init("s", Tensor::scalar_f32(0.1))
            .init("z", act_zp)
            .node("QuantizeLinear", &["x", "s", "z"], &["xq"], &[])
            .node("DequantizeLinear", &["xq", "s", "z"], &["xd"], &[])
            .node(
                "DequantizeLinear",
                &["wq", "ws", "wz"],
                &["w"],
                &[("axis", A::I(1))],
            )
            .node("MatMul", &["xd", "w"], &["m"], &[])
            .node("QuantizeLinear", &["m", "s", "z"], &["mq"], &[])
            .node("DequantizeLinear", &["mq", "s", "z"], &["y"], &[])
            .output("y")
    }

    #[test]
    fn int4_weights_are_4_bit_fixed_point_and_4_bit_activations_are_refused() {
        let w = Tensor::from_i64_as(DType::I4, vec![2, 2], &[-8, 7, 3, -1]);
        let wz = Tensor::from_i64_as(DType::I4, vec![2], &[0, 0]);
        let u8_zp = Tensor::from_i64_as(DType::U8, vec![], &[128]);
        let p = lower(&qdq_matmul(w.clone(), wz.clone(), u8_zp));
        assert!(p.op_types().contains(&"FullyConnected"), "{}", p.dump());
        assert!(p.dump().contains(":qi4[2, 2]"), "{}", p.dump());
        // The weights keep the model's integers (transposed into FullyConnected's [out, in]).
        assert_eq!(int4_values(&p), vec![-8, 3, 7, -1]);
        let i4_zp = Tensor::from_i64_as(DType::I4, vec![], &[0]);
        let e = lower_err(&qdq_matmul(w, wz, i4_zp));
        assert!(e.contains("4-bit activations"), "{e}");
    }

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

    /// x [2, K] (uint16 QDQ) -> `op` with the blocked int4 weight `wq` [4, 2] (block_size 2
    /// along `axis`, scale `ws`) -> uint16 QDQ -> y.
    fn blocked(op: &str, wq: Tensor, ws: Tensor, axis: i64, bias: bool) -> ModelBuilder {
        let k = wq.shape[axis as usize] as i64;
        let mut b = ModelBuilder::new(21)
            .input("x", DType::F32, &[2, k])
            .init("wq", wq)
            .init("ws", ws)
            .init("s", Tensor::scalar_f32(0.01))
            .init("z", Tensor::from_i64_as(DType::U16, vec![], &[32768]))
            .node("QuantizeLinear", &["x", "s", "z"], &["xq"], &[])
            .node("DequantizeLinear", &["xq", "s", "z"], &["xd"], &[])
            .node(
                "DequantizeLinear",
                &["wq", "ws"],
                &["w"],
                &[("axis", A::I(axis)), ("block_size", A::I(2))],
            );
        let mut ins = vec!["xd", "w"];
        let mut attrs = vec![];
        if op == "Gemm" && axis == 1 {
            attrs.push(("transB", A::I(1)));
        }
        if bias {
            // As PT2E writes it: int32 behind a DequantizeLinear, scale input x weight scale.
            b = b
                .init(
                    "cq",
                    Tensor::from_i64_as(DType::I32, vec![2], &[500, -1000]),
                )
                .init("cs", Tensor::from_f32(vec![2], &[1e-3, 5e-4]))
                .node(
                    "DequantizeLinear",
                    &["cq", "cs"],
                    &["c"],
                    &[("axis", A::I(0))],
                );
            ins.push("c");
        }
        b.node(op, &ins, &["m"], &attrs)
            .node("QuantizeLinear", &["m", "s", "z"], &["mq"], &[])
            .node("DequantizeLinear", &["mq", "s", "z"], &["y"], &[])
            .output("y")
    }

    fn w_kn() -> (Tensor, Tensor) {
        let w = Tensor::from_i64_as(DType::I4, vec![4, 2], &[-8, 7, 3, -1, 1, 2, -3, 4]);
        // [blocks, channels]: channel 0 scales 0.1 x (16, 4), channel 1 0.05 x (16, 16).
        let s = Tensor::from_f32(vec![2, 2], &[1.6, 0.8, 0.4, 0.8]);
        (w, s)
    }

    #[test]
    fn blocked_int4_matmul_weights_are_block_expansion_encoded_matmul_weights() {
        let (w, s) = w_kn();
        let p = lower(&blocked("MatMul", w, s, 0, false));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            vec!["Quantize", "MatMul", "Dequantize"],
            "{d}"
        );
        assert!(
            d.contains(":qi4[4, 2] <qi4 axis=1 x2 scale=0.05..0.1 blocks(axis=0 size=2 x2 int4)>"),
            "{d}"
        );
        // The weight keeps the model's integers, [K, N] as the model has it.
        let i4 = p.tensors.iter().find(|t| t.dtype == DType::I4).unwrap();
        let q = i4.quant.as_ref().unwrap();
        assert_eq!(q.blocks.as_ref().unwrap().ints, vec![16, 4, 16, 16]);
        assert_eq!(int4_values(&p), vec![-8, 7, 3, -1, 1, 2, -3, 4]);
    }

    #[test]
    fn blocked_gemm_weights_are_a_matmul_and_an_add_of_the_bias() {
        // transB: the weight is [N, K] blocked along axis 1, transposed statically to [K, N].
        let w = Tensor::from_i64_as(DType::I4, vec![2, 4], &[-8, 3, 1, -3, 7, -1, 2, 4]);
        let s = Tensor::from_f32(vec![2, 2], &[1.6, 0.4, 0.8, 0.8]);
        let p = lower(&blocked("Gemm", w, s, 1, true));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            vec!["Quantize", "MatMul", "ElementWiseAdd", "Dequantize"],
            "{d}"
        );
        assert!(d.contains("[4, 2] <qi4 axis=1 x2"), "{d}");
        // The bias is added stored like an activation (u16), not as the int32 it came in.
        assert!(d.contains("Gemm_4_c:qu16[1, 2]"), "{d}");
        assert_eq!(int4_values(&p), vec![-8, 7, 3, -1, 1, 2, -3, 4]);
    }

    #[test]
    fn blocked_weights_that_qnn_cannot_take_are_refused_with_the_reason() {
        // int8 blocks: QNN's block expansion widens 4-bit weights only.
        let w8 = Tensor::from_i64_as(DType::I8, vec![4, 2], &[1; 8]);
        let (_, s) = w_kn();
        let e = lower_err(&blocked("MatMul", w8, s.clone(), 0, false));
        assert!(e.contains("block_size") && e.contains("int4"), "{e}");
        // A block size that does not divide K.
        let w = Tensor::from_i64_as(DType::I4, vec![5, 2], &[1; 10]);
        let s3 = Tensor::from_f32(vec![3, 2], &[0.1; 6]);
        let e = lower_err(&blocked("MatMul", w, s3, 0, false));
        assert!(e.contains("does not divide"), "{e}");
        // A scale of the wrong shape.
        let (w, _) = w_kn();
        let bad = Tensor::from_f32(vec![2], &[0.1, 0.2]);
        let e = lower_err(&blocked("MatMul", w, bad, 0, false));
        assert!(e.contains("scale has shape [2]"), "{e}");
    }
}
