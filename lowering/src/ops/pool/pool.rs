//! MaxPool / AveragePool — <https://onnx.ai/onnx/operators/onnx__MaxPool.html>,
//! <https://onnx.ai/onnx/operators/onnx__AveragePool.html>, opsets 1+ (2-D).
//! QNN `PoolMax2d` / `PoolAvg2d` on NHWC: params `filter_size`, `stride` UINT_32 `[2]`,
//! `pad_amount` UINT_32 `[2, 2]` (tensor params), `rounding_mode` UINT_32 scalar (from
//! `ceil_mode`), and for average pooling `count_pad_for_edges` BOOL_8 (`count_include_pad`).
//! Constraints: no dilation, no Indices output, `storage_order = 0`. 1-D pools are expanded
//! into 2-D ones first (`conv/conv1d.rs`). LpPool is only inferred (no op table lists it).
//!
//! AveragePool never hands padding or ceil rounding to `PoolAvg2d`: on the HTP library 2.51
//! (SoC 60) a padded `PoolAvg2d` can crash the process (SIGSEGV in graphExecute, e.g. 2x2 kernel,
//! stride 1, `pad_amount` {{0,1},{0,1}}, `count_pad_for_edges` 0, which ONNX
//! `auto_pad=SAME_UPPER` gives; also 2x2 stride 2 with pads 1 on every side), and other padded
//! or ceil-rounded configurations compute wrong values (zeros at the edges). An explicit `Pad`
//! before an unpadded `PoolAvg2d` does not help: QNN fuses the two back into the same op and
//! crashes the same way. So a padded or ceil-mode AveragePool is a `DepthWiseConv2d` with
//! weights `1 / kernel area` (conv padding is reliable; ceil-mode windows become extra end
//! padding), times a constant per-position factor `kernel area / divisor` for the edge
//! windows, whose divisor depends on `count_include_pad`.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::spatial::{infer_nchw, pool_out, require_2d_nhwc, spatial_params, Spatial};
use crate::ops::Quant;
use crate::ops::{u32s, Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param, rounding};

pub const MAX_POOL: OpDef = OpDef {
    op_type: "MaxPool",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer: infer_max_pool,
    fold: None,
    expand: Some(crate::ops::conv::conv1d::as_2d),
    lower: Some(pool),
    quant: Quant::Same,
};

pub const AVERAGE_POOL: OpDef = OpDef {
    op_type: "AveragePool",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer: infer_pool,
    fold: None,
    expand: Some(crate::ops::conv::conv1d::as_2d),
    lower: Some(pool),
    quant: Quant::Direct,
};

/// Inferred only: no op table lists it.
pub const LP_POOL: OpDef = OpDef {
    op_type: "LpPool",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: infer_pool,
    fold: None,
    expand: None,
    lower: None,
    quant: Quant::Float,
};

// Spatial loops index the input dims and the parsed attributes in parallel.
#[allow(clippy::needless_range_loop)]
fn infer_pool(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    infer_nchw(x, |xs| {
        let sp_in = &xs[2..];
        let sp = Spatial::parse(n, sp_in, None, None)?;
        let ceil = n.attr_i("ceil_mode", 0)? != 0;
        let mut o = vec![xs[0], xs[1]];
        let r = sp_in.len();
        for i in 0..r {
            o.push(pool_out(
                n,
                sp_in[i],
                sp.kernel[i],
                sp.strides[i],
                sp.dilations[i],
                (sp.pads[i], sp.pads[i + r]),
                ceil,
            )?);
        }
        Ok(o)
    })
}

/// A pool's output, and for MaxPool the `Indices` output of the same shape.
fn infer_max_pool(x: &In) -> Result<Vec<Out>> {
    let mut outs = infer_pool(x)?;
    if x.n.outputs.len() > 1 {
        let s = outs[0].1.clone();
        outs.push((DType::I64, s));
    }
    Ok(outs)
}

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
    } else if ceil || sp.pads.iter().any(|&p| p != 0) {
        return avg_pool_padded(cx, node, &sp);
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

/// Elements of one spatial dim that the window of output `o` averages over: the real input only
/// (`count_include_pad = 0`), or the input and its explicit pads.
fn window_count(o: usize, sp_dim: (usize, usize, usize, usize, usize), include_pad: bool) -> usize {
    let (len, k, s, begin, end) = sp_dim;
    let start = (o * s) as i64 - begin as i64;
    let stop = start + k as i64;
    let (lo, hi) = if include_pad {
        (-(begin as i64), (len + end) as i64)
    } else {
        (0, len as i64)
    };
    (stop.min(hi) - start.max(lo)).max(0) as usize
}

fn avg_pool_padded(cx: &mut LowerCx, node: &Node, sp: &Spatial) -> Result<()> {
    let xs = cx.shape(node, 0);
    let ys = cx.out_shape(node, 0);
    let (n, h, w, c) = (xs[0], xs[1], xs[2], xs[3]);
    let (oh, ow) = (ys[1], ys[2]);
    let include_pad = node.attr_i("count_include_pad", 0)? != 0;
    // End pads that make a floor-rounded conv produce exactly (oh, ow) outputs.
    let covered = |o: usize, k: usize, s: usize| (o.max(1) - 1) * s + k;
    let end_h = covered(oh, sp.kernel[0], sp.strides[0]).saturating_sub(sp.pads[0] + h);
    let end_w = covered(ow, sp.kernel[1], sp.strides[1]).saturating_sub(sp.pads[1] + w);
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    let dt = cx.tensor_dtype(y);
    let area = (sp.kernel[0] * sp.kernel[1]) as f64;
    let weights = Tensor::from_f64_as(
        dt,
        vec![sp.kernel[0], sp.kernel[1], 1, c],
        &vec![1.0 / area; sp.kernel[0] * sp.kernel[1] * c],
    );
    let wt = cx.static_tensor(node, &format!("{}_avg_w", node.name), &weights)?;
    let bias = Tensor::from_f64_as(dt, vec![c], &vec![0.0; c]);
    let bt = cx.static_tensor(node, &format!("{}_avg_b", node.name), &bias)?;
    let conv_sp = Spatial {
        pads: vec![sp.pads[0], sp.pads[1], end_h, end_w],
        ..sp.clone()
    };
    let params = spatial_params(node, &conv_sp, true)?;
    let mut factor = Vec::with_capacity(oh * ow);
    for i in 0..oh {
        let dh = (h, sp.kernel[0], sp.strides[0], sp.pads[0], sp.pads[2]);
        let ch = window_count(i, dh, include_pad);
        for j in 0..ow {
            let dw = (w, sp.kernel[1], sp.strides[1], sp.pads[1], sp.pads[3]);
            let cnt = ch * window_count(j, dw, include_pad);
            // A window entirely in padding sums zeros; keep its output 0 rather than 0 * inf.
            factor.push(if cnt == 0 { 0.0 } else { area / cnt as f64 });
        }
    }
    if factor.iter().all(|&f| f == 1.0) {
        cx.op(
            node,
            op::DEPTH_WISE_CONV_2D,
            vec![x, wt, bt],
            vec![y],
            params,
        );
        return Ok(());
    }
    let summed = cx.emit(
        node,
        op::DEPTH_WISE_CONV_2D,
        vec![x, wt, bt],
        dt,
        &[n, oh, ow, c],
        params,
    );
    let t = Tensor::from_f64_as(dt, vec![1, oh, ow, 1], &factor);
    let f = cx.static_tensor(node, &format!("{}_edge_factor", node.name), &t)?;
    cx.op(
        node,
        op::ELEMENT_WISE_MULTIPLY,
        vec![summed, f],
        vec![y],
        vec![],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::Attr;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn maxpool_ceil_mode() {
        let g = graph_with(&[("x", DType::F32, vec![1, 1, 6, 6])]);
        let mut n = node(
            "MaxPool",
            &[Some(0)],
            &[
                ("kernel_shape", Attr::Ints(vec![3, 3])),
                ("strides", Attr::Ints(vec![2, 2])),
                ("ceil_mode", Attr::Int(1)),
            ],
        );
        n.outputs = vec![None];
        assert_eq!(infer(&g, &n).unwrap()[0].1, vec![1, 1, 3, 3]);
    }

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

    fn avgpool(attrs: &[(&str, A)]) -> String {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .node("AveragePool", &["x"], &["y"], attrs)
            .output("y");
        lower(&b).dump()
    }

    #[test]
    fn unpadded_avgpool_is_pool_avg() {
        let d = avgpool(&[
            ("kernel_shape", A::Is(vec![2, 2])),
            ("strides", A::Is(vec![2, 2])),
        ]);
        assert!(d.contains("PoolAvg2d(x_nhwc:f32[1, 4, 4, 2]) filter_size=u32[2]{2,2} stride=u32[2]{2,2} pad_amount=u32[2, 2]{0,0,0,0} rounding_mode=0u count_pad_for_edges=false -> y_nhwc:f32[1, 2, 2, 2]"), "{d}");
    }

    #[test]
    fn same_upper_avgpool_is_a_depthwise_conv_with_edge_factors() {
        // The configuration that crashed the HTP emulator as a PoolAvg2d.
        let d = avgpool(&[
            ("kernel_shape", A::Is(vec![2, 2])),
            ("auto_pad", A::S("SAME_UPPER")),
        ]);
        assert!(!d.contains("PoolAvg2d"), "{d}");
        assert!(d.contains("DepthWiseConv2d(x_nhwc:f32[1, 4, 4, 2], static AveragePool_0_avg_w:f32[2, 2, 1, 2], static AveragePool_0_avg_b:f32[2]) stride=u32[2]{1,1} pad_amount=u32[2, 2]{0,1,0,1} dilation=u32[2]{1,1}"), "{d}");
        assert!(d.contains("ElementWiseMultiply(AveragePool_0_DepthWiseConv2d:f32[1, 4, 4, 2], static AveragePool_0_edge_factor:f32[1, 4, 4, 1]) -> y_nhwc"), "{d}");
    }

    #[test]
    fn avgpool_edge_divisors_follow_count_include_pad() {
        // 1-D view of one spatial dim: length 4, kernel 3, stride 2, pads 1 / 1.
        let dim = (4, 3, 2, 1, 1);
        assert_eq!(super::window_count(0, dim, false), 2);
        assert_eq!(super::window_count(1, dim, false), 3);
        assert_eq!(super::window_count(0, dim, true), 3);
        // A ceil-mode window past the explicit end pad counts only what it covers.
        let dim = (4, 3, 2, 0, 0);
        assert_eq!(super::window_count(1, dim, false), 2);
        assert_eq!(super::window_count(1, dim, true), 2);
    }

    #[test]
    fn ceil_avgpool_pads_the_end_and_count_include_pad_without_pads_needs_no_factor() {
        let d = avgpool(&[
            ("kernel_shape", A::Is(vec![3, 3])),
            ("strides", A::Is(vec![2, 2])),
            ("ceil_mode", A::I(1)),
        ]);
        assert!(d.contains("pad_amount=u32[2, 2]{0,1,0,1}"), "{d}");
        assert!(d.contains("edge_factor"), "{d}");
        let d = avgpool(&[
            ("kernel_shape", A::Is(vec![3, 3])),
            ("pads", A::Is(vec![1, 1, 1, 1])),
            ("count_include_pad", A::I(1)),
        ]);
        assert!(d.contains("DepthWiseConv2d"), "{d}");
        assert!(!d.contains("edge_factor"), "{d}");
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
