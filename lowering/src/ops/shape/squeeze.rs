//! Squeeze / Unsqueeze — <https://onnx.ai/onnx/operators/onnx__Squeeze.html>,
//! <https://onnx.ai/onnx/operators/onnx__Unsqueeze.html> (`axes` an attribute before opset 13,
//! a constant input after; Squeeze without axes drops every size-1 dim). QNN `Reshape` (no
//! params; the output tensor's shape is the target).

use crate::error::Result;
use crate::ir::attr::norm_axes;
use crate::ir::{Graph, Node};
use crate::ops::infer::{In, Out};
use crate::ops::registry::{slot_1_from_13, Resolved, ShapeQuery};
use crate::ops::shape::reshape::{fold_reshape, reshape};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, OpDef, ShapeInput};
use crate::plan::assumed::squeeze_shape;
use crate::plan::Accept;

pub const SQUEEZE: OpDef = OpDef {
    op_type: "Squeeze",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_13,
        resolve: resolve_squeeze,
    },
    infer: infer_squeeze,
    fold: Some(Fold::Values(fold_reshape)),
    expand: None,
    lower: Some(reshape),
    quant: Quant::Same,
};

pub const UNSQUEEZE: OpDef = OpDef {
    op_type: "Unsqueeze",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_13,
        resolve: resolve_unsqueeze,
    },
    infer: infer_unsqueeze,
    fold: Some(Fold::Values(fold_reshape)),
    expand: None,
    lower: Some(reshape),
    quant: Quant::Same,
};

/// The dims a Squeeze removes.
pub fn squeeze_axes(g: &Graph, n: &Node) -> Result<Vec<usize>> {
    let x = In { g, n };
    let shape = x.shape(0)?;
    let axes = if g.opset() >= 13 {
        x.opt_const_ints(1, "axes")?
    } else {
        n.attr_ints_opt("axes")?
    };
    match axes {
        Some(a) => {
            let a = norm_axes(n, "axes", &a, shape.len())?;
            for &i in &a {
                if shape[i] != 1 {
                    return Err(
                        n.err_invalid(format!("cannot squeeze dim {i} of size {}", shape[i]))
                    );
                }
            }
            Ok(a)
        }
        None => Ok((0..shape.len()).filter(|&i| shape[i] == 1).collect()),
    }
}

/// The axes an Unsqueeze inserts, as given (resolved against the output rank by
/// [`unsqueeze_shape`]).
pub fn unsqueeze_axes(g: &Graph, n: &Node) -> Result<Vec<i64>> {
    let x = In { g, n };
    if g.opset() >= 13 {
        x.const_ints(1, "axes")
    } else {
        n.attr_ints_opt("axes")?
            .ok_or_else(|| n.err_invalid("attribute 'axes' is missing"))
    }
}

/// `shape` with size-1 dims inserted at `axes`.
pub fn unsqueeze_shape(n: &Node, shape: &[usize], axes: &[i64]) -> Result<Vec<usize>> {
    let r = shape.len() + axes.len();
    let axes = norm_axes(n, "axes", axes, r)?;
    let mut out = Vec::with_capacity(r);
    let mut it = shape.iter();
    for i in 0..r {
        if axes.contains(&i) {
            out.push(1);
        } else {
            out.push(
                *it.next()
                    .ok_or_else(|| n.err_invalid("duplicate unsqueeze axes"))?,
            );
        }
    }
    Ok(out)
}

fn infer_squeeze(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let g = x.g;
    let axes = squeeze_axes(g, n)?;
    let s = x.shape(0)?;
    Ok(vec![(
        x.dtype(0)?,
        s.iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect(),
    )])
}

fn infer_unsqueeze(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let g = x.g;
    let axes = unsqueeze_axes(g, n)?;
    Ok(vec![(x.dtype(0)?, unsqueeze_shape(n, x.shape(0)?, &axes)?)])
}
/// Squeeze's `axes` that give the declared output.
fn resolve_squeeze(q: &ShapeQuery) -> Option<Resolved> {
    let input = q.known(0)?;
    let (d, name) = q.out(0)?;
    let mut removed = Vec::new();
    let mut k = 0;
    for (j, &ij) in input.iter().enumerate() {
        if k < d.len() && ij == d[k] {
            k += 1;
        } else if ij == 1 {
            removed.push(j as i64);
        } else {
            return None;
        }
    }
    (k == d.len()).then_some(())?;
    let value = if q.len == 0 && squeeze_shape(&input, &[]).as_ref() == Some(&d) {
        vec![]
    } else {
        removed
    };
    let accept = Accept::Squeeze { input, output: d };
    Some((q.ints(&value)?, accept, name))
}

/// Unsqueeze's `axes` that give the declared output.
fn resolve_unsqueeze(q: &ShapeQuery) -> Option<Resolved> {
    let input = q.known(0)?;
    let (d, name) = q.out(0)?;
    let mut axes = Vec::new();
    let mut i = 0;
    for (j, &dj) in d.iter().enumerate() {
        if i < input.len() && dj == input[i] {
            i += 1;
        } else if dj == 1 {
            axes.push(j as i64);
        } else {
            return None;
        }
    }
    (i == input.len() && crate::plan::assumed::unsqueeze_shape(&input, &axes).as_ref() == Some(&d))
        .then_some(())?;
    let accept = Accept::Unsqueeze { input, output: d };
    Some((q.ints(&axes)?, accept, name))
}
