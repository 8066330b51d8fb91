//! ReduceMean / ReduceSum / ReduceMax / ReduceMin — <https://onnx.ai/onnx/operators/onnx__ReduceMean.html>.
//! `axes` is an attribute before opset 18 (13 for ReduceSum) and a constant input after;
//! `noop_with_empty_axes` is honoured. QNN `ReduceMean`/`ReduceSum`/`ReduceMax`/`ReduceMin`:
//! `axes` UINT_32 `[k]` (tensor param), `keep_dims` BOOL_8 scalar.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::{LowerCx, OpDef};
use crate::passes::infer::reduce_params;
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const REDUCE_MEAN: OpDef = OpDef {
    op_type: "ReduceMean",
    expand: None,
    lower: Some(reduce),
};

pub const REDUCE_SUM: OpDef = OpDef {
    op_type: "ReduceSum",
    expand: None,
    lower: Some(reduce),
};

pub const REDUCE_MAX: OpDef = OpDef {
    op_type: "ReduceMax",
    expand: None,
    lower: Some(reduce),
};

pub const REDUCE_MIN: OpDef = OpDef {
    op_type: "ReduceMin",
    expand: None,
    lower: Some(reduce),
};

pub fn reduce(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let q = match node.op_type.as_str() {
        "ReduceMean" => op::REDUCE_MEAN,
        "ReduceSum" => op::REDUCE_SUM,
        "ReduceMax" => op::REDUCE_MAX,
        _ => op::REDUCE_MIN,
    };
    let (axes, keep) = reduce_params(cx.g, node)?;
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    let Some(axes) = axes else {
        cx.op(node, op::RESHAPE, vec![x], vec![y], vec![]);
        return Ok(());
    };
    let axes: Vec<u32> = axes.iter().map(|&a| a as u32).collect();
    cx.op(
        node,
        q,
        vec![x],
        vec![y],
        vec![
            (param::AXES, Param::u32_vec(&axes)),
            (param::KEEP_DIMS, Param::bool(keep)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn reduce_mean_attr_axes() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .node(
                "ReduceMean",
                &["x"],
                &["y"],
                &[("axes", A::Is(vec![-1])), ("keepdims", A::I(0))],
            )
            .output("y");
        assert!(lower(&b)
            .dump()
            .contains("ReduceMean(x:f32[2, 3, 4]) axes=u32[1]{2} keep_dims=false -> y:f32[2, 3]"));
    }

    #[test]
    fn reduce_sum_input_axes() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .init("ax", Tensor::from_i64(vec![2], &[0, 1]))
            .node("ReduceSum", &["x", "ax"], &["y"], &[])
            .output("y");
        assert!(lower(&b).dump().contains(
            "ReduceSum(x:f32[2, 3, 4]) axes=u32[2]{0,1} keep_dims=true -> y:f32[1, 1, 4]"
        ));
    }

    #[test]
    fn reduce_dynamic_axes_unsupported() {
        let b = ModelBuilder::new(18)
            .input("x", DType::F32, &[2, 3])
            .input("ax", DType::I64, &[1])
            .node("ReduceMax", &["x", "ax"], &["y"], &[])
            .output("y");
        assert!(crate::ops::test_util::lower_err(&b).contains("input 'axes' must be a constant"));
    }
}
