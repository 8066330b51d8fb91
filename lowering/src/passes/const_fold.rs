//! Shape inference plus constant folding, in one topological sweep, by each node's registry
//! entry ([`crate::ops::OpDef`]): its `infer`, then its `fold`.
//!
//! torch exports shape arithmetic (Shape → Gather → Unsqueeze → Concat → Reshape, Range,
//! ConstantOfShape, ...) that QNN cannot run; with static input shapes all of it folds to
//! constants here. A node is folded when its inputs are constant (or, for Shape/Size, when its
//! input's shape is known) and its output is small enough to evaluate on the host.

use crate::error::{LowerError, Result};
use crate::ir::tensor::{checked_numel, numel, Tensor};
use crate::ir::{Graph, Node};
use crate::ops::infer::{In, Out};
use crate::ops::Fold;

/// Outputs larger than this are left to the device rather than evaluated on the host.
const FOLD_LIMIT: usize = 1 << 24;

/// Infers every node's outputs and folds constant nodes. Returns the per-node errors; the
/// outputs of a failing node (and everything downstream) are left `known == false`.
pub fn run(g: &mut Graph) -> Vec<LowerError> {
    let mut errors = Vec::new();
    let mut dead = vec![false; g.nodes.len()];
    for (idx, is_dead) in dead.iter_mut().enumerate() {
        let node = &g.nodes[idx];
        if node.inputs.iter().flatten().any(|&v| !g.values[v].known) {
            mark_unknown(g, idx);
            continue;
        }
        let outs = match infer_node(g, node) {
            Ok(o) => o,
            Err(e) => {
                errors.push(e);
                mark_unknown(g, idx);
                continue;
            }
        };
        if outs.len() < node.outputs.len() {
            errors.push(node.err_invalid(format!(
                "has {} outputs but the op produces {}",
                node.outputs.len(),
                outs.len()
            )));
            mark_unknown(g, idx);
            continue;
        }
        for (slot, (dt, shape)) in node.outputs.clone().iter().zip(outs.iter()) {
            if let Some(v) = slot {
                let val = &mut g.values[*v];
                val.dtype = *dt;
                val.shape = shape.clone();
                val.known = true;
                val.konst = None;
            }
        }
        let node = &g.nodes[idx];
        match fold(g, node, &outs) {
            Ok(Some(ts)) => {
                for (slot, t) in node.outputs.clone().iter().zip(ts) {
                    if let Some(v) = slot {
                        g.set_const(*v, t);
                    }
                }
                *is_dead = true;
            }
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    let mut i = 0;
    g.nodes.retain(|_| {
        i += 1;
        !dead[i - 1]
    });
    errors
}

/// The outputs of `n`, from its registry entry's `infer`.
pub fn infer_node(g: &Graph, n: &Node) -> Result<Vec<Out>> {
    if !n.domain.is_empty() {
        return Err(n.err_op(format!("domain '{}' is not supported", n.domain)));
    }
    let def =
        crate::ops::def(&n.op_type).ok_or_else(|| n.err_op("no shape inference for this op"))?;
    let outs = (def.infer)(&In { g, n })?;
    for (dt, s) in &outs {
        if checked_numel(s, *dt).is_none() {
            return Err(n.err_invalid(format!(
                "output shape {s:?} of {dt} exceeds the 4 GiB tensor limit"
            )));
        }
    }
    Ok(outs)
}

fn mark_unknown(g: &mut Graph, idx: usize) {
    for v in g.nodes[idx].outputs.clone().into_iter().flatten() {
        g.values[v].known = false;
        g.values[v].konst = None;
    }
}

/// Evaluates `node` on the host with its registry entry's `fold`, if it has one and the
/// outputs (`outs`, inferred) are small enough.
pub fn fold(g: &Graph, node: &Node, outs: &[Out]) -> Result<Option<Vec<Tensor>>> {
    let Some(f) = crate::ops::def(&node.op_type).and_then(|d| d.fold) else {
        return Ok(None);
    };
    if outs.iter().any(|(_, s)| numel(s) > FOLD_LIMIT) {
        return Ok(None);
    }
    let x = In { g, n: node };
    match f {
        Fold::Shapes(f) => f(&x, outs).map(Some),
        Fold::Values(f) => {
            let mut ins: Vec<&Tensor> = Vec::new();
            for v in node.inputs.iter().flatten() {
                match g.konst(*v) {
                    Some(t) => ins.push(t),
                    None => return Ok(None),
                }
            }
            if ins.is_empty() {
                return Ok(None);
            }
            f(&x, outs, &ins)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::testing::{ModelBuilder, A};

    fn fold_model(b: ModelBuilder) -> Graph {
        let mut g = b.load().graph;
        let errs = run(&mut g);
        assert!(errs.is_empty(), "{errs:?}");
        crate::passes::dce::run(&mut g);
        g
    }

    #[test]
    fn torch_shape_chain_folds_to_static_reshape() {
        // x.view(x.size(0), -1) as torch exports it.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .node("Shape", &["x"], &["s"], &[])
            .node(
                "Constant",
                &[],
                &["zero"],
                &[("value", A::T(Tensor::from_i64(vec![], &[0])))],
            )
            .node("Gather", &["s", "zero"], &["n"], &[("axis", A::I(0))])
            .node(
                "Constant",
                &[],
                &["ax"],
                &[("value", A::T(Tensor::from_i64(vec![1], &[0])))],
            )
            .node("Unsqueeze", &["n", "ax"], &["n1"], &[])
            .node(
                "Constant",
                &[],
                &["m1"],
                &[("value", A::T(Tensor::from_i64(vec![1], &[-1])))],
            )
            .node("Concat", &["n1", "m1"], &["shape"], &[("axis", A::I(0))])
            .node("Reshape", &["x", "shape"], &["y"], &[])
            .output("y");
        let g = fold_model(b);
        assert_eq!(g.dump(), "Reshape(x, shape) -> y:f32[2, 12]\noutputs: y\n");
        let shape = g.name_map()["shape"];
        assert_eq!(g.konst(shape).unwrap().to_i64(), vec![2, -1]);
    }

    #[test]
    fn range_constant_of_shape_cast_slice_fold() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 6])
            .node("Shape", &["x"], &["s"], &[])
            .init("st", Tensor::from_i64(vec![1], &[1]))
            .init("en", Tensor::from_i64(vec![1], &[2]))
            .node("Slice", &["s", "st", "en"], &["len1"], &[])
            .node("Squeeze", &["len1"], &["len"], &[])
            .init("zero", Tensor::from_i64(vec![], &[0]))
            .init("one", Tensor::from_i64(vec![], &[1]))
            .node("Range", &["zero", "len", "one"], &["r"], &[])
            .node("Cast", &["r"], &["rf"], &[("to", A::I(1))])
            .node(
                "ConstantOfShape",
                &["s"],
                &["ones"],
                &[("value", A::T(Tensor::from_f32(vec![1], &[1.0])))],
            )
            .node("Mul", &["ones", "rf"], &["w"], &[])
            .node("Add", &["x", "w"], &["y"], &[])
            .output("y");
        let g = fold_model(b);
        assert_eq!(g.nodes.len(), 1);
        let w = g.name_map()["w"];
        assert_eq!(
            g.konst(w).unwrap().to_f64(),
            vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        );
        assert_eq!(g.konst(w).unwrap().shape, vec![1, 6]);
    }

    #[test]
    fn transpose_and_where_fold() {
        let t = Tensor::from_f32(vec![2, 3], &[1., 2., 3., 4., 5., 6.]);
        let tt = t.transpose(&[1, 0]);
        assert_eq!(tt.to_f64(), vec![1., 4., 2., 5., 3., 6.]);
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[3])
            .init("c", Tensor::from_i64_as(DType::Bool, vec![3], &[1, 0, 1]))
            .init("a", Tensor::from_f32(vec![3], &[1., 2., 3.]))
            .init("b", Tensor::from_f32(vec![1], &[9.]))
            .node("Where", &["c", "a", "b"], &["w"], &[])
            .node("Add", &["x", "w"], &["y"], &[])
            .output("y");
        let g = fold_model(b);
        assert_eq!(
            g.konst(g.name_map()["w"]).unwrap().to_f64(),
            vec![1., 9., 3.]
        );
    }

    #[test]
    fn dynamic_reshape_shape_is_reported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .input("s", DType::I64, &[2])
            .node("Reshape", &["x", "s"], &["y"], &[])
            .node("Relu", &["y"], &["z"], &[])
            .output("z");
        let mut g = b.load().graph;
        let errs = run(&mut g);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0]
                .to_string()
                .contains("input 'shape' must be a constant"),
            "{}",
            errs[0]
        );
        assert!(!g.values[g.name_map()["z"]].known);
    }

    #[test]
    fn unknown_op_is_unsupported() {
        let mut g = Graph::default();
        g.opsets.insert(String::new(), 17);
        g.add_typed("x", DType::F32, vec![1]);
        let mut n = Node::new("n", "FancyOp");
        n.inputs = vec![Some(0)];
        let e = infer_node(&g, &n).unwrap_err().to_string();
        assert_eq!(e, "Node \"n\" (FancyOp): no shape inference for this op");
    }
}
