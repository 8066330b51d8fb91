//! NCHW → NHWC for the layout-sensitive (conv-family) ops, with as few transposes as possible.
//!
//! QNN's Conv2d, pools, Batchnorm, Resize, DepthToSpace, ... take channel-last data. Each
//! sensitive node (op table `layout = "sensitive"`) gets a Transpose to NHWC on its data input
//! and one back to NCHW on its output, and is marked `nhwc`. Then transposes are sunk through
//! `layout = "agnostic"` (element-wise) nodes and adjacent inverse pairs cancel, so a chain
//! Conv → Relu → Conv has no transpose left, and a residual Add runs in NHWC. Graph I/O keeps
//! the model's layout because only internal values are rewritten.

use crate::ir::{Attr, Graph, Node, NodeId, ValueId};
use crate::table::{Layout, OpTable};

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

pub fn run(g: &mut Graph, table: &OpTable) {
    convert_sensitive(g, table);
    optimize(g, table);
    let _ = g.toposort();
}

fn convert_sensitive(g: &mut Graph, table: &OpTable) {
    let count = g.nodes.len();
    for i in 0..count {
        let n = &g.nodes[i];
        if table.layout(&n.op_type) != Some(Layout::Sensitive) || n.nhwc || !known(g, n) {
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

fn optimize(g: &mut Graph, table: &OpTable) {
    // Each rewrite moves a transpose strictly downstream or removes one, so this terminates;
    // the bound is a guard against a bug turning into a hang.
    for _ in 0..(g.nodes.len() + 1) * 8 {
        if !(compose_step(g) || sink_step(g, table)) {
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
fn sink_step(g: &mut Graph, table: &OpTable) -> bool {
    let producers = g.producers();
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        if table.layout(&n.op_type) != Some(Layout::Agnostic)
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
        let ydt = g.dtype(y);
        let yshape: Vec<usize> = inv.iter().map(|&k| g.shape(y)[k]).collect();
        let y2 = g.add_typed(&format!("{}_pre", g.value(y).name), ydt, yshape);
        g.values[y2].quant = g.values[y].quant.clone();
        g.values[y2].origin = g.values[y].origin.as_ref().map(|o| o.permuted(&inv));
        let mut t = Node::new(format!("{}_post", g.nodes[i].name), "Transpose")
            .with_attr("perm", Attr::Ints(p.iter().map(|&x| x as i64).collect()));
        t.inputs = vec![Some(y2)];
        t.outputs = vec![Some(y)];
        let n = &mut g.nodes[i];
        n.inputs = new_inputs;
        n.outputs = vec![Some(y2)];
        // Keep the node list topological: the new transpose goes right after its producer.
        let name = g.unique_node_name(&t.name);
        t.name = name;
        g.nodes.insert(i + 1, t);
        return true;
    }
    false
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
        assert!(
            d.contains("Reshape(g_nhwc, g_shape) -> g:f32[1, 2, 1, 1]"),
            "{d}"
        );
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
}
