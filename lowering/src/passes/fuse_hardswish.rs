//! Fuses HardSwish written out in element-wise ops into one `HardSwish` node.
//!
//! `x * relu6(x + 3) / 6`, with relu6 a `Clip(·, 0, 6)`: as paddle2onnx writes PaddleOCR's
//! hardswish (rapidocr's models), as YOLOv5's export-friendly `Hardswish` module and many
//! MobileNetV3 ports write it, and with the division by 6 applied to either product
//! (`Div(Mul(x, c), 6)`, `Mul(x, Div(c, 6))`, or a `Mul` by 1/6); and `x * HardSigmoid(x)` with
//! alpha 1/6 and beta 0.5, as torch exports `nn.Hardswish` before opset 14 and ONNX's own
//! HardSwish function is defined. Four element-wise ops become one, which the HTP computes in
//! one pass (the chains cost rapidocr's recognizer about 40% of its graph, docs/graph-quality.md).
//! QNN's fp16 HardSwish is slightly less accurate than the four ops (max error 5.0e-3 against
//! 3.9e-3 on [-6, 6]) and about twice as fast as them or as HardSigmoid + Mul, the most accurate
//! form (docs/qnn-notes.md §8.20); its error stays within the fp16 HTP's.

use crate::ir::{Graph, Node, NodeId, ValueId};
use crate::table::{OpEntry, OpTable};

fn scalar(g: &Graph, v: Option<ValueId>) -> Option<f64> {
    let t = g.konst(v?)?;
    (t.numel() == 1).then(|| t.get_f64(0))
}

/// Within float32 rounding of `b`.
fn near(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

/// The operand of binary node `n` other than `v`.
fn other(n: &Node, v: ValueId) -> Option<ValueId> {
    match (n.input(0), n.input(1)) {
        (Some(a), Some(b)) if a == v => Some(b),
        (Some(a), Some(b)) if b == v => Some(a),
        _ => None,
    }
}

pub fn run(g: &mut Graph, table: &OpTable) {
    if !table.entry("HardSwish").is_some_and(OpEntry::runs) {
        return;
    }
    let mut i = 0;
    while i < g.nodes.len() {
        if !try_fuse(g, i) {
            i += 1;
        }
    }
}

/// x of `Clip(x + 3, 0, 6)` (Clip's bounds as inputs, or as attributes before opset 11).
fn relu6_of_x_plus_3(g: &Graph, producers: &[Option<NodeId>], clip: NodeId) -> Option<ValueId> {
    let n = &g.nodes[clip];
    if n.op_type != "Clip" {
        return None;
    }
    let (lo, hi) = if g.opset() < 11 {
        (n.attr_f_opt("min").ok()?, n.attr_f_opt("max").ok()?)
    } else {
        let bound = |k| scalar(g, n.input(k)).map(|x| x as f32);
        (bound(1), bound(2))
    };
    if lo != Some(0.0) || hi != Some(6.0) {
        return None;
    }
    let add = &g.nodes[producers[n.input(0)?]?];
    if add.op_type != "Add" {
        return None;
    }
    let (a, b) = (add.input(0)?, add.input(1)?);
    [(a, b), (b, a)]
        .into_iter()
        .find_map(|(x, k)| (scalar(g, Some(k)) == Some(3.0) && g.konst(x).is_none()).then_some(x))
}

/// x when node `n` is `HardSigmoid(x)` with alpha 1/6 and beta 1/2.
fn hardsigmoid_of(g: &Graph, n: NodeId) -> Option<ValueId> {
    let n = &g.nodes[n];
    if n.op_type != "HardSigmoid" {
        return None;
    }
    let alpha = n.attr_f("alpha", 0.2).ok()? as f64;
    let beta = n.attr_f("beta", 0.5).ok()? as f64;
    (near(alpha, 1.0 / 6.0) && near(beta, 0.5)).then(|| n.input(0))?
}

/// The output of node `n` when it divides `v` by 6 (`Div(v, 6)` or `Mul` by 1/6).
fn sixth_of(g: &Graph, n: NodeId, v: ValueId) -> Option<ValueId> {
    let node = &g.nodes[n];
    let k = scalar(g, other(node, v))?;
    let ok = match node.op_type.as_str() {
        "Div" => node.input(0) == Some(v) && k == 6.0,
        "Mul" => near(k, 1.0 / 6.0),
        _ => false,
    };
    ok.then(|| node.output(0))?
}

/// Node `i` heads a HardSwish of some x (its Clip or HardSigmoid): replaces the chain by one
/// `HardSwish(x)` that writes the chain's output.
fn try_fuse(g: &mut Graph, i: NodeId) -> bool {
    if g.nodes[i].quantized {
        return false;
    }
    let producers = g.producers();
    let (x, scaled) = match g.nodes[i].op_type.as_str() {
        "Clip" => match relu6_of_x_plus_3(g, &producers, i) {
            Some(x) => (x, false),
            None => return false,
        },
        "HardSigmoid" => match hardsigmoid_of(g, i) {
            Some(x) => (x, true),
            None => return false,
        },
        _ => return false,
    };
    let cons = g.consumers();
    let uses = g.use_counts();
    // The one consumer of an intermediate value that may vanish.
    let next = |v: ValueId| -> Option<NodeId> {
        let ok = uses[v] == 1 && !g.is_output(v) && g.values[v].quant.is_none();
        ok.then(|| cons[v].first().copied())?
            .filter(|&k| !g.nodes[k].quantized)
    };
    let Some(h) = g.nodes[i].output(0) else {
        return false;
    };
    // The Add of x + 3 vanishes with the chain: x + 3 feeds nothing else.
    if !scaled && g.nodes[i].input(0).and_then(next) != Some(i) {
        return false;
    }
    let times_x = |k: NodeId, v: ValueId| {
        let n = &g.nodes[k];
        (n.op_type == "Mul" && other(n, v) == Some(x)).then(|| n.output(0))?
    };
    let out = (|| {
        let k = next(h)?;
        if scaled {
            return times_x(k, h);
        }
        // (x * c) / 6, or x * (c / 6).
        match times_x(k, h) {
            Some(m) => sixth_of(g, next(m)?, m),
            None => {
                let d = sixth_of(g, k, h)?;
                times_x(next(d)?, d)
            }
        }
    })();
    let Some(out) = out else { return false };
    if g.shape(out) != g.shape(x) || g.dtype(out) != g.dtype(x) {
        return false;
    }
    let hint = format!("{}_hardswish", g.nodes[i].name);
    crate::passes::replace_chain(g, out, &hint, "HardSwish", x);
    true
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::table::OpTable;
    use crate::testing::{ModelBuilder, A};
    use crate::Backend;

    fn fused(b: ModelBuilder) -> String {
        let mut g = b.load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g, OpTable::get(Backend::Htp).unwrap());
        g.dump()
    }

    fn chain(opset: i64) -> ModelBuilder {
        ModelBuilder::new(opset)
            .input("x", DType::F32, &[1, 4, 2, 2])
            .init("three", Tensor::scalar_f32(3.0))
            .init("zero", Tensor::scalar_f32(0.0))
            .init("six", Tensor::scalar_f32(6.0))
            .init("sixth", Tensor::scalar_f32(1.0 / 6.0))
            .node("Add", &["x", "three"], &["a"], &[])
    }

    const FUSED: &str = "HardSwish(x) -> y:f32[1, 4, 2, 2]\noutputs: y\n";

    #[test]
    fn paddle_and_yolo_forms_fuse() {
        // paddle2onnx: Div(Mul(x, Clip(x + 3, 0, 6)), 6).
        let paddle = chain(17)
            .node("Clip", &["a", "zero", "six"], &["c"], &[])
            .node("Mul", &["x", "c"], &["m"], &[])
            .node("Div", &["m", "six"], &["y"], &[])
            .output("y");
        assert_eq!(fused(paddle), FUSED);
        // x * (relu6(x + 3) * 1/6), Clip bounds as attributes (opset 6).
        let old = chain(6)
            .node(
                "Clip",
                &["a"],
                &["c"],
                &[("min", A::F(0.0)), ("max", A::F(6.0))],
            )
            .node("Mul", &["c", "sixth"], &["d"], &[])
            .node("Mul", &["d", "x"], &["y"], &[])
            .output("y");
        assert_eq!(fused(old), FUSED);
    }

    #[test]
    fn torch_hardsigmoid_form_fuses() {
        let hs = ModelBuilder::new(13)
            .input("x", DType::F32, &[1, 4, 2, 2])
            .node("HardSigmoid", &["x"], &["h"], &[("alpha", A::F(1.0 / 6.0))])
            .node("Mul", &["x", "h"], &["y"], &[])
            .output("y");
        assert_eq!(fused(hs), FUSED);
    }

    #[test]
    fn near_misses_stay() {
        // ReLU6(x + 3) * x without the division; a Clip to 5; x + 3 also used elsewhere;
        // HardSigmoid with ONNX's default alpha 0.2.
        let undivided = chain(17)
            .node("Clip", &["a", "zero", "six"], &["c"], &[])
            .node("Mul", &["x", "c"], &["y"], &[])
            .output("y");
        assert!(!fused(undivided).contains("HardSwish"));
        let five = chain(17)
            .init("five", Tensor::scalar_f32(5.0))
            .node("Clip", &["a", "zero", "five"], &["c"], &[])
            .node("Mul", &["x", "c"], &["m"], &[])
            .node("Div", &["m", "six"], &["y"], &[])
            .output("y");
        assert!(!fused(five).contains("HardSwish"));
        let shared = chain(17)
            .node("Clip", &["a", "zero", "six"], &["c"], &[])
            .node("Mul", &["x", "c"], &["m"], &[])
            .node("Div", &["m", "six"], &["y"], &[])
            .output("y")
            .output("a");
        assert!(!fused(shared).contains("HardSwish"));
        let sigmoid = ModelBuilder::new(13)
            .input("x", DType::F32, &[1, 4, 2, 2])
            .node("HardSigmoid", &["x"], &["h"], &[])
            .node("Mul", &["x", "h"], &["y"], &[])
            .output("y");
        assert!(!fused(sigmoid).contains("HardSwish"));
    }

    /// `producer` → HardSwish written as `tail` (from `x`, to `h`) → `consumer`: around 1x1
    /// Convs on NCHW `[1, 4, 6, 6]` or around MatMuls on `[1, 6, 4]`.
    fn block(conv: bool, tail: &[(&str, &[&str], &str)]) -> ModelBuilder {
        use crate::testing::rand_f32;
        let mut b = if conv {
            ModelBuilder::new(17)
                .input("in", DType::F32, &[1, 4, 6, 6])
                .init("w1", Tensor::from_f32(vec![8, 4, 1, 1], &rand_f32(1, 32)))
                .init("w2", Tensor::from_f32(vec![4, 8, 1, 1], &rand_f32(3, 32)))
                .node("Conv", &["in", "w1"], &["x"], &[])
        } else {
            ModelBuilder::new(17)
                .input("in", DType::F32, &[1, 6, 4])
                .init("w1", Tensor::from_f32(vec![4, 8], &rand_f32(1, 32)))
                .init("w2", Tensor::from_f32(vec![8, 4], &rand_f32(3, 32)))
                .node("MatMul", &["in", "w1"], &["x"], &[])
        };
        b = b
            .init("three", Tensor::scalar_f32(3.0))
            .init("zero", Tensor::scalar_f32(0.0))
            .init("six", Tensor::scalar_f32(6.0))
            .init("sixth", Tensor::scalar_f32(1.0 / 6.0))
            .node("Add", &["x", "three"], &["a"], &[])
            .node("Clip", &["a", "zero", "six"], &["c"], &[]);
        for (op, ins, out) in tail {
            b = b.node(op, ins, &[out], &[]);
        }
        let op = if conv { "Conv" } else { "MatMul" };
        b.node(op, &["h", "w2"], &["y"], &[]).output("y")
    }

    #[test]
    fn hardswish_between_convs_and_between_matmuls_fuses() {
        // Before a Conv, fold_conv must not take the trailing `Mul(·, 1/6)` into its weights
        // before the fusion has seen it.
        let forms: [&[(&str, &[&str], &str)]; 3] = [
            &[("Mul", &["x", "c"], "m"), ("Div", &["m", "six"], "h")],
            &[("Mul", &["x", "c"], "m"), ("Mul", &["m", "sixth"], "h")],
            &[("Mul", &["c", "sixth"], "d"), ("Mul", &["d", "x"], "h")],
        ];
        for conv in [true, false] {
            for (k, tail) in forms.iter().enumerate() {
                let p = crate::passes::prepare(
                    &block(conv, tail).load(),
                    &crate::LowerOptions {
                        backend: Backend::Htp,
                        ..Default::default()
                    },
                )
                .unwrap();
                let ops: Vec<&str> = p.graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
                let n = ops.iter().filter(|&&o| o == "HardSwish").count();
                assert!(
                    n == 1 && !ops.contains(&"Clip"),
                    "conv {conv}, form {k}: {ops:?}"
                );
            }
        }
    }
}
