//! Cast / CastLike — <https://onnx.ai/onnx/operators/onnx__Cast.html>, opset 6+. QNN `Cast`
//! (no params; the output tensor's dtype is the target). Casts to int64 were narrowed to int32
//! by `narrow_int64`; casts to f32 inside an fp16 graph were turned into f16 by `fp16`.

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
    quant: Quant::Float,
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
    quant: Quant::Float,
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
    fn cast_to_string_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("Cast", &["x"], &["y"], &[("to", A::I(8))])
            .output("y");
        assert!(lower_err(&b).contains("attribute 'to': unsupported target type 8"));
    }
}
