//! Folds the bias `Add` of a linear layer into a `Gemm`, so that it lowers to one QNN
//! `FullyConnected` with a bias instead of `FullyConnected` followed by `ElementWiseAdd`:
//!
//! - `MatMul(x, W)` with a constant 2-D `W [K, N]`, then `Add` of a constant bias of `N` elements
//!   (`[N]`, `[1, N]`, `[1, 1, N]`, in either operand order), as the TorchScript exporter writes
//!   `nn.Linear` on N-D input, becomes `Reshape(x, [M, K])` → `Gemm(·, W, bias[N])` →
//!   `Reshape(·, out shape)`; a 2-D `x` needs no Reshapes. ONNX Runtime's `MatMulAddFusion`
//!   writes the same Reshape → Gemm → Reshape, which its QNN EP maps to `FullyConnected`.
//! - `Gemm` without `C`, then `Add` of such a bias, becomes `Gemm` with the bias as `C`.
//!
//! Only float tensors of one dtype, and only when the backend's op table runs `Gemm` (and
//! `Reshape`) for that dtype. The MatMul or Gemm output must feed nothing but the Add, and the
//! Add must not broadcast past the product's shape.

use std::collections::HashMap;

use crate::dtype::DType;
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Graph, Node, NodeId};
use crate::table::OpTable;

/// A product whose bias Add can be folded.
struct Fold {
    product: NodeId,
    add: NodeId,
    bias: Tensor,
}

fn runs(table: &OpTable, op: &str, dtype: DType) -> bool {
    table
        .entry(op)
        .is_some_and(|e| e.runs() && e.has_dtype(dtype.name()))
}

fn find(
    g: &Graph,
    table: &OpTable,
    idx: NodeId,
    uses: &[usize],
    cons: &[Vec<NodeId>],
) -> Option<Fold> {
    let n = &g.nodes[idx];
    let x = n.input(0)?;
    let w = n.input(1)?;
    let y = n.output(0)?;
    let (xv, yv) = (g.value(x), g.value(y));
    if !xv.known || !yv.known || xv.konst.is_some() || !xv.dtype.is_float() {
        return None;
    }
    let dt = xv.dtype;
    match n.op_type.as_str() {
        "MatMul" => {
            let wt = g.konst(w)?;
            if wt.shape.len() != 2 || wt.dtype != dt || xv.shape.len() < 2 {
                return None;
            }
            if xv.shape.len() > 2 && !runs(table, "Reshape", dt) {
                return None;
            }
        }
        "Gemm" if n.input(2).is_none() && n.outputs.len() == 1 => {}
        _ => return None,
    }
    if !runs(table, "Gemm", dt) || uses[y] != 1 || g.is_output(y) {
        return None;
    }
    let &add = cons[y].first()?;
    let a = &g.nodes[add];
    if a.op_type != "Add" || a.inputs.len() != 2 {
        return None;
    }
    let b = match (a.input(0), a.input(1)) {
        (Some(p), Some(q)) if p == y && q != y => q,
        (Some(p), Some(q)) if q == y && p != y => p,
        _ => return None,
    };
    let out = a.output(0)?;
    let ov = g.value(out);
    if !ov.known || ov.shape != yv.shape || ov.dtype != dt {
        return None;
    }
    let bias = g.konst(b)?;
    let cols = *yv.shape.last()?;
    let row_vector = bias.shape.last() == Some(&cols) && bias.numel() == cols;
    if bias.dtype != dt || !row_vector || bias.shape.len() > yv.shape.len() {
        return None;
    }
    Some(Fold {
        product: idx,
        add,
        bias: bias.with_shape(vec![cols]),
    })
}

/// The nodes that replace `f.product` and `f.add`.
fn rewrite(g: &mut Graph, f: Fold) -> Vec<Node> {
    let p = g.nodes[f.product].clone();
    let add = &g.nodes[f.add];
    let out = add.output(0).expect("checked by find");
    let bias = g.add_const(&format!("{}_bias", add.name), f.bias);
    let mut gemm = p.clone();
    gemm.outputs = vec![Some(out)];
    if p.op_type == "Gemm" {
        gemm.inputs.resize(2, None);
        gemm.inputs.push(Some(bias));
        gemm.attrs.insert("beta".into(), Attr::Float(1.0));
        return vec![gemm];
    }
    gemm.op_type = "Gemm".into();
    gemm.attrs.clear();
    let x = p.input(0).expect("checked by find");
    let xshape = g.shape(x).to_vec();
    if xshape.len() == 2 {
        gemm.inputs = vec![Some(x), p.input(1), Some(bias)];
        return vec![gemm];
    }
    let dt = g.dtype(x);
    let k = xshape[xshape.len() - 1];
    let rows: usize = xshape[..xshape.len() - 1].iter().product();
    let oshape = g.shape(out).to_vec();
    let n = oshape[oshape.len() - 1];
    let x2 = g.add_typed(&format!("{}_rows", g.values[x].name), dt, vec![rows, k]);
    let y2 = g.add_typed(&format!("{}_gemm", g.values[out].name), dt, vec![rows, n]);
    let r_in = g.reshape_node(&format!("{}_rows", p.name), x, x2);
    gemm.inputs = vec![Some(x2), p.input(1), Some(bias)];
    gemm.outputs = vec![Some(y2)];
    let r_out = g.reshape_node(&format!("{}_unrows", p.name), y2, out);
    vec![r_in, gemm, r_out]
}

pub fn run(g: &mut Graph, table: &OpTable) {
    let uses = g.use_counts();
    let cons = g.consumers();
    let folds: Vec<Fold> = (0..g.nodes.len())
        .filter_map(|i| find(g, table, i, &uses, &cons))
        .collect();
    if folds.is_empty() {
        return;
    }
    // The replacement goes where the Add was: every input (x, W, bias) exists by then.
    let mut at_add: HashMap<NodeId, Vec<Node>> = HashMap::new();
    let mut gone = vec![false; g.nodes.len()];
    for f in folds {
        gone[f.product] = true;
        let add = f.add;
        let nodes = rewrite(g, f);
        at_add.insert(add, nodes);
    }
    let old = std::mem::take(&mut g.nodes);
    for (i, n) in old.into_iter().enumerate() {
        match at_add.remove(&i) {
            Some(new) => g.nodes.extend(new),
            None if !gone[i] => g.nodes.push(n),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::run;
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::table::OpTable;
    use crate::testing::{rand_f32, ModelBuilder, A};
    use crate::Backend;

    fn linear_3d(bias_first: bool, bias_shape: &[usize]) -> ModelBuilder {
        let add_in: &[&str] = if bias_first { &["b", "m"] } else { &["m", "b"] };
        ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 5, 8])
            .init("w", Tensor::from_f32(vec![8, 3], &rand_f32(1, 24)))
            .init("b", Tensor::from_f32(bias_shape.to_vec(), &[1., 2., 3.]))
            .node("MatMul", &["x", "w"], &["m"], &[])
            .node("Add", add_in, &["y"], &[])
            .output("y")
    }

    #[test]
    fn linear_on_3d_input_is_one_fully_connected_with_bias() {
        for (bias_first, shape) in [(true, &[3][..]), (false, &[1, 1, 3][..])] {
            let p = lower(&linear_3d(bias_first, shape));
            assert_eq!(
                p.op_types(),
                vec!["Reshape", "FullyConnected", "Reshape"],
                "{}",
                p.dump()
            );
            let d = p.dump();
            assert!(
                d.contains("FullyConnected(x_rows:f32[5, 8], static MatMul_0_w:f32[3, 8], static MatMul_0_b:f32[3]) -> y_gemm:f32[5, 3]"),
                "{d}"
            );
            assert!(d.contains("-> y:f32[1, 5, 3]"), "{d}");
        }
    }

    #[test]
    fn linear_on_2d_input_needs_no_reshape() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[5, 8])
            .init("w", Tensor::from_f32(vec![8, 3], &rand_f32(1, 24)))
            .init("b", Tensor::from_f32(vec![3], &[1., 2., 3.]))
            .node("MatMul", &["x", "w"], &["m"], &[])
            .node("Add", &["b", "m"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower(&b).dump(),
            "input x:f32[5, 8]\n\
             FullyConnected(x:f32[5, 8], static MatMul_0_w:f32[3, 8], static MatMul_0_b:f32[3]) -> y:f32[5, 3]\n\
             output y:f32[5, 3]\n"
        );
    }

    #[test]
    fn gemm_without_c_takes_the_bias() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 4])
            .init("w", Tensor::from_f32(vec![3, 4], &rand_f32(1, 12)))
            .init("b", Tensor::from_f32(vec![1, 3], &[1., 2., 3.]))
            .node(
                "Gemm",
                &["x", "w"],
                &["m"],
                &[("transB", A::I(1)), ("beta", A::F(0.5))],
            )
            .node("Add", &["b", "m"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        assert_eq!(p.op_types(), vec!["FullyConnected"], "{}", p.dump());
        assert!(p.dump().contains("static Gemm_0_b:f32[3]"), "{}", p.dump());
    }

    #[test]
    fn bias_is_folded_exactly() {
        // beta must not scale the folded bias.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 4])
            .init("w", Tensor::from_f32(vec![3, 4], &rand_f32(1, 12)))
            .init("b", Tensor::from_f32(vec![3], &[1., 2., 3.]))
            .node(
                "Gemm",
                &["x", "w"],
                &["m"],
                &[("transB", A::I(1)), ("beta", A::F(0.5))],
            )
            .node("Add", &["m", "b"], &["y"], &[])
            .output("y");
        let mut g = b.load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        run(&mut g, OpTable::get(Backend::Htp).unwrap());
        let gemm = g.nodes.iter().find(|n| n.op_type == "Gemm").unwrap();
        assert_eq!(gemm.attrs.get("beta"), Some(&crate::ir::Attr::Float(1.0)));
        let c = g.konst(gemm.input(2).unwrap()).unwrap();
        assert_eq!(c.to_f64(), vec![1., 2., 3.]);
    }

    #[test]
    fn fp16_linear_keeps_weights_and_bias_in_f16() {
        let o = crate::LowerOptions {
            fp16: true,
            ..Default::default()
        };
        let p = crate::ops::test_util::lower_with(&linear_3d(true, &[3]), &o);
        let d = p.dump();
        assert!(
            d.contains("static MatMul_0_w:f16[3, 8], static MatMul_0_b:f16[3]"),
            "{d}"
        );
        assert!(!d.contains("ElementWiseAdd"), "{d}");
    }

    #[test]
    fn product_used_twice_is_not_fused() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 5, 8])
            .init("w", Tensor::from_f32(vec![8, 3], &rand_f32(1, 24)))
            .init("b", Tensor::from_f32(vec![3], &[1., 2., 3.]))
            .node("MatMul", &["x", "w"], &["m"], &[])
            .node("Add", &["m", "b"], &["y"], &[])
            .node("Relu", &["m"], &["z"], &[])
            .output("y")
            .output("z");
        let ops = lower(&b).op_types();
        assert!(ops.contains(&"ElementWiseAdd"), "{ops:?}");
    }

    #[test]
    fn bias_that_is_not_a_row_vector_is_not_fused() {
        // [5, 3] broadcasts along rows: not a Linear bias.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 5, 8])
            .init("w", Tensor::from_f32(vec![8, 3], &rand_f32(1, 24)))
            .init("b", Tensor::from_f32(vec![5, 3], &rand_f32(2, 15)))
            .node("MatMul", &["x", "w"], &["m"], &[])
            .node("Add", &["m", "b"], &["y"], &[])
            .output("y");
        let ops = lower(&b).op_types();
        assert!(ops.contains(&"ElementWiseAdd"), "{ops:?}");
        // A bias with more dims than the product broadcasts the output up: not folded either.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[5, 8])
            .init("w", Tensor::from_f32(vec![8, 3], &rand_f32(1, 24)))
            .init("b", Tensor::from_f32(vec![1, 1, 3], &[1., 2., 3.]))
            .node("MatMul", &["x", "w"], &["m"], &[])
            .node("Add", &["m", "b"], &["y"], &[])
            .output("y");
        let ops = lower(&b).op_types();
        assert!(ops.contains(&"ElementWiseAdd"), "{ops:?}");
    }

    #[test]
    fn activation_weights_are_not_fused() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 5, 8])
            .input("w", DType::F32, &[8, 3])
            .init("b", Tensor::from_f32(vec![3], &[1., 2., 3.]))
            .node("MatMul", &["x", "w"], &["m"], &[])
            .node("Add", &["m", "b"], &["y"], &[])
            .output("y");
        let ops = lower(&b).op_types();
        assert!(!ops.contains(&"FullyConnected"), "{ops:?}");
        assert!(ops.contains(&"ElementWiseAdd"), "{ops:?}");
    }
}
