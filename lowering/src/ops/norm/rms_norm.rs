//! RMSNormalization — <https://onnx.ai/onnx/operators/onnx__RMSNormalization.html>, opset 23,
//! also produced by `passes::fuse_rmsnorm` from the Llama pattern. QNN `RmsNorm`: in[0] data,
//! in[1] gamma, in[2] beta (zeros); params `epsilon` FLOAT_32 scalar, `axes` UINT_32 `[k]`.
//! HTP validates `axes` with exactly one value, so a normalisation over the last k > 1 axes
//! runs on the input reshaped to `[..., product of those axes]`, with gamma flattened to match
//! (broadcast first when it is constant; a dynamic gamma must have the full normalised shape).
//! Quantized (`Weighted`, as LayerNorm): gamma UFIXED_POINT_8, beta int32 zeros with scale input
//! scale × gamma scale. A v68 HTP (no float path) runs it so; on libQnnHtp 2.51's QCS6490 and
//! SoC 60 emulators a 16-bit RmsNorm of [1, 7, 64] is within one output step of the float one.

use qnnx_types::Encoding;

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::attr::norm_axis;
use crate::ir::tensor::Tensor;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::ops::{Quant, Weighted};
use crate::plan::{Param, TensorId};
use crate::qnn_names::{op, param};

pub const RMS_NORMALIZATION: OpDef = OpDef {
    op_type: "RMSNormalization",
    since: 23,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(rms_norm),
    quant: Quant::Weighted(Weighted {
        weight: 1,
        channel: None,
        bias: None,
        weight_storage: Some(DType::U8),
        symmetric_u16: false,
    }),
};

/// QNN's beta input, zeros of `n` elements: in a quantized graph int32 with scale input scale ×
/// gamma scale and offset 0, as LayerNorm's derived bias (a float zero tensor derived per tensor
/// would have no range).
fn beta(cx: &mut LowerCx, node: &Node, dt: DType, shape: Vec<usize>) -> Result<TensorId> {
    let n: usize = shape.iter().product();
    let hint = format!("{}_beta", node.name);
    if !node.quantized {
        return cx.static_tensor(node, &hint, &Tensor::from_f64_as(dt, shape, &vec![0.0; n]));
    }
    let scale = match (cx.enc(node, 0), cx.enc(node, 1)) {
        (Some(x), Some(g)) if !g.is_per_axis() => x.scales[0] * g.scales[0],
        _ => 1.0,
    };
    let zeros = Tensor::from_f64_as(DType::F32, shape, &vec![0.0; n]);
    let enc = Encoding::per_tensor(DType::I32, scale, 0);
    cx.static_tensor_enc(node, &hint, &zeros, Some(enc))
}

pub fn rms_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let shape = cx.shape(node, 0);
    let r = shape.len();
    let axis = norm_axis(node, "axis", node.attr_i("axis", -1)?, r)?;
    let eps = node.attr_f("epsilon", 1e-5)?;
    let gshape = cx.shape(node, 1);
    let x = cx.input(node, 0)?;
    let gamma = cx.input(node, 1)?;
    let dt = cx.dtype(node, 0);
    if axis + 1 < r {
        return rms_norm_flattened(cx, node, axis, eps);
    }
    let beta = beta(cx, node, dt, gshape)?;
    let axes: Vec<u32> = (axis as u32..r as u32).collect();
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::RMS_NORM,
        vec![x, gamma, beta],
        vec![y],
        vec![
            (param::EPSILON, Param::f32(eps)),
            (param::AXES, Param::u32_vec(&axes)),
        ],
    );
    Ok(())
}

fn rms_norm_flattened(cx: &mut LowerCx, node: &Node, axis: usize, eps: f32) -> Result<()> {
    let shape = cx.shape(node, 0);
    let suffix = &shape[axis..];
    let m: usize = suffix.iter().product();
    let gshape = cx.shape(node, 1);
    let gamma = match cx.konst(node, 1) {
        Some(t) => {
            if gshape.len() > suffix.len()
                || gshape
                    .iter()
                    .rev()
                    .zip(suffix.iter().rev())
                    .any(|(&g, &s)| g != 1 && g != s)
            {
                return Err(node.err_invalid(format!(
                    "scale shape {gshape:?} does not broadcast to {suffix:?}"
                )));
            }
            let map = crate::ir::tensor::broadcast_map(suffix, &gshape);
            let v: Vec<f64> = map.iter().map(|&i| t.get_f64(i)).collect();
            let flat = Tensor::from_f64_as(t.dtype, vec![m], &v);
            cx.static_tensor(node, &format!("{}_gamma_flat", node.name), &flat)?
        }
        None => {
            let mut g = vec![1; suffix.len().saturating_sub(gshape.len())];
            g.extend_from_slice(&gshape);
            if g != suffix {
                return Err(node.err_op(
                    "a dynamic scale must have the full normalised shape when normalising over \
                     more than the last axis",
                ));
            }
            let g = cx.input(node, 1)?;
            cx.reshape(node, g, &[m])
        }
    };
    let dt = cx.dtype(node, 0);
    let beta = beta(cx, node, dt, vec![m])?;
    let mut flat_shape = shape[..axis].to_vec();
    flat_shape.push(m);
    let x = cx.input(node, 0)?;
    let x2 = cx.reshape(node, x, &flat_shape);
    let y = cx.output(node, 0)?;
    let pdt = cx.tensor_dtype(y);
    let n2 = cx.emit(
        node,
        op::RMS_NORM,
        vec![x2, gamma, beta],
        pdt,
        &flat_shape,
        vec![
            (param::EPSILON, Param::f32(eps)),
            (param::AXES, Param::u32_vec(&[axis as u32])),
        ],
    );
    cx.op(node, op::RESHAPE, vec![n2], vec![y], vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn fused_llama_rmsnorm_lowers_to_rms_norm() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 4])
            .init("two", Tensor::scalar_f32(2.0))
            .init("eps", Tensor::scalar_f32(1e-6))
            .init("w", Tensor::from_f32(vec![4], &[1.0; 4]))
            .node("Pow", &["x", "two"], &["sq"], &[])
            .node("ReduceMean", &["sq"], &["ms"], &[("axes", A::Is(vec![-1]))])
            .node("Add", &["ms", "eps"], &["a"], &[])
            .node("Sqrt", &["a"], &["r"], &[])
            .node("Div", &["x", "r"], &["n"], &[])
            .node("Mul", &["n", "w"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(d.contains("RmsNorm(x:f32[1, 3, 4], static w:f32[4], static ReduceMean_1_rmsnorm_beta:f32[4]) epsilon=0.000001f axes=u32[1]{2} -> y:f32[1, 3, 4]"), "{d}");
    }

    #[test]
    fn a_quantized_rmsnorm_runs_quantized_with_an_8_bit_gamma() {
        // QDQ only around the pattern (its inside float, as the annotator leaves an RMSNorm
        // module): the fused RmsNorm runs on the 16-bit values, which a v68 HTP needs.
        let s = |v: f32| Tensor::scalar_f32(v);
        let u16 = |v: i64| Tensor::from_i64_as(DType::U16, vec![], &[v]);
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 3, 4])
            .init("xs", s(0.001))
            .init("xz", u16(32768))
            .init("ys", s(0.0001))
            .init("yz", u16(32768))
            .init("two", s(2.0))
            .init("eps", s(1e-6))
            .init(
                "wq",
                Tensor::from_i64_as(DType::U8, vec![4], &[10, 20, 30, 255]),
            )
            .init("ws", s(0.01))
            .init("wz", Tensor::from_i64_as(DType::U8, vec![], &[0]))
            .node("QuantizeLinear", &["x", "xs", "xz"], &["xq"], &[])
            .node("DequantizeLinear", &["xq", "xs", "xz"], &["xd"], &[])
            .node("DequantizeLinear", &["wq", "ws", "wz"], &["w"], &[])
            .node("Pow", &["xd", "two"], &["sq"], &[])
            .node("ReduceMean", &["sq"], &["ms"], &[("axes", A::Is(vec![-1]))])
            .node("Add", &["ms", "eps"], &["a"], &[])
            .node("Sqrt", &["a"], &["r"], &[])
            .node("Reciprocal", &["r"], &["inv"], &[])
            .node("Mul", &["xd", "inv"], &["n"], &[])
            .node("Mul", &["n", "w"], &["m"], &[])
            .node("QuantizeLinear", &["m", "ys", "yz"], &["mq"], &[])
            .node("DequantizeLinear", &["mq", "ys", "yz"], &["y"], &[])
            .output("y");
        let p = lower(&b);
        let d = p.dump();
        assert_eq!(p.op_types(), ["Quantize", "RmsNorm", "Dequantize"], "{d}");
        let rms = &p.ops[1];
        let t = |k: usize| &p.tensors[rms.inputs[k]];
        assert_eq!(t(0).dtype, DType::U16, "{d}");
        assert_eq!(t(1).dtype, DType::U8, "{d}");
        assert_eq!(t(2).dtype, DType::I32, "{d}");
        let beta = t(2).quant.as_ref().unwrap();
        assert!((beta.scales[0] - 0.001 * 0.01).abs() < 1e-9, "{d}");
        assert_eq!(p.tensors[rms.outputs[0]].dtype, DType::U16, "{d}");
    }

    #[test]
    fn two_axes_are_flattened_into_one() {
        let b = ModelBuilder::new(23)
            .input("x", DType::F32, &[2, 3, 4])
            .init("w", Tensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]))
            .node(
                "RMSNormalization",
                &["x", "w"],
                &["y"],
                &[("axis", A::I(1))],
            )
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("static RMSNormalization_0_gamma_flat:f32[12]"),
            "{d}"
        );
        assert!(
            d.contains("axes=u32[1]{1} -> RMSNormalization_0_RmsNorm:f32[2, 12]"),
            "{d}"
        );
        assert!(
            d.contains("Reshape(RMSNormalization_0_RmsNorm:f32[2, 12]) -> y:f32[2, 3, 4]"),
            "{d}"
        );
    }

    #[test]
    fn dynamic_scale_of_partial_shape_over_two_axes_unsupported() {
        let b = ModelBuilder::new(23)
            .input("x", DType::F32, &[2, 3, 4])
            .input("w", DType::F32, &[4])
            .node(
                "RMSNormalization",
                &["x", "w"],
                &["y"],
                &[("axis", A::I(1))],
            )
            .output("y");
        assert!(crate::ops::test_util::lower_err(&b)
            .contains("a dynamic scale must have the full normalised shape"));
    }
}
