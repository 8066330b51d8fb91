//! Split — <https://onnx.ai/onnx/operators/onnx__Split.html> (`split` attribute before opset
//! 13, input after; `num_outputs` since 18). QNN `Split`: `axis` UINT_32 scalar, `split_index`
//! UINT_32 `[outputs - 1]` (start offset of every output but the first).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};
use crate::passes::infer::split_sizes;
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const SPLIT: OpDef = OpDef {
    op_type: "Split",
    expand: None,
    lower: Some(split),
};

pub fn split(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let (axis, sizes) = split_sizes(cx.g, node)?;
    let mut starts = Vec::new();
    let mut acc = 0u32;
    for s in &sizes[..sizes.len() - 1] {
        acc += *s as u32;
        starts.push(acc);
    }
    let x = cx.input(node, 0)?;
    let in_shape = cx.shape(node, 0);
    let dt = cx.tensor_dtype(x);
    let mut outs = Vec::new();
    for (i, &s) in sizes.iter().enumerate() {
        outs.push(match node.output(i) {
            Some(_) => cx.output(node, i)?,
            None => {
                let mut shape = in_shape.clone();
                shape[axis] = s;
                cx.native(&format!("{}_unused{i}", node.name), dt, &shape)
            }
        });
    }
    if outs.len() == 1 {
        cx.op(node, op::RESHAPE, vec![x], outs, vec![]);
        return Ok(());
    }
    cx.op(
        node,
        op::SPLIT,
        vec![x],
        outs,
        vec![
            (param::AXIS, Param::u32(axis as u32)),
            (param::SPLIT_INDEX, Param::u32_vec(&starts)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::ModelBuilder;

    #[test]
    fn split_qkv() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 12])
            .init("s", Tensor::from_i64(vec![3], &[4, 4, 4]))
            .node(
                "Split",
                &["x", "s"],
                &["q", "k", "v"],
                &[("axis", crate::testing::A::I(2))],
            )
            .output("q")
            .output("k")
            .output("v");
        assert!(lower(&b).dump().contains("Split(x:f32[1, 4, 12]) axis=2u split_index=u32[2]{4,8} -> q:f32[1, 4, 4], k:f32[1, 4, 4], v:f32[1, 4, 4]"));
    }
}
