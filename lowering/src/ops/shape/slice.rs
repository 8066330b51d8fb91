//! Slice — <https://onnx.ai/onnx/operators/onnx__Slice.html> (attributes before opset 10,
//! constant inputs after). QNN `StridedSlice`: `ranges` INT_32 `[rank, 3]` of
//! `{begin, end, stride}` per dim (tensor param), `begin_mask`, `end_mask`, `shrink_axes`
//! UINT_32 scalars. A negative-stride slice that runs past element 0 uses the end mask, since
//! an end of -1 would mean "the last element".

use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::tensor::{map_indices, strides, Tensor};
use crate::ir::{Graph, Node};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{AxesOp, Fold, Layout, LowerCx, OpDef, ShapeInput};

pub const SLICE: OpDef = OpDef {
    op_type: "Slice",
    since: 1,
    layout: Layout::Axes(layout_axes),
    shape_input: ShapeInput::None,
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(slice),
    quant: Quant::Same,
};

/// Slice parameters resolved to per-axis (start, end, step) with ONNX clamping.
/// The sliced ranges for the layout pass ([`Layout::Axes`]). Opset < 10 names its ranges in
/// attributes; rewriting them is not worth it.
fn layout_axes(g: &Graph, n: &Node, _r: usize) -> Option<AxesOp> {
    (g.opset() >= 10).then_some(())?;
    Some(AxesOp::Slice {
        ranges: slice_params(g, n).ok()?,
    })
}

pub fn slice_params(g: &Graph, n: &Node) -> Result<Vec<(usize, i64, i64, i64)>> {
    let x = In { g, n };
    let shape = x.shape(0)?;
    let (starts, ends, axes, steps) = if g.opset() < 10 {
        (
            n.attr_ints("starts", &[])?,
            n.attr_ints("ends", &[])?,
            n.attr_ints_opt("axes")?,
            None,
        )
    } else {
        (
            x.const_ints(1, "starts")?,
            x.const_ints(2, "ends")?,
            x.opt_const_ints(3, "axes")?,
            x.opt_const_ints(4, "steps")?,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(n.err_invalid("starts, ends, axes and steps must have the same length"));
    }
    let mut out = Vec::new();
    for i in 0..starts.len() {
        let ax = norm_axis(n, "axes", axes[i], shape.len())?;
        let d = shape[ax] as i64;
        let step = steps[i];
        if step == 0 {
            return Err(n.err_invalid("slice step must not be 0"));
        }
        let clampi = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
        let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (s, e) = if step > 0 {
            (clampi(fix(starts[i]), 0, d), clampi(fix(ends[i]), 0, d))
        } else {
            (
                clampi(fix(starts[i]), 0, d - 1),
                clampi(fix(ends[i]), -1, d - 1),
            )
        };
        out.push((ax, s, e, step));
    }
    Ok(out)
}

pub fn slice_len(s: i64, e: i64, step: i64) -> usize {
    if step > 0 {
        if e > s {
            ((e - s + step - 1) / step) as usize
        } else {
            0
        }
    } else if s > e {
        ((s - e - step - 1) / (-step)) as usize
    } else {
        0
    }
}

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let g = x.g;
    let mut s = x.shape(0)?.to_vec();
    for (ax, st, e, step) in slice_params(g, n)? {
        s[ax] = slice_len(st, e, step);
    }
    Ok(vec![(x.dtype(0)?, s)])
}

fn fold(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let g = x.g;
    let shape0 = outs[0].1.clone();
    let t0 = ins[0];
    let params = slice_params(g, node)?;
    let mut start = vec![0i64; t0.shape.len()];
    let mut step = vec![1i64; t0.shape.len()];
    for (ax, s, _, st) in params {
        start[ax] = s;
        step[ax] = st;
    }
    let st = strides(&t0.shape);
    let map = map_indices(&shape0, |o| {
        o.iter()
            .enumerate()
            .map(|(k, &i)| ((start[k] + i as i64 * step[k]) as usize) * st[k])
            .sum()
    });
    Ok(Some(vec![t0.gather_flat(shape0, &map)]))
}

pub fn slice(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let mut ranges: Vec<[i32; 3]> = cx
        .shape(node, 0)
        .iter()
        .map(|&d| [0, d as i32, 1])
        .collect();
    let mut end_mask = 0u32;
    for (ax, s, e, step) in slice_params(cx.g, node)? {
        ranges[ax] = [s as i32, e as i32, step as i32];
        if step < 0 && e < 0 {
            end_mask |= 1 << ax;
            ranges[ax][1] = 0;
        }
    }
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.strided_slice(node, x, y, &ranges, end_mask, 0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::slice_len;
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::ModelBuilder;

    #[test]
    fn slice_clamps_like_onnx() {
        assert_eq!(slice_len(0, 5, 1), 5);
        assert_eq!(slice_len(4, -1, -1), 5);
        assert_eq!(slice_len(1, 5, 2), 2);
        assert_eq!(slice_len(3, 3, 1), 0);
    }

    fn model(starts: &[i64], ends: &[i64], steps: &[i64]) -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 8])
            .init("st", Tensor::from_i64(vec![1], starts))
            .init("en", Tensor::from_i64(vec![1], ends))
            .init("ax", Tensor::from_i64(vec![1], &[1]))
            .init("sp", Tensor::from_i64(vec![1], steps))
            .node("Slice", &["x", "st", "en", "ax", "sp"], &["y"], &[])
            .output("y")
    }

    #[test]
    fn slice_with_int64_max_end() {
        let d = lower(&model(&[2], &[i64::MAX], &[2])).dump();
        assert!(d.contains("StridedSlice(x:f32[2, 8]) ranges=i32[2, 3]{0,2,1,2,8,2} begin_mask=0u end_mask=0u shrink_axes=0u -> y:f32[2, 3]"), "{d}");
    }

    #[test]
    fn reverse_slice_uses_end_mask() {
        let d = lower(&model(&[-1], &[i64::MIN], &[-1])).dump();
        assert!(
            d.contains("ranges=i32[2, 3]{0,2,1,7,0,-1} begin_mask=0u end_mask=2u"),
            "{d}"
        );
    }
}
