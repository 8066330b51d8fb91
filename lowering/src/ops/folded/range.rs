//! Range — <https://onnx.ai/onnx/operators/onnx__Range.html>, opset 11+: `start`, `limit`
//! and `delta` constant scalars give `max(ceil((limit - start) / delta), 0)` values
//! `start + i · delta` in their dtype. Folded to a constant; no QNN op.

use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, OpDef, ShapeInput};

pub const RANGE: OpDef = OpDef {
    op_type: "Range",
    since: 11,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: None,
    quant: Quant::Float,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let dt = x.dtype(0)?;
    let get = |i: usize, w: &str| -> Result<f64> {
        x.konst(i)
            .filter(|t| t.numel() == 1)
            .map(|t| t.get_f64(0))
            .ok_or_else(|| n.err_op(format!("input '{w}' must be a constant scalar")))
    };
    let (s, l, d) = (get(0, "start")?, get(1, "limit")?, get(2, "delta")?);
    if d == 0.0 {
        return Err(n.err_invalid("Range delta is 0"));
    }
    let len = ((l - s) / d).ceil().max(0.0);
    if len > 1e9 {
        return Err(n.err_invalid("Range is too long"));
    }
    Ok(vec![(dt, vec![len as usize])])
}

fn fold(_x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let (dt0, shape0) = outs[0].clone();
    let t0 = ins[0];
    let (s, d) = (t0.get_f64(0), ins[2].get_f64(0));
    let v: Vec<f64> = (0..shape0[0]).map(|i| s + d * i as f64).collect();
    Ok(Some(vec![Tensor::from_f64_as(dt0, shape0, &v)]))
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower_err;
    use crate::testing::ModelBuilder;

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
