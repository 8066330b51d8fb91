//! Trilu — <https://onnx.ai/onnx/operators/onnx__Trilu.html>, opset 14+. QNN has no Trilu: it is
//! expanded before lowering to `Where(mask, x, 0)` over the last two axes, the mask comparing the
//! constant `col - row` with `k` (`>= k` keeps the upper triangle, `<= k` the lower). A constant
//! (or absent, 0) `k` folds the mask to a constant; a `k` given as an input is compared at run
//! time (QNN ElementWiseGreaterEqual / LessEqual on int32, then ElementWiseSelect).

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::{Layout, OpDef, Quant, ShapeInput};

pub const TRILU: OpDef = OpDef {
    op_type: "Trilu",
    since: 14,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(expand),
    lower: None,
    quant: Quant::Float,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let s = x.shape(0)?;
    if s.len() < 2 {
        return Err(x.n.err_invalid(format!(
            "Trilu needs an input of rank 2 or more, got shape {s:?}"
        )));
    }
    Ok(vec![(x.dtype(0)?, s.to_vec())])
}

fn expand(b: &mut Builder, n: &Node) -> Result<bool> {
    let (x, y) = n.unary_io()?;
    let s = b.g.shape(x).to_vec();
    if s.len() < 2 {
        return Err(n.err_invalid(format!(
            "Trilu needs an input of rank 2 or more, got shape {s:?}"
        )));
    }
    let (rows, cols) = (s[s.len() - 2], s[s.len() - 1]);
    let d: Vec<i64> = (0..rows)
        .flat_map(|i| (0..cols).map(move |j| j as i64 - i as i64))
        .collect();
    let diff = b.konst("col_minus_row", Tensor::from_i64(vec![rows, cols], &d));
    let k = match n.input(1) {
        Some(k) => k,
        None => b.konst("k", Tensor::from_i64(vec![], &[0])),
    };
    let cmp = if n.attr_i("upper", 1)? != 0 {
        "GreaterOrEqual"
    } else {
        "LessOrEqual"
    };
    let mask = b.op(cmp, &[diff, k], vec![]);
    let zero = b.scalar(b.g.dtype(x), 0.0);
    b.op_to("Where", &[mask, x, zero], vec![], &[y]);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn a_constant_k_is_a_constant_mask() {
        let b = ModelBuilder::new(14)
            .input("x", DType::F32, &[2, 3, 4])
            .init("k", Tensor::from_i64(vec![], &[-1]))
            .node("Trilu", &["x", "k"], &["y"], &[("upper", A::I(0))])
            .output("y");
        let p = lower(&b);
        let d = p.dump();
        assert_eq!(p.op_types(), ["ElementWiseSelect"], "{d}");
        assert!(d.contains("static Trilu_0/"), "{d}");
    }

    #[test]
    fn a_k_input_is_compared_at_run_time() {
        let b = ModelBuilder::new(14)
            .input("x", DType::I64, &[4, 5])
            .input("k", DType::I64, &[])
            .node("Trilu", &["x", "k"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        let d = p.dump();
        assert!(d.contains("ElementWiseGreaterEqual("), "{d}");
        assert!(d.contains("ElementWiseSelect("), "{d}");
    }

    #[test]
    fn rank_1_is_refused_naming_the_node() {
        let b = ModelBuilder::new(14)
            .input("x", DType::F32, &[4])
            .node("Trilu", &["x"], &["y"], &[])
            .output("y");
        assert!(
            lower_err(&b).contains("rank 2 or more"),
            "{}",
            lower_err(&b)
        );
    }
}
