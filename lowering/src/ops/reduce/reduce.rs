//! ReduceMean / ReduceSum / ReduceMax / ReduceMin — <https://onnx.ai/onnx/operators/onnx__ReduceMean.html>
//! (and the inference and folding the expanded reductions of `reduce_composite.rs` share).
//! `axes` is an attribute before opset 18 (13 for ReduceSum) and a constant input after;
//! `noop_with_empty_axes` is honoured. QNN `ReduceMean`/`ReduceSum`/`ReduceMax`/`ReduceMin`:
//! `axes` UINT_32 `[k]` (tensor param), `keep_dims` BOOL_8 scalar.

use crate::error::Result;
use crate::ir::attr::norm_axes;
use crate::ir::tensor::{map_indices, numel, strides, Tensor};
use crate::ir::{Graph, Node};
use crate::ops::infer::{In, Out};
use crate::ops::registry::{slot_1_from_13, Resolved, ShapeQuery};
use crate::ops::Quant;
use crate::ops::{AxesOp, Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::assumed::{reduce_key, reduce_shape};
use crate::plan::Accept;
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const REDUCE_MEAN: OpDef = OpDef {
    op_type: "ReduceMean",
    since: 1,
    layout: Layout::Axes(layout_axes),
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_18,
        resolve: resolve_axes,
    },
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(reduce),
    quant: Quant::Direct,
};

pub const REDUCE_SUM: OpDef = OpDef {
    op_type: "ReduceSum",
    since: 1,
    layout: Layout::Axes(layout_axes),
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_13,
        resolve: resolve_axes,
    },
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(reduce),
    quant: Quant::Direct,
};

pub const REDUCE_MAX: OpDef = OpDef {
    op_type: "ReduceMax",
    since: 1,
    layout: Layout::Axes(layout_axes),
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_18,
        resolve: resolve_axes,
    },
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(reduce),
    quant: Quant::Same,
};

pub const REDUCE_MIN: OpDef = OpDef {
    op_type: "ReduceMin",
    since: 1,
    layout: Layout::Axes(layout_axes),
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_18,
        resolve: resolve_axes,
    },
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(reduce),
    quant: Quant::Same,
};

/// Whether `n` names its axes in input 1 rather than its `axes` attribute: ReduceSum moved them
/// to an input in opset 13, the other reductions in opset 18.
pub fn axes_are_input(g: &Graph, n: &Node) -> bool {
    if n.op_type == "ReduceSum" {
        g.opset() >= 13
    } else {
        g.opset() >= 18
    }
}

fn reduce_axes(x: &In, n: &Node, rank: usize) -> Result<Option<Vec<usize>>> {
    let axes = if axes_are_input(x.g, n) {
        x.opt_const_ints(1, "axes")?
    } else {
        n.attr_ints_opt("axes")?
    };
    match axes {
        Some(a) if !a.is_empty() => Ok(Some(norm_axes(n, "axes", &a, rank)?)),
        _ => {
            if n.attr_i("noop_with_empty_axes", 0)? != 0 {
                Ok(None)
            } else {
                Ok(Some((0..rank).collect()))
            }
        }
    }
}

/// The reduced axes (`None`: none, with `noop_with_empty_axes`) and `keepdims`.
/// The reduction's axes for the layout pass ([`Layout::Axes`]); `None` when they are not a
/// constant (the rule reports that) or `noop_with_empty_axes` is set with no axes (an identity).
fn layout_axes(g: &Graph, n: &Node, _r: usize) -> Option<AxesOp> {
    let (axes, keep) = reduce_params(g, n).ok()?;
    Some(AxesOp::Reduce { axes: axes?, keep })
}

pub fn reduce_params(g: &Graph, n: &Node) -> Result<(Option<Vec<usize>>, bool)> {
    let x = In { g, n };
    let rank = x.rank(0)?;
    Ok((reduce_axes(&x, n, rank)?, n.attr_i("keepdims", 1)? != 0))
}

pub(crate) fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let g = x.g;
    let (axes, keep) = reduce_params(g, n)?;
    let s = x.shape(0)?;
    let o = match axes {
        None => s.to_vec(),
        Some(axes) => s
            .iter()
            .enumerate()
            .filter_map(|(i, &d)| {
                if axes.contains(&i) {
                    keep.then_some(1)
                } else {
                    Some(d)
                }
            })
            .collect(),
    };
    Ok(vec![(x.dtype(0)?, o)])
}

/// ReduceProd, ReduceSum, ReduceMax, ReduceMin and ReduceMean of a constant input.
pub(crate) fn fold(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let g = x.g;
    let op = node.op_type.as_str();
    let (dt0, shape0) = outs[0].clone();
    let t0 = ins[0];
    let (axes, _) = reduce_params(g, node)?;
    let axes = axes.unwrap_or_default();
    let r = t0.shape.len();
    let red_shape: Vec<usize> = (0..r)
        .map(|i| if axes.contains(&i) { 1 } else { t0.shape[i] })
        .collect();
    let out_st = strides(&red_shape);
    let n_out = numel(&red_shape);
    let init = match op {
        "ReduceProd" => 1.0,
        "ReduceMax" => f64::NEG_INFINITY,
        "ReduceMin" => f64::INFINITY,
        _ => 0.0,
    };
    let mut acc = vec![init; n_out];
    let mut cnt = vec![0usize; n_out];
    let vals = t0.to_f64();
    let map = map_indices(&t0.shape, |idx| {
        idx.iter()
            .enumerate()
            .map(|(k, &i)| if axes.contains(&k) { 0 } else { i * out_st[k] })
            .sum()
    });
    for (k, &o) in map.iter().enumerate() {
        let v = vals[k];
        acc[o] = match op {
            "ReduceProd" => acc[o] * v,
            "ReduceMax" => acc[o].max(v),
            "ReduceMin" => acc[o].min(v),
            _ => acc[o] + v,
        };
        cnt[o] += 1;
    }
    if op == "ReduceMean" {
        for (a, c) in acc.iter_mut().zip(&cnt) {
            *a /= (*c).max(1) as f64;
        }
    }
    Ok(Some(vec![Tensor::from_f64_as(dt0, shape0, &acc)]))
}

pub fn reduce(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let q = match node.op_type.as_str() {
        "ReduceMean" => op::REDUCE_MEAN,
        "ReduceSum" => op::REDUCE_SUM,
        "ReduceMax" => op::REDUCE_MAX,
        _ => op::REDUCE_MIN,
    };
    let (axes, keep) = reduce_params(cx.g, node)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    let Some(axes) = axes else {
        cx.op(node, op::RESHAPE, vec![x], vec![y], vec![]);
        return Ok(());
    };
    let axes: Vec<u32> = axes.iter().map(|&a| a as u32).collect();
    cx.op(
        node,
        q,
        vec![x],
        vec![y],
        vec![
            (param::AXES, Param::u32_vec(&axes)),
            (param::KEEP_DIMS, Param::bool(keep)),
        ],
    );
    Ok(())
}

/// What a Reduce computes ([`reduce_key`]).
type ReduceKey = (Vec<usize>, bool);

/// `axes` is an input from opset 18 (ReduceSum: 13).
pub fn slot_1_from_18(v: i64, _: &Node) -> Option<usize> {
    (v >= 18).then_some(1)
}

/// The `axes` that give the declared output, when exactly one reduction does.
pub fn resolve_axes(q: &ShapeQuery) -> Option<Resolved> {
    let input = q.known(0)?;
    let (d, name) = q.out(0)?;
    let keepdims = q.n.attr_i("keepdims", 1).ok()? != 0;
    let noop = q.n.attr_i("noop_with_empty_axes", 0).ok()? != 0;
    let r = input.len();
    // Every axes value of the slot's length that gives the declared shape, grouped by
    // what it reduces; exactly one group is needed.
    let mut keys: Vec<(ReduceKey, Vec<i64>)> = Vec::new();
    if q.len == 0 {
        if reduce_shape(&input, &[], keepdims, noop).as_ref() == Some(&d) {
            keys.push((reduce_key(&input, &[], keepdims, noop)?, vec![]));
        }
    } else if r <= 12 {
        for mask in 0u32..(1 << r) {
            if mask.count_ones() as usize != q.len {
                continue;
            }
            let axes: Vec<i64> = (0..r)
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| i as i64)
                .collect();
            if reduce_shape(&input, &axes, keepdims, noop).as_ref() == Some(&d) {
                let key = reduce_key(&input, &axes, keepdims, noop)?;
                if !keys.iter().any(|(k, _)| *k == key) {
                    keys.push((key, axes));
                }
            }
        }
    }
    let [(_, axes)] = &keys[..] else { return None };
    let accept = Accept::Reduce {
        input,
        keepdims,
        noop_with_empty_axes: noop,
    };
    Some((q.ints(axes)?, accept, name))
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn reduce_mean_attr_axes() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .node(
                "ReduceMean",
                &["x"],
                &["y"],
                &[("axes", A::Is(vec![-1])), ("keepdims", A::I(0))],
            )
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("ReduceMean(x:f32[2, 3, 4]) axes=u32[1]{2} keep_dims=false -> y:f32[2, 3]"));
    }

    #[test]
    fn reduce_sum_input_axes() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .init("ax", Tensor::from_i64(vec![2], &[0, 1]))
            .node("ReduceSum", &["x", "ax"], &["y"], &[])
            .output("y");
        assert!(lower(&b).dump().contains(
            "ReduceSum(x:f32[2, 3, 4]) axes=u32[2]{0,1} keep_dims=true -> y:f32[1, 1, 4]"
        ));
    }

    #[test]
    fn reduce_dynamic_axes_unsupported() {
        let b = ModelBuilder::new(18)
            .input("x", DType::F32, &[2, 3])
            .input("ax", DType::I64, &[1])
            .node("ReduceMax", &["x", "ax"], &["y"], &[])
            .output("y");
        assert!(crate::ops::test_util::lower_err(&b).contains("input 'axes' must be a constant"));
    }
}
