//! MatMul — <https://onnx.ai/onnx/operators/onnx__MatMul.html>, opset 1+ (numpy semantics,
//! batched and broadcast).
//!
//! Constant 2-D B: QNN `FullyConnected` with weights `[N, K]` (B transposed statically) on A
//! reshaped to `[rows, K]`, reshaped back. Otherwise QNN `MatMul` (`transpose_in0`,
//! `transpose_in1` BOOL_8 scalars, false) with operands brought to equal rank; 1-D operands
//! are promoted and the output reshaped. Folded on the host when both operands are constant
//! (Swin V2's continuous position-bias MLP over its constant coordinate table).

use crate::error::Result;
use crate::ir::shape::broadcast;
use crate::ir::tensor::{broadcast_map, Tensor};
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::{Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::ops::{Quant, Weighted};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const MATMUL: OpDef = OpDef {
    op_type: "MatMul",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: Some(Fold::Values(fold)),
    expand: None,
    lower: Some(matmul),
    quant: Quant::Weighted(Weighted {
        weight: 1,
        // A constant B is [K, N]; an activation B is not a weight and keeps its encoding.
        channel: Some(|_| 1),
        bias: None,
        weight_storage: None,
        symmetric_u16: true,
    }),
};

/// The numpy matmul output shape of `a` × `b` (1-D operands promoted and their dim dropped,
/// batch dims broadcast).
pub fn matmul_shape(n: &Node, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    if a.is_empty() || b.is_empty() {
        return Err(n.err_invalid("MatMul inputs must have rank >= 1"));
    }
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k1) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, nn) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k1 != k2 {
        return Err(n.err_invalid(format!("MatMul inner dims differ: {a:?} x {b:?}")));
    }
    let mut out = broadcast(n, &[&a2[..a2.len() - 2], &b2[..b2.len() - 2]])?;
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(nn);
    }
    Ok(out)
}

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    Ok(vec![(
        x.dtype(0)?,
        matmul_shape(n, x.shape(0)?, x.shape(1)?)?,
    )])
}

/// Products folded on the host at most: a bigger constant matmul is left to the device.
const MAX_FOLD_MACS: usize = 1 << 26;

fn fold(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let (a, b) = (ins[0], ins[1]);
    let (dt, out_shape) = outs[0].clone();
    if !dt.is_float() || a.shape.is_empty() || b.shape.is_empty() {
        return Ok(None);
    }
    let a2 = if a.shape.len() == 1 {
        vec![1, a.shape[0]]
    } else {
        a.shape.clone()
    };
    let b2 = if b.shape.len() == 1 {
        vec![b.shape[0], 1]
    } else {
        b.shape.clone()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let n = b2[b2.len() - 1];
    let batch = broadcast(x.n, &[&a2[..a2.len() - 2], &b2[..b2.len() - 2]])?;
    let nb: usize = batch.iter().product();
    if nb.saturating_mul(m).saturating_mul(n).saturating_mul(k) > MAX_FOLD_MACS {
        return Ok(None);
    }
    // Each operand's batch index for each output batch (numpy broadcasting).
    let amap = broadcast_map(&batch, &a2[..a2.len() - 2]);
    let bmap = broadcast_map(&batch, &b2[..b2.len() - 2]);
    let (av, bv) = (a.to_f64(), b.to_f64());
    let mut out = Vec::with_capacity(nb * m * n);
    for q in 0..nb {
        let (ao, bo) = (amap[q] * m * k, bmap[q] * k * n);
        for i in 0..m {
            for j in 0..n {
                out.push(
                    (0..k)
                        .map(|l| av[ao + i * k + l] * bv[bo + l * n + j])
                        .sum(),
                );
            }
        }
    }
    Ok(Some(vec![Tensor::from_f64_as(dt, out_shape, &out)]))
}

pub fn matmul(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let a_shape = cx.shape(node, 0);
    let b_shape = cx.shape(node, 1);
    let out_shape = cx.out_shape(node, 0);
    let xdt = cx.dtype(node, 0);
    if let Some(b) = cx.konst(node, 1) {
        if b.shape.len() == 2 && a_shape.len() >= 2 {
            if b.dtype != xdt {
                return Err(
                    node.err_dtype(format!("weights are {} but the input is {xdt}", b.dtype))
                );
            }
            let (k, n) = (b.shape[0], b.shape[1]);
            let rows: usize = a_shape[..a_shape.len() - 1].iter().product();
            if node.quantized && cx.enc(node, 1).is_some_and(|e| e.is_blocked()) {
                return blocked(cx, node, rows, k, n);
            }
            let hint = format!("{}_w", node.name);
            let wt = cx
                .permuted_const(node, 1, &[1, 0], &hint)?
                .expect("B is constant");
            let mut a = cx.input(node, 0)?;
            if a_shape.len() != 2 {
                a = cx.reshape(node, a, &[rows, k]);
            }
            let y = cx.output(node, 0)?;
            if a_shape.len() == 2 {
                cx.op(node, op::FULLY_CONNECTED, vec![a, wt], vec![y], vec![]);
            } else {
                // The product before its reshape is stored like the output.
                let dt = cx.tensor_dtype(y);
                let f = cx.emit(
                    node,
                    op::FULLY_CONNECTED,
                    vec![a, wt],
                    dt,
                    &[rows, n],
                    vec![],
                );
                cx.op(node, op::RESHAPE, vec![f], vec![y], vec![]);
            }
            return Ok(());
        }
    }
    let a2: Vec<usize> = if a_shape.len() == 1 {
        vec![1, a_shape[0]]
    } else {
        a_shape.clone()
    };
    let b2: Vec<usize> = if b_shape.len() == 1 {
        vec![b_shape[0], 1]
    } else {
        b_shape.clone()
    };
    let rank = a2.len().max(b2.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (a2, b2) = (pad(&a2), pad(&b2));
    let mut a = cx.input(node, 0)?;
    if a2 != a_shape {
        a = match cx.konst(node, 0) {
            Some(t) => {
                cx.static_tensor(node, &format!("{}_a", node.name), &t.with_shape(a2.clone()))?
            }
            None => cx.reshape(node, a, &a2),
        };
    }
    let mut b = cx.input(node, 1)?;
    if b2 != b_shape {
        b = match cx.konst(node, 1) {
            Some(t) => {
                cx.static_tensor(node, &format!("{}_b", node.name), &t.with_shape(b2.clone()))?
            }
            None => cx.reshape(node, b, &b2),
        };
    }
    let params = vec![
        (param::TRANSPOSE_IN0, Param::bool(false)),
        (param::TRANSPOSE_IN1, Param::bool(false)),
    ];
    let y = cx.output(node, 0)?;
    let mut full = broadcast(node, &[&a2[..rank - 2], &b2[..rank - 2]])?;
    full.push(a2[rank - 2]);
    full.push(b2[rank - 1]);
    if full == out_shape {
        cx.op(node, op::MAT_MUL, vec![a, b], vec![y], params);
    } else {
        let dt = cx.tensor_dtype(y);
        let m = cx.emit(node, op::MAT_MUL, vec![a, b], dt, &full, params);
        cx.op(node, op::RESHAPE, vec![m], vec![y], vec![]);
    }
    Ok(())
}

/// A constant B with block-wise weights (QNN's block expansion, HTP v69+): QNN `MatMul` of A as
/// `[rows, K]` by B as it is, `[K, N]` with its channels on the last dim, the form ONNX Runtime's
/// QNN EP gives LPBQ weights (QNN 2.51's `FullyConnected` computes it as exactly with the
/// weight `[N, K]` on axis 0, measured on the emulator; not used).
fn blocked(cx: &mut LowerCx, node: &Node, rows: usize, k: usize, n: usize) -> Result<()> {
    let a_shape = cx.shape(node, 0);
    let w = cx.input(node, 1)?;
    let mut a = cx.input(node, 0)?;
    if a_shape.len() != 2 {
        a = cx.reshape(node, a, &[rows, k]);
    }
    let y = cx.output(node, 0)?;
    let params = vec![
        (param::TRANSPOSE_IN0, Param::bool(false)),
        (param::TRANSPOSE_IN1, Param::bool(false)),
    ];
    if a_shape.len() == 2 {
        cx.op(node, op::MAT_MUL, vec![a, w], vec![y], params);
    } else {
        let dt = cx.tensor_dtype(y);
        let m = cx.emit(node, op::MAT_MUL, vec![a, w], dt, &[rows, n], params);
        cx.op(node, op::RESHAPE, vec![m], vec![y], vec![]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::matmul_shape;
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ir::Node;
    use crate::ops::test_util::lower;
    use crate::testing::{rand_f32, ModelBuilder};

    #[test]
    fn matmul_batched_broadcast() {
        let n = Node::new("m", "MatMul");
        assert_eq!(
            matmul_shape(&n, &[2, 1, 3, 4], &[5, 4, 6]).unwrap(),
            vec![2, 5, 3, 6]
        );
        assert_eq!(matmul_shape(&n, &[4], &[4, 6]).unwrap(), vec![6]);
        assert!(matmul_shape(&n, &[3, 4], &[5, 6]).is_err());
    }

    #[test]
    fn batched_activation_matmul() {
        let b = ModelBuilder::new(17)
            .input("q", DType::F32, &[1, 2, 5, 8])
            .input("k", DType::F32, &[1, 2, 8, 5])
            .node("MatMul", &["q", "k"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower(&b).dump(),
            "input q:f32[1, 2, 5, 8]\ninput k:f32[1, 2, 8, 5]\n\
             MatMul(q:f32[1, 2, 5, 8], k:f32[1, 2, 8, 5]) transpose_in0=false transpose_in1=false -> y:f32[1, 2, 5, 5]\n\
             output y:f32[1, 2, 5, 5]\n"
        );
    }

    #[test]
    fn linear_3d_uses_fully_connected() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 5, 8])
            .init("w", Tensor::from_f32(vec![8, 3], &rand_f32(1, 24)))
            .node("MatMul", &["x", "w"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        assert_eq!(p.op_types(), vec!["Reshape", "FullyConnected", "Reshape"]);
        assert!(p.dump().contains("static MatMul_0_w:f32[3, 8]"));
    }

    #[test]
    fn vector_matmul_promotes() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[8])
            .input("w", DType::F32, &[8, 3])
            .node("MatMul", &["x", "w"], &["y"], &[])
            .output("y");
        assert_eq!(lower(&b).op_types(), vec!["Reshape", "MatMul", "Reshape"]);
    }

    #[test]
    fn constant_matmul_is_folded() {
        let b = crate::testing::ModelBuilder::new(17)
            .input("x", crate::dtype::DType::F32, &[2, 2, 2])
            .init(
                "a",
                crate::ir::tensor::Tensor::from_f32(vec![2, 1, 3], &[1., 2., 3., 4., 5., 6.]),
            )
            .init(
                "b",
                crate::ir::tensor::Tensor::from_f32(vec![3, 2], &[1., 0., 0., 1., 1., 1.]),
            )
            .node("MatMul", &["a", "b"], &["m"], &[])
            .node("Add", &["x", "m"], &["y"], &[])
            .output("y");
        let mut g = b.load().graph;
        let _ = crate::passes::const_fold::run(&mut g);
        let v = (0..g.values.len())
            .find(|&v| g.values[v].name == "m")
            .unwrap();
        assert_eq!(g.konst(v).unwrap().to_f64(), vec![4., 5., 10., 11.]);
    }
}
