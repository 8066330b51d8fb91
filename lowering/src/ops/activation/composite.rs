//! Ops with no QNN counterpart on HTP that ONNX defines as short functions, expanded before
//! lowering into the ops of their function bodies:
//!
//! - Selu — <https://onnx.ai/onnx/operators/onnx__Selu.html>: `gamma · Elu(x, alpha)`.
//! - ThresholdedRelu — <https://onnx.ai/onnx/operators/onnx__ThresholdedRelu.html>:
//!   `Where(x > alpha, x, 0)`.
//! - Swish — <https://onnx.ai/onnx/operators/onnx__Swish.html>: `x · Sigmoid(alpha · x)`.
//! - Tan — <https://onnx.ai/onnx/operators/onnx__Tan.html>: `Sin(x) / Cos(x)`.
//! - Mean — <https://onnx.ai/onnx/operators/onnx__Mean.html>: `Sum(x..) · (1 / n)`.
//! - IsNaN — <https://onnx.ai/onnx/operators/onnx__IsNaN.html>: `Not(x == x)`.
//!
//! All of them run on HTP in f16/f32 through the rules of the ops they expand into.

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::{Attr, Node, ValueId};
use crate::ops::elementwise::{infer_mask, infer_variadic};
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, OpDef, ShapeInput};

pub const SELU: OpDef = OpDef {
    op_type: "Selu",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: Some(selu),
    lower: None,
    quant: Quant::Float,
};

pub const THRESHOLDED_RELU: OpDef = OpDef {
    op_type: "ThresholdedRelu",
    since: 10,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: Some(thresholded_relu),
    lower: None,
    quant: Quant::Float,
};

pub const SWISH: OpDef = OpDef {
    op_type: "Swish",
    since: 24,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: Some(swish),
    lower: None,
    quant: Quant::Float,
};

pub const TAN: OpDef = OpDef {
    op_type: "Tan",
    since: 7,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: Some(tan),
    lower: None,
    quant: Quant::Float,
};

pub const MEAN: OpDef = OpDef {
    op_type: "Mean",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: infer_variadic,
    fold: None,
    expand: Some(mean),
    lower: None,
    quant: Quant::Float,
};

pub const IS_NAN: OpDef = OpDef {
    op_type: "IsNaN",
    since: 9,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: infer_mask,
    fold: None,
    expand: Some(is_nan),
    lower: None,
    quant: Quant::Float,
};

pub fn selu(b: &mut Builder, node: &Node) -> Result<bool> {
    let (x, y) = node.unary_io()?;
    let alpha = node.attr_f("alpha", 1.673_263_2)?;
    let gamma = node.attr_f("gamma", 1.050_701)?;
    let dt = b.g.dtype(x);
    let e = b.op("Elu", &[x], vec![("alpha", Attr::Float(alpha))]);
    let g = b.scalar(dt, gamma as f64);
    b.op_to("Mul", &[e, g], vec![], &[y]);
    Ok(true)
}

pub fn thresholded_relu(b: &mut Builder, node: &Node) -> Result<bool> {
    let (x, y) = node.unary_io()?;
    let alpha = node.attr_f("alpha", 1.0)?;
    let dt = b.g.dtype(x);
    let a = b.scalar(dt, alpha as f64);
    let zero = b.scalar(dt, 0.0);
    let gt = b.op("Greater", &[x, a], vec![]);
    b.op_to("Where", &[gt, x, zero], vec![], &[y]);
    Ok(true)
}

pub fn swish(b: &mut Builder, node: &Node) -> Result<bool> {
    let (x, y) = node.unary_io()?;
    let alpha = node.attr_f("alpha", 1.0)?;
    let dt = b.g.dtype(x);
    let ax = if alpha == 1.0 {
        x
    } else {
        let a = b.scalar(dt, alpha as f64);
        b.op("Mul", &[x, a], vec![])
    };
    let s = b.op("Sigmoid", &[ax], vec![]);
    b.op_to("Mul", &[x, s], vec![], &[y]);
    Ok(true)
}

pub fn tan(b: &mut Builder, node: &Node) -> Result<bool> {
    let (x, y) = node.unary_io()?;
    let s = b.op("Sin", &[x], vec![]);
    let c = b.op("Cos", &[x], vec![]);
    b.op_to("Div", &[s, c], vec![], &[y]);
    Ok(true)
}

pub fn mean(b: &mut Builder, node: &Node) -> Result<bool> {
    let (x, y) = node.unary_io()?;
    let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
    let dt = b.g.dtype(x);
    let s = if ins.len() == 1 {
        x
    } else {
        b.op("Sum", &ins, vec![])
    };
    let k = b.scalar(dt, 1.0 / ins.len() as f64);
    b.op_to("Mul", &[s, k], vec![], &[y]);
    Ok(true)
}

pub fn is_nan(b: &mut Builder, node: &Node) -> Result<bool> {
    let (x, y) = node.unary_io()?;
    let eq = b.op("Equal", &[x, x], vec![]);
    b.op_to("Not", &[eq], vec![], &[y]);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{graph_with, infer, lower, node};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn tan_is_inferred() {
        let g = graph_with(&[("x", DType::F16, vec![1, 4, 8])]);
        assert_eq!(
            infer(&g, &node("Tan", &[Some(0)], &[])).unwrap(),
            vec![(DType::F16, vec![1, 4, 8])]
        );
    }

    fn one(op: &str, attrs: &[(&str, A)]) -> ModelBuilder {
        ModelBuilder::new(24)
            .input("x", DType::F32, &[2, 3])
            .node(op, &["x"], &["y"], attrs)
            .output("y")
    }

    fn types(op: &str, attrs: &[(&str, A)]) -> Vec<&'static str> {
        lower(&one(op, attrs)).op_types()
    }

    #[test]
    fn composite_snapshots() {
        assert_eq!(types("Selu", &[]), vec!["Elu", "ElementWiseMultiply"]);
        assert_eq!(
            types("ThresholdedRelu", &[]),
            vec!["ElementWiseGreater", "ElementWiseSelect"]
        );
        assert_eq!(types("Swish", &[]), vec!["Sigmoid", "ElementWiseMultiply"]);
        assert_eq!(
            types("Tan", &[]),
            vec!["ElementWiseSin", "ElementWiseCos", "ElementWiseDivide"]
        );
        assert_eq!(
            types("IsNaN", &[]),
            vec!["ElementWiseEqual", "ElementWiseNot"]
        );
        let d = lower(
            &ModelBuilder::new(13)
                .input("a", DType::F32, &[2])
                .input("b", DType::F32, &[2])
                .node("Mean", &["a", "b"], &["y"], &[])
                .output("y"),
        )
        .dump();
        assert!(d.contains("ElementWiseAdd(a:f32[2], b:f32[2])"), "{d}");
    }
}
