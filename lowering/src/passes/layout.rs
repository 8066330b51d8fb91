//! NCHW → NHWC for the layout-sensitive (conv-family) ops, with as few transposes as possible.
//!
//! QNN's Conv2d, pools, Batchnorm, Resize, DepthToSpace, ... take channel-last data. Each
//! sensitive node (op table `layout = "sensitive"`) gets a Transpose to NHWC on its data input
//! and one back to NCHW on its output, and is marked `nhwc`. Then transposes are sunk through
//! `layout = "agnostic"` (element-wise) nodes and adjacent inverse pairs cancel, so a chain
//! Conv → Relu → Conv has no transpose left, and a residual Add runs in NHWC. Transposes are
//! also sunk through `layout = "axes"` nodes (reductions, Concat) with the axes they name
//! permuted: a squeeze-and-excitation `x.mean((2, 3), keepdim=True)` after a conv becomes a
//! ReduceMean over the NHWC axes 1, 2 (what GlobalAveragePool lowers to) instead of a full
//! transpose of the activation back to NCHW, and a DenseNet concat of conv outputs joins them
//! along the NHWC channel axis; a Slice of a conv's channels slices the NHWC channel axis.
//! Reshapes that only insert or remove size-1 dims (a Conv1d's unit H) let transposes through
//! too, so a Conv1d's output stays channel-last between Conv1ds, and so do reshapes that split
//! or merge dims adjacent in the transpose's input (ShuffleNet's channel shuffle becomes one
//! small NHWC transpose). Graph I/O keeps the model's layout because only internal values are
//! rewritten.

use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Graph, Node, NodeId, ValueId};
use crate::ops::reduce::reduce::axes_are_input;
use crate::ops::{layout, AxesOp, Layout};

pub const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
pub const TO_NCHW: [usize; 4] = [0, 3, 1, 2];

/// The perm of a Transpose node, when it is a valid permutation (a malformed one is left to
/// the Transpose rule to report).
fn perm_of(n: &Node) -> Option<Vec<usize>> {
    match n.attrs.get("perm") {
        Some(Attr::Ints(p)) if n.op_type == "Transpose" => {
            let mut seen = vec![false; p.len()];
            for &x in p {
                let k = usize::try_from(x).ok().filter(|&k| k < p.len())?;
                if std::mem::replace(&mut seen[k], true) {
                    return None;
                }
            }
            Some(p.iter().map(|&x| x as usize).collect())
        }
        _ => None,
    }
}

fn inverse(p: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; p.len()];
    for (i, &x) in p.iter().enumerate() {
        inv[x] = i;
    }
    inv
}

fn transpose_node(g: &mut Graph, hint: &str, input: ValueId, perm: &[usize]) -> (Node, ValueId) {
    let val = g.value(input);
    let shape: Vec<usize> = perm.iter().map(|&p| val.shape[p]).collect();
    let (dtype, quant) = (val.dtype, val.quant.clone());
    let out = g.add_typed(&format!("{}_{hint}", val.name), dtype, shape);
    // A transposed view stores its elements as its input does.
    g.values[out].quant = quant;
    g.values[out].origin = g.values[input].origin.as_ref().map(|o| o.permuted(perm));
    let mut n = Node::new(format!("{}_{hint}", g.value(input).name), "Transpose")
        .with_attr("perm", Attr::Ints(perm.iter().map(|&x| x as i64).collect()));
    n.inputs = vec![Some(input)];
    n.outputs = vec![Some(out)];
    (n, out)
}

fn known(g: &Graph, n: &Node) -> bool {
    n.inputs
        .iter()
        .flatten()
        .chain(n.outputs.iter().flatten())
        .all(|&v| g.values[v].known)
}

pub fn run(g: &mut Graph) {
    convert_sensitive(g);
    softmax_axis_last(g);
    optimize(g);
    let _ = g.toposort();
}

fn convert_sensitive(g: &mut Graph) {
    let count = g.nodes.len();
    for i in 0..count {
        let n = &g.nodes[i];
        if !matches!(layout(&n.op_type), Some(Layout::Sensitive)) || n.nhwc || !known(g, n) {
            continue;
        }
        let (Some(x), Some(y)) = (n.input(0), n.output(0)) else {
            continue;
        };
        if g.shape(x).len() != 4 || g.shape(y).len() != 4 {
            continue;
        }
        let (tin, xin) = transpose_node(g, "nhwc", x, &TO_NHWC);
        let yshape: Vec<usize> = TO_NHWC.iter().map(|&p| g.shape(y)[p]).collect();
        let ydt = g.dtype(y);
        let y_nhwc = g.add_typed(&format!("{}_nhwc", g.value(y).name), ydt, yshape);
        g.values[y_nhwc].quant = g.values[y].quant.clone();
        g.values[y_nhwc].origin = g.values[y].origin.as_ref().map(|o| o.permuted(&TO_NHWC));
        let mut tout = Node::new(format!("{}_nchw", g.value(y).name), "Transpose").with_attr(
            "perm",
            Attr::Ints(TO_NCHW.iter().map(|&x| x as i64).collect()),
        );
        tout.inputs = vec![Some(y_nhwc)];
        tout.outputs = vec![Some(y)];
        let n = &mut g.nodes[i];
        n.inputs[0] = Some(xin);
        n.outputs[0] = Some(y_nhwc);
        n.nhwc = true;
        g.push_node(tin);
        g.push_node(tout);
    }
}

/// Softmax / LogSoftmax (opset 13+) over an axis other than the last, as
/// `Transpose(axis last) → Softmax(last) → Transpose(back)`: QNN normalises the last axis only,
/// so the lowering rule would emit these two transposes anyway, but emitted here they compose
/// with the model's and the layout's own. YOLOv8's DFL head (`Reshape → Transpose(0, 2, 1, 3) →
/// Softmax(axis 1) → Conv`) then has one transpose before a last-axis softmax instead of four,
/// and a softmax over a conv output's channels (axis 1, NCHW) needs none, since the NHWC data has
/// its channels last already.
fn softmax_axis_last(g: &mut Graph) {
    if g.opset() < 13 {
        // Opsets 1-12 flatten the input at `axis` (the rule reshapes it to 2-D): not a permute.
        return;
    }
    let mut i = 0;
    while i < g.nodes.len() {
        let n = &g.nodes[i];
        let (Some(x), Some(y)) = (n.input(0), n.output(0)) else {
            i += 1;
            continue;
        };
        let r = g.shape(x).len();
        let axis = match n.op_type.as_str() {
            "Softmax" | "LogSoftmax" if known(g, n) && n.outputs.len() == 1 && r >= 2 => n
                .attr_i("axis", -1)
                .ok()
                .and_then(|a| crate::ir::attr::norm_axis(n, "axis", a, r).ok()),
            _ => None,
        };
        let Some(axis) = axis.filter(|&a| a != r - 1) else {
            i += 1;
            continue;
        };
        let mut perm: Vec<usize> = (0..r).filter(|&a| a != axis).collect();
        perm.push(axis);
        let (mut t, moved) = transpose_node(g, "last", x, &perm);
        t.name = g.unique_node_name(&t.name);
        let shape = g.shape(moved).to_vec();
        let n = &mut g.nodes[i];
        n.inputs[0] = Some(moved);
        n.attrs.insert("axis".into(), Attr::Int(r as i64 - 1));
        g.nodes.insert(i, t);
        transpose_output(g, i + 1, y, shape, &inverse(&perm));
        i += 3;
    }
}

fn optimize(g: &mut Graph) {
    // Each rewrite moves a transpose strictly downstream or removes one, so this terminates;
    // the bound is a guard against a bug turning into a hang.
    for _ in 0..(g.nodes.len() + 1) * 8 {
        if !(compose_step(g)
            || sink_step(g)
            || sink_axes_step(g)
            || sink_reshape_step(g)
            || regroup_reshape_step(g))
        {
            break;
        }
    }
    transposes_to_reshapes(g);
}

/// Transpose(Transpose(x, p1), p2) → Transpose(x, p1∘p2), dropped when it is the identity.
fn compose_step(g: &mut Graph) -> bool {
    let producers = g.producers();
    for i in 0..g.nodes.len() {
        let Some(p2) = perm_of(&g.nodes[i]) else {
            continue;
        };
        let Some(x) = g.nodes[i].input(0) else {
            continue;
        };
        let Some(pi) = producers[x] else { continue };
        let Some(p1) = perm_of(&g.nodes[pi]) else {
            continue;
        };
        let Some(src) = g.nodes[pi].input(0) else {
            continue;
        };
        if p1.len() != p2.len() {
            continue;
        }
        let p: Vec<usize> = p2.iter().map(|&k| p1[k]).collect();
        let out = g.nodes[i].output(0).expect("transpose has an output");
        if p.iter().enumerate().all(|(k, &v)| k == v) {
            if g.bypass(i, src, out) {
                return true;
            }
            continue;
        }
        let n = &mut g.nodes[i];
        n.inputs[0] = Some(src);
        n.attrs.insert(
            "perm".into(),
            Attr::Ints(p.iter().map(|&x| x as i64).collect()),
        );
        return true;
    }
    false
}

/// Agnostic(T_p(a), T_p(b) | const | scalar) → T_p(Agnostic(a, b', ...)).
fn sink_step(g: &mut Graph) -> bool {
    let producers = g.producers();
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        if !matches!(layout(&n.op_type), Some(Layout::Agnostic))
            || !known(g, n)
            || n.outputs.len() != 1
        {
            continue;
        }
        let Some(y) = n.output(0) else { continue };
        let r = g.shape(y).len();
        let mut perm: Option<Vec<usize>> = None;
        let mut ok = true;
        for v in n.inputs.iter().flatten() {
            if let Some(pi) = producers[*v] {
                if let Some(p) = perm_of(&g.nodes[pi]) {
                    if p.len() == r && perm.as_ref().is_none_or_eq(&p) {
                        perm = Some(p);
                        continue;
                    }
                }
            }
            let s = g.shape(*v);
            let scalar = s.iter().product::<usize>() == 1;
            if !(scalar || (g.konst(*v).is_some() && s.len() <= r) || s.len() == r) {
                ok = false;
                break;
            }
        }
        let Some(p) = perm else { continue };
        if !ok {
            continue;
        }
        let inv = inverse(&p);
        // A full-rank activation not coming from T_p can join only if its T_inv(p) already
        // exists (e.g. a residual input that also feeds a conv); a new transpose would cost
        // as much as it saves.
        let mut reuse: Vec<(ValueId, ValueId)> = Vec::new();
        for v in g.nodes[i].inputs.iter().flatten() {
            let from_t =
                producers[*v].is_some_and(|pi| perm_of(&g.nodes[pi]).as_deref() == Some(&p[..]));
            let s = g.shape(*v);
            if from_t || g.konst(*v).is_some() || s.iter().product::<usize>() == 1 {
                continue;
            }
            let existing = g
                .nodes
                .iter()
                .find(|t| t.input(0) == Some(*v) && perm_of(t).as_deref() == Some(&inv[..]));
            match existing.and_then(|t| t.output(0)) {
                Some(o) => reuse.push((*v, o)),
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            continue;
        }
        if !reuse.is_empty() {
            // Only worth it when one of the T_p inputs dies; otherwise this undoes the sink
            // that created the reused transpose's consumer and the two ping-pong.
            let uses = g.use_counts();
            let dies = g.nodes[i].inputs.iter().flatten().any(|v| {
                uses[*v] == 1
                    && producers[*v]
                        .is_some_and(|pi| perm_of(&g.nodes[pi]).as_deref() == Some(&p[..]))
            });
            if !dies {
                continue;
            }
        }
        let mut new_inputs = Vec::new();
        for slot in g.nodes[i].inputs.clone() {
            let Some(v) = slot else {
                new_inputs.push(None);
                continue;
            };
            if let Some(pi) = producers[v] {
                if perm_of(&g.nodes[pi]).as_deref() == Some(&p[..]) {
                    new_inputs.push(g.nodes[pi].input(0));
                    continue;
                }
            }
            if let Some(t) = g.konst(v).cloned() {
                if t.numel() == 1 && t.shape.len() <= 1 {
                    new_inputs.push(Some(v));
                    continue;
                }
                let mut s = vec![1; r - t.shape.len()];
                s.extend_from_slice(&t.shape);
                let pad = r - t.shape.len();
                let tt = t.with_shape(s).transpose(&inv);
                let name = format!("{}_t", g.value(v).name);
                let c = g.add_const(&name, tt);
                g.values[c].quant = g.values[v].quant.as_ref().map(|q| {
                    let mut q = q.clone();
                    q.axis = q.axis.map(|a| a + pad);
                    q.permuted(&inv)
                });
                new_inputs.push(Some(c));
                continue;
            }
            match reuse.iter().find(|(a, _)| *a == v) {
                Some((_, o)) => new_inputs.push(Some(*o)),
                None => new_inputs.push(Some(v)),
            }
        }
        let yshape: Vec<usize> = inv.iter().map(|&k| g.shape(y)[k]).collect();
        g.nodes[i].inputs = new_inputs;
        transpose_output(g, i, y, yshape, &p);
        return true;
    }
    false
}

/// Reduce(T_p(x), axes) → T_p'(Reduce(x, p[axes])), Concat(T_p(a), T_p(b) | const, axis) →
/// T_p(Concat(a, b', p[axis])), Slice(T_p(x), axes) → T_p(Slice(x, p[axes])). A reduction's
/// output is smaller than its input, so the transpose that comes out is never bigger than the
/// one that went in; with keepdims and reduced H, W it only moves size-1 dims and becomes a
/// reshape. Without keepdims the kept dims may come out in order already (NHWC mean over H, W →
/// [N, C]), and then no transpose is left.
fn sink_axes_step(g: &mut Graph) -> bool {
    let producers = g.producers();
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let Some(Layout::Axes(axes_of)) = layout(&n.op_type) else {
            continue;
        };
        if !known(g, n) || n.outputs.len() != 1 {
            continue;
        }
        let (Some(x0), Some(y)) = (n.input(0), n.output(0)) else {
            continue;
        };
        let r = g.shape(x0).len();
        let Some(kind) = axes_of(g, n, r) else {
            continue;
        };
        let from_t = |g: &Graph, v: ValueId| {
            producers[v].and_then(|pi| {
                perm_of(&g.nodes[pi])
                    .filter(|p| p.len() == r)
                    .map(|p| (pi, p))
            })
        };
        let Some((_, p)) = from_t(g, x0) else {
            continue;
        };
        let inv = inverse(&p);
        // The data inputs: the reduction's first one; all of Concat's, each from the same T_p
        // or a constant of the same rank (transposed here).
        let data = match kind {
            AxesOp::Reduce { .. } | AxesOp::Slice { .. } => 1,
            AxesOp::Concat { .. } => n.inputs.len(),
        };
        let ok = n.inputs[..data].iter().all(|slot| {
            slot.is_some_and(|v| {
                from_t(g, v).is_some_and(|(_, q)| q == p)
                    || g.konst(v).is_some_and(|t| t.shape.len() == r)
            })
        });
        if !ok {
            continue;
        }
        let mut inputs = g.nodes[i].inputs.clone();
        for slot in inputs[..data].iter_mut() {
            let v = slot.expect("checked above");
            if let Some((pi, _)) = from_t(g, v) {
                *slot = g.nodes[pi].input(0);
                continue;
            }
            let t = g.konst(v).expect("checked above").transpose(&inv);
            let c = g.add_const(&format!("{}_t", g.value(v).name), t);
            g.values[c].quant = g.values[v].quant.as_ref().map(|q| q.permuted(&inv));
            *slot = Some(c);
        }
        let xs = g.shape(inputs[0].expect("data input")).to_vec();
        let ys = g.shape(y).to_vec();
        // The rewritten node's output shape and the perm that takes it back to `y`'s layout.
        let (y2shape, post): (Vec<usize>, Vec<usize>) = match kind {
            AxesOp::Concat { axis } => {
                let n = &mut g.nodes[i];
                n.attrs.insert("axis".into(), Attr::Int(p[axis] as i64));
                (inv.iter().map(|&k| ys[k]).collect(), p.clone())
            }
            AxesOp::Slice { ranges } => {
                let name = g.nodes[i].name.clone();
                let mut ints = |part: &str, v: Vec<i64>| {
                    Some(g.add_const(
                        &format!("{name}_{part}"),
                        Tensor::from_i64(vec![v.len()], &v),
                    ))
                };
                // A clamped end of -1 (a negative step down to index 0) written back as -1
                // would mean the last index: i64::MIN clamps to the same place.
                let ends = ranges
                    .iter()
                    .map(|&(_, _, e, st)| if st < 0 && e < 0 { i64::MIN } else { e })
                    .collect();
                inputs = vec![
                    inputs[0],
                    ints("starts", ranges.iter().map(|r| r.1).collect()),
                    ints("ends", ends),
                    ints("axes", ranges.iter().map(|r| p[r.0] as i64).collect()),
                    ints("steps", ranges.iter().map(|r| r.3).collect()),
                ];
                (inv.iter().map(|&k| ys[k]).collect(), p.clone())
            }
            AxesOp::Reduce { axes, keep } => {
                let mut axes2: Vec<usize> = axes.iter().map(|&a| p[a]).collect();
                axes2.sort_unstable();
                let written: Vec<i64> = axes2.iter().map(|&a| a as i64).collect();
                if axes_are_input(g, &g.nodes[i]) {
                    if inputs.len() > 1 && inputs[1].is_some() {
                        let c = g.add_const(
                            &format!("{}_axes", g.nodes[i].name),
                            Tensor::from_i64(vec![written.len()], &written),
                        );
                        inputs[1] = Some(c);
                    }
                } else if g.nodes[i].attrs.contains_key("axes") {
                    g.nodes[i].attrs.insert("axes".into(), Attr::Ints(written));
                }
                // (No axes given: all are reduced, in any layout.)
                if keep {
                    let s = (0..r)
                        .map(|k| if axes2.contains(&k) { 1 } else { xs[k] })
                        .collect();
                    (s, p.clone())
                } else {
                    let kept_x: Vec<usize> = (0..r).filter(|k| !axes2.contains(k)).collect();
                    let post = (0..r)
                        .filter(|k| !axes.contains(k))
                        .map(|k| kept_x.iter().position(|&d| d == p[k]).expect("kept dim"))
                        .collect();
                    (kept_x.iter().map(|&k| xs[k]).collect(), post)
                }
            }
        };
        g.nodes[i].inputs = inputs;
        transpose_output(g, i, y, y2shape, &post);
        return true;
    }
    false
}

/// Node `i`, rewritten to compute `y` transposed by the inverse of `post` (shape `shape`), gets
/// a new output value and the Transpose `post` from it to `y` right after it, which keeps the
/// node list topological. Nothing to add when `post` is the identity.
fn transpose_output(g: &mut Graph, i: NodeId, y: ValueId, shape: Vec<usize>, post: &[usize]) {
    if post.iter().enumerate().all(|(k, &d)| k == d) {
        return;
    }
    let back = inverse(post);
    let ydt = g.dtype(y);
    let y2 = g.add_typed(&format!("{}_pre", g.value(y).name), ydt, shape);
    g.values[y2].quant = g.values[y].quant.as_ref().map(|q| q.permuted(&back));
    g.values[y2].origin = g.values[y].origin.as_ref().map(|o| o.permuted(&back));
    g.nodes[i].outputs = vec![Some(y2)];
    let mut t = Node::new(format!("{}_post", g.nodes[i].name), "Transpose")
        .with_attr("perm", Attr::Ints(post.iter().map(|&x| x as i64).collect()));
    t.inputs = vec![Some(y2)];
    t.outputs = vec![Some(y)];
    t.name = g.unique_node_name(&t.name);
    g.nodes.insert(i + 1, t);
}

/// Reshape(T_p(x)) → T_q(Reshape'(x)) when the reshape only inserts or removes size-1 dims
/// (a Conv1d's squeeze of its unit H, the unsqueeze back before the next conv). The transpose
/// keeps its size and moves on towards the ops it sinks through and the inverse it cancels
/// with: silero-vad's STFT (a Conv1d whose output is sliced into real and imaginary halves,
/// squared, added and square-rooted, then fed to the next Conv1d) then runs channel-last as in
/// ONNX Runtime's graph, instead of over `[1, 129, 3]` tensors whose last dim is 3 (10x to 200x
/// the cycles per op on the HTP). `Reshape'` keeps `y`'s size-1 dims where `y` has them and
/// lays the others out in `x`'s order. Only when `T_p` has no other reader, so that no
/// transpose is added.
fn sink_reshape_step(g: &mut Graph) -> bool {
    let producers = g.producers();
    let uses = g.use_counts();
    for i in 0..g.nodes.len() {
        let Some(TransposedReshape { x, p, t, y }) = transposed_reshape(g, &producers, &uses, i)
        else {
            continue;
        };
        let (xs, ts, ys) = (g.shape(x), g.shape(t), g.shape(y).to_vec());
        if xs.contains(&0) || ys.contains(&0) {
            continue;
        }
        // The dims other than 1, in `t`'s (and `y`'s) order: their axis in `x`, and in `y`.
        let big_x: Vec<usize> = (0..p.len()).filter(|&k| ts[k] != 1).map(|k| p[k]).collect();
        let big_y: Vec<usize> = (0..ys.len()).filter(|&k| ys[k] != 1).collect();
        if big_x.len() != big_y.len() || big_x.iter().zip(&big_y).any(|(&a, &b)| xs[a] != ys[b]) {
            continue;
        }
        let mut in_x_order: Vec<usize> = (0..big_x.len()).collect();
        in_x_order.sort_by_key(|&k| big_x[k]);
        // z = Reshape'(x), y = T_q(z): y's dim j is z's dim q[j].
        let mut zs = ys.clone();
        let mut q: Vec<usize> = (0..ys.len()).collect();
        for (r, &k) in in_x_order.iter().enumerate() {
            zs[big_y[r]] = ys[big_y[k]];
            q[big_y[k]] = big_y[r];
        }
        reshape_then_transpose(g, i, x, y, zs, &q);
        return true;
    }
    false
}

/// A reshape node `i` (y = Reshape(t)) of a Transpose's output `t = T_p(x)` that nothing else
/// reads, all shapes known: what the reshape-sinking steps rewrite.
struct TransposedReshape {
    x: ValueId,
    p: Vec<usize>,
    t: ValueId,
    y: ValueId,
}

fn transposed_reshape(
    g: &Graph,
    producers: &[Option<NodeId>],
    uses: &[usize],
    i: NodeId,
) -> Option<TransposedReshape> {
    let n = &g.nodes[i];
    if !n.only_reshapes() || !known(g, n) {
        return None;
    }
    let (t, y) = (n.input(0)?, n.output(0)?);
    let pi = producers[t]?;
    let (p, x) = (perm_of(&g.nodes[pi])?, g.nodes[pi].input(0)?);
    if uses[t] != 1 || !g.values[x].known || g.shape(x).len() != p.len() {
        return None;
    }
    Some(TransposedReshape { x, p, t, y })
}

/// Node `i` becomes `Reshape(src)` to shape `zs`, followed by the Transpose `q` to its old
/// output `y` (see [`transpose_output`]).
fn reshape_then_transpose(
    g: &mut Graph,
    i: NodeId,
    src: ValueId,
    y: ValueId,
    zs: Vec<usize>,
    q: &[usize],
) {
    let dims: Vec<i64> = zs.iter().map(|&d| d as i64).collect();
    let shape = g.add_const(
        &format!("{}_shape", g.nodes[i].name),
        Tensor::from_i64(vec![dims.len()], &dims),
    );
    let n = &mut g.nodes[i];
    n.op_type = "Reshape".into();
    n.attrs.clear();
    n.inputs = vec![Some(src), Some(shape)];
    transpose_output(g, i, y, zs, q);
}

/// Reshape(T_p(x)) → T_q(Reshape'(T_inner(x))) for a reshape that splits or merges dims, when
/// each group of `t`'s dims that the reshape splits or merges is a block of adjacent dims of `x`
/// too. The transpose `q` then permutes whole groups and moves on (to cancel with the NHWC
/// conversion of the next conv, say); `inner` is left only where `p` reorders dims inside a group
/// that is merged, which is the data movement the model asked for. ShuffleNet's channel shuffle
/// after a conv (`Reshape [N, g, C/g, H, W] → Transpose(0, 2, 1, 3, 4) → Reshape [N, C, H, W]`)
/// so becomes one small transpose of NHWC data instead of three (two of them the full
/// activation between NHWC and NCHW), and a ViT patch embedding's `flatten(2).transpose(1, 2)`
/// after its conv needs none. Only when `T_p` has no other reader, `x` has no per-axis encoding,
/// and `q` is not the identity (else nothing would move).
fn regroup_reshape_step(g: &mut Graph) -> bool {
    let producers = g.producers();
    let uses = g.use_counts();
    for i in 0..g.nodes.len() {
        let Some(TransposedReshape { x, p, t, y }) = transposed_reshape(g, &producers, &uses, i)
        else {
            continue;
        };
        if g.values[x].quant.as_ref().is_some_and(|q| q.axis.is_some()) {
            continue;
        }
        let Some(groups) = reshape_groups(g.shape(t), g.shape(y)) else {
            continue;
        };
        // Each group's dims of x, in t's order; they must be adjacent in x.
        let x_dims: Vec<Vec<usize>> = groups
            .iter()
            .map(|(tr, _)| tr.clone().map(|k| p[k]).collect())
            .collect();
        let adjacent = |d: &Vec<usize>| {
            let (lo, hi) = (d.iter().min(), d.iter().max());
            matches!((lo, hi), (Some(lo), Some(hi)) if hi - lo + 1 == d.len())
        };
        if !x_dims.iter().all(adjacent) {
            continue;
        }
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by_key(|&k| x_dims[k].iter().min().copied());
        let inner: Vec<usize> = order.iter().flat_map(|&k| x_dims[k].clone()).collect();
        // z holds y's groups in x's order; y's dim j is z's dim q[j].
        let ys = g.shape(y).to_vec();
        let mut zs = Vec::with_capacity(ys.len());
        let mut q = vec![0; ys.len()];
        for &k in &order {
            for j in groups[k].1.clone() {
                q[j] = zs.len();
                zs.push(ys[j]);
            }
        }
        if q.iter().enumerate().all(|(k, &d)| k == d) {
            continue;
        }
        let (mut src, mut at) = (x, i);
        if inner.iter().enumerate().any(|(k, &d)| k != d) {
            let (mut tn, u) = transpose_node(g, "regroup", x, &inner);
            tn.name = g.unique_node_name(&format!("{}_regroup", g.nodes[i].name));
            g.nodes.insert(i, tn);
            (src, at) = (u, i + 1);
        }
        reshape_then_transpose(g, at, src, y, zs, &q);
        return true;
    }
    false
}

/// The reshape of shape `from` to `to` as groups of adjacent dims with equal products: each
/// group of `from` dims becomes the paired group of `to` dims. `None` when a group would be
/// empty on one side (trailing size-1 dims) or the sizes do not match.
fn reshape_groups(
    from: &[usize],
    to: &[usize],
) -> Option<Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>> {
    let (mut i, mut j) = (0, 0);
    let mut groups = Vec::new();
    while i < from.len() || j < to.len() {
        let (gi, gj) = (i, j);
        let (mut a, mut b) = (*from.get(i)?, *to.get(j)?);
        (i, j) = (i + 1, j + 1);
        while a != b {
            if a < b {
                a *= *from.get(i)?;
                i += 1;
            } else {
                b *= *to.get(j)?;
                j += 1;
            }
        }
        groups.push((gi..i, gj..j));
    }
    Some(groups)
}

trait PermEq {
    fn is_none_or_eq(&self, p: &[usize]) -> bool;
}
impl PermEq for Option<&Vec<usize>> {
    fn is_none_or_eq(&self, p: &[usize]) -> bool {
        match self {
            None => true,
            Some(q) => q.as_slice() == p,
        }
    }
}

/// A transpose that only moves size-1 dims is a reshape (no data movement).
fn transposes_to_reshapes(g: &mut Graph) {
    for i in 0..g.nodes.len() {
        let Some(p) = perm_of(&g.nodes[i]) else {
            continue;
        };
        let Some(x) = g.nodes[i].input(0) else {
            continue;
        };
        let s = g.shape(x);
        if !g.values[x].known || s.len() != p.len() || p.iter().any(|&k| k >= s.len()) {
            continue;
        }
        let moved: Vec<usize> = p.iter().copied().filter(|&k| s[k] != 1).collect();
        if moved.windows(2).all(|w| w[0] < w[1]) {
            let out = g.nodes[i].output(0).expect("transpose has an output");
            let shape: Vec<i64> = g.shape(out).iter().map(|&d| d as i64).collect();
            let c = g.add_const(
                &format!("{}_shape", g.value(out).name),
                crate::ir::tensor::Tensor::from_i64(vec![shape.len()], &shape),
            );
            let n = &mut g.nodes[i];
            n.op_type = "Reshape".into();
            n.attrs.clear();
            n.inputs.push(Some(c));
        }
    }
}

pub fn node_index(g: &Graph, name: &str) -> Option<NodeId> {
    g.nodes.iter().position(|n| n.name == name)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::testing::{rand_f32, ModelBuilder, A};
    use crate::{passes, Backend, LowerOptions};

    fn prepared(b: &ModelBuilder) -> String {
        let m = b.load();
        let p = passes::prepare(
            &m,
            &LowerOptions {
                backend: Backend::Htp,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(p.node_errors.is_empty(), "{:?}", p.node_errors);
        p.graph.dump()
    }

    fn conv_w(seed: u64, o: usize, i: usize) -> Tensor {
        Tensor::from_f32(vec![o, i, 3, 3], &rand_f32(seed, o * i * 9))
    }

    #[test]
    fn conv_relu_conv_has_transposes_only_at_io() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 8, 8])
            .init("w1", conv_w(1, 4, 3))
            .init("w2", conv_w(2, 4, 4))
            .node(
                "Conv",
                &["x", "w1"],
                &["c1"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .node("Relu", &["c1"], &["r1"], &[])
            .node(
                "Conv",
                &["r1", "w2"],
                &["c2"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .node("Add", &["c2", "r1"], &["y"], &[])
            .output("y");
        let d = prepared(&b);
        assert_eq!(d.matches("Transpose(").count(), 2, "{d}");
        assert!(
            d.starts_with("Transpose(x) perm=[0, 2, 3, 1] -> x_nhwc:f32[1, 8, 8, 3]"),
            "{d}"
        );
        assert!(d.contains("Relu(c1_nhwc) -> r1_pre:f32[1, 8, 8, 4]"), "{d}");
        assert!(
            d.contains("Add(c2_nhwc, r1_pre) -> y_pre:f32[1, 8, 8, 4]"),
            "{d}"
        );
        assert!(
            d.contains("Transpose(y_pre) perm=[0, 3, 1, 2] -> y:f32[1, 4, 8, 8]"),
            "{d}"
        );
    }

    #[test]
    fn constant_operand_is_transposed_statically() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 4, 4])
            .init("w", conv_w(1, 2, 3))
            .init("slope", Tensor::from_f32(vec![2, 1, 1], &[0.1, 0.2]))
            .node(
                "Conv",
                &["x", "w"],
                &["c"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .node("PRelu", &["c", "slope"], &["p"], &[])
            .node(
                "MaxPool",
                &["p"],
                &["y"],
                &[
                    ("kernel_shape", A::Is(vec![2, 2])),
                    ("strides", A::Is(vec![2, 2])),
                ],
            )
            .output("y");
        let d = prepared(&b);
        assert_eq!(d.matches("Transpose(").count(), 2, "{d}");
        assert!(
            d.contains("PRelu(c_nhwc, slope_t) -> p_pre:f32[1, 4, 4, 2]"),
            "{d}"
        );
    }

    #[test]
    fn global_pool_then_flatten_uses_reshape() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 4, 4])
            .init("w", conv_w(1, 2, 3))
            .node("Conv", &["x", "w"], &["c"], &[])
            .node("GlobalAveragePool", &["c"], &["g"], &[])
            .node("Flatten", &["g"], &["y"], &[])
            .output("y");
        let d = prepared(&b);
        assert_eq!(d.matches("Transpose(").count(), 1, "{d}");
        // The NCHW transpose moved only size-1 dims and is gone into the Flatten.
        assert!(
            d.contains("Reshape(g_nhwc, Flatten_2_shape) -> y:f32[1, 2]"),
            "{d}"
        );
    }

    fn conv1x1(seed: u64, o: usize, i: usize) -> Tensor {
        Tensor::from_f32(vec![o, i, 1, 1], &rand_f32(seed, o * i))
    }

    /// Conv → squeeze-and-excitation as timm writes it (`x.mean((2, 3), keepdim=True)` into
    /// two 1x1 convs) → Mul, at `opset` (axes an attribute before 18, an input from 18).
    fn se_block(opset: i64, op: &str) -> ModelBuilder {
        let mut b = ModelBuilder::new(opset)
            .input("x", DType::F32, &[1, 3, 8, 8])
            .init("w", conv_w(1, 8, 3))
            .init("w1", conv1x1(2, 2, 8))
            .init("w2", conv1x1(3, 8, 2))
            .node(
                "Conv",
                &["x", "w"],
                &["c"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            );
        let axes_input = opset >= 18 || (op == "ReduceSum" && opset >= 13);
        b = if axes_input {
            b.init("ax", Tensor::from_i64(vec![2], &[2, 3]))
                .node(op, &["c", "ax"], &["m"], &[])
        } else {
            b.node(op, &["c"], &["m"], &[("axes", A::Is(vec![2, 3]))])
        };
        b.node("Conv", &["m", "w1"], &["r"], &[])
            .node("Relu", &["r"], &["rr"], &[])
            .node("Conv", &["rr", "w2"], &["e"], &[])
            .node("Sigmoid", &["e"], &["s"], &[])
            .node("Mul", &["c", "s"], &["y"], &[])
            .output("y")
    }

    #[test]
    fn se_squeeze_stays_nhwc() {
        for (opset, op) in [
            (17, "ReduceMean"),
            (18, "ReduceMean"),
            (17, "ReduceMax"),
            (12, "ReduceSum"),
            (13, "ReduceSum"),
        ] {
            let d = prepared(&se_block(opset, op));
            // Only the graph input's and output's transposes: none around the squeeze, the
            // 1x1 convs or the excitation's Mul.
            assert_eq!(
                d.matches("Transpose(").count(),
                2,
                "{op} opset {opset}: {d}"
            );
            assert!(
                d.contains(&format!("{op}(c_nhwc")),
                "{op} opset {opset}: {d}"
            );
            assert!(
                d.contains("Mul(c_nhwc, s_pre) -> y_pre:f32[1, 8, 8, 8]"),
                "{op} opset {opset}: {d}"
            );
        }
    }

    #[test]
    fn se_squeeze_lowers_to_an_nhwc_spatial_reduce() {
        // The QNN op GlobalAveragePool lowers to: ReduceMean over axes 1, 2 of the NHWC data.
        for opset in [17, 18] {
            let d = crate::ops::test_util::lower(&se_block(opset, "ReduceMean")).dump();
            assert!(
                d.contains("ReduceMean(c_nhwc:f32[1, 8, 8, 8]) axes=u32[2]{1,2} keep_dims=true -> m_pre:f32[1, 1, 1, 8]"),
                "opset {opset}: {d}"
            );
            assert_eq!(d.matches("Transpose(").count(), 2, "opset {opset}: {d}");
        }
    }

    #[test]
    fn spatial_mean_without_keepdims_needs_no_transpose() {
        // A classifier head's `x.mean((2, 3))`: the NHWC mean over H, W is [N, C] already.
        let b = ModelBuilder::new(18)
            .input("x", DType::F32, &[1, 3, 8, 8])
            .init("w", conv_w(1, 8, 3))
            .init("ax", Tensor::from_i64(vec![2], &[-2, -1]))
            .node("Conv", &["x", "w"], &["c"], &[])
            .node("ReduceMean", &["c", "ax"], &["y"], &[("keepdims", A::I(0))])
            .output("y");
        let d = prepared(&b);
        assert_eq!(d.matches("Transpose(").count(), 1, "{d}");
        assert!(d.contains("ReduceMean(c_nhwc, "), "{d}");
        assert!(d.contains("-> y:f32[1, 8]"), "{d}");
    }

    #[test]
    fn reduce_without_keepdims_keeps_the_order_of_the_kept_dims() {
        // Mean over W alone leaves [N, C, H]; from NHWC data that is [N, H, C] transposed.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 6, 8])
            .init("w", conv_w(1, 4, 3))
            .node("Conv", &["x", "w"], &["c"], &[])
            .node(
                "ReduceMean",
                &["c"],
                &["y"],
                &[("axes", A::Is(vec![3])), ("keepdims", A::I(0))],
            )
            .output("y");
        let d = prepared(&b);
        assert!(
            d.contains("ReduceMean(c_nhwc) axes=[2] keepdims=0 -> y_pre:f32[1, 4, 4]"),
            "{d}"
        );
        assert!(
            d.contains("Transpose(y_pre) perm=[0, 2, 1] -> y:f32[1, 4, 4]"),
            "{d}"
        );
    }

    #[test]
    fn channel_reduce_into_conv_stays_nhwc() {
        // CBAM-style spatial attention: max over channels, keepdims, into a conv.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 8, 8])
            .init("w", conv_w(1, 4, 3))
            .init("w1", conv_w(2, 1, 1))
            .node("Conv", &["x", "w"], &["c"], &[])
            .node("ReduceMax", &["c"], &["m"], &[("axes", A::Is(vec![1]))])
            .node("Conv", &["m", "w1"], &["y"], &[])
            .output("y");
        let d = prepared(&b);
        assert_eq!(d.matches("Transpose(").count(), 1, "{d}");
        assert!(
            d.contains("ReduceMax(c_nhwc) axes=[3] -> m_pre:f32[1, 6, 6, 1]"),
            "{d}"
        );
    }

    #[test]
    fn concat_of_conv_outputs_stays_nhwc() {
        // A DenseNet layer: the conv outputs so far, joined on channels, into the next conv.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 8, 8])
            .init("w1", conv_w(1, 4, 3))
            .init("w2", conv_w(2, 2, 4))
            .init("w3", conv_w(3, 4, 6))
            .node(
                "Conv",
                &["x", "w1"],
                &["a"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .node(
                "Conv",
                &["a", "w2"],
                &["b"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .node("Concat", &["a", "b"], &["cat"], &[("axis", A::I(-3))])
            .node("Relu", &["cat"], &["r"], &[])
            .node("Conv", &["r", "w3"], &["y"], &[])
            .output("y");
        let d = prepared(&b);
        assert_eq!(d.matches("Transpose(").count(), 2, "{d}");
        assert!(
            d.contains("Concat(a_nhwc, b_nhwc) axis=3 -> cat_pre:f32[1, 8, 8, 6]"),
            "{d}"
        );
    }

    #[test]
    fn concat_with_a_graph_input_is_left_in_nchw() {
        // An operand that is neither transposed nor constant would need a transpose of its
        // own: the concat stays where it is.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 8, 8])
            .input("z", DType::F32, &[1, 2, 8, 8])
            .init("w", conv_w(1, 4, 3))
            .node(
                "Conv",
                &["x", "w"],
                &["a"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .node("Concat", &["a", "z"], &["y"], &[("axis", A::I(1))])
            .output("y");
        let d = prepared(&b);
        assert!(
            d.contains("Concat(a, z) axis=1 -> y:f32[1, 6, 8, 8]"),
            "{d}"
        );
    }

    /// Conv1d → Slice halves of its channels → Pow → Add → Sqrt → Conv1d (silero-vad's STFT
    /// magnitude), as the plan that lowering emits.
    fn stft_magnitude(second_reader: bool) -> String {
        let i64s = |v: &[i64]| Tensor::from_i64(vec![v.len()], v);
        let mut b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 1, 64])
            .init("w1", Tensor::from_f32(vec![8, 1, 16], &rand_f32(1, 128)))
            .init("w2", Tensor::from_f32(vec![3, 4, 3], &rand_f32(2, 36)))
            .init("s0", i64s(&[0]))
            .init("s4", i64s(&[4]))
            .init("s8", i64s(&[8]))
            .init("ax", i64s(&[1]))
            .init("two", Tensor::scalar_f32(2.0))
            .node("Conv", &["x", "w1"], &["c"], &[("strides", A::Is(vec![8]))])
            .node("Slice", &["c", "s0", "s4", "ax"], &["re"], &[])
            .node("Slice", &["c", "s4", "s8", "ax"], &["im"], &[])
            .node("Pow", &["re", "two"], &["re2"], &[])
            .node("Pow", &["im", "two"], &["im2"], &[])
            .node("Add", &["re2", "im2"], &["p"], &[])
            .node("Sqrt", &["p"], &["m"], &[])
            .node("Conv", &["m", "w2"], &["y"], &[("pads", A::Is(vec![1, 1]))])
            .output("y");
        if second_reader {
            // The NCW conv output is also a graph output: its transpose stays.
            b = b.output("c");
        }
        crate::ops::test_util::lower_with(&b, &LowerOptions::default()).dump()
    }

    #[test]
    fn conv1d_output_stays_channel_last_through_slices_and_elementwise() {
        let d = stft_magnitude(false);
        // Only the graph output's transpose back to NCW is left.
        assert_eq!(d.matches("Transpose(").count(), 1, "{d}");
        assert!(
            d.contains("ElementWiseAdd(re2_pre:f32[1, 7, 4], im2_pre:f32[1, 7, 4])"),
            "{d}"
        );
        assert!(
            d.contains("StridedSlice(c_pre:f32[1, 7, 8]) ranges=i32[3, 3]{0,1,1,0,7,1,4,8,1}"),
            "{d}"
        );
        assert!(
            d.contains("Transpose(y_pre:f32[1, 7, 3]) perm=u32[3]{0,2,1} -> y:f32[1, 3, 7]"),
            "{d}"
        );
    }

    /// Conv → channel shuffle (ShuffleNet's `view(N, g, C/g, H, W).transpose(1, 2).view(N, C, H,
    /// W)`, groups 2) → Conv.
    fn channel_shuffle() -> ModelBuilder {
        let i64s = |v: &[i64]| Tensor::from_i64(vec![v.len()], v);
        ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 6, 5])
            .init("w1", conv_w(1, 8, 3))
            .init("w2", conv_w(2, 4, 8))
            .init("split", i64s(&[1, 2, 4, 6, 5]))
            .init("merged", i64s(&[1, 8, 6, 5]))
            .node(
                "Conv",
                &["x", "w1"],
                &["c"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .node("Reshape", &["c", "split"], &["r1"], &[])
            .node(
                "Transpose",
                &["r1"],
                &["t"],
                &[("perm", A::Is(vec![0, 2, 1, 3, 4]))],
            )
            .node("Reshape", &["t", "merged"], &["s"], &[])
            .node(
                "Conv",
                &["s", "w2"],
                &["y"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .output("y")
    }

    #[test]
    fn channel_shuffle_between_convs_is_one_transpose_of_nhwc_data() {
        let d = prepared(&channel_shuffle());
        // The input's and the output's layout transposes, and the shuffle itself: the groups
        // axis swapped with the channels of a group, in NHWC.
        assert_eq!(d.matches("Transpose(").count(), 3, "{d}");
        assert!(d.contains("perm=[0, 1, 2, 4, 3] -> "), "{d}");
        assert!(d.contains(":f32[1, 6, 5, 2, 4]"), "{d}");
        assert!(d.contains(":f32[1, 6, 5, 4, 2]"), "{d}");
    }

    #[test]
    fn reshape_merging_dims_apart_in_nhwc_keeps_its_transpose() {
        // [N, C, H, W] -> [N, C * H, W]: C and H are not adjacent in NHWC.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 8, 8])
            .init("w", conv_w(1, 4, 3))
            .init("shape", Tensor::from_i64(vec![3], &[1, 32, 8]))
            .node(
                "Conv",
                &["x", "w"],
                &["c"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .node("Reshape", &["c", "shape"], &["y"], &[])
            .output("y");
        let d = prepared(&b);
        assert!(
            d.contains("Transpose(c_nhwc) perm=[0, 3, 1, 2] -> c:f32[1, 4, 8, 8]"),
            "{d}"
        );
        assert!(d.contains("Reshape(c, "), "{d}");
    }

    #[test]
    fn reshape_keeps_a_transpose_that_has_another_reader() {
        // Sinking past the squeeze would leave the original transpose for `c` and add one.
        let d = stft_magnitude(true);
        assert!(d.contains("-> c:f32[1, 8, 7]"), "{d}");
        assert_eq!(d.matches("Transpose(").count(), 2, "{d}");
    }

    #[test]
    fn malformed_perm_and_unknown_shape_are_left_to_the_rules() {
        // A perm that is not a permutation, composed with another transpose, and a transpose
        // of a value whose shape inference failed: no panic, the rules report them.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .node("Transpose", &["x"], &["t"], &[("perm", A::Is(vec![1, 5]))])
            .node("Transpose", &["t"], &["y"], &[("perm", A::Is(vec![1, 0]))])
            .output("y");
        let m = b.load();
        let p = passes::prepare(&m, &LowerOptions::default()).unwrap();
        assert!(!p.node_errors.is_empty());
        assert!(crate::lower(m, &LowerOptions::default()).is_err());
    }

    /// YOLOv8's DFL head: Reshape → Transpose(0, 2, 1, 3) → Softmax(axis 1) → 1x1 Conv.
    fn dfl(opset: i64) -> ModelBuilder {
        ModelBuilder::new(opset)
            .input("x", DType::F32, &[1, 64, 12])
            .init("shape", Tensor::from_i64(vec![4], &[1, 4, 16, 12]))
            .init("w", conv1x1(1, 1, 16))
            .node("Reshape", &["x", "shape"], &["r"], &[])
            .node(
                "Transpose",
                &["r"],
                &["t"],
                &[("perm", A::Is(vec![0, 2, 1, 3]))],
            )
            .node("Softmax", &["t"], &["s"], &[("axis", A::I(1))])
            .node("Conv", &["s", "w"], &["y"], &[])
            .output("y")
    }

    #[test]
    fn softmax_axis_moves_last_through_the_models_transposes() {
        let d = prepared(&dfl(13));
        // The model's transpose, the softmax's two and the conv's NHWC one compose into one
        // before the softmax (the softmax's output is the conv's NHWC input); the conv's single
        // output channel goes back to NCHW by a reshape.
        assert_eq!(d.matches("Transpose(").count(), 1, "{d}");
        assert!(
            d.contains("Transpose(r) perm=[0, 1, 3, 2] -> t_last:f32[1, 4, 12, 16]"),
            "{d}"
        );
        assert!(
            d.contains("Softmax(t_last) axis=3 -> s_pre:f32[1, 4, 12, 16]"),
            "{d}"
        );
        assert!(d.contains("Conv(s_pre, w) nhwc"), "{d}");
        let plan = crate::lower(
            dfl(13).load(),
            &LowerOptions {
                backend: Backend::Htp,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            plan.op_types(),
            ["Reshape", "Transpose", "Softmax", "Conv2d", "Reshape"]
        );
    }

    #[test]
    fn softmax_over_conv_channels_needs_no_transpose() {
        let b = ModelBuilder::new(13)
            .input("x", DType::F32, &[1, 3, 6, 6])
            .init("w", conv_w(1, 8, 3))
            .init("w1", conv1x1(2, 5, 8))
            .node(
                "Conv",
                &["x", "w"],
                &["c"],
                &[("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .node("Softmax", &["c"], &["s"], &[("axis", A::I(1))])
            .node("Conv", &["s", "w1"], &["c1"], &[])
            .node("LogSoftmax", &["c1"], &["y"], &[("axis", A::I(-3))])
            .output("y");
        let d = prepared(&b);
        // The graph input's and output's only.
        assert_eq!(d.matches("Transpose(").count(), 2, "{d}");
        assert!(d.contains("Softmax(c_nhwc) axis=3"), "{d}");
        assert!(d.contains("LogSoftmax(c1_nhwc) axis=3"), "{d}");
    }

    #[test]
    fn legacy_softmax_is_not_permuted() {
        // Before opset 13 Softmax(axis 1) normalises the flattened [C·H·W] tail, not one axis.
        let d = prepared(&dfl(12));
        assert!(d.contains("Softmax(t) axis=1"), "{d}");
    }
}
