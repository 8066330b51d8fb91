//! GatherND — <https://onnx.ai/onnx/operators/onnx__GatherND.html>, opsets 11 and 12+
//! (`batch_dims`). QNN `GatherNd`: in[0] data, in[1] indices int32 `[..., k]`; param
//! `batch_dims` UINT_32 scalar. QNN does not wrap negative indices: constant ones are wrapped
//! here (and out-of-range ones refused), dynamic ones by `Select(idx < 0, idx + dims, idx)`
//! with the dims the last axis addresses.

use super::gather::wrapped_indices;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const GATHER_ND: OpDef = OpDef {
    op_type: "GatherND",
    since: 11,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(gather_nd),
    quant: Quant::Float,
};

/// `batch_dims` and `k` (the indices' last dim), checked against the shapes.
fn params(n: &Node, data: &[usize], idx: &[usize]) -> Result<(usize, usize)> {
    let b = n.attr_i("batch_dims", 0)?;
    let (r, q) = (data.len(), idx.len());
    let Some(&k) = idx.last() else {
        return Err(n.err_invalid("indices must have rank >= 1"));
    };
    if b < 0 || b as usize >= q.min(r) {
        return Err(n.err_attr(
            "batch_dims",
            format!("{b} must be below the ranks of data ({r}) and indices ({q})"),
        ));
    }
    let b = b as usize;
    if k < 1 || k > r - b {
        return Err(n.err_invalid(format!(
            "indices' last dim {k} must be in 1..={} (data rank {r}, batch_dims {b})",
            r - b
        )));
    }
    if data[..b] != idx[..b] {
        return Err(n.err_invalid(format!(
            "batch dims differ: data {:?}, indices {:?}",
            &data[..b],
            &idx[..b]
        )));
    }
    Ok((b, k))
}

/// `indices.shape[:-1] + data.shape[batch_dims + k:]`.
fn infer(x: &In) -> Result<Vec<Out>> {
    let (data, idx) = (x.shape(0)?, x.shape(1)?);
    let (b, k) = params(x.n, data, idx)?;
    let mut o = idx[..idx.len() - 1].to_vec();
    o.extend_from_slice(&data[b + k..]);
    Ok(vec![(x.dtype(0)?, o)])
}

pub fn gather_nd(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let data = cx.shape(node, 0);
    let (b, k) = params(node, &data, &cx.shape(node, 1))?;
    let idx = wrapped_indices(cx, node, 1, &data[b..b + k])?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::GATHER_ND,
        vec![x, idx],
        vec![y],
        vec![(param::BATCH_DIMS, Param::u32(b as u32))],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ir::Attr;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn gather_nd_snapshot() {
        let b = ModelBuilder::new(13)
            .input("x", DType::F32, &[2, 3, 4])
            .input("i", DType::I64, &[5, 2])
            .node("GatherND", &["x", "i"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("static GatherND_0_dim:i32[1, 2]"),
            "dynamic indices are wrapped by dims [2, 3]: {d}"
        );
        assert!(d.contains("GatherNd(x:f32[2, 3, 4], GatherND_0_ElementWiseSelect:i32[5, 2]) batch_dims=0u -> y:f32[5, 4]"), "{d}");
    }

    #[test]
    fn constant_indices_are_wrapped_and_checked() {
        let m = |v: i64| {
            ModelBuilder::new(13)
                .input("x", DType::F32, &[2, 3])
                .init("i", Tensor::from_i64(vec![1, 2], &[1, v]))
                .node("GatherND", &["x", "i"], &["y"], &[])
                .output("y")
        };
        assert_eq!(lower(&m(-1)).op_types(), ["GatherNd"]);
        assert!(lower_err(&m(3)).contains("index 3 is out of range for dim 3"));
    }

    #[test]
    fn gather_nd_is_inferred() {
        let g = graph_with(&[
            ("x", DType::F16, vec![2, 3, 4]),
            ("i", DType::I32, vec![2, 1]),
        ]);
        let n = node(
            "GatherND",
            &[Some(0), Some(1)],
            &[("batch_dims", Attr::Int(1))],
        );
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F16, vec![2, 4])]);
        let n = node(
            "GatherND",
            &[Some(0), Some(1)],
            &[("batch_dims", Attr::Int(2))],
        );
        assert!(infer(&g, &n)
            .unwrap_err()
            .to_string()
            .contains("batch_dims"));
    }

    #[test]
    fn bad_batch_dims_unsupported() {
        let b = ModelBuilder::new(13)
            .input("x", DType::F32, &[2, 3])
            .input("i", DType::I64, &[3, 1])
            .node("GatherND", &["x", "i"], &["y"], &[("batch_dims", A::I(1))])
            .output("y");
        assert!(lower_err(&b).contains("batch dims differ"));
    }
}
