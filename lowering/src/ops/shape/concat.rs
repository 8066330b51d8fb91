//! Concat — <https://onnx.ai/onnx/operators/onnx__Concat.html>, opset 4+. QNN `Concat`:
//! `axis` UINT_32 scalar. Empty inputs (a zero-sized concat dim) are dropped.

use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::tensor::{map_indices, numel, strides, Tensor};
use crate::ir::{Graph, Node};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{AxesOp, Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const CONCAT: OpDef = OpDef {
    op_type: "Concat",
    since: 1,
    layout: Layout::Axes(layout_axes),
    shape_input: ShapeInput::None,
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(concat),
    quant: Quant::Direct,
};

/// The concat axis for the layout pass ([`Layout::Axes`]).
fn layout_axes(_g: &Graph, n: &Node, r: usize) -> Option<AxesOp> {
    let axis = n.attr_i_opt("axis").ok()??;
    let axis = norm_axis(n, "axis", axis, r).ok()?;
    Some(AxesOp::Concat { axis })
}

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let s0 = x.shape(0)?;
    let axis = norm_axis(n, "axis", n.attr_i("axis", 0)?, s0.len())?;
    let mut out = s0.to_vec();
    out[axis] = 0;
    for i in 0..n.inputs.len() {
        let s = x.shape(i)?;
        if s.len() != s0.len()
            || s.iter()
                .zip(s0)
                .enumerate()
                .any(|(k, (a, b))| k != axis && a != b)
        {
            return Err(n.err_invalid(format!(
                "input shapes {s0:?} and {s:?} cannot be concatenated on axis {axis}"
            )));
        }
        out[axis] += s[axis];
    }
    Ok(vec![(x.dtype(0)?, out)])
}

fn fold(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let (dt0, shape0) = outs[0].clone();
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, shape0.len())?;
    let mut srcs = Vec::new();
    for (ti, t) in ins.iter().enumerate() {
        for k in 0..t.shape[axis] {
            srcs.push((ti, k));
        }
    }
    let sts: Vec<Vec<usize>> = ins.iter().map(|t| strides(&t.shape)).collect();
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let map = map_indices(&shape0, |idx| {
        let (ti, k) = srcs[idx[axis]];
        let mut f = 0;
        for (d, &i) in idx.iter().enumerate() {
            f += if d == axis { k } else { i } * sts[ti][d];
        }
        parts.push((ti, f));
        0
    });
    drop(map);
    let mut bytes = Vec::with_capacity(numel(&shape0) * dt0.size());
    let es = dt0.size();
    for (ti, f) in parts {
        bytes.extend_from_slice(&ins[ti].bytes()[f * es..(f + 1) * es]);
    }
    Tensor::from_bytes(dt0, shape0, bytes)
        .map(|t| Some(vec![t]))
        .map_err(|e| node.err_invalid(e))
}

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
