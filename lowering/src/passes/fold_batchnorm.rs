//! Folds an inference BatchNormalization into the Conv that feeds it.
//!
//! `y = (conv(x, W) + B - mean) * s + beta` with `s = gamma / sqrt(var + eps)` equals
//! `conv(x, W * s) + (B - mean) * s + beta`, with `s` applied per output channel.

use crate::dtype::DType;
use crate::ir::tensor::Tensor;
use crate::ir::Graph;

pub fn run(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        if try_fold(g, i) {
            continue;
        }
        i += 1;
    }
}

fn try_fold(g: &mut Graph, bn_idx: usize) -> bool {
    let bn = &g.nodes[bn_idx];
    if bn.op_type != "BatchNormalization" || bn.outputs.iter().skip(1).any(Option::is_some) {
        return false;
    }
    let Some(c) = bn.input(0) else { return false };
    let producers = g.producers();
    let Some(ci) = producers[c] else { return false };
    let conv = &g.nodes[ci];
    if conv.op_type != "Conv" || g.use_counts()[c] != 1 || g.is_output(c) {
        return false;
    }
    let params: Option<Vec<Vec<f64>>> = (1..5)
        .map(|k| bn.input(k).and_then(|v| g.konst(v)).map(Tensor::to_f64))
        .collect();
    let Some(params) = params else { return false };
    let Some(w) = conv.input(1).and_then(|v| g.konst(v)).cloned() else {
        return false;
    };
    if w.dtype != DType::F32 && w.dtype != DType::F16 {
        return false;
    }
    let eps = bn.attr_f("epsilon", 1e-5).unwrap_or(1e-5) as f64;
    let cout = w.shape[0];
    if params.iter().any(|p| p.len() != cout) {
        return false;
    }
    let (gamma, beta, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
    let s: Vec<f64> = (0..cout)
        .map(|o| gamma[o] / (var[o] + eps).sqrt())
        .collect();
    let per = w.numel() / cout.max(1);
    let wv = w.to_f64();
    let nw: Vec<f64> = wv
        .iter()
        .enumerate()
        .map(|(k, &x)| x * s[k / per])
        .collect();
    let b0 = conv
        .input(2)
        .and_then(|v| g.konst(v))
        .map(Tensor::to_f64)
        .unwrap_or_else(|| vec![0.0; cout]);
    let nb: Vec<f64> = (0..cout)
        .map(|o| (b0[o] - mean[o]) * s[o] + beta[o])
        .collect();
    let y = bn.output(0).expect("checked");
    let wname = format!("{}_bnfold_w", g.value(conv.input(1).unwrap()).name);
    let bname = format!("{}_bnfold_b", conv.name);
    let w2 = g.add_const(&wname, Tensor::from_f64_as(w.dtype, w.shape.clone(), &nw));
    let b2 = g.add_const(&bname, Tensor::from_f64_as(w.dtype, vec![cout], &nb));
    let conv = &mut g.nodes[ci];
    conv.inputs.resize(3, None);
    conv.inputs[1] = Some(w2);
    conv.inputs[2] = Some(b2);
    conv.outputs[0] = Some(y);
    g.nodes.remove(bn_idx);
    true
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::testing::ModelBuilder;

    #[test]
    fn conv_bn_becomes_one_conv() {
        let mut g = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 1, 3, 3])
            .init("w", Tensor::from_f32(vec![2, 1, 1, 1], &[1.0, 2.0]))
            .init("gamma", Tensor::from_f32(vec![2], &[2.0, 1.0]))
            .init("beta", Tensor::from_f32(vec![2], &[0.5, 0.0]))
            .init("mean", Tensor::from_f32(vec![2], &[1.0, 0.0]))
            .init("var", Tensor::from_f32(vec![2], &[4.0, 1.0]))
            .node("Conv", &["x", "w"], &["c"], &[])
            .node(
                "BatchNormalization",
                &["c", "gamma", "beta", "mean", "var"],
                &["y"],
                &[("epsilon", crate::testing::A::F(0.0))],
            )
            .output("y")
            .load()
            .graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g);
        assert_eq!(g.nodes.len(), 1);
        let n = &g.nodes[0];
        assert_eq!(
            g.konst(n.input(1).unwrap()).unwrap().to_f64(),
            vec![1.0, 2.0]
        );
        assert_eq!(
            g.konst(n.input(2).unwrap()).unwrap().to_f64(),
            vec![-0.5, 0.0]
        );
        assert_eq!(n.output(0), Some(g.name_map()["y"]));
    }
}
