//! Transpose — <https://onnx.ai/onnx/operators/onnx__Transpose.html>, opset 1+ (default perm
//! reverses the dims). QNN `Transpose`: `perm` UINT_32 `[rank]` (tensor param).

use crate::error::Result;
use crate::ir::attr::to_usizes;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const TRANSPOSE: OpDef = OpDef {
    op_type: "Transpose",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(transpose),
    quant: Quant::Same,
};

/// The `perm` attribute, checked to be a permutation of `rank` dims (reversed by default).
pub fn transpose_perm(n: &Node, rank: usize) -> Result<Vec<usize>> {
    let perm = match n.attr_ints_opt("perm")? {
        Some(p) => to_usizes(n, "perm", &p)?,
        None => (0..rank).rev().collect(),
    };
    let mut seen = vec![false; rank];
    if perm.len() != rank
        || perm
            .iter()
            .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
    {
        return Err(n.err_invalid(format!("perm {perm:?} is not a permutation of rank {rank}")));
    }
    Ok(perm)
}

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let s = x.shape(0)?;
    let p = transpose_perm(n, s.len())?;
    Ok(vec![(x.dtype(0)?, p.iter().map(|&i| s[i]).collect())])
}

fn fold(x: &In, _outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let t0 = ins[0];
    Ok(Some(vec![
        t0.transpose(&transpose_perm(node, t0.shape.len())?)
    ]))
}

pub fn transpose(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let r = cx.shape(node, 0).len();
    let perm: Vec<u32> = transpose_perm(node, r)?.iter().map(|&p| p as u32).collect();
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    if r == 0 {
        cx.op(node, op::RESHAPE, vec![x], vec![y], vec![]);
    } else {
        cx.op(
            node,
            op::TRANSPOSE,
            vec![x],
            vec![y],
            vec![(param::PERM, Param::u32_vec(&perm))],
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn transpose_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .node(
                "Transpose",
                &["x"],
                &["y"],
                &[("perm", A::Is(vec![0, 2, 1]))],
            )
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("Transpose(x:f32[2, 3, 4]) perm=u32[3]{0,2,1} -> y:f32[2, 4, 3]"));
    }
}
