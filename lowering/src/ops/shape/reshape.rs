//! Reshape, Flatten and the pass-through Identity —
//! <https://onnx.ai/onnx/operators/onnx__Reshape.html>, `allowzero` since opset 14;
//! <https://onnx.ai/onnx/operators/onnx__Flatten.html> (negative `axis` since 11);
//! <https://onnx.ai/onnx/operators/onnx__Identity.html>. All become QNN `Reshape` (no params;
//! the output tensor's shape is the target). Reshape's `shape` must be constant after folding
//! (checked by inference): `0` copies the input dim unless `allowzero`, one `-1` is inferred.

use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{same, In, Out};
use crate::ops::registry::{shape_i64, slot_1, Resolved, ShapeQuery};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Accept;
use crate::qnn_names::op;

pub const RESHAPE: OpDef = OpDef {
    op_type: "Reshape",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::Slot {
        slot: slot_1,
        resolve: resolve_shape,
    },
    infer: infer_reshape,
    fold: Some(Fold::Values(fold_reshape)),
    expand: None,
    lower: Some(reshape),
    quant: Quant::Same,
};

pub const FLATTEN: OpDef = OpDef {
    op_type: "Flatten",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: infer_flatten,
    fold: Some(Fold::Values(fold_reshape)),
    expand: None,
    lower: Some(reshape),
    quant: Quant::Same,
};

pub const IDENTITY: OpDef = OpDef {
    op_type: "Identity",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::Kept,
    infer: same,
    fold: Some(Fold::Values(fold_reshape)),
    expand: None,
    lower: Some(reshape),
    quant: Quant::Same,
};

/// Why a Reshape's `shape` does not fit its input ([`reshape_shape`]).
#[derive(Debug, PartialEq, Eq)]
pub enum BadReshape {
    TwoInferred,
    ZeroPastRank,
    Negative(i64),
    TooLarge,
    Mismatch,
}

/// ONNX Reshape of `input` to `spec` (`0` copies a dim unless `allowzero`, one `-1` is
/// inferred): the one implementation of the rule, for inference and for comparing a `shape`
/// given at run time with an assumed one ([`crate::plan::Accept`]).
pub fn reshape_shape(
    input: &[usize],
    spec: &[i64],
    allowzero: bool,
) -> std::result::Result<Vec<usize>, BadReshape> {
    let total: usize = input.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer_at = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 => {
                if infer_at.replace(i).is_some() {
                    return Err(BadReshape::TwoInferred);
                }
                out.push(1);
            }
            0 if !allowzero => out.push(*input.get(i).ok_or(BadReshape::ZeroPastRank)?),
            d if d < 0 => return Err(BadReshape::Negative(d)),
            d => out.push(d as usize),
        }
    }
    let known = out
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or(BadReshape::TooLarge)?;
    match infer_at {
        Some(i) => {
            if known == 0 || total % known != 0 {
                return Err(BadReshape::Mismatch);
            }
            out[i] = total / known;
        }
        None if known != total => return Err(BadReshape::Mismatch),
        None => {}
    }
    Ok(out)
}

/// The output shape of a Reshape of `in_shape` to `spec`, or the node's error.
pub fn reshape_target(
    n: &Node,
    in_shape: &[usize],
    spec: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>> {
    reshape_shape(in_shape, spec, allowzero).map_err(|e| match e {
        BadReshape::TwoInferred => n.err_invalid("reshape has more than one -1"),
        BadReshape::ZeroPastRank => n.err_invalid("reshape 0 refers past the input rank"),
        BadReshape::Negative(d) => n.err_invalid(format!("reshape dim {d} is invalid")),
        BadReshape::TooLarge => n.err_invalid(format!("reshape target {spec:?} is too large")),
        BadReshape::Mismatch => n.err_invalid(format!("cannot reshape {in_shape:?} to {spec:?}")),
    })
}

fn infer_reshape(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let spec = x.const_ints(1, "shape")?;
    let allowzero = n.attr_i("allowzero", 0)? != 0;
    Ok(vec![(
        x.dtype(0)?,
        reshape_target(n, x.shape(0)?, &spec, allowzero)?,
    )])
}

fn infer_flatten(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let s = x.shape(0)?;
    // Flatten's axis is in [-r, r] and a negative one counts from r (not r + 1).
    let a = n.attr_i("axis", 1)?;
    let axis = if a < 0 {
        norm_axis(n, "axis", a, s.len())?
    } else {
        norm_axis(n, "axis", a, s.len() + 1)?
    };
    Ok(vec![(
        x.dtype(0)?,
        vec![s[..axis].iter().product(), s[axis..].iter().product()],
    )])
}

/// The constant input with the inferred output shape (the shape-only ops share it).
pub fn fold_reshape(_x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let shape0 = outs[0].1.clone();
    let t0 = ins[0];
    Ok(Some(vec![t0.with_shape(shape0)]))
}

/// The rule of every op that only changes the shape (Squeeze, Unsqueeze and the inference-mode
/// Dropout use it too).
pub fn reshape(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(node, op::RESHAPE, vec![x], vec![y], vec![]);
    Ok(())
}

/// The `shape` that gives the declared output.
fn resolve_shape(q: &ShapeQuery) -> Option<Resolved> {
    let input = q.known(0)?;
    let (d, name) = q.out(0)?;
    let allowzero = q.n.attr_i("allowzero", 0).ok()? != 0;
    let value = shape_i64(&d);
    (reshape_shape(&input, &value, allowzero).as_ref() == Ok(&d)).then_some(())?;
    let accept = Accept::Reshape {
        input,
        allowzero,
        output: d,
    };
    Some((q.ints(&value)?, accept, name))
}

#[cfg(test)]
mod tests {
    use super::reshape_target;
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ir::{Attr, Node};
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::ModelBuilder;

    #[test]
    fn reshape_zero_and_minus_one() {
        let n = Node::new("r", "Reshape");
        assert_eq!(
            reshape_target(&n, &[2, 3, 4], &[0, -1], false).unwrap(),
            vec![2, 12]
        );
        assert!(reshape_target(&n, &[2, 3, 4], &[5, -1], false).is_err());
        assert!(reshape_target(&n, &[2, 3], &[-1, -1], false).is_err());
    }

    #[test]
    fn flatten_negative_axis_counts_from_rank() {
        let g = graph_with(&[("x", DType::F32, vec![3, 4, 5])]);
        let flat = |axis: i64| {
            let mut n = node("Flatten", &[Some(0)], &[("axis", Attr::Int(axis))]);
            n.outputs = vec![None];
            infer(&g, &n).map(|o| o[0].1.clone())
        };
        assert_eq!(flat(-1).unwrap(), vec![12, 5]);
        assert_eq!(flat(-3).unwrap(), vec![1, 60]);
        assert_eq!(flat(3).unwrap(), vec![60, 1]);
        assert!(flat(-4).is_err());
        assert!(flat(4).is_err());
    }

    #[test]
    fn reshape_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 6])
            .init("s", Tensor::from_i64(vec![3], &[2, 3, -1]))
            .node("Reshape", &["x", "s"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower(&b).dump(),
            "input x:f32[2, 6]\nReshape(x:f32[2, 6]) -> y:f32[2, 3, 2]\noutput y:f32[2, 3, 2]\n"
        );
    }

    #[test]
    fn dropout_mask_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .node("Dropout", &["x"], &["y", "mask"], &[])
            .output("y")
            .output("mask");
        assert!(lower_err(&b).contains("mask output is not supported"));
    }
}
