//! Gelu — <https://onnx.ai/onnx/operators/onnx__Gelu.html>, opset 20 (also produced by the
//! `fuse_gelu` pass from torch's erf pattern). QNN `Gelu` (erf form, no params).
//! Constraint: `approximate = "none"` here; the tanh form is expanded before lowering
//! (`activation/composite.rs`).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::LowerCx;
use crate::qnn_names::op;

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
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn gelu_maps_to_gelu() {
        let b = ModelBuilder::new(20)
            .input("x", DType::F32, &[4])
            .node("Gelu", &["x"], &["y"], &[])
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
