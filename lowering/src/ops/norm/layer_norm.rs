//! LayerNormalization — <https://onnx.ai/onnx/operators/onnx__LayerNormalization.html>,
//! opset 17+. QNN `LayerNorm`: in[0] data, in[1] gamma (shape of the normalised dims), in[2]
//! beta; params `epsilon` FLOAT_32 scalar, `axes` UINT_32 `[k]` = `axis..rank`.
//! A missing bias becomes zeros. When the Mean or InvStdDev output is used, the node is expanded
//! before lowering instead (QNN's LayerNorm has one output): `mean = ReduceMean(x)`,
//! `d = x - mean`, `std = Sqrt(ReduceMean(d·d) + epsilon)`, `y = d / std · scale + bias`,
//! `InvStdDev = Reciprocal(std)`, reduced over `axis..rank` with kept dims, statistics in f32
//! (`stash_type` 1, the default; others are rejected).
//!
//! The same expansion replaces LayerNorm when its input comes straight from an Add, Sub, Mul or
//! Div that broadcasts an operand along a dim other than the normalised last one (GPT-2's
//! `token embedding + position embedding [1, S, D]` with batch > 1): the HTP fuses that pair
//! and then applies the broadcast operand of batch 0 to every batch (measured on libQnnHtp 2.51,
//! SoC 60: errors of 4.1 for outputs up to 3.7 on every batch but the first; a per-channel
//! bias `[D]` or a scalar is handled correctly, and so is anything between the two ops).

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::{Graph, Node};
use crate::ops::infer::{same, In, Out};
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::ops::{Quant, Weighted};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const LAYER_NORMALIZATION: OpDef = OpDef {
    op_type: "LayerNormalization",
    since: 17,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(layer_norm_with_stats),
    lower: Some(layer_norm),
    quant: Quant::Weighted(Weighted {
        weight: 1,
        channel: None,
        bias: Some(2),
        weight_storage: Some(DType::U8),
        symmetric_u16: false,
    }),
};

/// `Y` has the input's shape; `Mean` and `InvStdDev` (f32) keep the leading dims and are 1
/// over the normalised ones.
fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let mut v = same(x)?;
    let r = x.rank(0)?;
    let axis = norm_axis(n, "axis", n.attr_i("axis", -1)?, r)?;
    let mut red = x.shape(0)?.to_vec();
    for d in &mut red[axis..] {
        *d = 1;
    }
    for _ in 1..n.outputs.len() {
        v.push((DType::F32, red.clone()));
    }
    Ok(v)
}

/// The expansion used when the Mean or InvStdDev output is read.
pub fn layer_norm_with_stats(b: &mut Builder, node: &Node) -> Result<bool> {
    let stats = node.outputs.iter().skip(1).any(Option::is_some);
    if !stats && !fed_by_broadcast(b.g, node) {
        return Ok(false);
    }
    if node.attr_i("stash_type", 1)? != 1 {
        return Err(node.err_attr("stash_type", "only 1 (float32 statistics) is supported"));
    }
    let x = node
        .input(0)
        .ok_or_else(|| node.err_invalid("input 'X' is missing"))?;
    let scale = node
        .input(1)
        .ok_or_else(|| node.err_invalid("input 'Scale' is missing"))?;
    let r = b.g.shape(x).len();
    let axis = norm_axis(node, "axis", node.attr_i("axis", -1)?, r)?;
    let eps = node.attr_f("epsilon", 1e-5)? as f64;
    let dt = b.g.dtype(x);
    let axes: Vec<i64> = (axis as i64..r as i64).collect();
    let xf = if dt == DType::F32 {
        x
    } else {
        b.cast(x, DType::F32)
    };
    let mean = b.reduce("ReduceMean", xf, &axes, true);
    let d = b.op("Sub", &[xf, mean], vec![]);
    let sq = b.op("Mul", &[d, d], vec![]);
    let var = b.reduce("ReduceMean", sq, &axes, true);
    let e = b.scalar(DType::F32, eps);
    let ve = b.op("Add", &[var, e], vec![]);
    let std = b.op("Sqrt", &[ve], vec![]);
    let mut n = b.op("Div", &[d, std], vec![]);
    if dt != DType::F32 {
        n = b.cast(n, dt);
    }
    let y = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 'Y' is missing"))?;
    match node.input(2) {
        Some(bias) => {
            let s = b.op("Mul", &[n, scale], vec![]);
            b.op_to("Add", &[s, bias], vec![], &[y]);
        }
        None => b.op_to("Mul", &[n, scale], vec![], &[y]),
    }
    if let Some(o) = node.output(1) {
        b.op_to("Identity", &[mean], vec![], &[o]);
    }
    if let Some(o) = node.output(2) {
        b.op_to("Reciprocal", &[std], vec![], &[o]);
    }
    Ok(true)
}

/// Whether the data input is the output of an elementwise Add/Sub/Mul/Div that broadcasts an
/// operand along a dim other than the last (see the module doc).
fn fed_by_broadcast(g: &Graph, node: &Node) -> bool {
    let Some(x) = node.input(0) else {
        return false;
    };
    let Some(p) = g.producers()[x] else {
        return false;
    };
    let p = &g.nodes[p];
    if !matches!(p.op_type.as_str(), "Add" | "Sub" | "Mul" | "Div") {
        return false;
    }
    let out = g.shape(x);
    p.inputs.iter().flatten().any(|&v| {
        let s = g.shape(v);
        let n: usize = s.iter().product();
        if n <= 1 || s == out {
            return false;
        }
        // Right-aligned, does any dim but the last differ from the output's?
        let pad = out.len().saturating_sub(s.len());
        (0..out.len().saturating_sub(1)).any(|i| {
            let d = if i < pad { 1 } else { s[i - pad] };
            d != out[i]
        }) && s.iter().rev().skip(1).any(|&d| d != 1)
    })
}

pub fn layer_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    if node.outputs.iter().skip(1).any(Option::is_some) {
        return Err(
            node.err_op("the Mean and InvStdDev outputs are produced only by the expanded form")
        );
    }
    let shape = cx.shape(node, 0);
    let r = shape.len();
    let axis = norm_axis(node, "axis", node.attr_i("axis", -1)?, r)?;
    let eps = node.attr_f("epsilon", 1e-5)?;
    let norm_shape = shape[axis..].to_vec();
    let x = cx.input(node, 0)?;
    let gamma = cx.input(node, 1)?;
    let beta = match node.input(2) {
        Some(_) => cx.input(node, 2)?,
        None => {
            let dt = cx.dtype(node, 0);
            let n: usize = norm_shape.iter().product();
            cx.static_tensor(
                node,
                &format!("{}_beta", node.name),
                &Tensor::from_f64_as(dt, norm_shape.clone(), &vec![0.0; n]),
            )?
        }
    };
    let axes: Vec<u32> = (axis as u32..r as u32).collect();
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::LAYER_NORM,
        vec![x, gamma, beta],
        vec![y],
        vec![
            (param::EPSILON, Param::f32(eps)),
            (param::AXES, Param::u32_vec(&axes)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn layer_norm_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 8])
            .init("g", Tensor::from_f32(vec![8], &[1.0; 8]))
            .init("b", Tensor::from_f32(vec![8], &[0.0; 8]))
            .node("LayerNormalization", &["x", "g", "b"], &["y"], &[])
            .output("y");
        assert!(lower(&b).dump().contains("LayerNorm(x:f32[1, 4, 8], static g:f32[8], static b:f32[8]) epsilon=0.00001f axes=u32[1]{2} -> y:f32[1, 4, 8]"));
    }

    #[test]
    fn layer_norm_after_a_batch_broadcast_add_is_expanded() {
        // x [2, 4, 8] + a dynamic [1, 4, 8]: the HTP's fused Add+LayerNorm would apply batch
        // 0's operand to batch 1. A per-channel bias [8] keeps the native LayerNorm.
        let ln = |other: &[i64]| {
            ModelBuilder::new(17)
                .input("x", DType::F32, &[2, 4, 8])
                .input("p", DType::F32, other)
                .init("g", Tensor::from_f32(vec![8], &[1.0; 8]))
                .node("Add", &["x", "p"], &["a"], &[])
                .node("LayerNormalization", &["a", "g"], &["y"], &[])
                .output("y")
        };
        let expanded = lower(&ln(&[1, 4, 8])).op_types();
        assert!(!expanded.contains(&"LayerNorm"), "{expanded:?}");
        assert!(expanded.contains(&"ReduceMean"), "{expanded:?}");
        assert!(lower(&ln(&[8])).op_types().contains(&"LayerNorm"));
    }

    #[test]
    fn layer_norm_with_stats_is_expanded() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 8])
            .init("g", Tensor::from_f32(vec![8], &[1.0; 8]))
            .node(
                "LayerNormalization",
                &["x", "g"],
                &["y", "mean", "inv"],
                &[],
            )
            .output("y")
            .output("mean")
            .output("inv");
        let p = lower(&b);
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            vec![
                "ReduceMean",
                "ElementWiseSubtract",
                "ElementWiseMultiply",
                "ReduceMean",
                "ElementWiseAdd",
                "ElementWiseSquareRoot",
                "ElementWiseDivide",
                "ElementWiseMultiply",
                "ElementWiseDivide"
            ],
            "{d}"
        );
        assert!(d.contains("output mean:f32[2, 1]"), "{d}");
    }

    #[test]
    fn layer_norm_with_stats_other_stash_type_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 8])
            .init("g", Tensor::from_f32(vec![8], &[1.0; 8]))
            .node(
                "LayerNormalization",
                &["x", "g"],
                &["y", "mean"],
                &[("stash_type", A::I(10))],
            )
            .output("y")
            .output("mean");
        assert!(lower_err(&b).contains("attribute 'stash_type'"));
    }
}
