//! Transpose — <https://onnx.ai/onnx/operators/onnx__Transpose.html>, opset 1+ (default perm
//! reverses the dims). QNN `Transpose`: `perm` UINT_32 `[rank]` (tensor param).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};
use crate::passes::infer::transpose_perm;
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const TRANSPOSE: OpDef = OpDef {
    op_type: "Transpose",
    expand: None,
    lower: Some(transpose),
};

pub fn transpose(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let r = cx.shape(node, 0).len();
    let perm: Vec<u32> = transpose_perm(node, r)?.iter().map(|&p| p as u32).collect();
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    if r == 0 {
        cx.op(node, op::RESHAPE, vec![x], vec![y], vec![]);
    } else {
        cx.op(
            node,
            op::TRANSPOSE,
            vec![x],
            vec![y],
            vec![(param::PERM, Param::u32_vec(&perm))],
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn transpose_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .node(
                "Transpose",
                &["x"],
                &["y"],
                &[("perm", A::Is(vec![0, 2, 1]))],
            )
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("Transpose(x:f32[2, 3, 4]) perm=u32[3]{0,2,1} -> y:f32[2, 4, 3]"));
    }
}
