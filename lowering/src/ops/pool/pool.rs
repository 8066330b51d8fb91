//! MaxPool / AveragePool — <https://onnx.ai/onnx/operators/onnx__MaxPool.html>,
//! <https://onnx.ai/onnx/operators/onnx__AveragePool.html>, opsets 1+ (2-D).
//! QNN `PoolMax2d` / `PoolAvg2d` on NHWC: params `filter_size`, `stride` UINT_32 `[2]`,
//! `pad_amount` UINT_32 `[2, 2]` (tensor params), `rounding_mode` UINT_32 scalar (from
//! `ceil_mode`), and for average pooling `count_pad_for_edges` BOOL_8 (`count_include_pad`).
//! Constraints: no dilation, no Indices output, `storage_order = 0`.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::conv::conv::{require_2d_nhwc, spatial_params};
use crate::ops::{u32s, LowerCx};
use crate::passes::infer::Spatial;
use crate::plan::Param;
use crate::qnn_names::{op, param, rounding};

pub fn pool(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let xs = cx.shape(node, 0);
    require_2d_nhwc(node, xs.len())?;
    if node.output(1).is_some() {
        return Err(node.err_op("the Indices output is not supported"));
    }
    if node.attr_i("storage_order", 0)? != 0 {
        return Err(node.err_attr("storage_order", "only row-major (0) is supported"));
    }
    let sp = Spatial::parse(node, &[xs[1], xs[2]], None, None)?;
    if sp.dilations.iter().any(|&d| d != 1) {
        return Err(node.err_attr("dilations", "only dilation 1 is supported"));
    }
    let ceil = node.attr_i("ceil_mode", 0)? != 0;
    let mut params = vec![(
        param::FILTER_SIZE,
        Param::u32_vec(&u32s(node, "kernel_shape", &sp.kernel)?),
    )];
    params.extend(spatial_params(node, &sp, false)?);
    params.push((
        param::ROUNDING_MODE,
        Param::u32(if ceil {
            rounding::CEIL
        } else {
            rounding::FLOOR
        }),
    ));
    let q = if node.op_type == "MaxPool" {
        op::POOL_MAX_2D
    } else {
        params.push((
            param::COUNT_PAD_FOR_EDGES,
            Param::bool(node.attr_i("count_include_pad", 0)? != 0),
        ));
        op::POOL_AVG_2D
    };
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(node, q, vec![x], vec![y], params);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn maxpool_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 6, 6])
            .node(
                "MaxPool",
                &["x"],
                &["y"],
                &[
                    ("kernel_shape", A::Is(vec![3, 3])),
                    ("strides", A::Is(vec![2, 2])),
                    ("pads", A::Is(vec![1, 1, 1, 1])),
                ],
            )
            .output("y");
        let d = lower(&b).dump();
        assert!(d.contains("PoolMax2d(x_nhwc:f32[1, 6, 6, 2]) filter_size=u32[2]{3,3} stride=u32[2]{2,2} pad_amount=u32[2, 2]{1,1,1,1} rounding_mode=0u -> y_nhwc:f32[1, 3, 3, 2]"), "{d}");
    }

    #[test]
    fn avgpool_count_include_pad() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .node(
                "AveragePool",
                &["x"],
                &["y"],
                &[
                    ("kernel_shape", A::Is(vec![2, 2])),
                    ("count_include_pad", A::I(1)),
                    ("ceil_mode", A::I(1)),
                ],
            )
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("rounding_mode=1u count_pad_for_edges=true"),
            "{d}"
        );
    }

    #[test]
    fn maxpool_indices_and_dilation_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .node(
                "MaxPool",
                &["x"],
                &["y", "i"],
                &[("kernel_shape", A::Is(vec![2, 2]))],
            )
            .output("y")
            .output("i");
        assert!(lower_err(&b).contains("Indices output"));
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 6, 6])
            .node(
                "MaxPool",
                &["x"],
                &["y"],
                &[
                    ("kernel_shape", A::Is(vec![2, 2])),
                    ("dilations", A::Is(vec![2, 2])),
                ],
            )
            .output("y");
        assert!(lower_err(&b).contains("attribute 'dilations'"));
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 6, 6])
            .node(
                "MaxPool",
                &["x"],
                &["y"],
                &[
                    ("kernel_shape", A::Is(vec![2, 2])),
                    ("storage_order", A::I(1)),
                ],
            )
            .output("y");
        assert!(lower_err(&b).contains("attribute 'storage_order'"));
    }
}
