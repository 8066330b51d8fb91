//! ScatterElements (and its opset-9 name Scatter) and ScatterND —
//! <https://onnx.ai/onnx/operators/onnx__ScatterElements.html>,
//! <https://onnx.ai/onnx/operators/onnx__ScatterND.html>; `reduction` from opset 16 (`max`,
//! `min` from 18).
//!
//! QNN `ScatterElements`: in[0] data, in[1] indices int32, in[2] updates; params `axis` UINT_32
//! scalar (INT_32 fails validation, 3110), `reduction` UINT_32. The HTP validates only
//! reduction none ("expected < 1" for the others; libQnnHtp 2.51, SoC 60), so `add` and `mul`
//! become a QNN `ScatterNd` whose index tuples are the positions of the indices with the axis
//! coordinate replaced by the index (Concat of constant coordinate grids and the indices;
//! all on the host for constant indices). `max` and `min` are refused: neither QNN op reduces
//! so on the HTP.
//!
//! QNN `ScatterNd`: in[0] data, in[1] indices int32 `[..., k]`, in[2] updates; param
//! `reduction` UINT_32 (none, add, mul): ScatterND's `max` and `min` are refused. Negative
//! indices are wrapped as for Gather (`gather.rs`). A ScatterND of constants (reduction none,
//! add or mul) is folded on the host: the TorchScript exporter writes an in-place slice update
//! of a parameter (Swin V2's `qkv_bias` with its zeroed key part) that way.

use super::gather::wrapped_indices;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::tensor::{numel, strides, Tensor};
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::{Param, TensorId};
use crate::qnn_names::{op, param, scatter_reduction};

pub const SCATTER_ELEMENTS: OpDef = OpDef {
    op_type: "ScatterElements",
    since: 11,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: infer_elements,
    fold: None,
    expand: None,
    lower: Some(scatter_elements),
    quant: Quant::Float,
};

pub const SCATTER: OpDef = OpDef {
    op_type: "Scatter",
    since: 9,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: infer_elements,
    fold: None,
    expand: None,
    lower: Some(scatter_elements),
    quant: Quant::Float,
};

pub const SCATTER_ND: OpDef = OpDef {
    op_type: "ScatterND",
    since: 11,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: infer_nd,
    fold: Some(crate::ops::Fold::Values(fold_nd)),
    expand: None,
    lower: Some(scatter_nd),
    quant: Quant::Float,
};

/// The normalised axis; indices and updates must have the data's rank and one shape.
fn elements_axis(n: &Node, data: &[usize], idx: &[usize], upd: &[usize]) -> Result<usize> {
    if idx != upd || idx.len() != data.len() {
        return Err(n.err_invalid(format!(
            "indices {idx:?} and updates {upd:?} must have one shape of data's rank {}",
            data.len()
        )));
    }
    norm_axis(n, "axis", n.attr_i("axis", 0)?, data.len())
}

/// `k`, the indices' last dim; updates must be `indices.shape[:-1] + data.shape[k:]`.
fn nd_depth(n: &Node, data: &[usize], idx: &[usize], upd: &[usize]) -> Result<usize> {
    let Some(&k) = idx.last() else {
        return Err(n.err_invalid("indices must have rank >= 1"));
    };
    if k < 1 || k > data.len() {
        return Err(n.err_invalid(format!(
            "indices' last dim {k} must be in 1..={}",
            data.len()
        )));
    }
    let mut want = idx[..idx.len() - 1].to_vec();
    want.extend_from_slice(&data[k..]);
    if upd != want {
        return Err(n.err_invalid(format!("updates have shape {upd:?}, not {want:?}")));
    }
    Ok(k)
}

fn fold_nd(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let (data, idx, upd) = (ins[0], ins[1], ins[2]);
    let k = nd_depth(node, &data.shape, &idx.shape, &upd.shape)?;
    let red = node.attr_s("reduction", "none")?;
    if !matches!(red, "none" | "add" | "mul") || !(data.dtype.is_float() || red == "none") {
        return Ok(None);
    }
    let st = strides(&data.shape);
    let slice = numel(&data.shape[k..]);
    let (iv, uv) = (idx.to_i64(), upd.to_f64());
    let mut out = data.to_f64();
    for (t, tuple) in iv.chunks(k).enumerate() {
        let mut base = 0;
        for (a, &i) in tuple.iter().enumerate() {
            let d = data.shape[a] as i64;
            let j = if i < 0 { i + d } else { i };
            if j < 0 || j >= d {
                return Err(node.err_invalid(format!("index {i} is out of range for dim {d}")));
            }
            base += j as usize * st[a];
        }
        for e in 0..slice {
            let (o, u) = (base + e, uv[t * slice + e]);
            out[o] = match red {
                "add" => out[o] + u,
                "mul" => out[o] * u,
                _ => u,
            };
        }
    }
    let t = if data.dtype.is_float() {
        Tensor::from_f64_as(outs[0].0, outs[0].1.clone(), &out)
    } else {
        // Integer data with reduction none: the updates' integers, exactly.
        let mut o = data.to_i64();
        let ui = upd.to_i64();
        for (t, tuple) in iv.chunks(k).enumerate() {
            let base: usize = tuple
                .iter()
                .enumerate()
                .map(|(a, &i)| {
                    let d = data.shape[a] as i64;
                    (if i < 0 { i + d } else { i }) as usize * st[a]
                })
                .sum();
            for e in 0..slice {
                o[base + e] = ui[t * slice + e];
            }
        }
        Tensor::from_i64_as(outs[0].0, outs[0].1.clone(), &o)
    };
    Ok(Some(vec![t]))
}

fn infer_elements(x: &In) -> Result<Vec<Out>> {
    elements_axis(x.n, x.shape(0)?, x.shape(1)?, x.shape(2)?)?;
    Ok(vec![(x.dtype(0)?, x.shape(0)?.to_vec())])
}

fn infer_nd(x: &In) -> Result<Vec<Out>> {
    nd_depth(x.n, x.shape(0)?, x.shape(1)?, x.shape(2)?)?;
    Ok(vec![(x.dtype(0)?, x.shape(0)?.to_vec())])
}

/// QNN's reduction code for the node's `reduction` (`nd`: ScatterND's; ScatterElements takes
/// none on the HTP and reaches add and mul through ScatterNd).
fn reduction(node: &Node, nd: bool) -> Result<u32> {
    let r = node.attr_s("reduction", "none")?;
    Ok(match r {
        "none" => scatter_reduction::NONE,
        "add" => scatter_reduction::ADD,
        "mul" => scatter_reduction::MUL,
        _ => {
            let which = if nd {
                "ScatterNd"
            } else {
                "ScatterElements or ScatterNd"
            };
            return Err(node.err_attr(
                "reduction",
                format!(
                    "'{r}' is not supported (QNN {which} reduces by add or mul only on the HTP)"
                ),
            ));
        }
    })
}

/// The `[..indices.shape, rank]` index tuples of a ScatterElements along `axis`: each position
/// of the indices with its `axis` coordinate replaced by the (wrapped) index there.
fn element_tuples(cx: &mut LowerCx, node: &Node, axis: usize, dim: usize) -> Result<TensorId> {
    let s = cx.shape(node, 1);
    let r = s.len();
    let n = numel(&s);
    let st = strides(&s);
    let coords = |lo: usize, hi: usize| -> Vec<i64> {
        let mut v = Vec::with_capacity(n * (hi - lo));
        for p in 0..n {
            for j in lo..hi {
                v.push(((p / st[j]) % s[j]) as i64);
            }
        }
        v
    };
    let tuples = |cols: usize| {
        let mut t = s.clone();
        t.push(cols);
        t
    };
    if let Some(t) = cx.konst(node, 1) {
        let mut v = coords(0, r);
        for (p, i) in t.to_i64().into_iter().enumerate() {
            let w = if i < 0 { i + dim as i64 } else { i };
            if w < 0 || w >= dim as i64 {
                return Err(node.err_invalid(format!("index {i} is out of range for dim {dim}")));
            }
            v[p * r + axis] = w;
        }
        let t = Tensor::from_i64_as(DType::I32, tuples(r), &v);
        return cx.static_tensor(node, &format!("{}_tuples", node.name), &t);
    }
    let idx = wrapped_indices(cx, node, 1, &[dim])?;
    let idx = cx.reshape(node, idx, &tuples(1));
    let mut parts = Vec::new();
    if axis > 0 {
        let t = Tensor::from_i64_as(DType::I32, tuples(axis), &coords(0, axis));
        parts.push(cx.static_tensor(node, &format!("{}_lead", node.name), &t)?);
    }
    parts.push(idx);
    if axis + 1 < r {
        let t = Tensor::from_i64_as(DType::I32, tuples(r - axis - 1), &coords(axis + 1, r));
        parts.push(cx.static_tensor(node, &format!("{}_trail", node.name), &t)?);
    }
    Ok(cx.emit(
        node,
        op::CONCAT,
        parts,
        DType::I32,
        &tuples(r),
        vec![(param::AXIS, Param::u32(r as u32))],
    ))
}

pub fn scatter_elements(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let data = cx.shape(node, 0);
    let axis = elements_axis(node, &data, &cx.shape(node, 1), &cx.shape(node, 2))?;
    let red = reduction(node, false)?;
    let (q, idx, params) = if red == scatter_reduction::NONE {
        let idx = wrapped_indices(cx, node, 1, &[data[axis]])?;
        let params = vec![
            (param::AXIS, Param::u32(axis as u32)),
            (param::REDUCTION, Param::u32(red)),
        ];
        (op::SCATTER_ELEMENTS, idx, params)
    } else {
        let idx = element_tuples(cx, node, axis, data[axis])?;
        let params = vec![(param::REDUCTION, Param::u32(red))];
        (op::SCATTER_ND, idx, params)
    };
    let x = cx.input(node, 0)?;
    let u = cx.input(node, 2)?;
    let y = cx.output(node, 0)?;
    cx.op(node, q, vec![x, idx, u], vec![y], params);
    Ok(())
}

pub fn scatter_nd(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let data = cx.shape(node, 0);
    let k = nd_depth(node, &data, &cx.shape(node, 1), &cx.shape(node, 2))?;
    let red = reduction(node, true)?;
    let idx = wrapped_indices(cx, node, 1, &data[..k])?;
    let x = cx.input(node, 0)?;
    let u = cx.input(node, 2)?;
    let y = cx.output(node, 0)?;
    let params = vec![(param::REDUCTION, Param::u32(red))];
    cx.op(node, op::SCATTER_ND, vec![x, idx, u], vec![y], params);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ir::Attr;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    fn elements(reduction: &'static str) -> ModelBuilder {
        ModelBuilder::new(18)
            .input("x", DType::F32, &[3, 4])
            .init("i", Tensor::from_i64(vec![1, 2], &[-1, 0]))
            .input("u", DType::F32, &[1, 2])
            .node(
                "ScatterElements",
                &["x", "i", "u"],
                &["y"],
                &[("axis", A::I(1)), ("reduction", A::S(reduction))],
            )
            .output("y")
    }

    #[test]
    fn scatter_elements_snapshot() {
        let d = lower(&elements("none")).dump();
        assert!(d.contains("ScatterElements(x:f32[3, 4], static ScatterElements_0_indices:i32[1, 2], u:f32[1, 2]) axis=1u reduction=0u -> y:f32[3, 4]"), "{d}");
    }

    #[test]
    fn scatter_elements_add_is_a_scatter_nd() {
        // Constant indices [[-1, 0]] along axis 1: tuples (0, 3) and (0, 0).
        let p = lower(&elements("add"));
        assert_eq!(p.op_types(), ["ScatterNd"]);
        assert!(p.dump().contains("ScatterNd(x:f32[3, 4], static ScatterElements_0_tuples:i32[1, 2, 2], u:f32[1, 2]) reduction=1u -> y:f32[3, 4]"), "{}", p.dump());
        // Dynamic indices: the row coordinates come from a constant grid.
        let b = ModelBuilder::new(18)
            .input("x", DType::F32, &[3, 4])
            .input("i", DType::I64, &[2, 2])
            .input("u", DType::F32, &[2, 2])
            .node(
                "ScatterElements",
                &["x", "i", "u"],
                &["y"],
                &[("axis", A::I(1)), ("reduction", A::S("mul"))],
            )
            .output("y");
        let d = lower(&b).dump();
        assert!(d.contains("Concat(static ScatterElements_0_lead:i32[2, 2, 1], ScatterElements_0_ElementWiseSelect_reshaped:i32[2, 2, 1]) axis=2u -> ScatterElements_0_Concat:i32[2, 2, 2]"), "{d}");
        assert!(d.contains("reduction=2u"), "{d}");
    }

    #[test]
    fn scatter_elements_max_unsupported() {
        assert!(
            lower_err(&elements("max")).contains("attribute 'reduction': 'max' is not supported")
        );
    }

    fn nd(reduction: &'static str) -> ModelBuilder {
        ModelBuilder::new(18)
            .input("x", DType::F32, &[4, 3])
            .input("i", DType::I64, &[2, 1])
            .input("u", DType::F32, &[2, 3])
            .node(
                "ScatterND",
                &["x", "i", "u"],
                &["y"],
                &[("reduction", A::S(reduction))],
            )
            .output("y")
    }

    #[test]
    fn scatter_nd_snapshot() {
        let d = lower(&nd("mul")).dump();
        assert!(d.contains("ScatterNd(x:f32[4, 3], ScatterND_0_ElementWiseSelect:i32[2, 1], u:f32[2, 3]) reduction=2u -> y:f32[4, 3]"), "{d}");
    }

    #[test]
    fn scatter_nd_max_unsupported() {
        assert!(lower_err(&nd("max")).contains("attribute 'reduction': 'max' is not supported"));
    }

    #[test]
    fn scatter_is_inferred() {
        let g = graph_with(&[
            ("x", DType::F16, vec![4, 3]),
            ("i", DType::I32, vec![2, 1]),
            ("u", DType::F16, vec![2, 3]),
            ("v", DType::F16, vec![2, 2]),
        ]);
        let n = node("ScatterND", &[Some(0), Some(1), Some(2)], &[]);
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F16, vec![4, 3])]);
        let n = node("ScatterND", &[Some(0), Some(1), Some(3)], &[]);
        assert!(infer(&g, &n).unwrap_err().to_string().contains("updates"));
        let n = node(
            "ScatterElements",
            &[Some(0), Some(1), Some(3)],
            &[("axis", Attr::Int(0))],
        );
        assert!(infer(&g, &n).unwrap_err().to_string().contains("one shape"));
    }

    #[test]
    fn constant_scatter_nd_is_folded() {
        let b = ModelBuilder::new(16)
            .input("x", DType::F32, &[6])
            .init("d", Tensor::from_f32(vec![6], &[1., 2., 3., 4., 5., 6.]))
            .init("i", Tensor::from_i64(vec![2, 1], &[2, -1]))
            .init("u", Tensor::from_f32(vec![2], &[0., 10.]))
            .node("ScatterND", &["d", "i", "u"], &["s"], &[])
            .node("Add", &["x", "s"], &["y"], &[])
            .output("y");
        assert!(!lower(&b).dump().contains("ScatterNd"));
        let mut g = b.load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        let v = (0..g.values.len())
            .find(|&v| g.values[v].name == "s")
            .unwrap();
        assert_eq!(g.konst(v).unwrap().to_f64(), vec![1., 2., 0., 4., 5., 10.]);
    }
}
