//! Reshape, Flatten, Squeeze, Unsqueeze, and the pass-throughs Identity and Dropout
//! (inference) — <https://onnx.ai/onnx/operators/onnx__Reshape.html> and siblings.
//! All become QNN `Reshape` (no params; the output tensor's shape is the target). Shape inputs
//! must be constant after folding (checked by shape inference). Dropout's mask output and
//! Dropout in training mode (`training_mode` not a constant false) are rejected.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};
use crate::qnn_names::op;

pub const RESHAPE: OpDef = OpDef {
    op_type: "Reshape",
    expand: None,
    lower: Some(reshape),
};

pub const FLATTEN: OpDef = OpDef {
    op_type: "Flatten",
    expand: None,
    lower: Some(reshape),
};

pub const SQUEEZE: OpDef = OpDef {
    op_type: "Squeeze",
    expand: None,
    lower: Some(reshape),
};

pub const UNSQUEEZE: OpDef = OpDef {
    op_type: "Unsqueeze",
    expand: None,
    lower: Some(reshape),
};

pub const IDENTITY: OpDef = OpDef {
    op_type: "Identity",
    expand: None,
    lower: Some(reshape),
};

pub const DROPOUT: OpDef = OpDef {
    op_type: "Dropout",
    expand: None,
    lower: Some(reshape),
};

pub fn reshape(cx: &mut LowerCx, node: &Node) -> Result<()> {
    if node.op_type == "Dropout" && node.output(1).is_some() {
        return Err(node.err_op("the mask output is not supported"));
    }
    if node.op_type == "Dropout" && crate::passes::simplify::dropout_may_train(cx.g, node) {
        return Err(node.err_op("training mode is not supported (inference only)"));
    }
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(node, op::RESHAPE, vec![x], vec![y], vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::ModelBuilder;

    #[test]
    fn reshape_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 6])
            .init("s", Tensor::from_i64(vec![3], &[2, 3, -1]))
            .node("Reshape", &["x", "s"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower(&b).dump(),
            "input x:f32[2, 6]\nReshape(x:f32[2, 6]) -> y:f32[2, 3, 2]\noutput y:f32[2, 3, 2]\n"
        );
    }

    #[test]
    fn dropout_mask_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .node("Dropout", &["x"], &["y", "mask"], &[])
            .output("y")
            .output("mask");
        assert!(lower_err(&b).contains("mask output is not supported"));
    }
}
