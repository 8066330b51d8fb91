//! The reductions QNN's HTP has no op for, expanded before lowering into ReduceSum, ReduceMax
//! and elementwise ops (the ONNX function bodies, made safe for fp16):
//!
//! - ReduceL1 — <https://onnx.ai/onnx/operators/onnx__ReduceL1.html>: `ReduceSum(|x|)`.
//! - ReduceSumSquare — <https://onnx.ai/onnx/operators/onnx__ReduceSumSquare.html>:
//!   `ReduceSum(x · x)`.
//! - ReduceL2 — <https://onnx.ai/onnx/operators/onnx__ReduceL2.html>: `m · Sqrt(ReduceSum((x /
//!   m)²))` with `m = Max(ReduceMax(|x|), 2⁻¹⁴)`: the plain `Sqrt(ReduceSum(x²))` saturates in
//!   fp16 once the sum of squares passes 65504, a norm of 256 (measured on libQnnHtp 2.51, SoC 60:
//!   362 for a norm of 623, 1024 values of scale 20).
//! - ReduceLogSum — <https://onnx.ai/onnx/operators/onnx__ReduceLogSum.html>: `Log(ReduceSum(x))`.
//! - ReduceLogSumExp — <https://onnx.ai/onnx/operators/onnx__ReduceLogSumExp.html>:
//!   `Log(ReduceSum(Exp(x - m))) + m` with `m = ReduceMax(x)`.
//! - ReduceProd — <https://onnx.ai/onnx/operators/onnx__ReduceProd.html>: per reduced axis, the
//!   axis padded with ones to a power of two (one Concat), then its first half times its second
//!   half (Slice, Mul) until one element is left: ⌈log₂ n⌉ rounds, exact for integers.
//!
//! Opsets: every version (`axes` an attribute before opset 18, a constant input from 18).
//! `noop_with_empty_axes` with no axes applies only the elementwise part (`|x|`, `x²`, ...), as the
//! reference does. The reductions keep their dims inside the expansion and a Reshape drops them
//! for `keepdims = 0`.

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::tensor::{numel, Tensor};
use crate::ir::{Attr, Node, ValueId};
use crate::ops::reduce::reduce::{fold, infer, reduce_params};
use crate::ops::reduce::reduce::{resolve_axes, slot_1_from_18};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, OpDef, ShapeInput};

pub const REDUCE_L1: OpDef = OpDef {
    op_type: "ReduceL1",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_18,
        resolve: resolve_axes,
    },
    infer,
    fold: None,
    expand: Some(reduce_composite),
    lower: None,
    quant: Quant::Float,
};

pub const REDUCE_L2: OpDef = OpDef {
    op_type: "ReduceL2",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_18,
        resolve: resolve_axes,
    },
    infer,
    fold: None,
    expand: Some(reduce_composite),
    lower: None,
    quant: Quant::Float,
};

pub const REDUCE_SUM_SQUARE: OpDef = OpDef {
    op_type: "ReduceSumSquare",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_18,
        resolve: resolve_axes,
    },
    infer,
    fold: None,
    expand: Some(reduce_composite),
    lower: None,
    quant: Quant::Float,
};

pub const REDUCE_LOG_SUM: OpDef = OpDef {
    op_type: "ReduceLogSum",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_18,
        resolve: resolve_axes,
    },
    infer,
    fold: None,
    expand: Some(reduce_composite),
    lower: None,
    quant: Quant::Float,
};

pub const REDUCE_LOG_SUM_EXP: OpDef = OpDef {
    op_type: "ReduceLogSumExp",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_18,
        resolve: resolve_axes,
    },
    infer,
    fold: None,
    expand: Some(reduce_composite),
    lower: None,
    quant: Quant::Float,
};

pub const REDUCE_PROD: OpDef = OpDef {
    op_type: "ReduceProd",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1_from_18,
        resolve: resolve_axes,
    },
    infer,
    fold: Some(Fold::Values(fold)),
    expand: Some(reduce_composite),
    lower: None,
    quant: Quant::Float,
};

/// The smallest normal fp16: the floor of ReduceL2's scale, so that an all-zero slice gives 0.
const MIN_SCALE: f64 = 6.103_515_625e-5;

/// `op_type` over `axes` with kept dims; `None` (a no-op reduction) is `x` itself.
fn reduce(b: &mut Builder, op_type: &str, x: ValueId, axes: Option<&[i64]>) -> ValueId {
    match axes {
        Some(a) => b.reduce(op_type, x, a, true),
        None => x,
    }
}

/// ReduceProd over one axis of `x` (shape `shape`, updated): padded with ones to a power of
/// two, then halved.
fn prod_axis(b: &mut Builder, mut x: ValueId, shape: &mut [usize], axis: usize) -> ValueId {
    let n = shape[axis];
    let p2 = n.next_power_of_two();
    if p2 != n {
        let mut s = shape.to_vec();
        s[axis] = p2 - n;
        let dt = b.g.dtype(x);
        let ones = b.konst(
            "ones",
            Tensor::from_f64_as(dt, s.clone(), &vec![1.0; numel(&s)]),
        );
        x = b.op("Concat", &[x, ones], vec![("axis", Attr::Int(axis as i64))]);
    }
    let mut n = p2;
    while n > 1 {
        let lo = b.slice(x, axis, 0, n / 2);
        let hi = b.slice(x, axis, n / 2, n);
        x = b.op("Mul", &[lo, hi], vec![]);
        n /= 2;
    }
    shape[axis] = 1;
    x
}

pub fn reduce_composite(b: &mut Builder, node: &Node) -> Result<bool> {
    let x = node
        .input(0)
        .ok_or_else(|| node.err_invalid("input 'data' is missing"))?;
    let y = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 'reduced' is missing"))?;
    let (axes, keep) = reduce_params(b.g, node)?;
    let axes: Option<Vec<i64>> = axes.map(|a| a.iter().map(|&i| i as i64).collect());
    let ax = axes.as_deref();
    let dt = b.g.dtype(x);
    let r = match node.op_type.as_str() {
        "ReduceL1" => {
            let a = b.op("Abs", &[x], vec![]);
            reduce(b, "ReduceSum", a, ax)
        }
        "ReduceSumSquare" => {
            let sq = b.op("Mul", &[x, x], vec![]);
            reduce(b, "ReduceSum", sq, ax)
        }
        "ReduceL2" => {
            let a = b.op("Abs", &[x], vec![]);
            if ax.is_none() {
                a
            } else {
                let m = reduce(b, "ReduceMax", a, ax);
                let floor = b.scalar(dt, MIN_SCALE);
                let m = b.op("Max", &[m, floor], vec![]);
                let q = b.op("Div", &[x, m], vec![]);
                let sq = b.op("Mul", &[q, q], vec![]);
                let s = reduce(b, "ReduceSum", sq, ax);
                let n = b.op("Sqrt", &[s], vec![]);
                b.op("Mul", &[n, m], vec![])
            }
        }
        "ReduceLogSum" => {
            let s = reduce(b, "ReduceSum", x, ax);
            b.op("Log", &[s], vec![])
        }
        "ReduceLogSumExp" => {
            if ax.is_none() {
                x
            } else {
                let m = reduce(b, "ReduceMax", x, ax);
                let d = b.op("Sub", &[x, m], vec![]);
                let e = b.op("Exp", &[d], vec![]);
                let s = reduce(b, "ReduceSum", e, ax);
                let l = b.op("Log", &[s], vec![]);
                b.op("Add", &[l, m], vec![])
            }
        }
        "ReduceProd" => {
            let mut shape = b.g.shape(x).to_vec();
            let mut p = x;
            for &a in ax.unwrap_or_default() {
                p = prod_axis(b, p, &mut shape, a as usize);
            }
            p
        }
        other => return Err(node.err_op(format!("{other} has no expansion"))),
    };
    let out_shape: Vec<i64> = b.g.shape(y).iter().map(|&d| d as i64).collect();
    if keep || ax.is_none() {
        b.op_to("Identity", &[r], vec![], &[y]);
    } else {
        let s = b.ints(&out_shape);
        b.op_to("Reshape", &[r, s], vec![], &[y]);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    fn model(op: &str, shape: &[i64], axes: &[i64], keep: i64) -> ModelBuilder {
        ModelBuilder::new(18)
            .input("x", DType::F32, shape)
            .init("ax", Tensor::from_i64(vec![axes.len()], axes))
            .node(op, &["x", "ax"], &["y"], &[("keepdims", A::I(keep))])
            .output("y")
    }

    fn types(op: &str, shape: &[i64], axes: &[i64], keep: i64) -> Vec<&'static str> {
        lower(&model(op, shape, axes, keep)).op_types()
    }

    #[test]
    fn reduce_composite_snapshots() {
        assert_eq!(
            types("ReduceL1", &[2, 3], &[1], 1),
            ["ElementWiseAbs", "ReduceSum"]
        );
        assert_eq!(
            types("ReduceSumSquare", &[2, 3], &[1], 1),
            ["ElementWiseMultiply", "ReduceSum"]
        );
        assert_eq!(
            types("ReduceLogSum", &[2, 3], &[1], 1),
            ["ReduceSum", "ElementWiseLog"]
        );
        assert_eq!(
            types("ReduceLogSumExp", &[2, 3], &[1], 1),
            [
                "ReduceMax",
                "ElementWiseSubtract",
                "ElementWiseExp",
                "ReduceSum",
                "ElementWiseLog",
                "ElementWiseAdd"
            ]
        );
    }

    #[test]
    fn reduce_l2_is_scaled_by_the_max() {
        let p = lower(&model("ReduceL2", &[2, 3, 4], &[-1], 0));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            [
                "ElementWiseAbs",
                "ReduceMax",
                "ElementWiseMaximum",
                "ElementWiseDivide",
                "ElementWiseMultiply",
                "ReduceSum",
                "ElementWiseSquareRoot",
                "ElementWiseMultiply",
                "Reshape"
            ],
            "{d}"
        );
        assert!(
            d.contains("ReduceMax(ReduceL2_0/Abs:f32[2, 3, 4]) axes=u32[1]{2} keep_dims=true"),
            "{d}"
        );
        assert!(d.contains("-> y:f32[2, 3]"), "{d}");
    }

    #[test]
    fn reduce_prod_halves_each_axis() {
        // 5 ones-padded to 8 -> 4 -> 2 -> 1.
        let p = lower(&model("ReduceProd", &[2, 5], &[1], 1));
        let d = p.dump();
        let muls = p
            .op_types()
            .iter()
            .filter(|t| **t == "ElementWiseMultiply")
            .count();
        let concats = p.op_types().iter().filter(|t| **t == "Concat").count();
        assert_eq!((muls, concats), (3, 1), "{d}");
        assert!(
            d.contains("Concat(x:f32[2, 5], static ReduceProd_0/ones:f32[2, 3]) axis=1u"),
            "{d}"
        );
        assert!(d.contains("-> y:f32[2, 1]"), "{d}");
    }

    #[test]
    fn reduce_prod_of_constants_is_folded() {
        let b = ModelBuilder::new(13)
            .init("c", Tensor::from_f32(vec![2, 2], &[1.0, 2.0, 3.0, 4.0]))
            .input("x", DType::F32, &[2])
            .node(
                "ReduceProd",
                &["c"],
                &["p"],
                &[("axes", A::Is(vec![0])), ("keepdims", A::I(0))],
            )
            .node("Mul", &["x", "p"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(d.contains("ElementWiseMultiply(x:f32[2], static"), "{d}");
    }

    #[test]
    fn noop_with_empty_axes_keeps_the_elementwise_part() {
        let b = ModelBuilder::new(18)
            .input("x", DType::F32, &[2, 3])
            .node(
                "ReduceSumSquare",
                &["x"],
                &["y"],
                &[("noop_with_empty_axes", A::I(1))],
            )
            .output("y");
        assert_eq!(lower(&b).op_types(), ["ElementWiseMultiply"]);
    }

    #[test]
    fn dynamic_axes_unsupported() {
        let b = ModelBuilder::new(18)
            .input("x", DType::F32, &[2, 3])
            .input("ax", DType::I64, &[1])
            .node("ReduceL2", &["x", "ax"], &["y"], &[])
            .output("y");
        // A graph input as `axes` is refused by the table (the dtype of a non-constant input).
        let e = lower_err(&b);
        assert!(
            e.contains("Node \"ReduceL2_0\" (ReduceL2): input 'ax'"),
            "{e}"
        );
    }

    #[test]
    fn reduce_composite_is_inferred() {
        let g = graph_with(&[("x", DType::F16, vec![2, 3, 4])]);
        let n = node(
            "ReduceLogSumExp",
            &[Some(0)],
            &[
                ("axes", crate::ir::Attr::Ints(vec![0, 2])),
                ("keepdims", crate::ir::Attr::Int(0)),
            ],
        );
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F16, vec![3])]);
    }
}
