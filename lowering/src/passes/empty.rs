//! Removes tensors that are empty by construction: QNN tensors cannot have a zero dim, but an
//! empty value often feeds nothing but a Concat. Phi-3's rotary embedding concatenates
//! `q[..., :rot]` rotated with `q[..., rot:]`, which is `[B, H, S, 0]` when the whole head is
//! rotated, and ONNX's RotaryEmbedding function body does the same with `rotary_embedding_dim`
//! 0.
//!
//! To a fixed point: a node whose outputs are all empty (and none a graph output) is replaced by
//! empty constants, a Split drops its empty outputs (which become empty constants; one output
//! left: an Identity), and a Concat drops its empty inputs (one left: an Identity). What is left
//! without readers is removed by dce; an empty value still read by another op, or an empty
//! graph output, is left for lowering to refuse.

use crate::ir::attr::norm_axis;
use crate::ir::tensor::{numel, Tensor};
use crate::ir::{Attr, Graph, NodeId, ValueId};

fn empty(g: &Graph, v: ValueId) -> bool {
    let val = g.value(v);
    val.known && numel(&val.shape) == 0
}

fn make_const_empty(g: &mut Graph, v: ValueId) {
    let val = g.value(v);
    let t = Tensor::from_bytes(val.dtype, val.shape.clone(), Vec::new())
        .expect("an empty tensor has no bytes");
    g.set_const(v, t);
}

/// Drops the empty outputs of Split node `i`; whether it changed the node.
fn drop_split_outputs(g: &mut Graph, i: NodeId) -> bool {
    let n = &g.nodes[i];
    let (Some(x), true) = (n.input(0), n.outputs.iter().all(Option::is_some)) else {
        return false;
    };
    let outs: Vec<ValueId> = n.outputs.iter().flatten().copied().collect();
    if !outs.iter().any(|&v| empty(g, v) && !g.is_output(v)) || !g.values[x].known {
        return false;
    }
    let r = g.shape(x).len();
    let Ok(axis) = n.attr_i("axis", 0).and_then(|a| norm_axis(n, "axis", a, r)) else {
        return false;
    };
    let keep: Vec<ValueId> = outs.iter().copied().filter(|&v| !empty(g, v)).collect();
    if keep.is_empty() {
        return false;
    }
    let sizes: Vec<i64> = keep.iter().map(|&v| g.shape(v)[axis] as i64).collect();
    let dropped: Vec<ValueId> = outs.iter().copied().filter(|&v| empty(g, v)).collect();
    for v in dropped {
        make_const_empty(g, v);
    }
    let opset = g.opset();
    let split = (opset >= 13 && keep.len() > 1)
        .then(|| g.add_const("split_sizes", Tensor::from_i64(vec![sizes.len()], &sizes)));
    let n = &mut g.nodes[i];
    n.outputs = keep.iter().map(|&v| Some(v)).collect();
    n.attrs.remove("num_outputs");
    if keep.len() == 1 {
        n.op_type = "Identity".into();
        n.attrs.clear();
        n.inputs = vec![Some(x)];
    } else if let Some(s) = split {
        n.inputs = vec![Some(x), Some(s)];
    } else {
        n.attrs.insert("split".into(), Attr::Ints(sizes));
    }
    true
}

pub fn run(g: &mut Graph) {
    loop {
        let mut changed = false;
        let mut i = 0;
        while i < g.nodes.len() {
            let n = &g.nodes[i];
            let outs: Vec<ValueId> = n.outputs.iter().flatten().copied().collect();
            if !outs.is_empty() && outs.iter().all(|&v| empty(g, v) && !g.is_output(v)) {
                for v in outs {
                    make_const_empty(g, v);
                }
                g.nodes.remove(i);
                changed = true;
                continue;
            }
            if n.op_type == "Split" && drop_split_outputs(g, i) {
                changed = true;
                i += 1;
                continue;
            }
            let n = &g.nodes[i];
            if n.op_type == "Concat" && n.inputs.iter().flatten().any(|&v| empty(g, v)) {
                let keep: Vec<Option<ValueId>> = n
                    .inputs
                    .iter()
                    .filter(|v| v.is_some_and(|v| !empty(g, v)))
                    .copied()
                    .collect();
                if !keep.is_empty() {
                    let n = &mut g.nodes[i];
                    if keep.len() == 1 {
                        n.op_type = "Identity".into();
                        n.attrs.clear();
                    }
                    n.inputs = keep;
                    changed = true;
                }
            }
            i += 1;
        }
        if !changed {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    /// `Concat(Neg(x[..., :4]), x[..., 4:])` of a `[1, 2, 4]` x: the second slice is empty.
    fn rotary_tail() -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4])
            .init("s0", Tensor::from_i64(vec![1], &[0]))
            .init("s4", Tensor::from_i64(vec![1], &[4]))
            .init("big", Tensor::from_i64(vec![1], &[i64::MAX]))
            .init("ax", Tensor::from_i64(vec![1], &[-1]))
            .node("Slice", &["x", "s0", "s4", "ax"], &["rot"], &[])
            .node("Slice", &["x", "s4", "big", "ax"], &["pass"], &[])
            .node("Neg", &["rot"], &["nr"], &[])
            .node("Concat", &["nr", "pass"], &["y"], &[("axis", A::I(-1))])
            .output("y")
    }

    #[test]
    fn empty_concat_input_is_dropped() {
        let mut g = rotary_tail().load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g);
        crate::passes::simplify::run(&mut g);
        crate::passes::dce::run(&mut g);
        let d = g.dump();
        assert!(!d.contains("Concat"), "{d}");
        assert!(d.contains("Neg("), "{d}");
        assert!(!d.contains("[1, 2, 0]"), "{d}");
    }

    #[test]
    fn empty_split_output_is_dropped() {
        // RotaryEmbedding's function body with the whole head rotated: Split(x, [4, 0]).
        let b = ModelBuilder::new(23)
            .input("x", DType::F32, &[1, 2, 4])
            .init("sizes", Tensor::from_i64(vec![2], &[4, 0]))
            .node(
                "Split",
                &["x", "sizes"],
                &["rot", "pass"],
                &[("axis", A::I(-1))],
            )
            .node("Neg", &["rot"], &["nr"], &[])
            .node("Concat", &["nr", "pass"], &["y"], &[("axis", A::I(-1))])
            .output("y");
        assert_eq!(lower(&b).op_types(), ["ElementWiseNeg"]);
        let b = ModelBuilder::new(23)
            .input("x", DType::F32, &[1, 2, 5])
            .init("sizes", Tensor::from_i64(vec![3], &[2, 0, 3]))
            .node(
                "Split",
                &["x", "sizes"],
                &["a", "e", "c"],
                &[("axis", A::I(-1))],
            )
            .node("Concat", &["c", "e", "a"], &["y"], &[("axis", A::I(-1))])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("Split(x:f32[1, 2, 5]) axis=2u split_index=u32[1]{2}"),
            "{d}"
        );
        assert!(!d.contains(", 0]"), "{d}");
    }

    #[test]
    fn empty_slice_lowers() {
        // The empty slice goes with its Concat; the other takes all of x and is an identity.
        let p = lower(&rotary_tail());
        assert_eq!(p.op_types(), ["ElementWiseNeg"], "{}", p.dump());
    }
}
