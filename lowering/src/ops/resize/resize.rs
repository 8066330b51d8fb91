//! Resize — <https://onnx.ai/onnx/operators/onnx__Resize.html> (opsets 10, 11, 13, 18, 19) and
//! Upsample (opsets 7–9, asymmetric). QNN `Resize` on NHWC: `transformation_mode`,
//! `interpolation_mode`, `nearest_mode` UINT_32 scalars, `exclude_outside` BOOL_8, and
//! `cubic_coeff` FLOAT_32; HTP rejects `nearest_mode` unless the interpolation is nearest and
//! `cubic_coeff` unless it is cubic, so each is passed only with its mode. Output size comes
//! from shape inference (scales or sizes).
//! Constraints: 4-D input resized over H and W only; no `tf_crop_and_resize`, no antialias,
//! no `keep_aspect_ratio_policy` other than `stretch`.

use crate::error::Result;
use crate::ir::attr::to_usizes;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::registry::{shape_i64, Resolved, ShapeQuery};
use crate::ops::spatial::{infer_nchw, require_2d_nhwc};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Accept;
use crate::plan::Param;
use crate::qnn_names::{op, param, resize as rv};

pub const RESIZE: OpDef = OpDef {
    op_type: "Resize",
    since: 10,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::Slot {
        slot: slot_resize,
        resolve: resolve_shape,
    },
    infer,
    fold: None,
    expand: None,
    lower: Some(resize),
    quant: Quant::Same,
};

pub const UPSAMPLE: OpDef = OpDef {
    op_type: "Upsample",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::Slot {
        slot: slot_upsample,
        resolve: resolve_shape,
    },
    infer,
    fold: None,
    expand: None,
    lower: Some(resize),
    quant: Quant::Same,
};

/// The output size from `sizes`, or from `scales` (an input since opset 11, an attribute
/// before and for Upsample), of the NCHW shape `xs`.
fn resize_shape(x: &In, n: &Node, xs: &[usize]) -> Result<Vec<usize>> {
    let (scales_i, sizes_i) = if n.op_type == "Upsample" || x.g.opset() < 11 {
        (1, usize::MAX)
    } else {
        (2, 3)
    };
    if sizes_i != usize::MAX && x.has(sizes_i) {
        let s = x.const_ints(sizes_i, "sizes")?;
        if !s.is_empty() {
            if s.len() != xs.len() {
                return Err(n.err_invalid("'sizes' must have one value per input dim"));
            }
            return to_usizes(n, "sizes", &s);
        }
    }
    let scales = match x.konst(scales_i) {
        Some(t) if t.numel() > 0 => t.to_f64(),
        None if x.has(scales_i) => {
            return Err(n.err_op("input 'scales' must be a constant after folding"))
        }
        _ => match n.attr_floats_opt("scales")? {
            Some(s) => s.iter().map(|&v| v as f64).collect(),
            None => return Err(n.err_invalid("neither 'scales' nor 'sizes' is given")),
        },
    };
    if scales.len() != xs.len() {
        return Err(n.err_invalid("'scales' must have one value per input dim"));
    }
    Ok(xs
        .iter()
        .zip(&scales)
        .map(|(&d, &s)| (d as f64 * s).floor() as usize)
        .collect())
}

fn infer(x: &In) -> Result<Vec<Out>> {
    infer_nchw(x, |xs| resize_shape(x, x.n, xs))
}

pub fn resize(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let xs = cx.shape(node, 0);
    require_2d_nhwc(node, xs.len())?;
    let ys = cx.out_shape(node, 0);
    if xs[0] != ys[0] || xs[3] != ys[3] {
        return Err(node.err_op("only the spatial dims may be resized"));
    }
    let legacy = node.op_type == "Upsample" || cx.g.opset() < 11;
    let mode = node.attr_s("mode", "nearest")?;
    let interp = match mode {
        "nearest" => rv::NEAREST,
        "linear" | "bilinear" => rv::LINEAR,
        "cubic" => rv::CUBIC,
        m => return Err(node.err_attr("mode", format!("'{m}' is not supported"))),
    };
    let ctm = if legacy {
        "asymmetric"
    } else {
        node.attr_s("coordinate_transformation_mode", "half_pixel")?
    };
    let transform = match ctm {
        "half_pixel" => rv::HALF_PIXEL,
        "pytorch_half_pixel" => rv::PYTORCH_HALF_PIXEL,
        "align_corners" => rv::ALIGN_CORNERS,
        "asymmetric" => rv::ASYMMETRIC,
        m => {
            return Err(node.err_attr(
                "coordinate_transformation_mode",
                format!("'{m}' is not supported"),
            ))
        }
    };
    let nearest = match if legacy {
        "floor"
    } else {
        node.attr_s("nearest_mode", "round_prefer_floor")?
    } {
        "round_prefer_floor" => rv::ROUND_PREFER_FLOOR,
        "round_prefer_ceil" => rv::ROUND_PREFER_CEIL,
        "floor" => rv::FLOOR,
        "ceil" => rv::CEIL,
        m => return Err(node.err_attr("nearest_mode", format!("'{m}' is not supported"))),
    };
    // QNN's quantized nearest Resize validates only with nearest_mode FLOOR (and CEIL for
    // align_corners): measured on the HTP validator, QNN 2.51. For an integer upscale,
    // (pytorch_)half_pixel with either rounding picks the same source pixels as asymmetric with
    // floor — the source of output `o` is floor((o + 0.5) / s) = floor(o / s) — so that form is
    // used; another quantized nearest resize is left to the validator's refusal.
    let (transform, nearest) = if node.quantized && interp == rv::NEAREST {
        let integer_upscale = (1..3).all(|k| ys[k] >= xs[k] && ys[k] % xs[k] == 0);
        let rounds = matches!(nearest, rv::ROUND_PREFER_FLOOR | rv::ROUND_PREFER_CEIL);
        let odd = (1..3).any(|k| (ys[k] / xs[k]) % 2 == 1 && ys[k] != xs[k]);
        let half = matches!(transform, rv::HALF_PIXEL | rv::PYTORCH_HALF_PIXEL);
        // round_prefer_ceil differs from floor at the ties of odd factors.
        if integer_upscale && rounds && half && !(odd && nearest == rv::ROUND_PREFER_CEIL) {
            (rv::ASYMMETRIC, rv::FLOOR)
        } else {
            (transform, nearest)
        }
    } else {
        (transform, nearest)
    };
    if node.attr_i("antialias", 0)? != 0 {
        return Err(node.err_attr("antialias", "antialiasing is not supported"));
    }
    if node.attr_s("keep_aspect_ratio_policy", "stretch")? != "stretch" {
        return Err(node.err_attr("keep_aspect_ratio_policy", "only 'stretch' is supported"));
    }
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    let mut params = vec![
        (
            param::EXCLUDE_OUTSIDE,
            Param::bool(node.attr_i("exclude_outside", 0)? != 0),
        ),
        (param::TRANSFORMATION_MODE, Param::u32(transform)),
        (param::INTERPOLATION_MODE, Param::u32(interp)),
    ];
    if interp == rv::NEAREST {
        params.push((param::NEAREST_MODE, Param::u32(nearest)));
    }
    if interp == rv::CUBIC {
        params.push((
            param::CUBIC_COEFF,
            Param::f32(node.attr_f("cubic_coeff_a", -0.75)?),
        ));
    }
    cx.op(node, op::RESIZE, vec![x], vec![y], params);
    Ok(())
}

/// `sizes` when given, else `scales` (inputs from opset 11).
fn slot_resize(v: i64, n: &Node) -> Option<usize> {
    (v >= 11).then(|| if n.input(3).is_some() { 3 } else { 2 })
}

/// `scales` is an input from opset 9.
fn slot_upsample(v: i64, _: &Node) -> Option<usize> {
    (v >= 9).then_some(1)
}

/// The `sizes` or `scales` that give the declared output (a scale only when it gives the size exactly).
fn resolve_shape(q: &ShapeQuery) -> Option<Resolved> {
    let input = q.known(0)?;
    let (d, name) = q.out(0)?;
    (d.len() == input.len() && !q.n.has_attr("axes")).then_some(())?;
    if q.n.op_type == "Resize" && q.n.input(3).is_some() {
        return Some((q.ints(&shape_i64(&d))?, Accept::Equal, name));
    }
    let scales: Vec<f64> = input
        .iter()
        .zip(&d)
        .map(|(&i, &o)| (i > 0).then(|| o as f64 / i as f64))
        .collect::<Option<_>>()?;
    // The scale the output size came from is not known when it is not exact: only a
    // scale that reproduces the size exactly is assumed.
    let exact = input
        .iter()
        .zip(&scales)
        .zip(&d)
        .all(|((&i, &s), &o)| (i as f64 * s as f32 as f64).floor() as usize == o);
    (exact && q.dtype.is_float() && scales.len() == q.len).then_some(())?;
    Some((
        Tensor::from_f64_as(q.dtype, q.shape.to_vec(), &scales),
        Accept::Equal,
        name,
    ))
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
            .init("scales", Tensor::from_f32(vec![4], &[1.0, 1.0, 2.0, 2.0]))
            .node("Resize", &["x", "", "scales"], &["y"], attrs)
            .output("y")
    }

    #[test]
    fn upsample_nearest_2x() {
        let d = lower(&model(&[
            ("mode", A::S("nearest")),
            ("coordinate_transformation_mode", A::S("asymmetric")),
            ("nearest_mode", A::S("floor")),
        ]))
        .dump();
        assert!(d.contains("Resize(x_nhwc:f32[1, 4, 4, 2]) exclude_outside=false transformation_mode=3u interpolation_mode=0u nearest_mode=2u -> y_nhwc:f32[1, 8, 8, 2]"), "{d}");
    }

    #[test]
    fn linear_resize_has_neither_nearest_mode_nor_cubic_coeff() {
        let d = lower(&model(&[("mode", A::S("linear"))])).dump();
        assert!(d.contains("interpolation_mode=1u -> y_nhwc"), "{d}");
    }

    #[test]
    fn resize_unsupported_modes() {
        assert!(lower_err(&model(&[(
            "coordinate_transformation_mode",
            A::S("tf_crop_and_resize")
        )]))
        .contains("attribute 'coordinate_transformation_mode'"));
        assert!(lower_err(&model(&[("antialias", A::I(1))])).contains("attribute 'antialias'"));
        assert!(lower_err(&model(&[("mode", A::S("area"))])).contains("attribute 'mode'"));
    }
}
