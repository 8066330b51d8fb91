//! Collapses a chain of Transposes and Reshapes that, taken together, keeps the elements in
//! their order into one Reshape (which moves no data).
//!
//! The layout pass leaves such chains where a model flattens a conv output into tokens or folds
//! tokens back into a feature map: a patch embedding's `conv(x).flatten(2).transpose(1, 2)`
//! (ViT, DeiT, SegFormer, Swin) is `Transpose(NHWC → NCHW) → Reshape → Transpose(0, 2, 1)`, which
//! is a Reshape of the NHWC conv output; SegFormer's Mix-FFN folds tokens back for its depthwise
//! conv with the mirror image; a Conv1d (Whisper, wav2vec2) is a Conv2d over a unit H between
//! Reshapes, so its output goes `Transpose → Reshape(squeeze) → Gelu → Reshape(unsqueeze) →
//! Transpose` into the next conv. ONNX Runtime's QNN graph has a single Reshape at each of those
//! places. Elementwise ops of one tensor (and scalar constants) inside the chain commute with the
//! data movement and are kept, applied to the collapsed Reshape's output.
//!
//! Whether the order is kept is decided exactly, by moving an index tensor through the chain.

use crate::dtype::DType;
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Graph, Node, NodeId, ValueId};
use crate::ops::{layout, Layout};

/// Chains over bigger tensors are left alone: the check moves an index per element.
const MAX_ELEMENTS: usize = 1 << 24;

pub fn run(g: &mut Graph) {
    // Nodes left without readers (a folded Shape of a chain's value) would count as its uses.
    crate::passes::dce::run(g);
    let mut changed = false;
    // Each collapse removes at least one Transpose; the bound guards against a bug.
    for _ in 0..g.nodes.len() {
        if !step(g) {
            break;
        }
        changed = true;
    }
    if changed {
        crate::passes::dce::run(g);
    }
}

fn perm(n: &Node) -> Option<Vec<usize>> {
    match n.attrs.get("perm") {
        Some(Attr::Ints(p)) if n.op_type == "Transpose" => {
            let p: Vec<usize> = p
                .iter()
                .map(|&x| usize::try_from(x).ok())
                .collect::<Option<_>>()?;
            let mut seen = vec![false; p.len()];
            for &k in &p {
                if k >= p.len() || std::mem::replace(&mut seen[k], true) {
                    return None;
                }
            }
            Some(p)
        }
        _ => None,
    }
}

enum Link {
    Transpose(Vec<usize>),
    Reshape,
    /// An elementwise op of the chain's value; its other inputs are constants, scalars or of the
    /// value's shape (moved with the value when the chain collapses).
    Pointwise,
}

fn link(g: &Graph, n: &Node, v: ValueId) -> Option<Link> {
    let y = n.output(0)?;
    if n.outputs.len() != 1 || !g.values[y].known || n.input(0) != Some(v) {
        return None;
    }
    if let Some(p) = perm(n) {
        return (p.len() == g.shape(v).len()).then_some(Link::Transpose(p));
    }
    if n.op_type == "Reshape" {
        return Some(Link::Reshape);
    }
    elementwise_of(g, n, v, true).then_some(Link::Pointwise)
}

/// `n` is an element-wise op of `v` (its output has `v`'s shape and dtype) whose other inputs
/// are float constants: scalars, or with `same_shape` also tensors of `v`'s shape (which move
/// with `v` when the op moves).
pub(crate) fn elementwise_of(g: &Graph, n: &Node, v: ValueId, same_shape: bool) -> bool {
    let Some(y) = n.output(0) else { return false };
    matches!(layout(&n.op_type), Some(Layout::Agnostic))
        && g.shape(y) == g.shape(v)
        && g.dtype(y) == g.dtype(v)
        && n.inputs[1..].iter().flatten().all(|&c| {
            g.values[c].quant.is_none()
                && g.konst(c).is_some_and(|t| {
                    (t.numel() == 1 && t.shape.len() <= 1) || (same_shape && t.shape == g.shape(v))
                })
        })
}

fn step(g: &mut Graph) -> bool {
    let cons = g.consumers();
    let uses = g.use_counts();
    for start in 0..g.nodes.len() {
        let Some(p0) = perm(&g.nodes[start]) else {
            continue;
        };
        let (Some(x), Some(mut cur)) = (g.nodes[start].input(0), g.nodes[start].output(0)) else {
            continue;
        };
        let numel: usize = g.shape(x).iter().product();
        if !g.values[x].known || p0.len() != g.shape(x).len() || numel > MAX_ELEMENTS {
            continue;
        }
        if g.values[x].quant.as_ref().is_some_and(|q| q.axis.is_some()) {
            continue;
        }
        let iota: Vec<i64> = (0..numel as i64).collect();
        let mut idx = Tensor::from_i64(g.shape(x).to_vec(), &iota).transpose(&p0);
        // The links after the first Transpose, in order.
        let mut chain: Vec<(NodeId, Link)> = Vec::new();
        loop {
            if uses[cur] != 1 || g.is_output(cur) {
                break;
            }
            let Some(&next) = cons[cur].first() else {
                break;
            };
            let Some(l) = link(g, &g.nodes[next], cur) else {
                break;
            };
            let y = g.nodes[next].output(0).expect("link has an output");
            if g.values[y].quant.as_ref().is_some_and(|q| q.axis.is_some()) {
                break;
            }
            match &l {
                Link::Pointwise => {}
                Link::Reshape => idx = idx.with_shape(g.shape(y).to_vec()),
                Link::Transpose(p) => idx = idx.transpose(p),
            }
            let done = matches!(l, Link::Transpose(_)) && idx.to_i64() == iota;
            chain.push((next, l));
            if done {
                collapse(g, start, x, &chain);
                return true;
            }
            cur = y;
        }
    }
    false
}

/// Rewrites the chain from `start` (reading `x`) through `chain` (whose last link writes `y`)
/// into `Reshape(x) → the pointwise ops → y`; the chain's moves are left without readers.
fn collapse(g: &mut Graph, start: NodeId, x: ValueId, chain: &[(NodeId, Link)]) {
    let last = chain.last().expect("a chain ends in a Transpose").0;
    let y = g.nodes[last].output(0).expect("link has an output");
    let shape = g.shape(y).to_vec();
    let dead = g.add_value(&format!("{}_uncollapsed", g.value(y).name));
    g.nodes[last].outputs[0] = Some(dead);
    let pointwise: Vec<usize> = (0..chain.len())
        .filter(|&k| matches!(chain[k].1, Link::Pointwise))
        .collect();
    let mut v = if pointwise.is_empty() {
        y
    } else {
        let dt: DType = g.dtype(x);
        let r = g.add_typed(&format!("{}_reshaped", g.value(x).name), dt, shape.clone());
        g.values[r].quant = g.values[x].quant.clone();
        r
    };
    let hint = format!("{}_collapsed", g.nodes[start].name);
    let reshape = g.reshape_node(&hint, x, v);
    for (j, &k) in pointwise.iter().enumerate() {
        let u = chain[k].0;
        let out = if j + 1 == pointwise.len() {
            y
        } else {
            let old = g.nodes[u].output(0).expect("link has an output");
            let dt = g.dtype(old);
            let o = g.add_typed(
                &format!("{}_collapsed", g.value(old).name),
                dt,
                shape.clone(),
            );
            g.values[o].quant = g.values[old].quant.clone();
            o
        };
        // A constant of the value's shape is moved as the value is after this op.
        for slot in 1..g.nodes[u].inputs.len() {
            let Some(cv) = g.nodes[u].inputs[slot] else {
                continue;
            };
            let t = g
                .konst(cv)
                .expect("pointwise operands are constants")
                .clone();
            if t.numel() == 1 && t.shape.len() <= 1 {
                continue;
            }
            let mut t = t;
            for (n, l) in &chain[k + 1..] {
                match l {
                    Link::Pointwise => {}
                    Link::Reshape => {
                        let o = g.nodes[*n].output(0).expect("link has an output");
                        t = t.with_shape(g.shape(o).to_vec());
                    }
                    Link::Transpose(p) => t = t.transpose(p),
                }
            }
            let moved = g.add_const(&format!("{}_moved", g.value(cv).name), t);
            g.nodes[u].inputs[slot] = Some(moved);
        }
        let n = &mut g.nodes[u];
        n.inputs[0] = Some(v);
        n.outputs[0] = Some(out);
        v = out;
    }
    // In place of the first Transpose: x is produced before it and every pointwise op after.
    g.nodes[start] = reshape;
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::testing::{ModelBuilder, A};
    use crate::LowerOptions;

    fn lower(b: &ModelBuilder) -> String {
        crate::ops::test_util::lower_with(b, &LowerOptions::default()).dump()
    }

    #[test]
    fn patch_embedding_flatten_is_one_reshape() {
        // conv(x).flatten(2).transpose(1, 2), as ViT's patch embedding writes it.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 8, 8])
            .init(
                "w",
                crate::ir::tensor::Tensor::from_f32(vec![16, 3, 4, 4], &[0.1; 768]),
            )
            .init(
                "s",
                crate::ir::tensor::Tensor::from_i64(vec![3], &[1, 16, 4]),
            )
            .node(
                "Conv",
                &["x", "w"],
                &["c"],
                &[("strides", A::Is(vec![4, 4]))],
            )
            .node("Reshape", &["c", "s"], &["f"], &[])
            .node(
                "Transpose",
                &["f"],
                &["y"],
                &[("perm", A::Is(vec![0, 2, 1]))],
            )
            .output("y");
        let d = lower(&b);
        // Only the graph input's transpose to NHWC is left.
        assert_eq!(d.matches("Transpose(").count(), 1, "{d}");
        assert!(
            d.contains("Reshape(c_nhwc:f32[1, 2, 2, 16]) -> y:f32[1, 4, 16]"),
            "{d}"
        );
    }

    #[test]
    fn conv1d_chain_keeps_its_activation() {
        // Conv1d → Gelu → Conv1d (Whisper's stem), lowered as Conv2d over a unit H.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 16])
            .init(
                "w1",
                crate::ir::tensor::Tensor::from_f32(vec![8, 4, 3], &[0.1; 96]),
            )
            .init(
                "w2",
                crate::ir::tensor::Tensor::from_f32(vec![8, 8, 3], &[0.1; 192]),
            )
            .node(
                "Conv",
                &["x", "w1"],
                &["c1"],
                &[("pads", A::Is(vec![1, 1]))],
            )
            .node("Relu", &["c1"], &["r"], &[])
            .node(
                "Conv",
                &["r", "w2"],
                &["c2"],
                &[("pads", A::Is(vec![1, 1]))],
            )
            .init(
                "pos",
                crate::ir::tensor::Tensor::from_f32(vec![1, 8, 16], &[0.5; 128]),
            )
            .node("Relu", &["c2"], &["r1"], &[])
            .node("Add", &["r1", "pos"], &["r2"], &[])
            .node(
                "Transpose",
                &["r2"],
                &["y"],
                &[("perm", A::Is(vec![0, 2, 1]))],
            )
            .output("y");
        let d = lower(&b);
        assert_eq!(d.matches("Transpose(").count(), 1, "{d}");
        assert_eq!(d.matches("Relu(").count(), 2, "{d}");
        assert!(
            d.contains("ElementWiseAdd(r1_pre:f32[1, 16, 8], static pos_t:f32[1, 16, 8])"),
            "{d}"
        );
    }

    #[test]
    fn a_real_transpose_is_kept() {
        // [N, C, H, W] -> [N, C, HW] -> [N, HW, C] of a graph input moves data.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 2, 2])
            .init(
                "s",
                crate::ir::tensor::Tensor::from_i64(vec![3], &[1, 4, 4]),
            )
            .node("Reshape", &["x", "s"], &["f"], &[])
            .node(
                "Transpose",
                &["f"],
                &["y"],
                &[("perm", A::Is(vec![0, 2, 1]))],
            )
            .output("y");
        assert!(lower(&b).contains("Transpose("));
    }

    #[test]
    fn flatten_with_a_computed_shape_is_one_reshape() {
        // SegFormer's DWConv: reshape(conv_out, shape(conv_out)[:2] + [-1]).transpose(1, 2);
        // the Shape node reads the conv output too until it is folded.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 8, 8])
            .init(
                "w",
                crate::ir::tensor::Tensor::from_f32(vec![16, 3, 1, 1], &[0.1; 48]),
            )
            .init("z", crate::ir::tensor::Tensor::from_i64(vec![1], &[0]))
            .init("two", crate::ir::tensor::Tensor::from_i64(vec![1], &[2]))
            .init("m1", crate::ir::tensor::Tensor::from_i64(vec![1], &[-1]))
            .node("Conv", &["x", "w"], &["c"], &[])
            .node("Shape", &["c"], &["s"], &[])
            .node("Slice", &["s", "z", "two"], &["s2"], &[])
            .node("Concat", &["s2", "m1"], &["shape"], &[("axis", A::I(0))])
            .node("Reshape", &["c", "shape"], &["f"], &[])
            .node(
                "Transpose",
                &["f"],
                &["t"],
                &[("perm", A::Is(vec![0, 2, 1]))],
            )
            .node("Relu", &["t"], &["y"], &[])
            .output("y");
        let d = lower(&b);
        assert_eq!(d.matches("Transpose(").count(), 1, "{d}");
        assert_eq!(d.matches("Reshape(").count(), 1, "{d}");
    }
}
