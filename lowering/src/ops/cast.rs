//! Cast / CastLike — <https://onnx.ai/onnx/operators/onnx__Cast.html>, opset 6+. QNN `Cast`
//! (no params; the output tensor's dtype is the target). Casts to int64 were narrowed to int32
//! by `narrow_int64`; casts to f32 inside an fp16 graph were turned into f16 by `fp16`.
//! Quantized (`Quant::FromInt`: an integer cast to a value with a non-negative encoding): QNN's
//! Cast writes the integer as the code (libQnnHtp 2.51, QCS6490 and SoC 60 emulators: int 9
//! into scale 0.5 read back 4.5), so it casts into scale 1, offset 0 and a `Convert` follows.

use qnnx_types::Encoding;

use crate::dtype::{DType, OnnxCode};
use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::qnn_names::op;

pub const CAST: OpDef = OpDef {
    op_type: "Cast",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::Kept,
    infer: infer_cast,
    fold: Some(Fold::Values(fold_cast)),
    expand: None,
    lower: Some(cast),
    quant: Quant::FromInt,
};

pub const CAST_LIKE: OpDef = OpDef {
    op_type: "CastLike",
    since: 15,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::Kept,
    infer: infer_cast_like,
    fold: Some(Fold::Values(fold_cast)),
    expand: None,
    lower: Some(cast),
    quant: Quant::FromInt,
};

fn infer_cast(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let to = n.attr_i("to", 0)?;
    let dt = DType::from_onnx(to as i32)
        .ok_or_else(|| n.err_attr("to", format!("unsupported target type {to}")))?;
    if dt.is_sub_byte() {
        return Err(n.err_attr(
            "to",
            format!(
                "casting to {dt} is not supported: QNN holds 4-bit values only as constant \
                 weights behind a DequantizeLinear"
            ),
        ));
    }
    Ok(vec![(dt, x.shape(0)?.to_vec())])
}

fn infer_cast_like(x: &In) -> Result<Vec<Out>> {
    Ok(vec![(x.dtype(1)?, x.shape(0)?.to_vec())])
}

pub const OPS: &[OpDef] = &[CAST, CAST_LIKE];

fn fold_cast(_x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let dt0 = outs[0].0;
    let t0 = ins[0];
    Ok(Some(vec![t0.cast(dt0)]))
}

pub fn cast(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    if node.quantized {
        // QNN's Cast writes the integer as the code: cast into scale 1, offset 0 (the integers
        // themselves, saturating), then convert to the output's encoding.
        let e = cx
            .enc_out(node, 0)
            .expect("settled quantized with an encoding");
        let unit = Encoding::per_tensor(e.storage, 1.0, 0);
        if *e == unit {
            cx.op(node, op::CAST, vec![x], vec![y], vec![]);
            return Ok(());
        }
        let shape = cx.out_shape(node, 0);
        let t = cx.native_enc(&format!("{}_ints", node.name), &shape, unit);
        cx.op(node, op::CAST, vec![x], vec![t], vec![]);
        cx.op(node, op::CONVERT, vec![t], vec![y], vec![]);
        return Ok(());
    }
    let q = if cx.tensor_dtype(x) == cx.tensor_dtype(y) {
        op::RESHAPE
    } else {
        op::CAST
    };
    cx.op(node, q, vec![x], vec![y], vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn cast_to_int64_becomes_int32() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("Cast", &["x"], &["y"], &[("to", A::I(7))])
            .output("y");
        let p = lower(&b);
        assert!(p.dump().contains("Cast(x:f32[4]) -> y:i32[4]"));
        assert_eq!(p.outputs[0].host_dtype, DType::I64);
    }

    #[test]
    fn an_integer_cast_to_a_quantized_value_casts_into_unit_scale_and_converts() {
        // RoPE's positions: an integer input cast to float and quantized. QNN's Cast writes
        // the integer as the code, so scale 1 first; a float Cast stays a float island.
        let b = ModelBuilder::new(17)
            .input("p", DType::I64, &[1, 4])
            .input("x", DType::F32, &[1, 4])
            .init("s", Tensor::scalar_f32(0.001))
            .init("z", Tensor::from_i64_as(DType::U16, vec![], &[0]))
            .node("Cast", &["p"], &["pf"], &[("to", A::I(1))])
            .node("QuantizeLinear", &["pf", "s", "z"], &["pq"], &[])
            .node("DequantizeLinear", &["pq", "s", "z"], &["pd"], &[])
            .node("QuantizeLinear", &["x", "s", "z"], &["xq"], &[])
            .node("DequantizeLinear", &["xq", "s", "z"], &["xd"], &[])
            .node("Cast", &["xd"], &["xh"], &[("to", A::I(10))])
            .node("Cast", &["xh"], &["xf"], &[("to", A::I(1))])
            .node("Add", &["pd", "xf"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        let d = p.dump();
        assert!(
            d.contains("Cast(p:i32[1, 4]) -> Cast_0_ints:qu16[1, 4]"),
            "{d}"
        );
        assert!(
            d.contains("Convert(Cast_0_ints:qu16[1, 4]) -> pf:qu16[1, 4]"),
            "{d}"
        );
        let ints = p.tensors.iter().find(|t| t.name == "Cast_0_ints").unwrap();
        assert_eq!(
            ints.quant,
            Some(qnnx_types::Encoding::per_tensor(DType::U16, 1.0, 0))
        );
        assert!(
            d.contains("Dequantize(x_q"),
            "the float Cast reads a float: {d}"
        );
    }

    #[test]
    fn cast_to_string_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("Cast", &["x"], &["y"], &[("to", A::I(8))])
            .output("y");
        assert!(lower_err(&b).contains("attribute 'to': unsupported target type 8"));
    }
}
