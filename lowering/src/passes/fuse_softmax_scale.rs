//! Folds a constant scalar scale of a Softmax's (or LogSoftmax's) input into QNN's `beta`:
//! `Softmax(Mul(x, c))` and `Softmax(Div(x, c))` become one Softmax of `x` with beta `c` or
//! `1 / c`, which the softmax rule reads from the attribute `BETA` (not an ONNX attribute).
//! Attention without a mask writes its `1/√d` scale this way (ViT, DeiT, SegFormer); ONNX
//! Runtime's QNN EP folds it the same way, and on the emulated HTP every elementwise op left
//! in a graph costs a dispatch (docs/graph-quality.md).

use crate::ir::{Attr, Graph};
use crate::ops::activation::softmax::BETA;

pub fn run(g: &mut Graph) {
    let producers = g.producers();
    let uses = g.use_counts();
    let mut changed = false;
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        if !matches!(n.op_type.as_str(), "Softmax" | "LogSoftmax") || n.attrs.contains_key(BETA) {
            continue;
        }
        let Some(s) = n.input(0) else { continue };
        if uses[s] != 1 || g.is_output(s) {
            continue;
        }
        let Some(p) = producers[s] else { continue };
        let m = &g.nodes[p];
        let (Some(a), Some(b)) = (m.input(0), m.input(1)) else {
            continue;
        };
        let scalar = |v| g.konst(v).filter(|t| t.numel() == 1).map(|t| t.get_f64(0));
        let (x, beta) = match m.op_type.as_str() {
            "Mul" => match (scalar(a), scalar(b)) {
                (_, Some(c)) => (a, c),
                (Some(c), _) => (b, c),
                _ => continue,
            },
            "Div" => match scalar(b) {
                Some(c) if c != 0.0 => (a, 1.0 / c),
                _ => continue,
            },
            _ => continue,
        };
        // The scalar must not broadcast x to a bigger shape or another dtype; beta is float32.
        let (vx, vs) = (&g.values[x], &g.values[s]);
        let fits = vx.known && vs.known && vx.shape == vs.shape && vx.dtype == vs.dtype;
        if !fits || !vs.dtype.is_float() || !beta.is_finite() || beta == 0.0 {
            continue;
        }
        let n = &mut g.nodes[i];
        n.inputs[0] = Some(x);
        n.attrs.insert(BETA.to_string(), Attr::Float(beta as f32));
        changed = true;
    }
    if changed {
        crate::passes::dce::run(g);
    }
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::testing::{ModelBuilder, A};

    fn attention(op: &str, c: f32) -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .init("c", Tensor::scalar_f32(c))
            .node(op, &["x", "c"], &["s"], &[])
            .node("Softmax", &["s"], &["y"], &[("axis", A::I(-1))])
            .output("y")
    }

    #[test]
    fn scale_becomes_beta() {
        for (op, c, beta) in [("Mul", 0.125, "0.125f"), ("Div", 8.0, "0.125f")] {
            let p = crate::ops::test_util::lower(&attention(op, c));
            assert_eq!(p.op_types(), vec!["Softmax"], "{op}");
            assert!(p.dump().contains(&format!("beta={beta}")), "{}", p.dump());
        }
    }

    #[test]
    fn scale_read_elsewhere_is_kept() {
        let b = attention("Mul", 0.125).output("s");
        let p = crate::ops::test_util::lower(&b);
        assert_eq!(p.op_types(), vec!["ElementWiseMultiply", "Softmax"]);
    }

    #[test]
    fn broadcasting_scale_is_kept() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("c", Tensor::from_f32(vec![1, 1], &[0.5]))
            .node("Mul", &["x", "c"], &["s"], &[])
            .node("Softmax", &["s"], &["y"], &[])
            .output("y");
        let p = crate::ops::test_util::lower(&b);
        assert!(p.dump().contains("beta=1f"), "{}", p.dump());
    }

    #[test]
    fn scaled_softmax_of_conv_channels_is_one_softmax() {
        // A scalar Mul between a Conv and a Softmax over its channels (NCHW) goes either into
        // the Softmax's beta or into the Conv's weights; no multiply is left either way.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 6, 6])
            .init(
                "w",
                Tensor::from_f32(vec![8, 4, 1, 1], &crate::testing::rand_f32(1, 32)),
            )
            .init("c", Tensor::scalar_f32(0.125))
            .node("Conv", &["x", "w"], &["v"], &[])
            .node("Mul", &["v", "c"], &["s"], &[])
            .node("Softmax", &["s"], &["y"], &[("axis", A::I(1))])
            .output("y");
        let p = crate::ops::test_util::lower(&b);
        assert_eq!(
            p.op_types(),
            ["Transpose", "Conv2d", "Softmax", "Transpose"],
            "{}",
            p.dump()
        );
    }
}
