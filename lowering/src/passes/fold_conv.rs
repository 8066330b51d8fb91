//! Folds per-channel affine maps into the Conv next to them, so that they cost nothing at run
//! time.
//!
//! After a Conv: an inference BatchNormalization, `y = (conv(x, W) + B - mean) * s + beta` with
//! `s = gamma / sqrt(var + eps)`, equals `conv(x, W * s) + B * s + (beta - mean * s)`, `s`
//! applied per output channel; a `Mul` or an `Add` by a constant that is a scalar or one value
//! per output channel is the same fold with scale `k` or shift `k`.
//!
//! Before a Conv: `conv(x * k, W)` equals `conv(x, W * k)`, `k` a scalar or one value per input
//! channel; without padding also `conv(x + k, W)` equals `conv(x, W) + Σ W * k` (summed over
//! the input channels and the kernel). With padding the padded zeros would not be shifted, so
//! such an Add stays, but a Mul before it moves into the weights: `s x + b = s (x + b / s)`.
//!
//! PaddleOCR's PP-LCNet backbones (rapidocr's recognizer) put a scalar `Mul`, `Add` pair (a
//! "learnable affine block") after every Conv and after every HardSwish; on the emulated HTP
//! each of those element-wise ops cost 3-10x the Conv next to it (docs/graph-quality.md).

use crate::dtype::DType;
use crate::ir::tensor::Tensor;
use crate::ir::{Graph, NodeId, ValueId};

pub fn run(g: &mut Graph) {
    loop {
        let mut changed = false;
        let mut i = 0;
        while i < g.nodes.len() {
            // Each fold removes one node, so `i` is looked at again (after a fold before a
            // Conv, it is the node after that Conv; the next sweep sees the Conv again).
            if fold_after(g, i) || fold_before(g, i) {
                changed = true;
                continue;
            }
            i += 1;
        }
        if !changed {
            break;
        }
    }
}

/// A float Conv of the ONNX domain with constant weights (and bias, if any), not quantized:
/// its weights.
fn foldable_conv(g: &Graph, ci: NodeId) -> Option<Tensor> {
    let conv = &g.nodes[ci];
    if conv.op_type != "Conv" || !conv.domain.is_empty() || conv.quantized {
        return None;
    }
    if conv.input(2).is_some_and(|b| g.konst(b).is_none()) {
        return None;
    }
    let w = g.konst(conv.input(1)?)?;
    (matches!(w.dtype, DType::F32 | DType::F16) && !w.shape.is_empty() && w.numel() > 0)
        .then(|| w.clone())
}

/// `t`'s values, one per channel, when it broadcasts against a rank-`rank` `[N, C, ...]`
/// tensor along the channel axis only: a scalar, `[1, C, 1, 1]`, `[C, 1, 1]` (not `[C]`, which
/// is the last axis). Finite floats only.
fn per_channel(t: &Tensor, rank: usize, c: usize) -> Option<Vec<f64>> {
    if !matches!(t.dtype, DType::F32 | DType::F16) || t.shape.len() > rank || rank < 2 {
        return None;
    }
    let off = rank - t.shape.len();
    let channel_only = t
        .shape
        .iter()
        .enumerate()
        .all(|(j, &d)| d == 1 || (j + off == 1 && d == c));
    let v = t.to_f64();
    if !channel_only || v.is_empty() || v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    Some(if v.len() == 1 { vec![v[0]; c] } else { v })
}

/// A `Mul` or `Add` node with one constant operand that is a per-channel map (per
/// [`per_channel`]) of its other operand: (the other operand, the constant's values).
fn affine_operand(g: &Graph, n: NodeId) -> Option<(ValueId, Vec<f64>)> {
    let node = &g.nodes[n];
    if !matches!(node.op_type.as_str(), "Mul" | "Add") || node.quantized {
        return None;
    }
    let (a, b) = (node.input(0)?, node.input(1)?);
    let y = node.output(0)?;
    let (x, k) = match (g.konst(a), g.konst(b)) {
        (None, Some(k)) => (a, k),
        (Some(k), None) => (b, k),
        _ => return None,
    };
    let shape = g.shape(x);
    // The constant neither broadcasts x up nor changes its dtype.
    if g.shape(y) != shape || g.dtype(y) != g.dtype(x) || shape.len() < 2 {
        return None;
    }
    Some((x, per_channel(k, shape.len(), shape[1])?))
}

/// A value that only `uses` uses once, unquantized, not a graph output: one that may vanish.
fn private(g: &Graph, uses: &[usize], v: ValueId) -> bool {
    uses[v] == 1 && !g.is_output(v) && g.values[v].quant.is_none()
}

/// Node `i` is a BatchNormalization, `Mul` or `Add` applied per channel to a Conv's only use:
/// folds it into the Conv's weights and bias.
fn fold_after(g: &mut Graph, i: NodeId) -> bool {
    let n = &g.nodes[i];
    let (c, scale_shift) = match n.op_type.as_str() {
        "BatchNormalization" => {
            if n.outputs.iter().skip(1).any(Option::is_some) {
                return false;
            }
            let Some(c) = n.input(0) else { return false };
            (c, None)
        }
        "Mul" | "Add" => {
            let Some((c, k)) = affine_operand(g, i) else {
                return false;
            };
            let cout = k.len();
            let s = if n.op_type == "Mul" {
                (k, vec![0.0; cout])
            } else {
                (vec![1.0; cout], k)
            };
            (c, Some(s))
        }
        _ => return false,
    };
    let Some(y) = n.output(0) else { return false };
    let Some(ci) = g.producers()[c] else {
        return false;
    };
    if !private(g, &g.use_counts(), c) {
        return false;
    }
    let Some(w) = foldable_conv(g, ci) else {
        return false;
    };
    let cout = w.shape[0];
    let Some((scale, shift)) = scale_shift.or_else(|| batchnorm_affine(g, i, cout)) else {
        return false;
    };
    if scale.len() != cout {
        return false;
    }
    let per = w.numel() / cout;
    let nw: Vec<f64> = w
        .to_f64()
        .iter()
        .enumerate()
        .map(|(k, &x)| x * scale[k / per])
        .collect();
    let b0 = bias(g, ci, cout);
    let nb: Vec<f64> = (0..cout).map(|o| b0[o] * scale[o] + shift[o]).collect();
    set_weights(g, ci, &w, nw, nb);
    g.nodes[ci].outputs[0] = Some(y);
    g.nodes.remove(i);
    true
}

/// BatchNormalization node `i`'s per-channel scale and shift, when its parameters are
/// constants of `c` values each.
fn batchnorm_affine(g: &Graph, i: NodeId, c: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    let bn = &g.nodes[i];
    let params: Vec<Vec<f64>> = (1..5)
        .map(|k| bn.input(k).and_then(|v| g.konst(v)).map(Tensor::to_f64))
        .collect::<Option<_>>()?;
    if params.iter().any(|p| p.len() != c) {
        return None;
    }
    let eps = bn.attr_f("epsilon", 1e-5).unwrap_or(1e-5) as f64;
    let (gamma, beta, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
    let s: Vec<f64> = (0..c).map(|o| gamma[o] / (var[o] + eps).sqrt()).collect();
    let shift = (0..c).map(|o| beta[o] - mean[o] * s[o]).collect();
    Some((s, shift))
}

/// Node `i` is a Conv whose input is a `Mul` or `Add` applied per input channel, used only
/// there: folds a `Mul` into the Conv's weights, and an `Add` into its bias when the Conv has
/// no padding. Before a padded Conv, `Add(Mul(x, s), b)` becomes `Add(x, b / s)` with `s` in
/// the weights (`s x + b = s (x + b / s)`, for `s` without zeros): one op instead of two.
fn fold_before(g: &mut Graph, i: NodeId) -> bool {
    let Some(w) = foldable_conv(g, i) else {
        return false;
    };
    let conv = &g.nodes[i];
    let unpadded = conv
        .attr_s("auto_pad", "NOTSET")
        .is_ok_and(|p| p == "NOTSET" || p == "VALID")
        && conv
            .attr_ints("pads", &[])
            .is_ok_and(|p| p.iter().all(|&x| x == 0));
    let group = conv.attr_i("group", 1).unwrap_or(0);
    let Some(x) = conv.input(0) else { return false };
    let producers = g.producers();
    let uses = g.use_counts();
    let Some(p) = producers[x] else { return false };
    if group < 1 || !private(g, &uses, x) {
        return false;
    }
    let Some((a, k)) = affine_operand(g, p) else {
        return false;
    };
    let (cout, cin_g, group) = (
        w.shape[0],
        w.shape.get(1).copied().unwrap_or(0),
        group as usize,
    );
    if cin_g * group != k.len() || cout % group != 0 || cin_g == 0 {
        return false;
    }
    let per = w.numel() / (cout * cin_g);
    // The input channel that weight element `e` multiplies.
    let channel = |e: usize| {
        let o = e / (cin_g * per);
        (o / (cout / group)) * cin_g + (e / per) % cin_g
    };
    let wv = w.to_f64();
    let scaled = |s: &[f64]| -> Vec<f64> {
        wv.iter()
            .enumerate()
            .map(|(e, &x)| x * s[channel(e)])
            .collect()
    };
    let mut nb = bias(g, i, cout);
    if g.nodes[p].op_type == "Mul" {
        set_weights(g, i, &w, scaled(&k), nb);
        g.nodes[i].inputs[0] = Some(a);
        g.nodes.remove(p);
        return true;
    }
    if unpadded {
        for (e, &x) in wv.iter().enumerate() {
            nb[e / (cin_g * per)] += x * k[channel(e)];
        }
        set_weights(g, i, &w, wv, nb);
        g.nodes[i].inputs[0] = Some(a);
        g.nodes.remove(p);
        return true;
    }
    // Padded: the Add stays, a Mul before it moves into the weights.
    let Some(m) = producers[a].filter(|&m| g.nodes[m].op_type == "Mul" && private(g, &uses, a))
    else {
        return false;
    };
    let Some((a0, s)) = affine_operand(g, m) else {
        return false;
    };
    if s.contains(&0.0) {
        return false;
    }
    let shifted: Vec<f64> = k.iter().zip(&s).map(|(b, s)| b / s).collect();
    let Some(kin) = g.nodes[p]
        .inputs
        .iter()
        .position(|v| v.is_some_and(|v| g.konst(v).is_some()))
    else {
        return false;
    };
    let kt = g
        .konst(g.nodes[p].inputs[kin].expect("found"))
        .expect("found");
    let shape = if shifted.iter().all(|&v| v == shifted[0]) {
        vec![]
    } else {
        let mut sh = vec![1; g.shape(x).len() - 1];
        sh[0] = shifted.len();
        sh
    };
    let shifted = if shape.is_empty() {
        vec![shifted[0]]
    } else {
        shifted
    };
    let b2 = Tensor::from_f64_as(kt.dtype, shape, &shifted);
    let b2 = g.add_const(&format!("{}_unscaled", g.nodes[p].name), b2);
    set_weights(g, i, &w, scaled(&s), nb);
    let add = &mut g.nodes[p];
    add.inputs[kin] = Some(b2);
    add.inputs[1 - kin] = Some(a0);
    g.nodes.remove(m);
    true
}

/// Conv `ci`'s bias values, zeros when it has none.
fn bias(g: &Graph, ci: NodeId, cout: usize) -> Vec<f64> {
    g.nodes[ci]
        .input(2)
        .and_then(|v| g.konst(v))
        .map(Tensor::to_f64)
        .unwrap_or_else(|| vec![0.0; cout])
}

/// Gives Conv `ci` new constant weights (in `w`'s dtype and shape) and bias.
fn set_weights(g: &mut Graph, ci: NodeId, w: &Tensor, nw: Vec<f64>, nb: Vec<f64>) {
    let name = g.nodes[ci].name.clone();
    let w2 = g.add_const(
        &format!("{name}_fold_w"),
        Tensor::from_f64_as(w.dtype, w.shape.clone(), &nw),
    );
    let b2 = g.add_const(
        &format!("{name}_fold_b"),
        Tensor::from_f64_as(w.dtype, vec![nb.len()], &nb),
    );
    let conv = &mut g.nodes[ci];
    conv.inputs.resize(3, None);
    conv.inputs[1] = Some(w2);
    conv.inputs[2] = Some(b2);
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::testing::{ModelBuilder, A};

    fn folded(b: ModelBuilder) -> crate::ir::Graph {
        let mut g = b.load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        super::run(&mut g);
        g
    }

    fn weights(g: &crate::ir::Graph) -> (Vec<f64>, Vec<f64>) {
        let n = &g.nodes[0];
        let k = |i: usize| g.konst(n.input(i).unwrap()).unwrap().to_f64();
        (k(1), k(2))
    }

    #[test]
    fn conv_bn_becomes_one_conv() {
        let g = folded(
            ModelBuilder::new(17)
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
                    &[("epsilon", A::F(0.0))],
                )
                .output("y"),
        );
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(weights(&g), (vec![1.0, 2.0], vec![-0.5, 0.0]));
        assert_eq!(g.nodes[0].output(0), Some(g.name_map()["y"]));
    }

    /// PP-LCNet's Conv → scalar Mul → scalar Add, and a per-channel `[C, 1, 1]` Mul.
    #[test]
    fn scalar_and_per_channel_affines_after_a_conv_fold() {
        let g = folded(
            ModelBuilder::new(17)
                .input("x", DType::F32, &[1, 1, 3, 3])
                .init("w", Tensor::from_f32(vec![2, 1, 1, 1], &[1.0, 2.0]))
                .init("b", Tensor::from_f32(vec![2], &[1.0, -1.0]))
                .init("s", Tensor::from_f32(vec![1], &[3.0]))
                .init("t", Tensor::scalar_f32(0.5))
                .init("pc", Tensor::from_f32(vec![2, 1, 1], &[1.0, 10.0]))
                .node("Conv", &["x", "w", "b"], &["c"], &[])
                .node("Mul", &["s", "c"], &["m"], &[])
                .node("Add", &["m", "t"], &["a"], &[])
                .node("Mul", &["a", "pc"], &["y"], &[])
                .output("y"),
        );
        assert_eq!(g.nodes.len(), 1, "{}", g.dump());
        // ((W x + b) * 3 + 0.5) * pc
        assert_eq!(weights(&g), (vec![3.0, 60.0], vec![3.5, -25.0]));
    }

    #[test]
    fn affine_before_an_unpadded_grouped_conv_folds() {
        // Two groups of one input channel each, two outputs per group, 1x2 kernel.
        let g = folded(
            ModelBuilder::new(17)
                .input("x", DType::F32, &[1, 2, 1, 4])
                .init("s", Tensor::from_f32(vec![1, 2, 1, 1], &[2.0, 3.0]))
                .init("t", Tensor::scalar_f32(1.0))
                .init(
                    "w",
                    Tensor::from_f32(vec![4, 1, 1, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
                )
                .node("Mul", &["x", "s"], &["m"], &[])
                .node("Add", &["t", "m"], &["a"], &[])
                .node("Conv", &["a", "w"], &["y"], &[("group", A::I(2))])
                .output("y"),
        );
        assert_eq!(g.nodes.len(), 1, "{}", g.dump());
        assert_eq!(g.nodes[0].input(0), Some(g.name_map()["x"]));
        // W(s x + 1): weights of group 0 by 2, group 1 by 3; bias the sum of each filter.
        assert_eq!(
            weights(&g),
            (
                vec![2.0, 4.0, 6.0, 8.0, 15.0, 18.0, 21.0, 24.0],
                vec![3.0, 7.0, 11.0, 15.0]
            )
        );
    }

    /// PP-LCNet's HardSwish → scalar Mul → scalar Add → padded depthwise Conv.
    #[test]
    fn mul_before_a_padded_conv_moves_into_the_weights_through_the_add() {
        let g = folded(
            ModelBuilder::new(17)
                .input("x", DType::F32, &[1, 2, 3, 3])
                .init("s", Tensor::scalar_f32(2.0))
                .init("t", Tensor::scalar_f32(1.0))
                .init("w", Tensor::from_f32(vec![2, 1, 1, 1], &[1.0, 3.0]))
                .node("Mul", &["x", "s"], &["m"], &[])
                .node("Add", &["m", "t"], &["a"], &[])
                .node(
                    "Conv",
                    &["a", "w"],
                    &["y"],
                    &[("group", A::I(2)), ("pads", A::Is(vec![1, 1, 1, 1]))],
                )
                .output("y"),
        );
        assert_eq!(g.nodes.len(), 2, "{}", g.dump());
        let add = &g.nodes[0];
        assert_eq!(add.op_type, "Add");
        assert_eq!(add.input(0), Some(g.name_map()["x"]));
        assert_eq!(g.konst(add.input(1).unwrap()).unwrap().to_f64(), vec![0.5]);
        let conv = &g.nodes[1];
        assert_eq!(
            g.konst(conv.input(1).unwrap()).unwrap().to_f64(),
            vec![2.0, 6.0]
        );
    }

    #[test]
    fn padded_shared_or_broadcasting_affines_stay() {
        // Before a padded Conv: the padded zeros would not be shifted.
        let g = folded(
            ModelBuilder::new(17)
                .input("x", DType::F32, &[1, 1, 3, 3])
                .init("t", Tensor::scalar_f32(1.0))
                .init("w", Tensor::from_f32(vec![1, 1, 3, 3], &[1.0; 9]))
                .node("Add", &["x", "t"], &["a"], &[])
                .node(
                    "Conv",
                    &["a", "w"],
                    &["y"],
                    &[("pads", A::Is(vec![1, 1, 1, 1]))],
                )
                .output("y"),
        );
        assert_eq!(g.nodes.len(), 2);
        // A `[3]` constant runs along W, not the channels.
        let g = folded(
            ModelBuilder::new(17)
                .input("x", DType::F32, &[1, 1, 3, 3])
                .init("w", Tensor::from_f32(vec![1, 1, 1, 1], &[2.0]))
                .init("row", Tensor::from_f32(vec![3], &[1.0, 2.0, 3.0]))
                .node("Conv", &["x", "w"], &["c"], &[])
                .node("Mul", &["c", "row"], &["y"], &[])
                .output("y"),
        );
        assert_eq!(g.nodes.len(), 2);
        // The Conv's output is used twice; a Mul by another tensor is not an affine map.
        let g = folded(
            ModelBuilder::new(17)
                .input("x", DType::F32, &[1, 1, 3, 3])
                .input("z", DType::F32, &[1, 1, 3, 3])
                .init("w", Tensor::from_f32(vec![1, 1, 1, 1], &[2.0]))
                .init("s", Tensor::scalar_f32(2.0))
                .node("Conv", &["x", "w"], &["c"], &[])
                .node("Mul", &["c", "s"], &["y1"], &[])
                .node("Mul", &["c", "z"], &["y2"], &[])
                .output("y1")
                .output("y2"),
        );
        assert_eq!(g.nodes.len(), 3);
    }
}
