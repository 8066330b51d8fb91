//! Merges chains of reshapes (Reshape, Squeeze, Unsqueeze, Flatten) and the unary element-wise
//! ops between them into at most one reshape on each side of those ops, and runs the ops on the
//! chain's shape whose last dim is largest.
//!
//! The layout pass and the lowering of Conv1d leave such chains where a model squeezes and
//! unsqueezes around convolutions: silero-vad's encoder is `Conv2d → Reshape([1, 64, 1]) → Relu
//! → Reshape([1, 64, 1, 1]) → Reshape([1, 1, 1, 64]) → Conv2d`. The Reshapes move no data, but
//! the Relu between them runs over a tensor whose last dim is 1, and the HTP lays tensors out
//! with the last dim innermost: that Relu cost 171K cycles on the emulator, the same Relu over
//! `[1, 1, 1, 64]` in ONNX Runtime's graph 12.5K. Here it becomes `Conv2d → Relu → Conv2d`.
//!
//! Only chains that insert and remove size-1 dims are merged (see `step` for why).
//! Every reshape this pass writes names its output shape in full (no 0 or -1 that would read
//! the input's dims), so moving its input cannot change what it means.

use crate::ir::{Graph, NodeId, ValueId};
use crate::passes::collapse_moves::elementwise_of;

/// The links of a chain reading `x`: nodes that each read the previous link's output (a value
/// with no other reader, not a graph output), with at least one reshape among them.
fn chain_from(g: &Graph, cons: &[Vec<NodeId>], uses: &[usize], start: NodeId) -> Vec<NodeId> {
    let mut chain = Vec::new();
    let mut cur = start;
    loop {
        let n = &g.nodes[cur];
        let Some(v) = n.input(0) else { break };
        let Some(y) = n.output(0) else { break };
        let ok = n.outputs.len() == 1
            && g.values[y].known
            && g.values[v].known
            && !g.values[y].quant.as_ref().is_some_and(|q| q.axis.is_some())
            // An element-wise op of `v` alone (scalar operands) runs on any shape of it.
            && (n.only_reshapes() || elementwise_of(g, n, v, false));
        if !ok {
            break;
        }
        chain.push(cur);
        if uses[y] != 1 || g.is_output(y) {
            break;
        }
        match cons[y].first() {
            Some(&next) if g.nodes[next].input(0) == Some(y) => cur = next,
            _ => break,
        }
    }
    chain
}

pub fn run(g: &mut Graph) {
    // Each rewrite removes a reshape or gives an op a larger last dim; the bound is a guard.
    for _ in 0..g.nodes.len() {
        if !step(g) {
            return;
        }
    }
}

fn last_dim(s: &[usize]) -> usize {
    s.last().copied().unwrap_or(1)
}

fn step(g: &mut Graph) -> bool {
    let cons = g.consumers();
    let uses = g.use_counts();
    let producers = g.producers();
    for start in 0..g.nodes.len() {
        let Some(x) = g.nodes[start].input(0) else {
            continue;
        };
        if g.values[x].quant.as_ref().is_some_and(|q| q.axis.is_some()) {
            continue;
        }
        // Only from the first link: a chain is rewritten once, whole.
        if let Some(p) = producers[x] {
            if uses[x] == 1 && !g.is_output(x) && chain_from(g, &cons, &uses, p).len() > 1 {
                continue;
            }
        }
        let chain = chain_from(g, &cons, &uses, start);
        let moves = chain
            .iter()
            .filter(|&&k| g.nodes[k].only_reshapes())
            .count();
        let ops: Vec<NodeId> = chain
            .iter()
            .copied()
            .filter(|&k| !g.nodes[k].only_reshapes())
            .collect();
        if moves == 0 {
            continue;
        }
        let y = g.nodes[*chain.last().expect("moves > 0")]
            .output(0)
            .expect("checked");
        // The shape the ops run on: the one with the largest last dim among the chain's,
        // x's or y's first when they tie (each saves a reshape).
        let mut shapes: Vec<&[usize]> = vec![g.shape(x), g.shape(y)];
        shapes.extend(
            chain
                .iter()
                .map(|&k| g.shape(g.nodes[k].output(0).expect("checked"))),
        );
        // Only chains that insert and remove size-1 dims: the HTP miscompiles some merged
        // reshapes of real dims (docs/qnn-notes.md §8.19: `[2, 2, 1, 32] → [2, 64]` into a
        // FullyConnected whose output is reshaped to `[2, 1, 64]` computes wrong rows, where
        // the same reshape in steps is right; GPT-2's batched decode graph has one).
        let big = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
        if shapes.iter().any(|s| big(s) != big(g.shape(x))) {
            continue;
        }
        let best = shapes
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|&(i, s)| (last_dim(s), std::cmp::Reverse(i)))
            .map(|(_, s)| s.to_vec())
            .expect("x and y");
        let needed = if ops.is_empty() {
            usize::from(g.shape(x) != g.shape(y) || g.is_output(y))
        } else {
            usize::from(g.shape(x) != best.as_slice()) + usize::from(g.shape(y) != best.as_slice())
        };
        let better_layout = ops
            .iter()
            .any(|&k| last_dim(g.shape(g.nodes[k].output(0).expect("checked"))) < last_dim(&best));
        if !(needed < moves || (needed <= moves && better_layout)) {
            continue;
        }
        rewrite(g, x, y, &chain, &ops, best);
        // The new reshapes were appended: sorted before dce, which sweeps in order.
        let _ = g.toposort();
        crate::passes::dce::run(g);
        return true;
    }
    false
}

/// `x → [Reshape → best] → the ops → [Reshape →] y`; the chain's reshapes are left unread.
fn rewrite(
    g: &mut Graph,
    x: ValueId,
    y: ValueId,
    chain: &[NodeId],
    ops: &[NodeId],
    best: Vec<usize>,
) {
    let last = *chain.last().expect("non-empty");
    let old_outs: Vec<ValueId> = ops
        .iter()
        .map(|&k| g.nodes[k].output(0).expect("checked"))
        .collect();
    let dead = g.add_value(&format!("{}_unmerged", g.value(y).name));
    g.nodes[last].outputs[0] = Some(dead);
    if ops.is_empty() && g.shape(x) == g.shape(y) && !g.is_output(y) {
        g.replace_uses(y, x);
        return;
    }
    let reshape = |g: &mut Graph, from: ValueId, to: ValueId| {
        let n = g.reshape_node(&format!("{}_merged", g.value(to).name), from, to);
        // Named uniquely already (push_node would rename it).
        g.nodes.push(n);
    };
    if ops.is_empty() {
        reshape(g, x, y);
        return;
    }
    let mut v = x;
    if g.shape(x) != best.as_slice() {
        let r = g.add_typed(
            &format!("{}_merged", g.value(x).name),
            g.dtype(x),
            best.clone(),
        );
        g.values[r].quant = g.values[x].quant.clone();
        reshape(g, x, r);
        v = r;
    }
    for (j, (&k, &old)) in ops.iter().zip(&old_outs).enumerate() {
        let out = if j + 1 == ops.len() && g.shape(y) == best.as_slice() {
            y
        } else {
            let o = g.add_typed(
                &format!("{}_merged", g.value(old).name),
                g.dtype(old),
                best.clone(),
            );
            g.values[o].quant = g.values[old].quant.clone();
            // A reshape keeps the element order, so a value in the model's own order still is
            // (the per-layer comparison reads values flat); a permuted one would not be.
            let origin = g.values[old].origin.clone().filter(|o| o.perm.is_none());
            g.values[o].origin = origin;
            o
        };
        let n = &mut g.nodes[k];
        n.inputs[0] = Some(v);
        n.outputs[0] = Some(out);
        v = out;
    }
    if v != y {
        reshape(g, v, y);
    }
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::testing::ModelBuilder;
    use crate::LowerOptions;

    fn lower(b: &ModelBuilder) -> String {
        crate::ops::test_util::lower_with(b, &LowerOptions::default()).dump()
    }

    #[test]
    fn an_activation_between_conv1ds_runs_channel_last() {
        // silero-vad's encoder: a Conv1d with one output step, ReLU, the next Conv1d.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 3])
            .init("w1", Tensor::from_f32(vec![8, 4, 3], &[0.1; 96]))
            .init("w2", Tensor::from_f32(vec![8, 8, 1], &[0.1; 64]))
            .node("Conv", &["x", "w1"], &["c1"], &[])
            .node("Relu", &["c1"], &["r"], &[])
            .node("Conv", &["r", "w2"], &["y"], &[])
            .output("y");
        let d = lower(&b);
        let relu = d.lines().find(|l| l.starts_with("Relu(")).expect("a Relu");
        assert!(relu.contains("f32[1, 1, 1, 8]) ->"), "{d}");
        // Between the convs only the Relu is left.
        let conv = d.find("Conv2d(").expect("conv");
        let second = d.rfind("Conv2d(").expect("conv");
        assert!(!d[conv..second].contains("Reshape("), "{d}");
    }

    #[test]
    fn a_chain_of_unit_reshapes_is_one_reshape() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .init("ax", Tensor::from_i64(vec![1], &[1]))
            .init("s1", Tensor::from_i64(vec![3], &[2, 3, 1]))
            .init("s2", Tensor::from_i64(vec![3], &[1, 2, 3]))
            .node("Unsqueeze", &["x", "ax"], &["u"], &[])
            .node("Reshape", &["u", "s1"], &["r1"], &[])
            .node("Neg", &["r1"], &["n"], &[])
            .node("Reshape", &["n", "s2"], &["y"], &[])
            .output("y");
        let d = lower(&b);
        assert_eq!(d.matches("Reshape(").count(), 1, "{d}");
        // The op runs on x's shape (last dim 3, not [2, 3, 1]'s 1).
        assert!(d.contains("ElementWiseNeg(x:f32[2, 3])"), "{d}");
        assert!(d.contains("-> y:f32[1, 2, 3]"), "{d}");
    }

    #[test]
    fn reshapes_of_real_dims_are_left_in_steps() {
        // GPT-2's decode attention output, [B, heads, 1, D] to rows of heads * D: merged into
        // one reshape, the HTP computed wrong rows (docs/qnn-notes.md §8.19).
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 2, 1, 32])
            .init("s1", Tensor::from_i64(vec![4], &[2, 1, 2, 32]))
            .init("s2", Tensor::from_i64(vec![3], &[2, 1, 64]))
            .init("s3", Tensor::from_i64(vec![2], &[2, 64]))
            .node("Reshape", &["x", "s1"], &["r1"], &[])
            .node("Reshape", &["r1", "s2"], &["r2"], &[])
            .node("Reshape", &["r2", "s3"], &["y"], &[])
            .output("y");
        let d = lower(&b);
        assert_eq!(d.matches("Reshape(").count(), 3, "{d}");
    }

    #[test]
    fn a_value_read_twice_ends_the_chain() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .init("ax", Tensor::from_i64(vec![1], &[0]))
            .node("Unsqueeze", &["x", "ax"], &["u"], &[])
            .node("Squeeze", &["u", "ax"], &["s"], &[])
            .node("Relu", &["u"], &["y1"], &[])
            .node("Neg", &["s"], &["y2"], &[])
            .output("y1")
            .output("y2");
        let d = lower(&b);
        // u feeds the Relu too, so it is kept, and the chain from it (Squeeze, Neg) would need
        // a reshape as before.
        assert!(d.contains("Relu(u:f32[1, 2, 3])"), "{d}");
        assert!(d.contains("ElementWiseNeg(s:f32[2, 3])"), "{d}");
        assert_eq!(d.matches("Reshape(").count(), 2, "{d}");
    }
}
