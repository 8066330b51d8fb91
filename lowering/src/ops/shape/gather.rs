//! Gather / GatherElements — <https://onnx.ai/onnx/operators/onnx__Gather.html>,
//! <https://onnx.ai/onnx/operators/onnx__GatherElements.html>. QNN `Gather` /
//! `GatherElements`: `axis` INT_32 scalar; indices int32. Constant negative indices are made
//! non-negative here (QNN does not wrap them); dynamic indices must already be in range.

use crate::attr::norm_axis;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::LowerCx;
use crate::plan::Param;
use crate::qnn_names::{op, param};
use crate::tensor::Tensor;

fn indices(cx: &mut LowerCx, node: &Node, dim: usize) -> Result<crate::plan::TensorId> {
    match cx.konst(node, 1) {
        Some(t) => {
            let mut v = t.to_i64();
            for x in &mut v {
                if *x < 0 {
                    *x += dim as i64;
                }
                if *x < 0 || *x >= dim as i64 {
                    return Err(
                        node.err_invalid(format!("index {x} is out of range for dim {dim}"))
                    );
                }
            }
            let nt = Tensor::from_i64_as(DType::I32, t.shape.clone(), &v);
            cx.static_tensor(node, &format!("{}_indices", node.name), &nt)
        }
        None => cx.input(node, 1),
    }
}

pub fn gather(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let s = cx.shape(node, 0);
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, s.len())?;
    let idx = indices(cx, node, s[axis])?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::GATHER,
        vec![x, idx],
        vec![y],
        vec![(param::AXIS, Param::i32(axis as i32))],
    );
    Ok(())
}

pub fn gather_elements(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let s = cx.shape(node, 0);
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, s.len())?;
    let idx = indices(cx, node, s[axis])?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::GATHER_ELEMENTS,
        vec![x, idx],
        vec![y],
        vec![(param::AXIS, Param::u32(axis as u32))],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::tensor::Tensor;
    use crate::testing::ModelBuilder;

    #[test]
    fn embedding_lookup() {
        let b = ModelBuilder::new(17)
            .input("ids", DType::I64, &[1, 4])
            .init("emb", Tensor::from_f32(vec![10, 3], &[0.5; 30]))
            .node("Gather", &["emb", "ids"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        assert!(
            p.dump()
                .contains("Gather(static emb:f32[10, 3], ids:i32[1, 4]) axis=0i -> y:f32[1, 4, 3]"),
            "{}",
            p.dump()
        );
        assert_eq!(p.inputs[0].host_dtype, DType::I64);
    }

    #[test]
    fn constant_negative_index_wraps_and_out_of_range_fails() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 5])
            .init("i", Tensor::from_i64(vec![1], &[-1]))
            .node(
                "Gather",
                &["x", "i"],
                &["y"],
                &[("axis", crate::testing::A::I(1))],
            )
            .output("y");
        let p = lower(&b);
        assert!(p.dump().contains("static Gather_0_indices:i32[1]"));
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 5])
            .init("i", Tensor::from_i64(vec![1], &[7]))
            .node(
                "Gather",
                &["x", "i"],
                &["y"],
                &[("axis", crate::testing::A::I(1))],
            )
            .output("y");
        assert!(lower_err(&b).contains("index 7 is out of range"));
    }
}
