//! ArgMax / ArgMin — <https://onnx.ai/onnx/operators/onnx__ArgMax.html>, opset 1+.
//! QNN `Argmax` / `Argmin`: `axis` UINT_32 scalar, `keep_dims` BOOL_8 scalar; output int32
//! (ONNX int64, narrowed). QNN returns the first index of a tie; `select_last_index = 1` (opset
//! 12+) is expanded before lowering to `(d - 1) - ArgMax(reversed x)`, the reversal a Gather
//! of the axis with the constant indices `d-1, ..., 0`.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Node};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const ARG_MAX: OpDef = OpDef {
    op_type: "ArgMax",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(last_index),
    lower: Some(arg),
    quant: Quant::Float,
};

pub const ARG_MIN: OpDef = OpDef {
    op_type: "ArgMin",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(last_index),
    lower: Some(arg),
    quant: Quant::Float,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let s = x.shape(0)?;
    let axis = norm_axis(n, "axis", n.attr_i("axis", 0)?, s.len())?;
    let mut o = s.to_vec();
    if n.attr_i("keepdims", 1)? != 0 {
        o[axis] = 1;
    } else {
        o.remove(axis);
    }
    Ok(vec![(DType::I64, o)])
}

/// `select_last_index = 1`: the first index in the reversed axis, counted from the end.
fn last_index(b: &mut Builder, node: &Node) -> Result<bool> {
    if node.attr_i("select_last_index", 0)? == 0 {
        return Ok(false);
    }
    let (x, y) = node.unary_io()?;
    let s = b.g.shape(x).to_vec();
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, s.len())?;
    let d = s[axis];
    let rev: Vec<i64> = (0..d as i64).rev().collect();
    let idx = b.konst("reversed", Tensor::from_i64(vec![d], &rev));
    let xr = b.op("Gather", &[x, idx], vec![("axis", Attr::Int(axis as i64))]);
    let keep = node.attr_i("keepdims", 1)?;
    let first = b.op(
        &node.op_type,
        &[xr],
        vec![
            ("axis", Attr::Int(axis as i64)),
            ("keepdims", Attr::Int(keep)),
        ],
    );
    let last = b.konst("last", Tensor::from_i64(vec![], &[d as i64 - 1]));
    b.op_to("Sub", &[last, first], vec![], &[y]);
    Ok(true)
}

pub fn arg(cx: &mut LowerCx, node: &Node) -> Result<()> {
    if node.attr_i("select_last_index", 0)? != 0 {
        return Err(node.err_attr("select_last_index", "only 0 (first index) is supported"));
    }
    let r = cx.shape(node, 0).len();
    let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, r)?;
    let keep = node.attr_i("keepdims", 1)? != 0;
    let q = if node.op_type == "ArgMax" {
        op::ARGMAX
    } else {
        op::ARGMIN
    };
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        q,
        vec![x],
        vec![y],
        vec![
            (param::AXIS, Param::u32(axis as u32)),
            (param::KEEP_DIMS, Param::bool(keep)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn argmax_output_is_i32() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 5])
            .node("ArgMax", &["x"], &["y"], &[("axis", A::I(-1))])
            .output("y");
        let p = lower(&b);
        assert!(p
            .dump()
            .contains("Argmax(x:f32[2, 5]) axis=1u keep_dims=true -> y:i32[2, 1]"));
        assert_eq!(p.outputs[0].host_dtype, DType::I64);
    }

    #[test]
    fn select_last_index_reverses_the_axis() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 5])
            .node(
                "ArgMin",
                &["x"],
                &["y"],
                &[("axis", A::I(1)), ("select_last_index", A::I(1))],
            )
            .output("y");
        let p = lower(&b);
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            ["Gather", "Argmin", "ElementWiseSubtract"],
            "{d}"
        );
        assert!(d.contains("Gather(x:f32[2, 5], static ArgMin_0/"), "{d}");
    }
}
