//! NegativeLogLikelihoodLoss — <https://onnx.ai/onnx/operators/onnx__NegativeLogLikelihoodLoss.html>
//! (opset 12, 13, 22). Expanded before lowering: the target is compared with the class indices
//! (`Equal` against a `[1, C, 1, ..]` constant) to give a one-hot mask, weighted by `weight` and
//! zeroed where the target is `ignore_index`; the loss is `-ReduceSum(input × mask, axis 1)`,
//! then reduced per `reduction`: `none`, `sum`, or `mean` (divided by the summed weights when a
//! weight or `ignore_index` is given, as the spec says). QNN ops: ElementWiseEqual, Cast,
//! ElementWiseMultiply, ElementWiseSubtract, ReduceSum, ElementWiseNeg, ElementWiseDivide, ReduceMean.
//! Constraints: targets must fit int32 (they are narrowed like all int64 I/O).

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::{Node, ValueId};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, OpDef, ShapeInput};

pub const NEGATIVE_LOG_LIKELIHOOD_LOSS: OpDef = OpDef {
    op_type: "NegativeLogLikelihoodLoss",
    since: 12,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(nll_loss),
    lower: None,
    quant: Quant::Float,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let loss = loss_shape(x.n, x.shape(0)?, x.shape(1)?)?;
    Ok(vec![(x.dtype(0)?, loss)])
}

/// Reduction of a loss, from the `reduction` attribute.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reduction {
    None,
    Sum,
    Mean,
}

pub fn reduction(node: &Node) -> Result<Reduction> {
    match node.attr_s("reduction", "mean")? {
        "none" => Ok(Reduction::None),
        "sum" => Ok(Reduction::Sum),
        "mean" => Ok(Reduction::Mean),
        other => Err(node.err_attr("reduction", format!("unknown value '{other}'"))),
    }
}

/// Shape of the loss of a `[N, C, d..]` input against a `[N, d..]` target: the target's shape
/// with `reduction = none`, a scalar otherwise.
pub fn loss_shape(node: &Node, xs: &[usize], ts: &[usize]) -> Result<Vec<usize>> {
    let r = xs.len();
    if r < 2 || ts.len() != r - 1 || ts[0] != xs[0] || ts[1..] != xs[2..] {
        return Err(node.err_invalid(format!(
            "input {xs:?} and target {ts:?} do not match ([N, C, d..] and [N, d..])"
        )));
    }
    Ok(match reduction(node)? {
        Reduction::None => ts.to_vec(),
        Reduction::Sum | Reduction::Mean => vec![],
    })
}

/// Writes the NLL loss of log-probabilities `x` (`[N, C, d..]`, the shape and dtype of `like`)
/// against `target` (`[N, d..]`) into `out`.
pub fn nll_into(
    b: &mut Builder,
    node: &Node,
    (x, like): (ValueId, ValueId),
    target: ValueId,
    weight: Option<ValueId>,
    out: ValueId,
) -> Result<()> {
    let xs = b.g.shape(like).to_vec();
    let ts = b.g.shape(target).to_vec();
    let r = xs.len();
    if r < 2 || ts.len() != r - 1 || ts[0] != xs[0] || ts[1..] != xs[2..] {
        return Err(node.err_invalid(format!(
            "input {xs:?} and target {ts:?} do not match ([N, C, d..] and [N, d..])"
        )));
    }
    let c = xs[1];
    let dt = b.g.dtype(like);
    let tdt = b.g.dtype(target);
    let reduction = reduction(node)?;
    let ignore = node.attr_i_opt("ignore_index")?;
    let mut tu_shape = xs.clone();
    tu_shape[1] = 1;
    let tu = b.reshape(target, &tu_shape);
    let mut cls_shape = vec![1; r];
    cls_shape[1] = c;
    let idx: Vec<i64> = (0..c as i64).collect();
    let classes = b.konst("classes", Tensor::from_i64_as(tdt, cls_shape.clone(), &idx));
    let onehot = b.op("Equal", &[tu, classes], vec![]);
    let mut w = b.cast(onehot, dt);
    if let Some(wt) = weight {
        if b.g.shape(wt) != [c] {
            return Err(node.err_invalid(format!(
                "weight has shape {:?}, expected [{c}]",
                b.g.shape(wt)
            )));
        }
        let wr = b.reshape(wt, &cls_shape);
        w = b.op("Mul", &[w, wr], vec![]);
    }
    if let Some(ii) = ignore {
        let iv = b.konst("ignore_index", Tensor::from_i64_as(tdt, vec![], &[ii]));
        // 1 - hit rather than Not(hit): HTP's ElementWiseNot rejects rank-5 tensors.
        let hit = b.op("Equal", &[tu, iv], vec![]);
        let hit = b.cast(hit, dt);
        let one = b.scalar(dt, 1.0);
        let keep = b.op("Sub", &[one, hit], vec![]);
        w = b.op("Mul", &[w, keep], vec![]);
    }
    let picked = b.op("Mul", &[x, w], vec![]);
    let summed = b.reduce("ReduceSum", picked, &[1], false);
    let all: Vec<i64> = (0..r as i64 - 1).collect();
    match reduction {
        Reduction::None => b.op_to("Neg", &[summed], vec![], &[out]),
        Reduction::Sum => {
            let loss = b.op("Neg", &[summed], vec![]);
            let s = b.reduce("ReduceSum", loss, &all, false);
            b.op_to("Identity", &[s], vec![], &[out]);
        }
        Reduction::Mean if weight.is_some() || ignore.is_some() => {
            let loss = b.op("Neg", &[summed], vec![]);
            let num = b.reduce("ReduceSum", loss, &all, false);
            let every: Vec<i64> = (0..r as i64).collect();
            let den = b.reduce("ReduceSum", w, &every, false);
            b.op_to("Div", &[num, den], vec![], &[out]);
        }
        Reduction::Mean => {
            let loss = b.op("Neg", &[summed], vec![]);
            let m = b.reduce("ReduceMean", loss, &all, false);
            b.op_to("Identity", &[m], vec![], &[out]);
        }
    }
    Ok(())
}

pub fn nll_loss(b: &mut Builder, node: &Node) -> Result<bool> {
    let x = node
        .input(0)
        .ok_or_else(|| node.err_invalid("input 'input' is missing"))?;
    let t = node
        .input(1)
        .ok_or_else(|| node.err_invalid("input 'target' is missing"))?;
    let out = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 'loss' is missing"))?;
    if !b.g.dtype(t).is_int() {
        return Err(node.err_dtype("target must be an integer tensor"));
    }
    nll_into(b, node, (x, x), t, node.input(2), out)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::Attr;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn loss_shape_follows_reduction() {
        let g = graph_with(&[
            ("x", DType::F32, vec![3, 5, 2]),
            ("t", DType::I64, vec![3, 2]),
        ]);
        let ins = [Some(0), Some(1)];
        let none = [("reduction", Attr::String("none".into()))];
        let nll = "NegativeLogLikelihoodLoss";
        assert_eq!(
            infer(&g, &node(nll, &ins, &none)).unwrap(),
            vec![(DType::F32, vec![3, 2])]
        );
        assert_eq!(
            infer(&g, &node(nll, &ins, &[])).unwrap(),
            vec![(DType::F32, vec![])]
        );
    }

    fn model(attrs: &[(&str, A)], weight: bool) -> ModelBuilder {
        let mut b =
            ModelBuilder::new(13)
                .input("x", DType::F32, &[2, 3])
                .input("t", DType::I64, &[2]);
        let mut ins = vec!["x", "t"];
        if weight {
            b = b.input("w", DType::F32, &[3]);
            ins.push("w");
        }
        b.node("NegativeLogLikelihoodLoss", &ins, &["y"], attrs)
            .output("y")
    }

    #[test]
    fn nll_loss_mean_snapshot() {
        assert_eq!(
            lower(&model(&[], false)).dump(),
            "input x:f32[2, 3]\n\
             input t:i32[2]\n\
             Reshape(t:i32[2]) -> NegativeLogLikelihoodLoss_0/Reshape:i32[2, 1]\n\
             ElementWiseEqual(NegativeLogLikelihoodLoss_0/Reshape:i32[2, 1], static NegativeLogLikelihoodLoss_0/classes:i32[1, 3]) -> NegativeLogLikelihoodLoss_0/Equal:bool[2, 3]\n\
             Cast(NegativeLogLikelihoodLoss_0/Equal:bool[2, 3]) -> NegativeLogLikelihoodLoss_0/Cast:f32[2, 3]\n\
             ElementWiseMultiply(x:f32[2, 3], NegativeLogLikelihoodLoss_0/Cast:f32[2, 3]) -> NegativeLogLikelihoodLoss_0/Mul:f32[2, 3]\n\
             ReduceSum(NegativeLogLikelihoodLoss_0/Mul:f32[2, 3]) axes=u32[1]{1} keep_dims=false -> NegativeLogLikelihoodLoss_0/ReduceSum:f32[2]\n\
             ElementWiseNeg(NegativeLogLikelihoodLoss_0/ReduceSum:f32[2]) -> NegativeLogLikelihoodLoss_0/Neg:f32[2]\n\
             ReduceMean(NegativeLogLikelihoodLoss_0/Neg:f32[2]) axes=u32[1]{0} keep_dims=false -> y:f32[1]\n\
             output y:f32[1]\n"
        );
    }

    #[test]
    fn nll_loss_weighted_ignore_divides_by_weights() {
        let p = lower(&model(
            &[("ignore_index", A::I(1)), ("reduction", A::S("mean"))],
            true,
        ));
        let ops = p.op_types();
        assert_eq!(ops.last(), Some(&"ElementWiseDivide"), "{ops:?}");
        assert!(ops.contains(&"ElementWiseSubtract"), "{ops:?}");
    }

    #[test]
    fn nll_loss_unknown_reduction() {
        let e = lower_err(&model(&[("reduction", A::S("max"))], false));
        assert!(
            e.contains("attribute 'reduction': unknown value 'max'"),
            "{e}"
        );
    }

    #[test]
    fn nll_loss_shape_mismatch() {
        let b = ModelBuilder::new(13)
            .input("x", DType::F32, &[2, 3])
            .input("t", DType::I64, &[3])
            .node("NegativeLogLikelihoodLoss", &["x", "t"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains("do not match"));
    }
}
