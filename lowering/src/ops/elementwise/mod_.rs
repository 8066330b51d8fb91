//! Mod — <https://onnx.ai/onnx/operators/onnx__Mod.html> (opset 10, 13). HTP has no
//! `ElementWiseMod`/`ElementWiseFmod` that accepts these types, so Mod is expanded before
//! lowering: `r = a - b · trunc(a / b)`, where `trunc` is `Where(q < 0, Ceil(q), Floor(q))` for
//! floats and the int32 `ElementWiseDivide` itself (it truncates toward zero on HTP, checked on
//! the emulator). With `fmod = 0` (integers only) a non-zero remainder whose sign differs from
//! the divisor's is moved by `b`, giving the divisor's sign like Python. Constraints: floats
//! need `fmod = 1` (as the spec requires); int8/int16/uint inputs are not supported (HTP cannot
//! cast them to int32).

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::Node;
use crate::ops::Quant;
use crate::ops::{Fold, Layout, OpDef, ShapeInput};

pub const MOD: OpDef = OpDef {
    op_type: "Mod",
    since: 10,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: super::infer_binary,
    fold: Some(Fold::Values(super::fold_arith)),
    expand: Some(mod_),
    lower: None,
    quant: Quant::Float,
};

pub fn mod_(b: &mut Builder, node: &Node) -> Result<bool> {
    let (a, d) = match (node.input(0), node.input(1)) {
        (Some(a), Some(d)) => (a, d),
        _ => return Err(node.err_invalid("Mod takes two inputs")),
    };
    let y = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 0 is missing"))?;
    let dt = b.g.dtype(a);
    let fmod = node.attr_i("fmod", 0)? != 0;
    let q = b.op("Div", &[a, d], vec![]);
    if dt.is_float() {
        if !fmod {
            return Err(node.err_attr("fmod", "must be 1 for floating-point inputs"));
        }
        let zero = b.scalar(dt, 0.0);
        let neg = b.op("Less", &[q, zero], vec![]);
        let c = b.op("Ceil", &[q], vec![]);
        let f = b.op("Floor", &[q], vec![]);
        let t = b.op("Where", &[neg, c, f], vec![]);
        let bt = b.op("Mul", &[d, t], vec![]);
        b.op_to("Sub", &[a, bt], vec![], &[y]);
        return Ok(true);
    }
    let bq = b.op("Mul", &[d, q], vec![]);
    if fmod {
        b.op_to("Sub", &[a, bq], vec![], &[y]);
        return Ok(true);
    }
    let r = b.op("Sub", &[a, bq], vec![]);
    let zero = b.scalar(dt, 0.0);
    let is_zero = b.op("Equal", &[r, zero], vec![]);
    let nonzero = b.op("Not", &[is_zero], vec![]);
    let rneg = b.op("Less", &[r, zero], vec![]);
    let dneg = b.op("Less", &[d, zero], vec![]);
    let differ = b.op("Xor", &[rneg, dneg], vec![]);
    let fix = b.op("And", &[nonzero, differ], vec![]);
    let moved = b.op("Add", &[r, d], vec![]);
    b.op_to("Where", &[fix, moved, r], vec![], &[y]);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    fn model(dt: DType, attrs: &[(&str, A)]) -> ModelBuilder {
        ModelBuilder::new(13)
            .input("a", dt, &[4])
            .input("b", dt, &[4])
            .node("Mod", &["a", "b"], &["y"], attrs)
            .output("y")
    }

    #[test]
    fn int_mod_takes_the_divisors_sign() {
        let t = lower(&model(DType::I32, &[])).op_types();
        assert_eq!(
            t,
            vec![
                "ElementWiseDivide",
                "ElementWiseMultiply",
                "ElementWiseSubtract",
                "ElementWiseEqual",
                "ElementWiseNot",
                "ElementWiseLess",
                "ElementWiseLess",
                "ElementWiseXor",
                "ElementWiseAnd",
                "ElementWiseAdd",
                "ElementWiseSelect"
            ]
        );
    }

    #[test]
    fn float_fmod_truncates() {
        let t = lower(&model(DType::F32, &[("fmod", A::I(1))])).op_types();
        assert!(
            t.contains(&"ElementWiseCeil") && t.contains(&"ElementWiseFloor"),
            "{t:?}"
        );
    }

    #[test]
    fn float_mod_without_fmod_is_rejected() {
        assert!(lower_err(&model(DType::F32, &[])).contains("attribute 'fmod'"));
    }
}
