//! ConvTranspose — <https://onnx.ai/onnx/operators/onnx__ConvTranspose.html>, opset 1+.
//!
//! QNN `TransposeConv2d`: in[0] NHWC, in[1] filter `[KH, KW, Cin, Cout]` (ONNX weights are
//! `[Cin, Cout, KH, KW]`), in[2] bias `[Cout]`; params `stride` UINT_32 `[2]`, `pad_amount`
//! UINT_32 `[2, 2]`, `output_padding` UINT_32 `[2]` (tensor params), `group` UINT_32 scalar.
//! Weights that are not constant are transposed by a `Transpose` op. A 1-D ConvTranspose is
//! expanded into a 2-D one first ([`super::conv1d`]).
//! Constraints: 2-D, group 1, dilation 1, no explicit `output_shape`.

use crate::error::Result;
use crate::ir::attr::to_usizes;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::spatial::{infer_nchw, require_2d_nhwc, spatial_params, Spatial};
use crate::ops::{u32s, Layout, LowerCx, OpDef, ShapeInput};
use crate::ops::{Quant, Weighted};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const CONV_TRANSPOSE: OpDef = OpDef {
    op_type: "ConvTranspose",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(crate::ops::conv::conv1d::as_2d),
    lower: Some(conv_transpose),
    quant: Quant::Weighted(Weighted {
        weight: 1,
        channel: Some(|_| 1),
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
        let group = n.attr_i("group", 1)?.max(1) as usize;
        if ws.len() != xs.len() || ws[0] != xs[1] {
            return Err(n.err_invalid(format!("weight {ws:?} does not match input {xs:?}")));
        }
        let r = sp_in.len();
        let sp = Spatial::parse(n, sp_in, Some(&ws[2..]), Some(&[]))?;
        let out_pad = to_usizes(
            n,
            "output_padding",
            &n.attr_ints("output_padding", &vec![0; r])?,
        )?;
        let mut o = vec![xs[0], ws[1] * group];
        if let Some(os) = n.attr_ints_opt("output_shape")? {
            let os = to_usizes(n, "output_shape", &os)?;
            o.extend_from_slice(&os[os.len().saturating_sub(r)..]);
        } else {
            for i in 0..r {
                let full = sp.strides[i] * sp_in[i].saturating_sub(1)
                    + out_pad.get(i).copied().unwrap_or(0)
                    + sp.kernel[i].saturating_sub(1) * sp.dilations[i]
                    + 1;
                o.push(
                    full.checked_sub(sp.pads[i] + sp.pads[i + r])
                        .ok_or_else(|| n.err_invalid("pads exceed output size"))?,
                );
            }
        }
        Ok(o)
    })
}

pub fn conv_transpose(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let xs = cx.shape(node, 0);
    require_2d_nhwc(node, xs.len())?;
    if node.attr_i("group", 1)? != 1 {
        return Err(node.err_attr("group", "only group = 1 is supported"));
    }
    if node.has_attr("output_shape") {
        return Err(node.err_attr(
            "output_shape",
            "is not supported; give pads and output_padding",
        ));
    }
    let xdt = cx.dtype(node, 0);
    let wdt = cx.dtype(node, 1);
    if wdt != xdt {
        return Err(node.err_dtype(format!("weights are {wdt} but the input is {xdt}")));
    }
    let ws = cx.shape(node, 1);
    if ws.len() != 4 {
        return Err(node.err_invalid(format!("weights have shape {ws:?}, expected 4-D")));
    }
    let sp = Spatial::parse(node, &[xs[1], xs[2]], Some(&ws[2..]), Some(&[]))?;
    if sp.dilations.iter().any(|&d| d != 1) {
        return Err(node.err_attr("dilations", "only dilation 1 is supported"));
    }
    let out_pad = node.attr_ints("output_padding", &[0, 0])?;
    let out_pad: Vec<usize> = out_pad.iter().map(|&v| v.max(0) as usize).collect();
    let cout = ws[1];
    let wt = super::permuted_weights(cx, node, [2, 3, 0, 1])?;
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
    let mut params = spatial_params(node, &sp, false)?;
    params.push((
        param::OUTPUT_PADDING,
        Param::u32_vec(&u32s(node, "output_padding", &out_pad)?),
    ));
    params.push((param::GROUP, Param::u32(1)));
    cx.op(
        node,
        op::TRANSPOSE_CONV_2D,
        vec![x, wt, bias],
        vec![y],
        params,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    fn model(attrs: &[(&str, A)]) -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .init("w", Tensor::from_f32(vec![2, 3, 2, 2], &[0.1; 24]))
            .node("ConvTranspose", &["x", "w"], &["y"], attrs)
            .output("y")
    }

    #[test]
    fn conv_transpose_snapshot() {
        let d = lower(&model(&[("strides", A::Is(vec![2, 2]))])).dump();
        assert!(
            d.contains("TransposeConv2d(x_nhwc:f32[1, 4, 4, 2], static ConvTranspose_0_w_hwio:f32[2, 2, 2, 3], static ConvTranspose_0_bias:f32[3]) stride=u32[2]{2,2} pad_amount=u32[2, 2]{0,0,0,0} output_padding=u32[2]{0,0} group=1u -> y_nhwc:f32[1, 8, 8, 3]"),
            "{d}"
        );
    }

    #[test]
    fn dynamic_weights_are_transposed_in_graph() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .input("w", DType::F32, &[2, 3, 2, 2])
            .node("ConvTranspose", &["x", "w"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("Transpose(w:f32[2, 3, 2, 2]) perm=u32[4]{2,3,0,1} -> ConvTranspose_0_Transpose:f32[2, 2, 2, 3]"),
            "{d}"
        );
    }

    #[test]
    fn grouped_conv_transpose_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 4, 4])
            .init("w", Tensor::from_f32(vec![2, 1, 2, 2], &[0.1; 8]))
            .node("ConvTranspose", &["x", "w"], &["y"], &[("group", A::I(2))])
            .output("y");
        assert!(lower_err(&b).contains("attribute 'group': only group = 1 is supported"));
    }

    #[test]
    fn dilated_and_output_shape_unsupported() {
        assert!(lower_err(&model(&[("dilations", A::Is(vec![2, 2]))])).contains("only dilation 1"));
        assert!(lower_err(&model(&[("output_shape", A::Is(vec![5, 5]))]))
            .contains("attribute 'output_shape'"));
    }
}
