//! Concat — <https://onnx.ai/onnx/operators/onnx__Concat.html>, opset 4+. QNN `Concat`:
//! `axis` UINT_32 scalar. Empty inputs (a zero-sized concat dim) are dropped.

use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const CONCAT: OpDef = OpDef {
    op_type: "Concat",
    expand: None,
    lower: Some(concat),
};

pub fn concat(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let r = cx.out_shape(node, 0).len();
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, r)?;
    let mut ins = Vec::new();
    for i in 0..node.inputs.len() {
        if cx.shape(node, i).iter().product::<usize>() == 0 {
            continue;
        }
        ins.push(cx.input(node, i)?);
    }
    let y = cx.output(node, 0)?;
    if ins.len() == 1 {
        cx.op(node, op::RESHAPE, ins, vec![y], vec![]);
    } else {
        cx.op(
            node,
            op::CONCAT,
            ins,
            vec![y],
            vec![(param::AXIS, Param::u32(axis as u32))],
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
    fn concat_snapshot() {
        let b = ModelBuilder::new(17)
            .input("a", DType::F32, &[2, 3])
            .input("b", DType::F32, &[2, 5])
            .node("Concat", &["a", "b"], &["y"], &[("axis", A::I(-1))])
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("Concat(a:f32[2, 3], b:f32[2, 5]) axis=1u -> y:f32[2, 8]"));
    }
}
