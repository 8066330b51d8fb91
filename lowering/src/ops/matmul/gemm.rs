//! Gemm — <https://onnx.ai/onnx/operators/onnx__Gemm.html>, opset 7+ (`alpha*A'B' + beta*C`).
//!
//! Constant B: QNN `FullyConnected` with weights `[N, K]` (B transposed statically unless
//! `transB = 1`; `alpha` folded in) and bias `[N]` from a constant C of `N` elements (`beta`
//! folded in). Otherwise QNN `MatMul` (`transpose_in0`/`transpose_in1` BOOL_8 scalars), then
//! `ElementWiseMultiply` by alpha and `ElementWiseAdd` of `beta*C`.

use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::ops::{Quant, Weighted};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const GEMM: OpDef = OpDef {
    op_type: "Gemm",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(gemm),
    quant: Quant::Weighted(Weighted {
        weight: 1,
        // B is [K, N], or [N, K] with transB.
        channel: Some(|n| {
            if n.attr_i("transB", 0).unwrap_or(0) != 0 {
                0
            } else {
                1
            }
        }),
        bias: Some(2),
        weight_storage: None,
        symmetric_u16: false,
    }),
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let (a, b) = (x.shape(0)?, x.shape(1)?);
    if a.len() != 2 || b.len() != 2 {
        return Err(n.err_invalid("Gemm inputs must be 2-D"));
    }
    let (m, k1) = if n.attr_i("transA", 0)? != 0 {
        (a[1], a[0])
    } else {
        (a[0], a[1])
    };
    let (k2, nn) = if n.attr_i("transB", 0)? != 0 {
        (b[1], b[0])
    } else {
        (b[0], b[1])
    };
    if k1 != k2 {
        return Err(n.err_invalid(format!("Gemm inner dims differ: {a:?} x {b:?}")));
    }
    Ok(vec![(x.dtype(0)?, vec![m, nn])])
}

/// A quantized Gemm with constant B: `FullyConnected` with the model's (or derived) weight
/// encoding moved with the transpose to `[N, K]` and the int32 bias the `qdq` pass derived.
/// alpha and beta would rescale integers: refused unless 1.
fn quantized_fully_connected(
    cx: &mut LowerCx,
    node: &Node,
    alpha: f64,
    beta: f64,
    trans_a: bool,
    trans_b: bool,
) -> Result<()> {
    if alpha != 1.0 || beta != 1.0 {
        return Err(node.err_attr(
            "alpha",
            "a quantized Gemm needs alpha = beta = 1 (fold them into the weights before \
             quantizing)",
        ));
    }
    if cx.enc(node, 1).is_some_and(|e| e.is_blocked()) {
        return blocked(cx, node, trans_a, trans_b);
    }
    let perm: &[usize] = if trans_b { &[0, 1] } else { &[1, 0] };
    let hint = format!("{}_w", node.name);
    let wt = cx
        .permuted_const(node, 1, perm, &hint)?
        .expect("the caller checked B is constant");
    let bt = cx.input(node, 2)?;
    let mut a = cx.input(node, 0)?;
    if trans_a {
        a = cx.transpose(node, a, &[1, 0]);
    }
    let y = cx.output(node, 0)?;
    cx.op(node, op::FULLY_CONNECTED, vec![a, wt, bt], vec![y], vec![]);
    Ok(())
}

/// A quantized Gemm with block-wise weights: QNN `MatMul` by B as `[K, N]` (see
/// `matmul::blocked`), then `ElementWiseAdd` of C, which the `qdq` pass leaves float for it (a
/// per-tensor encoding is derived when it is stored).
fn blocked(cx: &mut LowerCx, node: &Node, trans_a: bool, trans_b: bool) -> Result<()> {
    let perm: &[usize] = if trans_b { &[1, 0] } else { &[0, 1] };
    let hint = format!("{}_w", node.name);
    let w = cx
        .permuted_const(node, 1, perm, &hint)?
        .expect("the caller checked B is constant");
    let mut a = cx.input(node, 0)?;
    if trans_a {
        a = cx.transpose(node, a, &[1, 0]);
    }
    let y = cx.output(node, 0)?;
    let params = vec![
        (param::TRANSPOSE_IN0, Param::bool(false)),
        (param::TRANSPOSE_IN1, Param::bool(false)),
    ];
    if node.input(2).is_none() {
        cx.op(node, op::MAT_MUL, vec![a, w], vec![y], params);
        return Ok(());
    }
    let out_shape = cx.out_shape(node, 0);
    let dt = cx.tensor_dtype(y);
    let m = cx.emit(node, op::MAT_MUL, vec![a, w], dt, &out_shape, params);
    // C's real values, stored like an activation: an int32 encoding the model gives it (input
    // scale x weight scale, for a FullyConnected bias) is not what an ElementWiseAdd reads.
    let Some(c) = cx.konst(node, 2) else {
        return Err(node.err_op(
            "its C must be a constant when B is block-wise quantized (it is added after QNN's \
             MatMul)",
        ));
    };
    let c = c.with_shape(vec![1, c.numel()]);
    let c = cx.static_tensor(node, &format!("{}_c", node.name), &c)?;
    cx.op(node, op::ELEMENT_WISE_ADD, vec![m, c], vec![y], vec![]);
    Ok(())
}

pub fn gemm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let alpha = node.attr_f("alpha", 1.0)? as f64;
    let beta = node.attr_f("beta", 1.0)? as f64;
    let trans_a = node.attr_i("transA", 0)? != 0;
    let trans_b = node.attr_i("transB", 0)? != 0;
    let out_shape = cx.out_shape(node, 0);
    let n = out_shape[1];
    let xdt = cx.dtype(node, 0);
    let c_const = cx.konst(node, 2);
    let bias_vec = match (node.input(2), c_const) {
        (None, _) => Some(vec![0.0; n]),
        (Some(_), Some(c)) if c.numel() == n && c.shape.last() == Some(&n) => Some(c.to_f64()),
        _ => None,
    };
    if let (Some(b), Some(bias)) = (cx.konst(node, 1), bias_vec) {
        if b.dtype != xdt {
            return Err(node.err_dtype(format!("weights are {} but the input is {xdt}", b.dtype)));
        }
        if node.quantized {
            return quantized_fully_connected(cx, node, alpha, beta, trans_a, trans_b);
        }
        let w = if trans_b {
            b.clone()
        } else {
            b.transpose(&[1, 0])
        };
        let w = if alpha != 1.0 {
            Tensor::from_f64_as(
                w.dtype,
                w.shape.clone(),
                &w.to_f64().iter().map(|v| v * alpha).collect::<Vec<_>>(),
            )
        } else {
            w
        };
        let bias: Vec<f64> = bias.iter().map(|v| v * beta).collect();
        let wt = cx.static_tensor(node, &format!("{}_w", node.name), &w)?;
        let bt = cx.static_tensor(
            node,
            &format!("{}_b", node.name),
            &Tensor::from_f64_as(xdt, vec![n], &bias),
        )?;
        let mut a = cx.input(node, 0)?;
        if trans_a {
            a = cx.transpose(node, a, &[1, 0]);
        }
        let y = cx.output(node, 0)?;
        cx.op(node, op::FULLY_CONNECTED, vec![a, wt, bt], vec![y], vec![]);
        return Ok(());
    }
    let a = cx.input(node, 0)?;
    let b = cx.input(node, 1)?;
    let dt = cx.tensor_dtype(a);
    let params = vec![
        (param::TRANSPOSE_IN0, Param::bool(trans_a)),
        (param::TRANSPOSE_IN1, Param::bool(trans_b)),
    ];
    let has_c = node.input(2).is_some() && beta != 0.0;
    let y = cx.output(node, 0)?;
    if alpha == 1.0 && !has_c {
        cx.op(node, op::MAT_MUL, vec![a, b], vec![y], params);
        return Ok(());
    }
    let mut acc = cx.emit(node, op::MAT_MUL, vec![a, b], dt, &out_shape, params);
    if alpha != 1.0 {
        let s = cx.scalar(node, "alpha", alpha, xdt)?;
        let s = cx.reshape(node, s, &[1, 1]);
        acc = if has_c {
            cx.emit(
                node,
                op::ELEMENT_WISE_MULTIPLY,
                vec![acc, s],
                dt,
                &out_shape,
                vec![],
            )
        } else {
            cx.op(
                node,
                op::ELEMENT_WISE_MULTIPLY,
                vec![acc, s],
                vec![y],
                vec![],
            );
            return Ok(());
        };
    }
    let c = match c_const {
        Some(c) if beta != 1.0 => {
            let v: Vec<f64> = c.to_f64().iter().map(|x| x * beta).collect();
            let mut shape = vec![1; 2 - c.shape.len().min(2)];
            shape.extend_from_slice(&c.shape);
            cx.static_tensor(
                node,
                &format!("{}_c", node.name),
                &Tensor::from_f64_as(xdt, shape, &v),
            )?
        }
        Some(_) => cx.input_at_rank(node, 2, 2)?,
        None => {
            if beta != 1.0 {
                return Err(
                    node.err_attr("beta", "beta != 1 with a non-constant C is not supported")
                );
            }
            cx.input_at_rank(node, 2, 2)?
        }
    };
    cx.op(node, op::ELEMENT_WISE_ADD, vec![acc, c], vec![y], vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{rand_f32, ModelBuilder, A};

    #[test]
    fn linear_is_fully_connected() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4])
            .init("w", Tensor::from_f32(vec![3, 4], &rand_f32(1, 12)))
            .init("b", Tensor::from_f32(vec![3], &[1., 2., 3.]))
            .node("Gemm", &["x", "w", "b"], &["y"], &[("transB", A::I(1))])
            .output("y");
        assert_eq!(
            lower(&b).dump(),
            "input x:f32[1, 4]\n\
             FullyConnected(x:f32[1, 4], static Gemm_0_w:f32[3, 4], static Gemm_0_b:f32[3]) -> y:f32[1, 3]\n\
             output y:f32[1, 3]\n"
        );
    }

    #[test]
    fn gemm_untransposed_weights_are_transposed_statically() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 4])
            .init("w", Tensor::from_f32(vec![4, 3], &rand_f32(1, 12)))
            .node("Gemm", &["x", "w"], &["y"], &[("alpha", A::F(2.0))])
            .output("y");
        let p = lower(&b);
        assert!(p.dump().contains("static Gemm_0_w:f32[3, 4]"));
    }

    #[test]
    fn dynamic_gemm_is_matmul_plus_add() {
        let b = ModelBuilder::new(17)
            .input("a", DType::F32, &[2, 4])
            .input("b", DType::F32, &[3, 4])
            .input("c", DType::F32, &[3])
            .node("Gemm", &["a", "b", "c"], &["y"], &[("transB", A::I(1))])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("MatMul(a:f32[2, 4], b:f32[3, 4]) transpose_in0=false transpose_in1=true"),
            "{d}"
        );
        assert!(d.contains("ElementWiseAdd"), "{d}");
    }

    #[test]
    fn dynamic_c_with_beta_unsupported() {
        let b = ModelBuilder::new(17)
            .input("a", DType::F32, &[2, 4])
            .input("b", DType::F32, &[4, 3])
            .input("c", DType::F32, &[3])
            .node("Gemm", &["a", "b", "c"], &["y"], &[("beta", A::F(0.5))])
            .output("y");
        assert!(lower_err(&b).contains("attribute 'beta'"));
    }
}
