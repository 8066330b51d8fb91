//! TopK — <https://onnx.ai/onnx/operators/onnx__TopK.html>, opset 10+ (`K` a constant input).
//! QNN `TopK`: `k` UINT_32 scalar, `largest` BOOL_8 scalar; outputs values and int32 indices;
//! works on the last dimension. Constraints: `axis` is the last axis, `sorted = 1`.

use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::registry::{Resolved, ShapeQuery};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Accept;
use crate::plan::{DType, Param};
use crate::qnn_names::{op, param};

pub const TOP_K: OpDef = OpDef {
    op_type: "TopK",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_k,
        resolve: resolve_shape,
    },
    infer,
    fold: None,
    expand: None,
    lower: Some(topk),
    quant: Quant::Float,
};

/// Values and int64 indices, `K` along `axis`.
fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let g = x.g;
    let s = x.shape(0)?;
    let axis = norm_axis(n, "axis", n.attr_i("axis", -1)?, s.len())?;
    let k = if g.opset() >= 10 {
        x.const_ints(1, "K")?.first().copied().unwrap_or(-1)
    } else {
        n.attr_i("k", -1)?
    };
    if k < 0 || k as usize > s[axis] {
        return Err(n.err_invalid(format!("K={k} is out of range for dim {}", s[axis])));
    }
    let mut o = s.to_vec();
    o[axis] = k as usize;
    Ok(vec![(x.dtype(0)?, o.clone()), (DType::I64, o)])
}

pub fn topk(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let shape = cx.shape(node, 0);
    let r = shape.len();
    let axis = norm_axis(node, "axis", node.attr_i("axis", -1)?, r)?;
    if axis != r - 1 {
        return Err(node.err_attr("axis", "only the last axis is supported"));
    }
    if node.attr_i("sorted", 1)? != 1 {
        return Err(node.err_attr("sorted", "only sorted output is supported"));
    }
    let k = cx.out_shape(node, 0)[axis] as u32;
    let largest = node.attr_i("largest", 1)? != 0;
    let x = cx.input(node, 0)?;
    let values = cx.output(node, 0)?;
    let indices = match node.output(1) {
        Some(_) => cx.output(node, 1)?,
        None => {
            let s = cx.out_shape(node, 0);
            cx.native(&format!("{}_indices", node.name), DType::I32, &s)
        }
    };
    cx.op(
        node,
        op::TOP_K,
        vec![x],
        vec![values, indices],
        vec![
            (param::K, Param::u32(k)),
            (param::LARGEST, Param::bool(largest)),
        ],
    );
    Ok(())
}

/// `K` is an input from opset 10.
fn slot_k(v: i64, _: &Node) -> Option<usize> {
    (v >= 10).then_some(1)
}

/// The `K` that gives the declared outputs.
fn resolve_shape(q: &ShapeQuery) -> Option<Resolved> {
    let input = q.known(0)?;
    let (d, name) = q.out(0).or_else(|| q.out(1))?;
    let axis = crate::plan::assumed::norm_axis(q.n.attr_i("axis", -1).ok()?, input.len())?;
    (d.len() == input.len()).then_some(())?;
    Some((q.ints(&[d[axis] as i64])?, Accept::Equal, name))
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    fn model(attrs: &[(&str, A)]) -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, &[4, 8])
            .init("k", Tensor::from_i64(vec![1], &[3]))
            .node("TopK", &["x", "k"], &["v", "i"], attrs)
            .output("v")
            .output("i")
    }

    #[test]
    fn topk_snapshot() {
        assert!(lower(&model(&[]))
            .dump()
            .contains("TopK(x:f32[4, 8]) k=3u largest=true -> v:f32[4, 3], i:i32[4, 3]"));
    }

    #[test]
    fn topk_non_last_axis_unsupported() {
        assert!(lower_err(&model(&[("axis", A::I(0))])).contains("only the last axis"));
        assert!(lower_err(&model(&[("sorted", A::I(0))])).contains("attribute 'sorted'"));
    }
}
