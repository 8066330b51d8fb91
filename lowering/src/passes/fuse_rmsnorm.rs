//! Fuses the RMSNorm pattern into one `RMSNormalization` node (lowered to QNN RmsNorm).
//!
//! Matches what Llama-style models export for `x * rsqrt(mean(x^2, -1) + eps) * w`:
//! `Pow(x, 2) | Mul(x, x)` → `ReduceMean(last axis, keepdims)` → `Add(eps)` → `Sqrt` →
//! (`Reciprocal` → `Mul(x, ·)` | `Div(1, ·)` → `Mul(x, ·)` | `Div(x, ·)`), optionally followed by
//! `Mul(·, w)` with a constant `w` of shape `[D]`. Intermediates used elsewhere block the fusion.
//! In a quantized model the product may read `x` converted to another encoding than the square
//! reads (a `qnnx.Requantize` of `x`): the fused node reads the product's.

use crate::dtype::DType;
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Graph, Node, NodeId, ValueId};
use crate::ops::quant::REQUANTIZE;

struct Ctx {
    producers: Vec<Option<NodeId>>,
    consumers: Vec<Vec<NodeId>>,
    uses: Vec<usize>,
}

fn scalar(g: &Graph, v: Option<ValueId>) -> Option<f64> {
    let t = g.konst(v?)?;
    (t.numel() == 1).then(|| t.get_f64(0))
}

fn only_consumer(g: &Graph, c: &Ctx, v: ValueId) -> Option<NodeId> {
    if c.uses[v] != 1 || g.is_output(v) {
        return None;
    }
    c.consumers[v].first().copied()
}

/// Whether `a` holds `x`'s real values: `x` itself, or `x` converted to another encoding (a
/// QDQ model whose squaring reads the value at one encoding and the product at another, as
/// PT2E makes of an embedding's output read by an annotated Mul and an unannotated Pow).
fn same_reals(g: &Graph, c: &Ctx, a: ValueId, x: ValueId) -> bool {
    a == x
        || c.producers[a]
            .is_some_and(|p| g.nodes[p].op_type == REQUANTIZE && g.nodes[p].input(0) == Some(x))
}

fn other_input(n: &Node, v: ValueId) -> Option<ValueId> {
    match (n.input(0), n.input(1)) {
        (Some(a), Some(b)) if a == v => Some(b),
        (Some(a), Some(b)) if b == v => Some(a),
        _ => None,
    }
}

pub fn run(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        if g.nodes[i].op_type == "ReduceMean" && try_fuse(g, i) {
            continue;
        }
        i += 1;
    }
}

fn try_fuse(g: &mut Graph, rm: NodeId) -> bool {
    let c = Ctx {
        producers: g.producers(),
        consumers: g.consumers(),
        uses: g.use_counts(),
    };
    let n = &g.nodes[rm];
    let Some(sq) = n.input(0) else { return false };
    let Some(sq_node) = c.producers[sq] else {
        return false;
    };
    let sqn = &g.nodes[sq_node];
    let x = match sqn.op_type.as_str() {
        "Pow" if scalar(g, sqn.input(1)) == Some(2.0) => sqn.input(0),
        "Mul" if sqn.input(0) == sqn.input(1) => sqn.input(0),
        _ => None,
    };
    let Some(x) = x else { return false };
    if !g.values[x].known || c.uses[sq] != 1 {
        return false;
    }
    let rank = g.shape(x).len();
    let Ok((Some(axes), true)) = crate::ops::reduce::reduce::reduce_params(g, n) else {
        return false;
    };
    if axes != [rank - 1] {
        return false;
    }
    let Some(ms) = n.output(0) else { return false };
    let Some(add) = only_consumer(g, &c, ms).filter(|&k| g.nodes[k].op_type == "Add") else {
        return false;
    };
    let Some(eps) = other_input(&g.nodes[add], ms).and_then(|v| scalar(g, Some(v))) else {
        return false;
    };
    let Some(av) = g.nodes[add].output(0) else {
        return false;
    };
    let Some(sqrt) = only_consumer(g, &c, av).filter(|&k| g.nodes[k].op_type == "Sqrt") else {
        return false;
    };
    let Some(rms) = g.nodes[sqrt].output(0) else {
        return false;
    };
    let Some(next) = only_consumer(g, &c, rms) else {
        return false;
    };
    let nn = &g.nodes[next];
    // The value the normalised product reads, which the fused node reads.
    let mut x_in = x;
    let normed = match nn.op_type.as_str() {
        "Div"
            if nn.input(1) == Some(rms) && nn.input(0).is_some_and(|a| same_reals(g, &c, a, x)) =>
        {
            x_in = nn.input(0).expect("checked");
            nn.output(0)
        }
        "Reciprocal" | "Div" => {
            if nn.op_type == "Div"
                && (nn.input(1) != Some(rms) || scalar(g, nn.input(0)) != Some(1.0))
            {
                return false;
            }
            let Some(r) = nn.output(0) else { return false };
            let Some(m) = only_consumer(g, &c, r).filter(|&k| g.nodes[k].op_type == "Mul") else {
                return false;
            };
            match other_input(&g.nodes[m], r) {
                Some(a) if same_reals(g, &c, a, x) => x_in = a,
                _ => return false,
            }
            g.nodes[m].output(0)
        }
        _ => None,
    };
    let Some(mut out) = normed else { return false };
    let d = g.shape(x)[rank - 1];
    let dt = g.dtype(x);
    let mut weight = None;
    if let Some(m) = only_consumer(g, &c, out).filter(|&k| g.nodes[k].op_type == "Mul") {
        if let Some(w) = other_input(&g.nodes[m], out) {
            if g.konst(w).is_some_and(|t| t.shape == [d] && t.dtype == dt) {
                weight = Some(w);
                out = g.nodes[m].output(0).expect("Mul has an output");
            }
        }
    }
    let w = match weight {
        Some(w) => w,
        None => {
            if !dt.is_float() {
                return false;
            }
            g.add_const(
                "rmsnorm_ones",
                Tensor::from_f64_as(dt, vec![d], &vec![1.0; d]),
            )
        }
    };
    if dt != DType::F32 && dt != DType::F16 {
        return false;
    }
    let mut fused = Node::new(format!("{}_rmsnorm", g.nodes[rm].name), "RMSNormalization")
        .with_attr("epsilon", Attr::Float(eps as f32))
        .with_attr("axis", Attr::Int(-1));
    fused.inputs = vec![Some(x_in), Some(w)];
    // The old tail is disconnected by taking its output value; dce removes the rest.
    let producers = g.producers();
    let Some(tail) = producers[out] else {
        return false;
    };
    let dead = g.add_value(&format!("{}_unfused", g.values[out].name));
    for o in g.nodes[tail].outputs.iter_mut().flatten() {
        if *o == out {
            *o = dead;
        }
    }
    fused.outputs = vec![Some(out)];
    let name = g.unique_node_name(&fused.name);
    fused.name = name;
    g.nodes.insert(tail + 1, fused);
    crate::passes::dce::run(g);
    true
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn the_product_reading_x_at_another_encoding_is_fused() {
        // PT2E's first RMSNorm of a decoder: the embedding is squared at its own encoding and
        // multiplied at the Mul's (a second QDQ pair, a Convert). One quantized RmsNorm.
        let s = |v: f32| Tensor::scalar_f32(v);
        let u16 = |v: i64| Tensor::from_i64_as(DType::U16, vec![], &[v]);
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 4])
            .init("s1", s(0.001))
            .init("z1", u16(32768))
            .init("s2", s(0.0009))
            .init("z2", u16(32000))
            .init("ys", s(0.0001))
            .init("two", s(2.0))
            .init("eps", s(1e-6))
            .init("w", Tensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]))
            .node("QuantizeLinear", &["x", "s1", "z1"], &["q1"], &[])
            .node("DequantizeLinear", &["q1", "s1", "z1"], &["x1"], &[])
            .node("QuantizeLinear", &["x1", "s2", "z2"], &["q2"], &[])
            .node("DequantizeLinear", &["q2", "s2", "z2"], &["x2"], &[])
            .node("Pow", &["x1", "two"], &["sq"], &[])
            .node("ReduceMean", &["sq"], &["ms"], &[("axes", A::Is(vec![-1]))])
            .node("Add", &["ms", "eps"], &["a"], &[])
            .node("Sqrt", &["a"], &["r"], &[])
            .node("Reciprocal", &["r"], &["inv"], &[])
            .node("Mul", &["x2", "inv"], &["n"], &[])
            .node("Mul", &["n", "w"], &["m"], &[])
            .node("QuantizeLinear", &["m", "ys", "z1"], &["mq"], &[])
            .node("DequantizeLinear", &["mq", "ys", "z1"], &["y"], &[])
            .output("y");
        let p = crate::ops::test_util::lower(&b);
        assert_eq!(
            p.op_types(),
            ["Quantize", "Convert", "RmsNorm", "Dequantize"],
            "{}",
            p.dump()
        );
    }

    #[test]
    fn llama_rmsnorm_is_fused() {
        let mut g = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 4])
            .init("two", Tensor::scalar_f32(2.0))
            .init("eps", Tensor::scalar_f32(1e-6))
            .init("w", Tensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]))
            .node("Pow", &["x", "two"], &["sq"], &[])
            .node(
                "ReduceMean",
                &["sq"],
                &["ms"],
                &[("axes", A::Is(vec![-1])), ("keepdims", A::I(1))],
            )
            .node("Add", &["ms", "eps"], &["a"], &[])
            .node("Sqrt", &["a"], &["r"], &[])
            .node("Reciprocal", &["r"], &["inv"], &[])
            .node("Mul", &["x", "inv"], &["n"], &[])
            .node("Mul", &["n", "w"], &["y"], &[])
            .output("y")
            .load()
            .graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g);
        assert_eq!(
            g.dump(),
            "RMSNormalization(x, w) axis=-1 epsilon=0.000001 -> y:f32[1, 3, 4]\noutputs: y\n"
        );
    }

    #[test]
    fn shared_intermediate_blocks_fusion() {
        let mut g = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4])
            .init("eps", Tensor::scalar_f32(1e-6))
            .node("Mul", &["x", "x"], &["sq"], &[])
            .node("ReduceMean", &["sq"], &["ms"], &[("axes", A::Is(vec![-1]))])
            .node("Add", &["ms", "eps"], &["a"], &[])
            .node("Sqrt", &["a"], &["r"], &[])
            .node("Div", &["x", "r"], &["y"], &[])
            .output("y")
            .output("ms")
            .load()
            .graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g);
        assert_eq!(g.nodes.len(), 5);
    }
}
