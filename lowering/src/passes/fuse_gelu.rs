//! Fuses GELU written out in elementwise ops into one `Gelu` node.
//!
//! The erf form, as torch exports `nn.GELU()`: `Div(x, √2) | Mul(x, 1/√2)` → `Erf` → `Add(1)` →
//! `Mul(x, ·)` → `Mul(·, 0.5)`, or with the 0.5 applied to `x` first, or to `1 + erf` first
//! (`Mul(x, Mul(0.5, ·))`, as the dynamo exporter writes it). HTP has no Erf, so without this
//! the pattern would not lower.
//!
//! The tanh form (HTP only), as Hugging Face's `gelu_new` (GPT-2) and `nn.GELU("tanh")` export it
//! and as the Gelu op's `approximate = "tanh"` expands: `Pow(x, 3) | Mul(Mul(x, x), x)` →
//! `Mul(·, 0.044715)` → `Add(x, ·)` → `Mul(·, √(2/π))` → `Tanh`, then the same tail as the erf
//! form. On the QNN 2.51 HTP the preparer fuses this chain itself only in float32 graphs; with
//! fp16 tensors it runs op by op, and Tanh and Pow are the slowest elementwise ops there (GPT-2's
//! two GELUs took 80% of its graphExecute, docs/graph-quality.md). QNN `Gelu` is the erf form:
//! it differs from the tanh approximation by at most 4.8e-4 (at |x| ≈ 2.7, where the value is
//! ≈ 2.7 and an fp16 ulp is 2e-3), below the HTP's fp16 arithmetic; the GPU backend computes
//! float32 and keeps the tanh form.

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

/// `tanh`: also fuse the tanh form (HTP).
pub fn run(g: &mut Graph, tanh: bool) {
    let mut i = 0;
    while i < g.nodes.len() {
        let head = match g.nodes[i].op_type.as_str() {
            "Erf" => erf_head(g, i),
            "Tanh" if tanh => tanh_head(g, i),
            _ => None,
        };
        if head.is_some_and(|x| try_fuse(g, i, x)) {
            continue;
        }
        i += 1;
    }
}

/// The operand of a binary `op` node other than the scalar constant near `c`.
fn by_scalar(g: &Graph, n: NodeId, op: &str, c: f64) -> Option<ValueId> {
    let n = &g.nodes[n];
    if n.op_type != op {
        return None;
    }
    let (a, b) = (n.input(0)?, n.input(1)?);
    if scalar(g, Some(b)).is_some_and(|s| near(s, c)) {
        Some(a)
    } else if scalar(g, Some(a)).is_some_and(|s| near(s, c)) {
        Some(b)
    } else {
        None
    }
}

/// x of `Erf(x / √2)`.
fn erf_head(g: &Graph, erf: NodeId) -> Option<ValueId> {
    let producers = g.producers();
    let scale_node = producers[g.nodes[erf].input(0)?]?;
    by_scalar(g, scale_node, "Div", std::f64::consts::SQRT_2)
        .or_else(|| by_scalar(g, scale_node, "Mul", std::f64::consts::FRAC_1_SQRT_2))
}

/// x of `Tanh(√(2/π) · (x + 0.044715 · x³))`.
fn tanh_head(g: &Graph, tanh: NodeId) -> Option<ValueId> {
    let producers = g.producers();
    let inner = by_scalar(
        g,
        producers[g.nodes[tanh].input(0)?]?,
        "Mul",
        (2.0 / std::f64::consts::PI).sqrt(),
    )?;
    let add = &g.nodes[producers[inner]?];
    if add.op_type != "Add" {
        return None;
    }
    let (a, b) = (add.input(0)?, add.input(1)?);
    // x3 is the cube of x: Pow(x, 3), Mul(Mul(x, x), x) or Mul(x, Mul(x, x)).
    let cube_of = |x3: ValueId, x: ValueId| -> bool {
        let Some(p) = producers[x3] else { return false };
        let n = &g.nodes[p];
        match n.op_type.as_str() {
            "Pow" => n.input(0) == Some(x) && scalar(g, n.input(1)) == Some(3.0),
            "Mul" => other(n, x).is_some_and(|x2| {
                producers[x2].is_some_and(|q| {
                    let m = &g.nodes[q];
                    m.op_type == "Mul" && m.input(0) == Some(x) && m.input(1) == Some(x)
                })
            }),
            _ => false,
        }
    };
    [(a, b), (b, a)].into_iter().find_map(|(x, cx3)| {
        let x3 = by_scalar(g, producers[cx3]?, "Mul", 0.044715)?;
        cube_of(x3, x).then_some(x)
    })
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

/// `head` is the Erf or Tanh node of a GELU of `x`; fuses it with the tail
/// `Add(·, 1)` → the products with `x` and 0.5.
fn try_fuse(g: &mut Graph, head: NodeId, x: ValueId) -> bool {
    let producers = g.producers();
    let cons = g.consumers();
    let uses = g.use_counts();
    if !g.nodes[head].input(0).is_some_and(|v| uses[v] == 1) {
        return false;
    }
    let Some(ev) = g.nodes[head].output(0) else {
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
    let hint = format!("{}_gelu", g.nodes[head].name);
    crate::passes::replace_chain(g, out, &hint, "Gelu", x);
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
        super::run(&mut g, true);
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
        super::run(&mut g, true);
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
        super::run(&mut g, true);
        assert!(g.dump().contains("Erf("), "{}", g.dump());
    }

    /// GPT-2's `gelu_new` as the TorchScript exporter writes it.
    fn gpt2_gelu(x3: &str) -> ModelBuilder {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 8])
            .init("half", Tensor::scalar_f32(0.5))
            .init("three", Tensor::scalar_f32(3.0))
            .init("c", Tensor::scalar_f32(0.044715))
            .init("k", Tensor::scalar_f32((2.0 / std::f32::consts::PI).sqrt()))
            .init("one", Tensor::scalar_f32(1.0))
            .node("Mul", &["x", "half"], &["m"], &[]);
        let b = match x3 {
            "pow" => b.node("Pow", &["x", "three"], &["p"], &[]),
            "mul" => {
                b.node("Mul", &["x", "x"], &["x2"], &[])
                    .node("Mul", &["x2", "x"], &["p"], &[])
            }
            _ => b.node("Mul", &["x", "x"], &["p"], &[]),
        };
        b.node("Mul", &["p", "c"], &["pc"], &[])
            .node("Add", &["x", "pc"], &["a"], &[])
            .node("Mul", &["a", "k"], &["ak"], &[])
            .node("Tanh", &["ak"], &["t"], &[])
            .node("Add", &["t", "one"], &["t1"], &[])
            .node("Mul", &["m", "t1"], &["y"], &[])
            .output("y")
    }

    #[test]
    fn gpt2_tanh_gelu_is_fused() {
        for x3 in ["pow", "mul"] {
            let mut g = gpt2_gelu(x3).load().graph;
            let _ = crate::passes::const_fold::run(&mut g);
            super::run(&mut g, true);
            assert_eq!(g.dump(), "Gelu(x) -> y:f32[2, 8]\noutputs: y\n", "{x3}");
        }
    }

    #[test]
    fn tanh_gelu_is_kept_when_not_asked_for() {
        let mut g = gpt2_gelu("pow").load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g, false);
        assert!(g.dump().contains("Tanh("), "{}", g.dump());
    }

    #[test]
    fn tanh_of_a_square_is_not_fused() {
        let mut g = gpt2_gelu("square").load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g, true);
        assert!(g.dump().contains("Tanh("), "{}", g.dump());
    }

    /// How a GELU's constants and products are written.
    #[derive(Clone, Copy, Debug)]
    enum Form {
        /// TorchScript exporter: `Constant` nodes, `Mul(Mul(x, 1 + erf), 0.5)`.
        TorchScript,
        /// Dynamo exporter: initializers, `Mul(x, Mul(0.5, 1 + erf))`, `Mul` by 1/√2.
        Dynamo,
        /// `nn.GELU("tanh")`: `Mul(Mul(x, 0.5), 1 + tanh(√(2/π) (x + 0.044715 x³)))`.
        Tanh,
    }

    /// `producer` → GELU in `form` → `consumer`, as a timm MLP writes it: around 1x1 Convs on
    /// NCHW `[1, 4, 6, 6]` (ConvNeXt, FastViT, EfficientFormerV2) or around MatMuls on
    /// `[1, 6, 4]` (transformers).
    fn mlp(conv: bool, form: Form) -> ModelBuilder {
        use crate::testing::{rand_f32, A};
        let k = |b: ModelBuilder, name: &str, v: f32| match form {
            Form::TorchScript => b.node(
                "Constant",
                &[],
                &[name],
                &[("value", A::T(Tensor::scalar_f32(v)))],
            ),
            _ => b.init(name, Tensor::scalar_f32(v)),
        };
        let b = if conv {
            ModelBuilder::new(17)
                .input("in", DType::F32, &[1, 4, 6, 6])
                .init("w1", Tensor::from_f32(vec![8, 4, 1, 1], &rand_f32(1, 32)))
                .init("b1", Tensor::from_f32(vec![8], &rand_f32(2, 8)))
                .init("w2", Tensor::from_f32(vec![4, 8, 1, 1], &rand_f32(3, 32)))
                .node("Conv", &["in", "w1", "b1"], &["x"], &[])
        } else {
            ModelBuilder::new(17)
                .input("in", DType::F32, &[1, 6, 4])
                .init("w1", Tensor::from_f32(vec![4, 8], &rand_f32(1, 32)))
                .init("b1", Tensor::from_f32(vec![8], &rand_f32(2, 8)))
                .init("w2", Tensor::from_f32(vec![8, 4], &rand_f32(3, 32)))
                .node("MatMul", &["in", "w1"], &["xm"], &[])
                .node("Add", &["xm", "b1"], &["x"], &[])
        };
        let b = match form {
            Form::TorchScript => {
                let b = k(b, "s2", std::f32::consts::SQRT_2)
                    .node("Div", &["x", "s2"], &["d"], &[])
                    .node("Erf", &["d"], &["e"], &[]);
                let b = k(b, "one", 1.0)
                    .node("Add", &["e", "one"], &["a"], &[])
                    .node("Mul", &["x", "a"], &["m"], &[]);
                k(b, "half", 0.5).node("Mul", &["m", "half"], &["g"], &[])
            }
            Form::Dynamo => {
                let b = k(b, "r2", std::f32::consts::FRAC_1_SQRT_2);
                let b = k(b, "one", 1.0);
                k(b, "half", 0.5)
                    .node("Mul", &["x", "r2"], &["d"], &[])
                    .node("Erf", &["d"], &["e"], &[])
                    .node("Add", &["e", "one"], &["a"], &[])
                    .node("Mul", &["half", "a"], &["h"], &[])
                    .node("Mul", &["x", "h"], &["g"], &[])
            }
            Form::Tanh => {
                let b = k(b, "half", 0.5);
                let b = k(b, "three", 3.0);
                let b = k(b, "c", 0.044715);
                let b = k(b, "kk", (2.0 / std::f32::consts::PI).sqrt());
                k(b, "one", 1.0)
                    .node("Mul", &["x", "half"], &["m"], &[])
                    .node("Pow", &["x", "three"], &["p"], &[])
                    .node("Mul", &["p", "c"], &["pc"], &[])
                    .node("Add", &["x", "pc"], &["a"], &[])
                    .node("Mul", &["a", "kk"], &["ak"], &[])
                    .node("Tanh", &["ak"], &["t"], &[])
                    .node("Add", &["t", "one"], &["t1"], &[])
                    .node("Mul", &["m", "t1"], &["g"], &[])
            }
        };
        let op = if conv { "Conv" } else { "MatMul" };
        b.node(op, &["g", "w2"], &["y"], &[]).output("y")
    }

    /// The op types `prepare` leaves for the HTP (fusions, layout and the folds after them).
    fn prepared_ops(b: &ModelBuilder) -> Vec<String> {
        let p = crate::passes::prepare(
            &b.load(),
            &crate::LowerOptions {
                backend: crate::Backend::Htp,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(p.node_errors.is_empty(), "{:?}", p.node_errors);
        p.graph.nodes.iter().map(|n| n.op_type.clone()).collect()
    }

    #[test]
    fn gelu_between_convs_and_between_matmuls_is_fused_in_every_exported_form() {
        // Between 1x1 Convs, fold_conv must not take the trailing `Mul(·, 0.5)` into the
        // second Conv's weights before the fusion has seen it (timm's ConvNeXt MLPs).
        for conv in [true, false] {
            for form in [Form::TorchScript, Form::Dynamo, Form::Tanh] {
                let ops = prepared_ops(&mlp(conv, form));
                let gelus = ops.iter().filter(|o| *o == "Gelu").count();
                let left = ops
                    .iter()
                    .any(|o| ["Erf", "Tanh", "Pow"].contains(&o.as_str()));
                assert!(gelus == 1 && !left, "conv {conv}, {form:?}: {ops:?}");
            }
        }
    }
}
