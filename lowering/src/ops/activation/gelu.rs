//! Gelu — <https://onnx.ai/onnx/operators/onnx__Gelu.html>, opset 20 (also produced by the
//! `fuse_gelu` pass from torch's erf pattern). QNN `Gelu` (erf form, no params) for
//! `approximate = "none"`. The tanh form is expanded before lowering into the ops of its
//! definition, `0.5 · x · (1 + Tanh(√(2/π) · (x + 0.044715 · x³)))`, which on the HTP the
//! `fuse_gelu` pass then fuses back into QNN `Gelu` (why: passes/fuse_gelu.rs).

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::qnn_names::op;

pub const GELU: OpDef = OpDef {
    op_type: "Gelu",
    since: 20,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: Some(gelu_tanh),
    lower: Some(gelu),
    quant: Quant::Direct,
};

pub fn gelu_tanh(b: &mut Builder, node: &Node) -> Result<bool> {
    if node.attr_s("approximate", "none")? != "tanh" {
        return Ok(false);
    }
    let (x, y) = node.unary_io()?;
    let dt = b.g.dtype(x);
    let x2 = b.op("Mul", &[x, x], vec![]);
    let x3 = b.op("Mul", &[x2, x], vec![]);
    let c = b.scalar(dt, 0.044715);
    let cx3 = b.op("Mul", &[x3, c], vec![]);
    let inner = b.op("Add", &[x, cx3], vec![]);
    let k = b.scalar(dt, (2.0 / std::f64::consts::PI).sqrt());
    let scaled = b.op("Mul", &[inner, k], vec![]);
    let t = b.op("Tanh", &[scaled], vec![]);
    let one = b.scalar(dt, 1.0);
    let t1 = b.op("Add", &[t, one], vec![]);
    let half = b.scalar(dt, 0.5);
    let hx = b.op("Mul", &[x, half], vec![]);
    b.op_to("Mul", &[hx, t1], vec![], &[y]);
    Ok(true)
}

pub fn gelu(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let approx = node.attr_s("approximate", "none")?;
    if approx != "none" {
        return Err(node.err_attr(
            "approximate",
            format!("'{approx}' is not supported; only 'none' (erf GELU)"),
        ));
    }
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(node, op::GELU, vec![x], vec![y], vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err, lower_with};
    use crate::testing::{ModelBuilder, A};
    use crate::{Backend, LowerOptions};

    #[test]
    fn gelu_maps_to_gelu() {
        let b = ModelBuilder::new(20)
            .input("x", DType::F32, &[4])
            .node("Gelu", &["x"], &["y"], &[])
            .output("y");
        assert_eq!(lower(&b).op_types(), vec!["Gelu"]);
    }

    #[test]
    fn tanh_gelu_is_expanded_on_gpu() {
        let b = ModelBuilder::new(24)
            .input("x", DType::F32, &[2, 3])
            .node("Gelu", &["x"], &["y"], &[("approximate", A::S("tanh"))])
            .output("y");
        let o = LowerOptions {
            backend: Backend::Gpu,
            ..Default::default()
        };
        let t = lower_with(&b, &o).op_types();
        assert_eq!(t.last(), Some(&"ElementWiseMultiply"), "{t:?}");
        assert!(t.contains(&"Tanh"), "{t:?}");
    }

    #[test]
    fn tanh_gelu_is_one_gelu_on_htp() {
        let b = ModelBuilder::new(24)
            .input("x", DType::F32, &[2, 3])
            .node("Gelu", &["x"], &["y"], &[("approximate", A::S("tanh"))])
            .output("y");
        assert_eq!(lower(&b).op_types(), vec!["Gelu"]);
    }

    #[test]
    fn gelu_unknown_approximation_unsupported() {
        let b = ModelBuilder::new(20)
            .input("x", DType::F32, &[4])
            .node("Gelu", &["x"], &["y"], &[("approximate", A::S("sigmoid"))])
            .output("y");
        assert!(lower_err(&b).contains("attribute 'approximate': 'sigmoid' is not supported"));
    }
}
