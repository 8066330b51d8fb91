//! QuantizeLinear — <https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html>: output in the
//! zero point's dtype (`output_dtype` since opset 21; uint8 without either). A constant input
//! is quantized on the host; otherwise the `qdq` pass absorbs the node into an encoding (see
//! [`super`]), and one it could not is refused.

use crate::dtype::{DType, OnnxCode};
use crate::error::Result;
use crate::ir::quant::quantize_tensor;
use crate::ir::tensor::Tensor;
use crate::ops::infer::{In, Out};
use crate::ops::quant::{node_encoding, unpaired};
use crate::ops::{Fold, Layout, OpDef, Quant, ShapeInput};

pub const QUANTIZE_LINEAR: OpDef = OpDef {
    op_type: "QuantizeLinear",
    since: 10,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(unpaired),
    quant: Quant::Float,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let dt = if x.has(2) {
        x.dtype(2)?
    } else {
        match x.n.attr_i("output_dtype", 0)? {
            0 => DType::U8,
            c => DType::from_onnx(c as i32).ok_or_else(|| {
                x.n.err_attr("output_dtype", format!("element type {c} is not supported"))
            })?,
        }
    };
    Ok(vec![(dt, x.shape(0)?.to_vec())])
}

fn fold(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let (dt, _) = &outs[0];
    let q = node_encoding(x.g, x.n, *dt, &ins[0].shape)?;
    Ok(Some(vec![quantize_tensor(ins[0], &q)]))
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower_err;
    use crate::testing::ModelBuilder;

    #[test]
    fn a_lone_quantize_is_refused_with_the_reason() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("s", Tensor::scalar_f32(0.5))
            .node("QuantizeLinear", &["x", "s"], &["q"], &[])
            .node("Cast", &["q"], &["y"], &[("to", crate::testing::A::I(1))])
            .output("y");
        let e = lower_err(&b);
        assert!(e.contains("not part of such a pair"), "{e}");
    }
}
