//! Conv — <https://onnx.ai/onnx/operators/onnx__Conv.html>, opset 1+ (2-D only).
//!
//! QNN `Conv2d`: in[0] NHWC data, in[1] HWIO filter `[KH, KW, Cin/group, Cout]`, in[2] bias
//! `[Cout]` (zeros when the model has none); params `stride` UINT_32 `[2]`, `pad_amount`
//! UINT_32 `[2, 2]` = `{{top, bottom}, {left, right}}`, `dilation` UINT_32 `[2]` (all tensor
//! params) and `group` UINT_32 scalar. `group == Cin == Cout` becomes `DepthWiseConv2d`
//! (filter `[KH, KW, 1, Cout]`, no `group`).
//! Weights that are not constant are transposed to HWIO by a `Transpose` op. A 1-D Conv is
//! expanded into a 2-D one first ([`super::conv1d`]).
//! Constraints: 2-D spatial, weights/bias in the activation's float type.

use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::spatial::{infer_nchw, pool_out, require_2d_nhwc, spatial_params, Spatial};
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::ops::{Quant, Weighted};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const CONV: OpDef = OpDef {
    op_type: "Conv",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(super::conv1d::as_2d),
    lower: Some(conv),
    quant: Quant::Weighted(Weighted {
        weight: 1,
        channel: Some(|_| 0),
        bias: Some(2),
        weight_storage: None,
        symmetric_u16: false,
    }),
};

// Spatial loops index the input dims and the parsed attributes in parallel.
#[allow(clippy::needless_range_loop)]
fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    infer_nchw(x, |xs| {
        let sp_in = &xs[2..];
        let ws = x.shape(1)?;
        if ws.len() != xs.len() {
            return Err(n.err_invalid(format!(
                "weight rank {} != input rank {}",
                ws.len(),
                xs.len()
            )));
        }
        // The layout pass stores 2-D conv weights as OIHW still; only data is NHWC.
        let sp = Spatial::parse(n, sp_in, Some(&ws[2..]), None)?;
        let group = n.attr_i("group", 1)?;
        if group <= 0 || xs[1] != ws[1] * group as usize {
            return Err(n.err_invalid(format!(
                "input channels {} != weight channels {} x group {group}",
                xs[1], ws[1]
            )));
        }
        let mut o = vec![xs[0], ws[0]];
        for i in 0..sp_in.len() {
            let r = sp_in.len();
            o.push(pool_out(
                n,
                sp_in[i],
                sp.kernel[i],
                sp.strides[i],
                sp.dilations[i],
                (sp.pads[i], sp.pads[i + r]),
                false,
            )?);
        }
        Ok(o)
    })
}

pub fn conv(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let xs = cx.shape(node, 0);
    require_2d_nhwc(node, xs.len())?;
    let xdt = cx.dtype(node, 0);
    let wdt = cx.dtype(node, 1);
    if wdt != xdt {
        return Err(node.err_dtype(format!("weights are {wdt} but the input is {xdt}")));
    }
    let ws = cx.shape(node, 1);
    if ws.len() != 4 {
        return Err(node.err_invalid(format!("weights have shape {ws:?}, expected 4-D")));
    }
    let (cout, cin_g) = (ws[0], ws[1]);
    let cin = xs[3];
    let in_sp = [xs[1], xs[2]];
    let sp = Spatial::parse(node, &in_sp, Some(&ws[2..]), None)?;
    let group = node.attr_i("group", 1)? as usize;
    let depthwise = group > 1 && group == cin && cout == cin && cin_g == 1;
    let wt = super::permuted_weights(cx, node, [2, 3, 1, 0])?;
    let bias = match node.input(2) {
        Some(_) => cx.input(node, 2)?,
        None => cx.static_tensor(
            node,
            &format!("{}_bias", node.name),
            &Tensor::from_f64_as(xdt, vec![cout], &vec![0.0; cout]),
        )?,
    };
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    let mut params = spatial_params(node, &sp, true)?;
    let q = if depthwise {
        op::DEPTH_WISE_CONV_2D
    } else {
        params.push((param::GROUP, Param::u32(group as u32)));
        op::CONV_2D
    };
    cx.op(node, q, vec![x, wt, bias], vec![y], params);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ir::Attr;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{rand_f32, ModelBuilder, A};

    #[test]
    fn conv_same_upper_and_strides() {
        let g = graph_with(&[
            ("x", DType::F32, vec![1, 3, 7, 7]),
            ("w", DType::F32, vec![8, 3, 3, 3]),
        ]);
        let mut n = node(
            "Conv",
            &[Some(0), Some(1)],
            &[
                ("strides", Attr::Ints(vec![2, 2])),
                ("auto_pad", Attr::String("SAME_UPPER".into())),
            ],
        );
        n.outputs = vec![None];
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F32, vec![1, 8, 4, 4])]);
        n.nhwc = true;
        let g = graph_with(&[
            ("x", DType::F32, vec![1, 7, 7, 3]),
            ("w", DType::F32, vec![8, 3, 3, 3]),
        ]);
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F32, vec![1, 4, 4, 8])]);
    }

    fn w(o: usize, i: usize, k: usize) -> Tensor {
        Tensor::from_f32(vec![o, i, k, k], &rand_f32(3, o * i * k * k))
    }

    #[test]
    fn conv_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 6, 5])
            .init("w", w(4, 3, 3))
            .init("b", Tensor::from_f32(vec![4], &[0.0; 4]))
            .node(
                "Conv",
                &["x", "w", "b"],
                &["y"],
                &[
                    ("strides", A::Is(vec![2, 1])),
                    ("pads", A::Is(vec![2, 0, 0, 1])),
                ],
            )
            .output("y");
        assert_eq!(
            lower(&b).dump(),
            "input x:f32[1, 3, 6, 5]\n\
             Transpose(x:f32[1, 3, 6, 5]) perm=u32[4]{0,2,3,1} -> x_nhwc:f32[1, 6, 5, 3]\n\
             Conv2d(x_nhwc:f32[1, 6, 5, 3], static Conv_0_w_hwio:f32[3, 3, 3, 4], static b:f32[4]) stride=u32[2]{2,1} pad_amount=u32[2, 2]{2,0,0,1} dilation=u32[2]{1,1} group=1u -> y_nhwc:f32[1, 3, 4, 4]\n\
             Transpose(y_nhwc:f32[1, 3, 4, 4]) perm=u32[4]{0,3,1,2} -> y:f32[1, 4, 3, 4]\n\
             output y:f32[1, 4, 3, 4]\n"
        );
    }

    #[test]
    fn depthwise_conv() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 5, 5])
            .init("w", w(4, 1, 3))
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                &[("group", A::I(4)), ("pads", A::Is(vec![1, 1, 1, 1]))],
            )
            .output("y");
        let d = lower(&b).dump();
        assert!(d.contains("DepthWiseConv2d(x_nhwc:f32[1, 5, 5, 4], static Conv_0_w_hwio:f32[3, 3, 1, 4], static Conv_0_bias:f32[4])"), "{d}");
        assert!(!d.contains("group="), "{d}");
    }

    #[test]
    fn conv3d_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4, 4])
            .init("w", Tensor::from_f32(vec![2, 2, 1, 1, 1], &[0.1; 4]))
            .node("Conv", &["x", "w"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains("3-D spatial input is not supported"));
    }

    #[test]
    fn dynamic_weights_are_transposed_in_graph() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .input("w", DType::F32, &[3, 2, 3, 3])
            .node("Conv", &["x", "w"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("Transpose(w:f32[3, 2, 3, 3]) perm=u32[4]{2,3,1,0} -> Conv_0_Transpose:f32[3, 3, 2, 3]\n\
                        Conv2d(x_nhwc:f32[1, 4, 4, 2], Conv_0_Transpose:f32[3, 3, 2, 3], static Conv_0_bias:f32[3])"),
            "{d}"
        );
    }

    #[test]
    fn weights_of_another_dtype_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .input("w", DType::F16, &[2, 2, 3, 3])
            .node("Conv", &["x", "w"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains("weights are f16 but the input is f32"));
    }
}
