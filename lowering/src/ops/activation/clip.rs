//! Clip — <https://onnx.ai/onnx/operators/onnx__Clip.html>, opsets 6 (attributes) and 11+
//! (inputs). QNN `ReluMinMax` with `min_value`/`max_value` (FLOAT_32 scalars); `[0, inf)`
//! becomes `Relu`. Constraints: min and max must be constant. Folded on the host for a constant
//! input (Swin V2 clamps its learned logit scale).

use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const CLIP: OpDef = OpDef {
    op_type: "Clip",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(clip),
    quant: Quant::Direct,
};

fn fold(x: &In, outs: &[Out], _: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let konst = |i: usize| node.input(i).and_then(|v| x.g.konst(v));
    let Some(t) = konst(0) else { return Ok(None) };
    let bound = |i: usize, attr: &str, default: f64| -> Result<f64> {
        if x.g.opset() < 11 {
            return Ok(node.attr_f(attr, default as f32)? as f64);
        }
        Ok(konst(i)
            .filter(|b| b.numel() == 1)
            .map_or(default, |b| b.get_f64(0)))
    };
    let (dt, shape) = outs[0].clone();
    let v: Vec<f64> = if dt.is_float() {
        let (lo, hi) = (
            bound(1, "min", f64::NEG_INFINITY)?,
            bound(2, "max", f64::INFINITY)?,
        );
        t.to_f64().into_iter().map(|e| e.max(lo).min(hi)).collect()
    } else {
        let (lo, hi) = (bound(1, "min", f64::MIN)?, bound(2, "max", f64::MAX)?);
        t.to_f64().into_iter().map(|e| e.max(lo).min(hi)).collect()
    };
    Ok(Some(vec![Tensor::from_f64_as(dt, shape, &v)]))
}

pub fn clip(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let bound = |cx: &LowerCx, i: usize, attr: &str, default: f32| -> Result<f32> {
        if cx.g.opset() < 11 {
            return node.attr_f(attr, default);
        }
        match node.input(i) {
            None => Ok(default),
            Some(_) => match cx.konst(node, i) {
                Some(t) if t.numel() == 1 => Ok(t.get_f64(0) as f32),
                _ => Err(node.err_attr(attr, "must be a constant scalar")),
            },
        }
    };
    let lo = bound(cx, 1, "min", f32::MIN)?;
    let hi = bound(cx, 2, "max", f32::MAX)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    if lo == 0.0 && hi == f32::MAX {
        cx.op(node, op::RELU, vec![x], vec![y], vec![]);
    } else {
        cx.op(
            node,
            op::RELU_MIN_MAX,
            vec![x],
            vec![y],
            vec![
                (param::MIN_VALUE, Param::f32(lo)),
                (param::MAX_VALUE, Param::f32(hi)),
            ],
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::ModelBuilder;

    #[test]
    fn relu6_is_relu_min_max() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("lo", Tensor::scalar_f32(0.0))
            .init("hi", Tensor::scalar_f32(6.0))
            .node("Clip", &["x", "lo", "hi"], &["y"], &[])
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("ReluMinMax(x:f32[4]) min_value=0f max_value=6f -> y:f32[4]"));
    }

    #[test]
    fn clip_min_only_is_relu() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("lo", Tensor::scalar_f32(0.0))
            .node("Clip", &["x", "lo"], &["y"], &[])
            .output("y");
        assert_eq!(lower(&b).op_types(), vec!["Relu"]);
    }

    #[test]
    fn clip_dynamic_bound_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .input("hi", DType::F32, &[])
            .node("Clip", &["x", "", "hi"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower_err(&b),
            "Node \"Clip_0\" (Clip), attribute 'max': must be a constant scalar"
        );
    }

    #[test]
    fn constant_clip_is_folded() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[3])
            .init("c", Tensor::from_f32(vec![3], &[-1.0, 2.0, 9.0]))
            .init("hi", Tensor::scalar_f32(4.6))
            .node("Clip", &["c", "", "hi"], &["k"], &[])
            .node("Add", &["x", "k"], &["y"], &[])
            .output("y");
        assert!(!lower(&b).dump().contains("ReluMinMax"));
        let mut g = b.load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        let v = (0..g.values.len())
            .find(|&v| g.values[v].name == "k")
            .unwrap();
        let got = g.konst(v).unwrap().to_f64();
        assert_eq!(got[..2], [-1.0, 2.0]);
        assert!((got[2] - 4.6).abs() < 1e-6, "{got:?}");
    }
}
