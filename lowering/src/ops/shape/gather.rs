//! Gather / GatherElements — <https://onnx.ai/onnx/operators/onnx__Gather.html>,
//! <https://onnx.ai/onnx/operators/onnx__GatherElements.html>. QNN `Gather` /
//! `GatherElements`: `axis` INT_32 scalar; indices int32. QNN does not wrap negative indices:
//! constant ones are made non-negative here, dynamic ones by `Select(idx < 0, idx + dim, idx)`.
//! Rank-0 indices travel as `[1]` (plans have no rank 0), so QNN's output keeps the gathered
//! axis as size 1 and a Reshape drops it.
//!
//! The HTP validates Gather and GatherElements for f16, f32 and i32 data only, although it lists
//! bool, u8 and i8 (measured on libQnnHtp 2.51, SoC 60: error 3110 for the others). bool and u8
//! data (a padding mask gathered per position, say) go through i32 with Casts, which are exact;
//! i8 cannot (the HTP has no unquantized i8 Cast) and is refused by the op table. Quantized
//! (fixed-point) u8 and u16 data are gathered directly.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::tensor::{map_indices, strides, Tensor};
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{plan_shape, Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::{Param, TensorId};
use crate::qnn_names::{op, param};

pub const GATHER: OpDef = OpDef {
    op_type: "Gather",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: infer_gather,
    fold: Some(Fold::Values(fold_gather)),
    expand: None,
    lower: Some(gather),
    quant: Quant::Same,
};

pub const GATHER_ELEMENTS: OpDef = OpDef {
    op_type: "GatherElements",
    since: 11,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: infer_gather_elements,
    fold: Some(Fold::Values(fold_gather_elements)),
    expand: None,
    lower: Some(gather_elements),
    quant: Quant::Same,
};

fn infer_gather(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let s = x.shape(0)?;
    let axis = norm_axis(n, "axis", n.attr_i("axis", 0)?, s.len())?;
    let mut o = s[..axis].to_vec();
    o.extend_from_slice(x.shape(1)?);
    o.extend_from_slice(&s[axis + 1..]);
    Ok(vec![(x.dtype(0)?, o)])
}

fn infer_gather_elements(x: &In) -> Result<Vec<Out>> {
    Ok(vec![(x.dtype(0)?, x.shape(1)?.to_vec())])
}

// Output, index and data dims are addressed by position in parallel.
#[allow(clippy::needless_range_loop)]
fn fold_gather(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let shape0 = outs[0].1.clone();
    let t0 = ins[0];
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, t0.shape.len())?;
    let idx_t = ins[1];
    let d = t0.shape[axis] as i64;
    let mut idxs = Vec::with_capacity(idx_t.numel());
    for i in idx_t.to_i64() {
        let j = if i < 0 { i + d } else { i };
        if j < 0 || j >= d {
            return Err(node.err_invalid(format!("gather index {i} is out of range for dim {d}")));
        }
        idxs.push(j as usize);
    }
    let st = strides(&t0.shape);
    let ir = idx_t.shape.len();
    let map = map_indices(&shape0, |o| {
        let ist = strides(&idx_t.shape);
        let flat_idx: usize = o[axis..axis + ir]
            .iter()
            .zip(&ist)
            .map(|(a, b)| a * b)
            .sum();
        let mut f = idxs[flat_idx] * st[axis];
        for k in 0..axis {
            f += o[k] * st[k];
        }
        for k in axis + 1..t0.shape.len() {
            f += o[k - 1 + ir] * st[k];
        }
        f
    });
    Ok(Some(vec![t0.gather_flat(shape0, &map)]))
}

/// `out[o] = data[o with o[axis] replaced by idx[o]]`. A model that stores a buffer and its
/// indices (transformers' `token_type_ids` buffer, expanded and gathered per position) folds to a
/// constant here, and so does the embedding lookup it feeds.
fn fold_gather_elements(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let (t0, idx_t) = (ins[0], ins[1]);
    let r = t0.shape.len();
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, r)?;
    if idx_t.shape.len() != r {
        return Err(node.err_invalid("indices must have the rank of the data"));
    }
    let d = t0.shape[axis] as i64;
    let mut idxs = Vec::with_capacity(idx_t.numel());
    for i in idx_t.to_i64() {
        let j = if i < 0 { i + d } else { i };
        if j < 0 || j >= d {
            return Err(node.err_invalid(format!("index {i} is out of range for dim {d}")));
        }
        idxs.push(j as usize);
    }
    let shape0 = outs[0].1.clone();
    if shape0
        .iter()
        .zip(&t0.shape)
        .enumerate()
        .any(|(k, (o, s))| k != axis && o > s)
    {
        return Err(node.err_invalid("indices are larger than the data off the gathered axis"));
    }
    let st = strides(&t0.shape);
    let mut flat = 0;
    let map = map_indices(&shape0, |o| {
        let f = (0..r)
            .map(|k| if k == axis { idxs[flat] } else { o[k] } * st[k])
            .sum();
        flat += 1;
        f
    });
    Ok(Some(vec![t0.gather_flat(shape0, &map)]))
}

fn indices(cx: &mut LowerCx, node: &Node, dim: usize) -> Result<TensorId> {
    wrapped_indices(cx, node, 1, &[dim])
}

/// Index input `i` as QNN reads it: non-negative int32. `dims` are the sizes the indices
/// address, one for every index (`[dim]`) or one per position of the indices' last axis
/// (GatherND, ScatterND). Constant indices are wrapped here and checked; dynamic ones by
/// `Select(idx < 0, idx + dims, idx)`.
pub(crate) fn wrapped_indices(
    cx: &mut LowerCx,
    node: &Node,
    i: usize,
    dims: &[usize],
) -> Result<TensorId> {
    let dim_of = |k: usize| dims[if dims.len() == 1 { 0 } else { k % dims.len() }] as i64;
    match cx.konst(node, i) {
        Some(t) => {
            let mut v = t.to_i64();
            for (k, x) in v.iter_mut().enumerate() {
                let d = dim_of(k);
                if *x < 0 {
                    *x += d;
                }
                if *x < 0 || *x >= d {
                    return Err(node.err_invalid(format!("index {x} is out of range for dim {d}")));
                }
            }
            let nt = Tensor::from_i64_as(DType::I32, t.shape.clone(), &v);
            cx.static_tensor(node, &format!("{}_indices", node.name), &nt)
        }
        None => {
            let idx = cx.input(node, i)?;
            let dt = cx.tensor_dtype(idx);
            if dt != DType::I32 {
                return Ok(idx);
            }
            let qs = cx.tshape(idx);
            let mut ones = vec![1; qs.len()];
            let zero = Tensor::from_i64_as(DType::I32, ones.clone(), &[0]);
            let zero = cx.static_tensor(node, &format!("{}_zero", node.name), &zero)?;
            let dv: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
            if dims.len() > 1 {
                *ones.last_mut().expect("indices of rank >= 1") = dims.len();
            }
            let d = Tensor::from_i64_as(DType::I32, ones, &dv);
            let d = cx.static_tensor(node, &format!("{}_dim", node.name), &d)?;
            let neg = cx.emit(
                node,
                op::ELEMENT_WISE_LESS,
                vec![idx, zero],
                DType::Bool,
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

/// The data input, cast to i32 when its dtype is one the HTP cannot gather (see the module doc).
/// Quantized u8 data (an embedding table in a QDQ model) is gathered as it is: a QNN Cast of a
/// fixed-point tensor converts its real values, not its integers.
fn data(cx: &mut LowerCx, node: &Node) -> Result<TensorId> {
    let x = cx.input(node, 0)?;
    if !matches!(cx.tensor_dtype(x), crate::DType::Bool | crate::DType::U8) || cx.is_quantized(x) {
        return Ok(x);
    }
    let s = cx.tshape(x);
    Ok(cx.emit(node, op::CAST, vec![x], crate::DType::I32, &s, vec![]))
}

/// Emits `q` into `y`. `qnn_shape` is QNN's output shape when it differs from `y`'s (a Reshape
/// follows); a widened `data` is cast back to `y`'s dtype last.
fn emit_gather(
    cx: &mut LowerCx,
    node: &Node,
    q: &'static str,
    ins: Vec<TensorId>,
    y: TensorId,
    qnn_shape: Option<Vec<usize>>,
    params: Vec<(&'static str, Param)>,
) {
    let got = cx.tensor_dtype(ins[0]);
    let widened = got != cx.tensor_dtype(y);
    let mut t = match (qnn_shape, widened) {
        (None, false) => {
            cx.op(node, q, ins, vec![y], params);
            return;
        }
        (None, true) => {
            let ys = cx.tshape(y);
            cx.emit(node, q, ins, got, &ys, params)
        }
        (Some(qs), _) => cx.emit(node, q, ins, got, &qs, params),
    };
    if cx.tshape(t) != cx.tshape(y) {
        if !widened {
            cx.op(node, op::RESHAPE, vec![t], vec![y], vec![]);
            return;
        }
        let ys = cx.tshape(y);
        t = cx.emit(node, op::RESHAPE, vec![t], got, &ys, vec![]);
    }
    cx.op(node, op::CAST, vec![t], vec![y], vec![]);
}

pub fn gather(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let s = cx.shape(node, 0);
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, s.len())?;
    let idx = indices(cx, node, s[axis])?;
    let x = data(cx, node)?;
    let y = cx.output(node, 0)?;
    let params = vec![(param::AXIS, Param::i32(axis as i32))];
    let mut qnn_shape = s.clone();
    qnn_shape[axis] = 1;
    let reshape =
        cx.shape(node, 1).is_empty() && plan_shape(&qnn_shape) != cx.plan.tensors[y].shape;
    emit_gather(
        cx,
        node,
        op::GATHER,
        vec![x, idx],
        y,
        reshape.then_some(qnn_shape),
        params,
    );
    Ok(())
}

pub fn gather_elements(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let s = cx.shape(node, 0);
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, s.len())?;
    let idx = indices(cx, node, s[axis])?;
    let x = data(cx, node)?;
    let y = cx.output(node, 0)?;
    let params = vec![(param::AXIS, Param::u32(axis as u32))];
    emit_gather(cx, node, op::GATHER_ELEMENTS, vec![x, idx], y, None, params);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
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
    fn bool_data_is_gathered_as_int32() {
        // A padding mask read per position: the HTP refuses bool Gather (error 3110).
        let b = ModelBuilder::new(17)
            .input("mask", DType::Bool, &[2, 8])
            .init("i", Tensor::from_i64(vec![3], &[0, 2, 7]))
            .node(
                "Gather",
                &["mask", "i"],
                &["y"],
                &[("axis", crate::testing::A::I(1))],
            )
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("Cast(mask:bool[2, 8]) -> Gather_0_Cast:i32[2, 8]"),
            "{d}"
        );
        assert!(d.contains("Gather(Gather_0_Cast:i32[2, 8], static Gather_0_indices:i32[3]) axis=1i -> Gather_0_Gather:i32[2, 3]"), "{d}");
        assert!(
            d.contains("Cast(Gather_0_Gather:i32[2, 3]) -> y:bool[2, 3]"),
            "{d}"
        );
    }

    #[test]
    fn bool_scalar_index_reshapes_then_casts() {
        let b = ModelBuilder::new(17)
            .input("mask", DType::Bool, &[3, 4])
            .init("i", Tensor::from_i64(vec![], &[1]))
            .node("Gather", &["mask", "i"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        assert_eq!(p.op_types(), ["Cast", "Gather", "Reshape", "Cast"]);
    }

    #[test]
    fn int8_data_is_refused_by_the_table() {
        let b = ModelBuilder::new(17)
            .input("x", DType::I8, &[2, 8])
            .init("i", Tensor::from_i64(vec![1], &[0]))
            .node("Gather", &["x", "i"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains("i8"), "{}", lower_err(&b));
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

    #[test]
    fn constant_gather_elements_is_folded() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 2])
            .init(
                "d",
                Tensor::from_f32(vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            )
            .init("i", Tensor::from_i64(vec![2, 2], &[2, -3, 1, 1]))
            .node(
                "GatherElements",
                &["d", "i"],
                &["g"],
                &[("axis", crate::testing::A::I(1))],
            )
            .node("Add", &["x", "g"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(!d.contains("GatherElements"), "{d}");
        let mut g = b.load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        let v = (0..g.values.len())
            .find(|&v| g.values[v].name == "g")
            .unwrap();
        assert_eq!(g.konst(v).unwrap().to_f64(), vec![3.0, 1.0, 5.0, 5.0]);
    }

    #[test]
    fn constant_gather_elements_out_of_range_is_refused() {
        let b = ModelBuilder::new(17)
            .init("d", Tensor::from_f32(vec![2, 3], &[1.0; 6]))
            .init("i", Tensor::from_i64(vec![1, 1], &[3]))
            .node(
                "GatherElements",
                &["d", "i"],
                &["y"],
                &[("axis", crate::testing::A::I(1))],
            )
            .output("y");
        assert!(
            lower_err(&b).contains("index 3 is out of range for dim 3"),
            "{}",
            lower_err(&b)
        );
    }
}
