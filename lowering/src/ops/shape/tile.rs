//! Tile and Expand — <https://onnx.ai/onnx/operators/onnx__Tile.html>,
//! <https://onnx.ai/onnx/operators/onnx__Expand.html>. QNN `Tile`: `multiples` UINT_32
//! `[rank]` (tensor param). Expand is a Tile of the input brought to the output's rank
//! (QNN has no broadcast-to op). `repeats`/`shape` must be constant (checked by inference).

use crate::error::Result;
use crate::ir::attr::to_usizes;
use crate::ir::shape::broadcast;
use crate::ir::tensor::{map_indices, strides, Tensor};
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::registry::{shape_i64, slot_1, Resolved, ShapeQuery};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::assumed::expand_shape;
use crate::plan::Accept;
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const TILE: OpDef = OpDef {
    op_type: "Tile",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1,
        resolve: resolve_repeats,
    },
    infer: infer_tile,
    fold: Some(Fold::Values(fold_tile)),
    expand: None,
    lower: Some(tile),
    quant: Quant::Same,
};

pub const EXPAND: OpDef = OpDef {
    op_type: "Expand",
    since: 8,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1,
        resolve: resolve_expand,
    },
    infer: infer_expand,
    fold: Some(Fold::Values(fold_expand)),
    expand: None,
    lower: Some(expand),
    quant: Quant::Same,
};

fn infer_tile(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let reps = to_usizes(n, "repeats", &x.const_ints(1, "repeats")?)?;
    let s = x.shape(0)?;
    if reps.len() != s.len() {
        return Err(n.err_invalid("'repeats' must have one value per dim"));
    }
    Ok(vec![(
        x.dtype(0)?,
        s.iter()
            .zip(&reps)
            .map(|(a, b)| a.saturating_mul(*b))
            .collect(),
    )])
}

fn infer_expand(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let spec = x.const_ints(1, "shape")?;
    let spec = to_usizes(n, "shape", &spec)?;
    Ok(vec![(x.dtype(0)?, broadcast(n, &[x.shape(0)?, &spec])?)])
}

fn fold_tile(_x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let shape0 = outs[0].1.clone();
    let t0 = ins[0];
    let st = strides(&t0.shape);
    let map = map_indices(&shape0, |idx| {
        idx.iter()
            .enumerate()
            .map(|(k, &i)| (i % t0.shape[k]) * st[k])
            .sum()
    });
    Ok(Some(vec![t0.gather_flat(shape0, &map)]))
}

fn fold_expand(_x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let shape0 = outs[0].1.clone();
    let t0 = ins[0];
    Ok(Some(vec![t0.broadcast_to(&shape0)]))
}

pub fn tile(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let s = cx.shape(node, 0);
    let o = cx.out_shape(node, 0);
    let mult: Vec<u32> = s
        .iter()
        .zip(&o)
        .map(|(&a, &b)| b.checked_div(a).map_or(1, |m| m as u32))
        .collect();
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::TILE,
        vec![x],
        vec![y],
        vec![(param::MULTIPLES, Param::u32_vec(&mult))],
    );
    Ok(())
}

pub fn expand(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let o = cx.out_shape(node, 0);
    let x = cx.input_at_rank(node, 0, o.len())?;
    let s = cx.tshape(x);
    let y = cx.output(node, 0)?;
    if s == o {
        cx.op(node, op::RESHAPE, vec![x], vec![y], vec![]);
        return Ok(());
    }
    let mult: Vec<u32> = s
        .iter()
        .zip(&o)
        .map(|(&a, &b)| if a == b { 1 } else { b as u32 })
        .collect();
    cx.op(
        node,
        op::TILE,
        vec![x],
        vec![y],
        vec![(param::MULTIPLES, Param::u32_vec(&mult))],
    );
    Ok(())
}

/// Tile's `repeats` that give the declared output.
fn resolve_repeats(q: &ShapeQuery) -> Option<Resolved> {
    let input = q.known(0)?;
    let (d, name) = q.out(0)?;
    (input.len() == d.len()).then_some(())?;
    let reps = input
        .iter()
        .zip(&d)
        .map(|(&i, &o)| (i > 0 && o % i == 0).then(|| (o / i) as i64))
        .collect::<Option<Vec<i64>>>()?;
    Some((q.ints(&reps)?, Accept::Equal, name))
}

/// Expand's `shape` that gives the declared output.
fn resolve_expand(q: &ShapeQuery) -> Option<Resolved> {
    let input = q.known(0)?;
    let (d, name) = q.out(0)?;
    let value = shape_i64(d.get(d.len().checked_sub(q.len)?..)?);
    (expand_shape(&input, &value).as_ref() == Some(&d)).then_some(())?;
    let accept = Accept::Expand { input, output: d };
    Some((q.ints(&value)?, accept, name))
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::ModelBuilder;

    #[test]
    fn expand_is_tile_after_rank_alignment() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[3, 1])
            .init("s", Tensor::from_i64(vec![3], &[2, 3, 4]))
            .node("Expand", &["x", "s"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("Tile(x_r3:f32[1, 3, 1]) multiples=u32[3]{2,1,4} -> y:f32[2, 3, 4]"),
            "{d}"
        );
    }

    #[test]
    fn tile_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .init("r", Tensor::from_i64(vec![2], &[2, 1]))
            .node("Tile", &["x", "r"], &["y"], &[])
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("Tile(x:f32[2, 3]) multiples=u32[2]{2,1} -> y:f32[4, 3]"));
    }
}
