//! Transposes of rank 6 and more through rank ≤ 5: QNN's HTP validator refuses any tensor of
//! rank 6 ("incorrect Rank 6", 3110), and PyTorch exports `pixel_unshuffle` (without its
//! SpaceToDepth) and Swin's window partition and reverse as Reshape → Transpose (rank 6) →
//! Reshape.
//!
//! A Transpose only reorders groups of input axes that it keeps together and in order (and
//! axes of size 1, which go anywhere): merging each such group into one axis gives the same
//! element order with fewer axes. When that leaves at most 5, the Transpose becomes
//! Reshape (merged) → Transpose (merged perm) → Reshape; the merged Reshape reads what the
//! Reshape before the Transpose read, and Reshapes after it read the merged Transpose, so no
//! rank-6 tensor is left (dce removes the old nodes). A Transpose needing 6 axes is left for
//! QNN to refuse.

use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Graph, Node, NodeId};

/// The highest rank QNN's HTP takes.
const MAX_RANK: usize = 5;

pub fn run(g: &mut Graph) {
    let mut changed = false;
    let mut i = 0;
    while i < g.nodes.len() {
        if g.nodes[i].op_type == "Transpose" && lower_rank(g, i) {
            changed = true;
        }
        i += 1;
    }
    if changed {
        super::dce::run(g);
    }
}

/// The axis groups of a transpose of `shape` by `perm`, in output order, each a run of input
/// axes (size-1 axes dropped), and the merged input shape, perm and output shape.
pub fn merge_axes(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let kept: Vec<usize> = (0..shape.len()).filter(|&a| shape[a] != 1).collect();
    let pos = |a: usize| kept.iter().position(|&k| k == a).expect("a kept axis");
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &a in perm.iter().filter(|&&a| shape[a] != 1) {
        match groups.last_mut() {
            Some(last) if pos(a) == pos(*last.last().expect("non-empty")) + 1 => last.push(a),
            _ => groups.push(vec![a]),
        }
    }
    let mut by_input: Vec<usize> = (0..groups.len()).collect();
    by_input.sort_by_key(|&k| groups[k][0]);
    let size = |k: usize| groups[k].iter().map(|&a| shape[a]).product::<usize>();
    let in_shape: Vec<usize> = by_input.iter().map(|&k| size(k)).collect();
    let perm: Vec<usize> = (0..groups.len())
        .map(|k| by_input.iter().position(|&b| b == k).expect("every group"))
        .collect();
    let out_shape: Vec<usize> = (0..groups.len()).map(size).collect();
    (in_shape, perm, out_shape)
}

fn lower_rank(g: &mut Graph, i: NodeId) -> bool {
    let n = &g.nodes[i];
    let (Some(x), Some(y)) = (n.input(0), n.output(0)) else {
        return false;
    };
    if !g.values[x].known || !g.values[y].known {
        return false;
    }
    let shape = g.shape(x).to_vec();
    let r = shape.len();
    if r <= MAX_RANK {
        return false;
    }
    let perm: Vec<usize> = match n.attrs.get("perm") {
        Some(Attr::Ints(p)) => p.iter().map(|&a| a as usize).collect(),
        None => (0..r).rev().collect(),
        _ => return false,
    };
    let mut seen = vec![false; r];
    if perm.len() != r
        || perm
            .iter()
            .any(|&a| a >= r || std::mem::replace(&mut seen[a], true))
    {
        return false;
    }
    let (in_shape, mperm, out_shape) = merge_axes(&shape, &perm);
    if in_shape.len() > MAX_RANK {
        return false;
    }
    let name = n.name.clone();
    let dt = g.dtype(x);
    let producers = g.producers();
    let consumers = g.consumers();
    // Read past a Reshape that only feeds this Transpose.
    let src = match producers[x] {
        Some(p)
            if g.nodes[p].op_type == "Reshape" && consumers[x].len() == 1 && !g.is_output(x) =>
        {
            g.nodes[p].input(0).expect("Reshape has data")
        }
        _ => x,
    };
    let a = g.add_typed(&format!("{name}_merged_in"), dt, in_shape.clone());
    let r1 = g.reshape_node(&format!("{name}/merge"), src, a);
    let mut new = vec![r1];
    let b = if mperm.iter().enumerate().all(|(k, &p)| k == p) {
        a
    } else {
        let b = g.add_typed(&format!("{name}_merged"), dt, out_shape.clone());
        let mut t = Node::new(g.unique_node_name(&format!("{name}/merged")), "Transpose")
            .with_attr(
                "perm",
                Attr::Ints(mperm.iter().map(|&p| p as i64).collect()),
            );
        t.inputs = vec![Some(a)];
        t.outputs = vec![Some(b)];
        new.push(t);
        b
    };
    let readers = &consumers[y];
    let all_reshapes = !g.is_output(y)
        && !readers.is_empty()
        && readers.iter().all(|&k| {
            g.nodes[k].op_type == "Reshape"
                && g.nodes[k]
                    .inputs
                    .iter()
                    .flatten()
                    .filter(|&&v| v == y)
                    .count()
                    == 1
                && g.nodes[k].input(0) == Some(y)
        });
    if all_reshapes {
        for &k in readers {
            let o = g.nodes[k].output(0).expect("Reshape has an output");
            let s: Vec<i64> = g.shape(o).iter().map(|&d| d as i64).collect();
            let c = g.add_const(
                &format!("{name}_out_shape"),
                Tensor::from_i64(vec![s.len()], &s),
            );
            let rn = &mut g.nodes[k];
            rn.inputs = vec![Some(b), Some(c)];
            rn.attrs.remove("allowzero");
        }
    } else {
        let r2 = g.reshape_node(&format!("{name}/split"), b, y);
        new.push(r2);
    }
    // The old Transpose stops writing y; dce removes it (and a Reshape left unread).
    let dead = g.add_value(&format!("{name}_unmerged"));
    g.nodes[i].outputs[0] = Some(dead);
    let at = i + 1;
    for (k, n) in new.into_iter().enumerate() {
        g.nodes.insert(at + k, n);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::merge_axes;
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn axes_kept_together_merge() {
        // pixel_unshuffle(2) of [2, 3, 8, 12].
        let (i, p, o) = merge_axes(&[2, 3, 4, 2, 6, 2], &[0, 1, 3, 5, 2, 4]);
        assert_eq!(
            (i, p, o),
            (
                vec![6, 4, 2, 6, 2],
                vec![0, 2, 4, 1, 3],
                vec![6, 2, 2, 4, 6]
            )
        );
        // Swin's window partition: [B, H/ws, ws, W/ws, ws, C].
        let (i, p, _) = merge_axes(&[2, 2, 4, 3, 4, 5], &[0, 1, 3, 2, 4, 5]);
        assert_eq!((i, p), (vec![4, 4, 3, 20], vec![0, 2, 1, 3]));
        // Unit axes drop out, and so the axes around one merge.
        let (i, p, _) = merge_axes(&[1, 3, 1, 2, 5, 7], &[5, 1, 0, 2, 3, 4]);
        assert_eq!((i, p), (vec![30, 7], vec![1, 0]));
    }

    fn swin(x: &[i64], view: &[i64], perm: &[i64], out: &[i64]) -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, x)
            .init("s1", Tensor::from_i64(vec![view.len()], view))
            .init("s2", Tensor::from_i64(vec![out.len()], out))
            .node("Reshape", &["x", "s1"], &["v"], &[])
            .node(
                "Transpose",
                &["v"],
                &["t"],
                &[("perm", A::Is(perm.to_vec()))],
            )
            .node("Reshape", &["t", "s2"], &["y"], &[])
            .output("y")
    }

    #[test]
    fn window_partition_runs_at_rank_4() {
        let d = lower(&swin(
            &[2, 8, 12, 5],
            &[2, 2, 4, 3, 4, 5],
            &[0, 1, 3, 2, 4, 5],
            &[-1, 4, 4, 5],
        ))
        .dump();
        assert!(
            d.contains("_merged_in:f32[4, 4, 3, 20]) perm=u32[4]{0,2,1,3}"),
            "{d}"
        );
        assert!(d.contains("-> y:f32[12, 4, 4, 5]"), "{d}");
        assert_eq!(d.matches("Reshape(").count(), 2, "{d}");
        assert!(!d.contains("perm=u32[6]"), "{d}");
    }

    #[test]
    fn seven_axes_apart_are_left() {
        // Every axis moves: 6 groups stay 6.
        let d = lower(&swin(
            &[2, 3, 4, 5, 6, 7],
            &[2, 3, 4, 5, 6, 7],
            &[5, 4, 3, 2, 1, 0],
            &[-1],
        ))
        .dump();
        assert!(d.contains("perm=u32[6]"), "{d}");
    }
}
