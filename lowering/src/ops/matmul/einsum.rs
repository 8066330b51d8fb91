//! Einsum — <https://onnx.ai/onnx/operators/onnx__Einsum.html>, opset 12+.
//!
//! Two-operand contractions (the forms attention code uses: `bij,bjk->bik`, `bhqd,bhkd->bhqk`,
//! `ij,jk->ik`, ...) become QNN `Transpose` → `Reshape` → `MatMul` → `Reshape` → `Transpose`:
//! labels are classified as batch (both inputs and output), rows (A and output), cols (B and
//! output) and contracted (both inputs, not output). One-operand permutations become
//! `Transpose`. Constraints: no ellipsis, no repeated labels within an operand, no label
//! summed within a single operand.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::{Param, TensorId};
use crate::qnn_names::{op, param};

pub const EINSUM: OpDef = OpDef {
    op_type: "Einsum",
    since: 12,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(einsum),
    quant: Quant::Float,
};

/// Parses an einsum equation into per-input labels and output labels (no ellipsis).
pub fn einsum_parse(n: &Node) -> Result<(Vec<Vec<char>>, Vec<char>)> {
    let eq: String = n
        .attr_s("equation", "")?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    if eq.contains("...") {
        return Err(n.err_attr("equation", "ellipsis is not supported"));
    }
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let ins: Vec<Vec<char>> = lhs.split(',').map(|s| s.chars().collect()).collect();
    if ins.iter().flatten().any(|c| !c.is_ascii_alphabetic()) {
        return Err(n.err_attr("equation", format!("cannot parse '{eq}'")));
    }
    let out = match rhs {
        Some(r) => r.chars().collect(),
        None => {
            let mut counts = std::collections::BTreeMap::new();
            for c in ins.iter().flatten() {
                *counts.entry(*c).or_insert(0) += 1;
            }
            counts
                .into_iter()
                .filter(|(_, k)| *k == 1)
                .map(|(c, _)| c)
                .collect()
        }
    };
    Ok((ins, out))
}

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let (ins, out) = einsum_parse(n)?;
    if ins.len() != n.inputs.len() {
        return Err(n.err_attr("equation", "operand count does not match the inputs"));
    }
    let mut dims = std::collections::HashMap::new();
    for (i, labels) in ins.iter().enumerate() {
        let s = x.shape(i)?;
        if s.len() != labels.len() {
            return Err(n.err_attr(
                "equation",
                format!(
                    "operand {i} has rank {} but {} labels",
                    s.len(),
                    labels.len()
                ),
            ));
        }
        for (c, &d) in labels.iter().zip(s) {
            let e = dims.entry(*c).or_insert(d);
            if *e != d && d != 1 && *e != 1 {
                return Err(n.err_invalid(format!("label '{c}' has sizes {e} and {d}")));
            }
            *e = (*e).max(d);
        }
    }
    let shape = out
        .iter()
        .map(|c| {
            dims.get(c).copied().ok_or_else(|| {
                n.err_attr(
                    "equation",
                    format!("output label '{c}' is not an input label"),
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![(x.dtype(0)?, shape)])
}

fn permute(cx: &mut LowerCx, node: &Node, x: TensorId, from: &[char], to: &[char]) -> TensorId {
    let perm: Vec<u32> = to
        .iter()
        .map(|c| from.iter().position(|f| f == c).expect("label present") as u32)
        .collect();
    if perm.iter().enumerate().all(|(i, &p)| i as u32 == p) {
        return x;
    }
    let s = cx.tshape(x);
    let shape: Vec<usize> = perm.iter().map(|&p| s[p as usize]).collect();
    let dt = cx.tensor_dtype(x);
    cx.emit(
        node,
        op::TRANSPOSE,
        vec![x],
        dt,
        &shape,
        vec![(param::PERM, Param::u32_vec(&perm))],
    )
}

pub fn einsum(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let (ins, out) = einsum_parse(node)?;
    for l in &ins {
        let mut s = l.clone();
        s.sort_unstable();
        s.dedup();
        if s.len() != l.len() {
            return Err(node.err_attr(
                "equation",
                "repeated labels within an operand are not supported",
            ));
        }
    }
    let y = cx.output(node, 0)?;
    if ins.len() == 1 {
        if ins[0].iter().any(|c| !out.contains(c)) {
            return Err(node.err_attr(
                "equation",
                "reductions within one operand are not supported",
            ));
        }
        let x = cx.input(node, 0)?;
        let perm: Vec<u32> = out
            .iter()
            .map(|c| ins[0].iter().position(|f| f == c).unwrap() as u32)
            .collect();
        cx.op(
            node,
            op::TRANSPOSE,
            vec![x],
            vec![y],
            vec![(param::PERM, Param::u32_vec(&perm))],
        );
        return Ok(());
    }
    if ins.len() != 2 {
        return Err(node.err_attr("equation", "only one or two operands are supported"));
    }
    let (la, lb) = (&ins[0], &ins[1]);
    let sa = cx.shape(node, 0);
    let sb = cx.shape(node, 1);
    let dim = |c: &char| -> usize {
        la.iter()
            .position(|x| x == c)
            .map(|i| sa[i])
            .or_else(|| lb.iter().position(|x| x == c).map(|i| sb[i]))
            .unwrap_or(1)
    };
    let batch: Vec<char> = out
        .iter()
        .copied()
        .filter(|c| la.contains(c) && lb.contains(c))
        .collect();
    let rows: Vec<char> = out
        .iter()
        .copied()
        .filter(|c| la.contains(c) && !lb.contains(c))
        .collect();
    let cols: Vec<char> = out
        .iter()
        .copied()
        .filter(|c| lb.contains(c) && !la.contains(c))
        .collect();
    let k: Vec<char> = la
        .iter()
        .copied()
        .filter(|c| lb.contains(c) && !out.contains(c))
        .collect();
    if la
        .iter()
        .chain(lb.iter())
        .any(|c| !out.contains(c) && !k.contains(c))
    {
        return Err(node.err_attr(
            "equation",
            "reductions within one operand are not supported",
        ));
    }
    for c in &batch {
        let (i, j) = (
            la.iter().position(|x| x == c).unwrap(),
            lb.iter().position(|x| x == c).unwrap(),
        );
        if sa[i] != sb[j] {
            return Err(node.err_attr(
                "equation",
                format!("broadcast batch label '{c}' is not supported"),
            ));
        }
    }
    let prod = |v: &[char]| v.iter().map(dim).product::<usize>();
    let (bn, m, n, kk) = (prod(&batch), prod(&rows), prod(&cols), prod(&k));
    let order_a: Vec<char> = batch.iter().chain(&rows).chain(&k).copied().collect();
    let order_b: Vec<char> = batch.iter().chain(&k).chain(&cols).copied().collect();
    let a = cx.input(node, 0)?;
    let b = cx.input(node, 1)?;
    let a = permute(cx, node, a, la, &order_a);
    let b = permute(cx, node, b, lb, &order_b);
    let a = cx.reshape(node, a, &[bn, m, kk]);
    let b = cx.reshape(node, b, &[bn, kk, n]);
    let dt = cx.tensor_dtype(a);
    let params = vec![
        (param::TRANSPOSE_IN0, Param::bool(false)),
        (param::TRANSPOSE_IN1, Param::bool(false)),
    ];
    let mm = cx.emit(node, op::MAT_MUL, vec![a, b], dt, &[bn, m, n], params);
    let natural: Vec<char> = batch.iter().chain(&rows).chain(&cols).copied().collect();
    let nat_shape: Vec<usize> = natural.iter().map(dim).collect();
    let r = cx.reshape(node, mm, &nat_shape);
    let perm: Vec<u32> = out
        .iter()
        .map(|c| natural.iter().position(|f| f == c).unwrap() as u32)
        .collect();
    if perm.iter().enumerate().all(|(i, &p)| i as u32 == p) {
        cx.op(node, op::RESHAPE, vec![r], vec![y], vec![]);
    } else {
        cx.op(
            node,
            op::TRANSPOSE,
            vec![r],
            vec![y],
            vec![(param::PERM, Param::u32_vec(&perm))],
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    fn model(eq: &'static str, a: &[i64], b: &[i64]) -> ModelBuilder {
        ModelBuilder::new(17)
            .input("a", DType::F32, a)
            .input("b", DType::F32, b)
            .node("Einsum", &["a", "b"], &["y"], &[("equation", A::S(eq))])
            .output("y")
    }

    #[test]
    fn attention_scores() {
        let p = lower(&model("bhqd,bhkd->bhqk", &[1, 2, 3, 4], &[1, 2, 5, 4]));
        assert_eq!(
            p.op_types(),
            vec![
                "Transpose",
                "Reshape",
                "Reshape",
                "MatMul",
                "Reshape",
                "Reshape"
            ]
        );
        assert_eq!(p.tensors[p.outputs[0].tensor].shape, vec![1, 2, 3, 5]);
    }

    #[test]
    fn plain_matmul() {
        assert_eq!(
            lower(&model("ij,jk->ik", &[2, 3], &[3, 4])).op_types(),
            vec!["Reshape", "Reshape", "MatMul", "Reshape", "Reshape"]
        );
    }

    #[test]
    fn ellipsis_unsupported() {
        assert!(lower_err(&model("...ij,...jk->...ik", &[2, 3], &[3, 4]))
            .contains("ellipsis is not supported"));
    }
}
