//! Gather / GatherElements — <https://onnx.ai/onnx/operators/onnx__Gather.html>,
//! <https://onnx.ai/onnx/operators/onnx__GatherElements.html>. QNN `Gather` /
//! `GatherElements`: `axis` INT_32 scalar; indices int32. QNN does not wrap negative indices:
//! constant ones are made non-negative here, dynamic ones by `Select(idx < 0, idx + dim, idx)`.
//! Rank-0 indices travel as `[1]` (plans have no rank 0), so QNN's output keeps the gathered
//! axis as size 1 and a Reshape drops it.

use crate::attr::norm_axis;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::{plan_shape, LowerCx};
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
        None => {
            let idx = cx.input(node, 1)?;
            let dt = cx.tensor_dtype(idx);
            if dt != crate::plan::DType::I32 {
                return Ok(idx);
            }
            let qs = cx.tshape(idx);
            let ones = vec![1; qs.len()];
            let zero = Tensor::from_i64_as(DType::I32, ones.clone(), &[0]);
            let zero = cx.static_tensor(node, &format!("{}_zero", node.name), &zero)?;
            let d = Tensor::from_i64_as(DType::I32, ones, &[dim as i64]);
            let d = cx.static_tensor(node, &format!("{}_dim", node.name), &d)?;
            let neg = cx.emit(
                node,
                op::ELEMENT_WISE_LESS,
                vec![idx, zero],
                crate::plan::DType::Bool,
                &qs,
                vec![],
            );
            let plus = cx.emit(node, op::ELEMENT_WISE_ADD, vec![idx, d], dt, &qs, vec![]);
            Ok(cx.emit(
                node,
                op::ELEMENT_WISE_SELECT,
                vec![neg, plus, idx],
                dt,
                &qs,
                vec![],
            ))
        }
    }
}

pub fn gather(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let s = cx.shape(node, 0);
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, s.len())?;
    let idx = indices(cx, node, s[axis])?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    let params = vec![(param::AXIS, Param::i32(axis as i32))];
    let mut qnn_shape = s.clone();
    qnn_shape[axis] = 1;
    if cx.shape(node, 1).is_empty() && plan_shape(&qnn_shape) != cx.plan.tensors[y].shape {
        let dt = cx.tensor_dtype(y);
        let g = cx.emit(node, op::GATHER, vec![x, idx], dt, &qnn_shape, params);
        cx.op(node, op::RESHAPE, vec![g], vec![y], vec![]);
    } else {
        cx.op(node, op::GATHER, vec![x, idx], vec![y], params);
    }
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
                .contains("Gather(static emb:f32[10, 3], Gather_0_ElementWiseSelect:i32[1, 4]) axis=0i -> y:f32[1, 4, 3]"),
            "{}",
            p.dump()
        );
        assert_eq!(p.inputs[0].host_dtype, DType::I64);
    }

    #[test]
    fn dynamic_indices_are_wrapped() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[3, 4])
            .input("i", DType::I64, &[3, 4])
            .node("GatherElements", &["x", "i"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(d.contains("ElementWiseLess(i:i32[3, 4], static GatherElements_0_zero:i32[1, 1]) -> GatherElements_0_ElementWiseLess:bool[3, 4]"), "{d}");
        assert!(
            d.contains("ElementWiseAdd(i:i32[3, 4], static GatherElements_0_dim:i32[1, 1])"),
            "{d}"
        );
        assert!(d.contains("GatherElements(x:f32[3, 4], GatherElements_0_ElementWiseSelect:i32[3, 4]) axis=0u -> y"), "{d}");
    }

    #[test]
    fn scalar_index_drops_the_axis_with_a_reshape() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[3, 2, 4])
            .init("i", Tensor::from_i64(vec![], &[1]))
            .node("Gather", &["x", "i"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("Gather(x:f32[3, 2, 4], static Gather_0_indices:i32[1]) axis=0i -> Gather_0_Gather:f32[1, 2, 4]"),
            "{d}"
        );
        assert!(
            d.contains("Reshape(Gather_0_Gather:f32[1, 2, 4]) -> y:f32[2, 4]"),
            "{d}"
        );
    }

    #[test]
    fn scalar_index_into_a_vector_needs_no_reshape() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[5])
            .init("i", Tensor::from_i64(vec![], &[-2]))
            .node("Gather", &["x", "i"], &["y"], &[])
            .output("y");
        assert_eq!(lower(&b).op_types(), ["Gather"]);
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
