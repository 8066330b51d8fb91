//! Fuses `F.normalize(x, dim)` into one `LpNormalization` node (p = 2, lowered to QNN L2Norm).
//!
//! Both PyTorch exporters write `x / max(‖x‖₂, eps)` as `ReduceL2(x, [dim], keepdims)` →
//! `Clip(·, eps)` (or `Max(·, eps)`) → optionally `Expand` to `x`'s shape → `Div(x, ·)`; the
//! expansion of ReduceL2 alone is nine QNN ops. L2Norm computes `x / sqrt(max(Σx², 1e-24))`
//! (see `ops/norm/lp_normalization.rs`), which is the same for `eps = 1e-12` (PyTorch's default)
//! and differs for a smaller `eps` only on norms that fp16 cannot hold; a larger `eps` blocks the
//! fusion, and so do intermediates used elsewhere.

use crate::ir::{Attr, Graph, Node, NodeId, ValueId};

/// The largest `eps` of the pattern the fused L2Norm reproduces.
const MAX_EPS: f64 = 1e-12;

pub fn run(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        if g.nodes[i].op_type == "ReduceL2" && try_fuse(g, i) {
            continue;
        }
        i += 1;
    }
}

fn scalar(g: &Graph, v: Option<ValueId>) -> Option<f64> {
    let t = g.konst(v?)?;
    (t.numel() == 1).then(|| t.get_f64(0))
}

/// The one node reading `v`, when nothing else (a graph output included) does.
fn only_consumer(g: &Graph, consumers: &[Vec<NodeId>], v: ValueId) -> Option<NodeId> {
    match consumers[v].as_slice() {
        [k] if !g.is_output(v)
            && g.nodes[*k]
                .inputs
                .iter()
                .flatten()
                .filter(|&&i| i == v)
                .count()
                == 1 =>
        {
            Some(*k)
        }
        _ => None,
    }
}

/// `eps` when `n` is `Clip(v, eps)` with no upper bound or `Max(v, eps)`.
fn clamp_min(g: &Graph, n: &Node, v: ValueId) -> Option<f64> {
    match n.op_type.as_str() {
        "Clip" if n.input(0) == Some(v) => {
            if g.opset() < 11 {
                let max = n.attr_f("max", f32::MAX).ok()?;
                (max == f32::MAX || max == f32::INFINITY).then_some(())?;
                Some(n.attr_f("min", f32::MIN).ok()? as f64)
            } else {
                let unbounded = match n.input(2) {
                    None => true,
                    Some(m) => scalar(g, Some(m)).is_some_and(|m| m == f64::INFINITY),
                };
                unbounded.then_some(())?;
                scalar(g, n.input(1))
            }
        }
        "Max" if n.inputs.len() == 2 => {
            let other = if n.input(0) == Some(v) {
                n.input(1)
            } else {
                n.input(0)
            };
            scalar(g, other)
        }
        _ => None,
    }
}

fn try_fuse(g: &mut Graph, r: NodeId) -> bool {
    let producers = g.producers();
    let consumers = g.consumers();
    let n = &g.nodes[r];
    let (Some(x), Some(norm)) = (n.input(0), n.output(0)) else {
        return false;
    };
    if !g.values[x].known || !g.dtype(x).is_float() {
        return false;
    }
    let Ok((Some(axes), true)) = crate::ops::reduce::reduce::reduce_params(g, n) else {
        return false;
    };
    let [axis] = axes[..] else { return false };
    let Some(c) = only_consumer(g, &consumers, norm) else {
        return false;
    };
    match clamp_min(g, &g.nodes[c], norm) {
        Some(eps) if (0.0..=MAX_EPS).contains(&eps) => {}
        _ => return false,
    }
    let Some(mut d) = g.nodes[c].output(0) else {
        return false;
    };
    let Some(mut div) = only_consumer(g, &consumers, d) else {
        return false;
    };
    if g.nodes[div].op_type == "Expand" {
        let Some(e) = g.nodes[div].output(0) else {
            return false;
        };
        if g.shape(e) != g.shape(x) || g.nodes[div].input(0) != Some(d) {
            return false;
        }
        d = e;
        let Some(k) = only_consumer(g, &consumers, d) else {
            return false;
        };
        div = k;
    }
    let dn = &g.nodes[div];
    if dn.op_type != "Div" || dn.input(0) != Some(x) || dn.input(1) != Some(d) {
        return false;
    }
    let Some(y) = dn.output(0) else { return false };
    if g.shape(y) != g.shape(x) || producers[y] != Some(div) {
        return false;
    }
    let mut fused = Node::new(
        g.unique_node_name(&format!("{}_l2norm", g.nodes[r].name)),
        "LpNormalization",
    )
    .with_attr("axis", Attr::Int(axis as i64))
    .with_attr("p", Attr::Int(2));
    fused.inputs = vec![Some(x)];
    fused.outputs = vec![Some(y)];
    // The Div is replaced in place; the ReduceL2, the clamp and the Expand are left without
    // readers for dce.
    g.nodes[div] = fused;
    crate::passes::dce::run(g);
    true
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::testing::{ModelBuilder, A};

    fn normalize(eps: f32, expand: bool, extra_output: bool) -> crate::ir::Graph {
        let mut b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 8, 3])
            .init("eps", Tensor::scalar_f32(eps))
            .init("shape", Tensor::from_i64(vec![3], &[2, 8, 3]))
            .node(
                "ReduceL2",
                &["x"],
                &["n"],
                &[("axes", A::Is(vec![1])), ("keepdims", A::I(1))],
            )
            .node("Clip", &["n", "eps"], &["c"], &[]);
        b = if expand {
            b.node("Expand", &["c", "shape"], &["e"], &[])
                .node("Div", &["x", "e"], &["y"], &[])
        } else {
            b.node("Div", &["x", "c"], &["y"], &[])
        };
        b = b.output("y");
        if extra_output {
            b = b.output("n");
        }
        let mut g = b.load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g);
        g
    }

    #[test]
    fn f_normalize_is_fused() {
        let want = "LpNormalization(x) axis=1 p=2 -> y:f32[2, 8, 3]\noutputs: y\n";
        assert_eq!(normalize(1e-12, true, false).dump(), want);
        assert_eq!(normalize(1e-12, false, false).dump(), want);
    }

    #[test]
    fn large_eps_or_shared_norm_blocks_fusion() {
        assert!(normalize(1e-6, true, false).dump().contains("ReduceL2"));
        assert!(normalize(1e-12, true, true).dump().contains("ReduceL2"));
    }

    #[test]
    fn normalize_of_conv_channels_between_convs_is_one_l2norm() {
        // F.normalize(conv(x), dim=1) into a Conv, NCHW: fused before the layout pass (which
        // leaves the L2Norm between two Transposes: it does not move LpNormalization's axis).
        use crate::testing::rand_f32;
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 6, 6])
            .init("w1", Tensor::from_f32(vec![8, 4, 1, 1], &rand_f32(1, 32)))
            .init("w2", Tensor::from_f32(vec![4, 8, 1, 1], &rand_f32(2, 32)))
            .init("eps", Tensor::scalar_f32(1e-12))
            .node("Conv", &["x", "w1"], &["c"], &[])
            .node(
                "ReduceL2",
                &["c"],
                &["n"],
                &[("axes", A::Is(vec![1])), ("keepdims", A::I(1))],
            )
            .node("Clip", &["n", "eps"], &["cl"], &[])
            .node("Div", &["c", "cl"], &["d"], &[])
            .node("Conv", &["d", "w2"], &["y"], &[])
            .output("y");
        let p = crate::ops::test_util::lower(&b);
        let ops: Vec<_> = p
            .op_types()
            .into_iter()
            .filter(|&o| o != "Transpose")
            .collect();
        assert_eq!(ops, ["Conv2d", "L2Norm", "Conv2d"], "{}", p.dump());
    }
}
