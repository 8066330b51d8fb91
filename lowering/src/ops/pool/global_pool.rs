//! GlobalAveragePool / GlobalMaxPool — <https://onnx.ai/onnx/operators/onnx__GlobalAveragePool.html>.
//! QNN `ReduceMean` / `ReduceMax` over the spatial axes of the NHWC input: `axes` UINT_32
//! `[2]` = `{1, 2}` (tensor param), `keep_dims` BOOL_8 true. Constraint: 4-D input.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::spatial::{infer_nchw, require_2d_nhwc};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const GLOBAL_AVERAGE_POOL: OpDef = OpDef {
    op_type: "GlobalAveragePool",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(global_pool),
    quant: Quant::Direct,
};

pub const GLOBAL_MAX_POOL: OpDef = OpDef {
    op_type: "GlobalMaxPool",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(global_pool),
    quant: Quant::Same,
};

/// The input with every spatial dim reduced to 1.
fn infer(x: &In) -> Result<Vec<Out>> {
    infer_nchw(x, |xs| {
        let mut o = xs.to_vec();
        for d in &mut o[2..] {
            *d = 1;
        }
        Ok(o)
    })
}

pub fn global_pool(cx: &mut LowerCx, node: &Node) -> Result<()> {
    require_2d_nhwc(node, cx.shape(node, 0).len())?;
    let q = if node.op_type == "GlobalMaxPool" {
        op::REDUCE_MAX
    } else {
        op::REDUCE_MEAN
    };
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        q,
        vec![x],
        vec![y],
        vec![
            (param::AXES, Param::u32_vec(&[1, 2])),
            (param::KEEP_DIMS, Param::bool(true)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::ModelBuilder;

    #[test]
    fn global_avg_pool_is_reduce_mean() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 4, 4])
            .node("GlobalAveragePool", &["x"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(d.contains("ReduceMean(x_nhwc:f32[1, 4, 4, 3]) axes=u32[2]{1,2} keep_dims=true -> y_nhwc:f32[1, 1, 1, 3]"), "{d}");
    }

    #[test]
    fn global_pool_1d_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 4])
            .node("GlobalMaxPool", &["x"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains("1-D spatial input"));
    }
}
