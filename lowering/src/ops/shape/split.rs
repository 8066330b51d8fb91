//! Split — <https://onnx.ai/onnx/operators/onnx__Split.html> (`split` attribute before opset
//! 13, input after; `num_outputs` since 18). QNN `Split`: `axis` UINT_32 scalar, `split_index`
//! UINT_32 `[outputs - 1]` (start offset of every output but the first).

use crate::error::Result;
use crate::ir::attr::{norm_axis, to_usizes};
use crate::ir::{Graph, Node};
use crate::ops::infer::{In, Out};
use crate::ops::registry::{slot_1_from_13, Resolved, ShapeQuery};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Accept;
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const SPLIT: OpDef = OpDef {
    op_type: "Split",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_13,
        resolve: resolve_shape,
    },
    infer,
    fold: None,
    expand: None,
    lower: Some(split),
    quant: Quant::Same,
};

/// The split axis and the size of each output along it (equal chunks, the last one smaller,
/// without `split`).
pub fn split_sizes(g: &Graph, n: &Node) -> Result<(usize, Vec<usize>)> {
    let x = In { g, n };
    let shape = x.shape(0)?;
    let axis = norm_axis(n, "axis", n.attr_i("axis", 0)?, shape.len())?;
    let split = if g.opset() >= 13 {
        x.opt_const_ints(1, "split")?
    } else {
        n.attr_ints_opt("split")?
    };
    let d = shape[axis];
    let sizes = match split {
        Some(s) if !s.is_empty() => to_usizes(n, "split", &s)?,
        _ => {
            let k = match n.attr_i_opt("num_outputs")? {
                Some(k) => k as usize,
                None => n.outputs.len(),
            };
            if k == 0 {
                return Err(n.err_invalid("split has no outputs"));
            }
            let chunk = d.div_ceil(k);
            (0..k)
                .map(|i| chunk.min(d.saturating_sub(i * chunk)))
                .collect()
        }
    };
    if sizes.iter().sum::<usize>() != d {
        return Err(n.err_invalid(format!("split sizes {sizes:?} do not add up to {d}")));
    }
    Ok((axis, sizes))
}

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let g = x.g;
    let (axis, sizes) = split_sizes(g, n)?;
    if sizes.len() != n.outputs.len() {
        return Err(n.err_invalid(format!(
            "{} split sizes for {} outputs",
            sizes.len(),
            n.outputs.len()
        )));
    }
    let s = x.shape(0)?;
    sizes
        .iter()
        .map(|&k| {
            let mut o = s.to_vec();
            o[axis] = k;
            Ok((x.dtype(0)?, o))
        })
        .collect()
}

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

/// The `split` sizes that give the declared outputs.
fn resolve_shape(q: &ShapeQuery) -> Option<Resolved> {
    let input = q.known(0)?;
    let axis = crate::plan::assumed::norm_axis(q.n.attr_i("axis", 0).ok()?, input.len())?;
    let mut parts = Vec::new();
    let mut name = String::new();
    for i in 0..q.n.outputs.len() {
        let (d, nm) = q.out(i)?;
        (d.len() == input.len()).then_some(())?;
        parts.push(d[axis] as i64);
        if name.is_empty() {
            name = nm;
        }
    }
    (parts.iter().sum::<i64>() == input[axis] as i64).then_some(())?;
    Some((q.ints(&parts)?, Accept::Equal, name))
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
