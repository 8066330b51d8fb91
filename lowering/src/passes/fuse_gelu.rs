//! Fuses the erf form of GELU, as torch exports `nn.GELU()`, into one `Gelu` node:
//! `Div(x, √2) | Mul(x, 1/√2)` → `Erf` → `Add(1)` → `Mul(x, ·)` → `Mul(·, 0.5)`, or with the
//! 0.5 applied to `x` first, or to `1 + erf` first (`Mul(x, Mul(0.5, ·))`, as the dynamo exporter
//! writes it). HTP has no Erf, so without this the pattern would not lower.

use crate::ir::{Graph, Node, NodeId, ValueId};

fn scalar(g: &Graph, v: Option<ValueId>) -> Option<f64> {
    let t = g.konst(v?)?;
    (t.numel() == 1).then(|| t.get_f64(0))
}

fn other(n: &Node, v: ValueId) -> Option<ValueId> {
    match (n.input(0), n.input(1)) {
        (Some(a), Some(b)) if a == v => Some(b),
        (Some(a), Some(b)) if b == v => Some(a),
        _ => None,
    }
}

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-3 * b.abs().max(1.0)
}

pub fn run(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        if g.nodes[i].op_type == "Erf" && try_fuse(g, i) {
            continue;
        }
        i += 1;
    }
}

fn single(g: &Graph, uses: &[usize], cons: &[Vec<NodeId>], v: ValueId, op: &str) -> Option<NodeId> {
    if uses[v] != 1 || g.is_output(v) {
        return None;
    }
    cons[v]
        .first()
        .copied()
        .filter(|&k| g.nodes[k].op_type == op)
}

fn try_fuse(g: &mut Graph, erf: NodeId) -> bool {
    let producers = g.producers();
    let cons = g.consumers();
    let uses = g.use_counts();
    let Some(e_in) = g.nodes[erf].input(0) else {
        return false;
    };
    let Some(scale_node) = producers[e_in] else {
        return false;
    };
    let sn = &g.nodes[scale_node];
    let x = match sn.op_type.as_str() {
        "Div" if scalar(g, sn.input(1)).is_some_and(|s| near(s, std::f64::consts::SQRT_2)) => {
            sn.input(0)
        }
        "Mul" => sn.input(0).zip(sn.input(1)).and_then(|(a, b)| {
            if scalar(g, Some(b)).is_some_and(|s| near(s, std::f64::consts::FRAC_1_SQRT_2)) {
                Some(a)
            } else if scalar(g, Some(a)).is_some_and(|s| near(s, std::f64::consts::FRAC_1_SQRT_2)) {
                Some(b)
            } else {
                None
            }
        }),
        _ => None,
    };
    let Some(x) = x else { return false };
    if uses[e_in] != 1 {
        return false;
    }
    let Some(ev) = g.nodes[erf].output(0) else {
        return false;
    };
    let Some(add) = single(g, &uses, &cons, ev, "Add") else {
        return false;
    };
    if other(&g.nodes[add], ev).and_then(|v| scalar(g, Some(v))) != Some(1.0) {
        return false;
    }
    let Some(av) = g.nodes[add].output(0) else {
        return false;
    };
    let Some(m1) = single(g, &uses, &cons, av, "Mul") else {
        return false;
    };
    let Some(t) = other(&g.nodes[m1], av) else {
        return false;
    };
    let Some(m1v) = g.nodes[m1].output(0) else {
        return false;
    };
    let out = if t == x {
        let Some(m2) = single(g, &uses, &cons, m1v, "Mul") else {
            return false;
        };
        if other(&g.nodes[m2], m1v).and_then(|v| scalar(g, Some(v))) != Some(0.5) {
            return false;
        }
        g.nodes[m2].output(0)
    } else if scalar(g, Some(t)) == Some(0.5) {
        let Some(m2) = single(g, &uses, &cons, m1v, "Mul") else {
            return false;
        };
        if other(&g.nodes[m2], m1v) != Some(x) {
            return false;
        }
        g.nodes[m2].output(0)
    } else {
        let Some(h) = producers[t] else { return false };
        let hn = &g.nodes[h];
        if hn.op_type != "Mul" || other(hn, x).and_then(|v| scalar(g, Some(v))) != Some(0.5) {
            return false;
        }
        Some(m1v)
    };
    let Some(out) = out else { return false };
    let tail = producers[out].expect("out has a producer");
    let dead = g.add_value(&format!("{}_unfused", g.values[out].name));
    for o in g.nodes[tail].outputs.iter_mut().flatten() {
        if *o == out {
            *o = dead;
        }
    }
    let mut n = Node::new(format!("{}_gelu", g.nodes[erf].name), "Gelu");
    n.name = g.unique_node_name(&n.name);
    n.inputs = vec![Some(x)];
    n.outputs = vec![Some(out)];
    g.nodes.insert(tail + 1, n);
    crate::passes::dce::run(g);
    true
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::testing::ModelBuilder;

    #[test]
    fn torch_gelu_is_fused() {
        let mut g = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 8])
            .init("s2", Tensor::scalar_f32(std::f32::consts::SQRT_2))
            .init("one", Tensor::scalar_f32(1.0))
            .init("half", Tensor::scalar_f32(0.5))
            .node("Div", &["x", "s2"], &["d"], &[])
            .node("Erf", &["d"], &["e"], &[])
            .node("Add", &["e", "one"], &["a"], &[])
            .node("Mul", &["x", "a"], &["m"], &[])
            .node("Mul", &["m", "half"], &["y"], &[])
            .output("y")
            .load()
            .graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g);
        assert_eq!(g.dump(), "Gelu(x) -> y:f32[2, 8]\noutputs: y\n");
    }

    #[test]
    fn dynamo_gelu_with_half_on_the_erf_term_is_fused() {
        let mut g = ModelBuilder::new(18)
            .input("x", DType::F32, &[2, 8])
            .init("s2", Tensor::scalar_f32(std::f32::consts::SQRT_2))
            .init("one", Tensor::scalar_f32(1.0))
            .init("half", Tensor::scalar_f32(0.5))
            .node("Div", &["x", "s2"], &["d"], &[])
            .node("Erf", &["d"], &["e"], &[])
            .node("Add", &["e", "one"], &["a"], &[])
            .node("Mul", &["half", "a"], &["h"], &[])
            .node("Mul", &["x", "h"], &["y"], &[])
            .output("y")
            .load()
            .graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g);
        assert_eq!(g.dump(), "Gelu(x) -> y:f32[2, 8]\noutputs: y\n");
    }

    #[test]
    fn erf_times_other_value_is_not_fused() {
        let mut g = ModelBuilder::new(18)
            .input("x", DType::F32, &[2, 8])
            .input("z", DType::F32, &[2, 8])
            .init("s2", Tensor::scalar_f32(std::f32::consts::SQRT_2))
            .init("one", Tensor::scalar_f32(1.0))
            .init("half", Tensor::scalar_f32(0.5))
            .node("Div", &["x", "s2"], &["d"], &[])
            .node("Erf", &["d"], &["e"], &[])
            .node("Add", &["e", "one"], &["a"], &[])
            .node("Mul", &["half", "a"], &["h"], &[])
            .node("Mul", &["z", "h"], &["y"], &[])
            .output("y")
            .load()
            .graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g);
        assert!(g.dump().contains("Erf("), "{}", g.dump());
    }
}
