//! BatchNormalization — <https://onnx.ai/onnx/operators/onnx__BatchNormalization.html>,
//! inference mode (opsets 7–15 and 15+; training outputs are rejected). A BatchNorm after a
//! Conv is folded into it by `passes::fold_conv`; a standalone one becomes QNN
//! `Batchnorm` (channel-last input, in[1] weights `[C]` = `scale / sqrt(var + eps)`, in[2]
//! bias `[C]` = `B - mean * weights`, computed statically). Constraints: constant parameters;
//! 4-D inputs run NHWC (layout pass), 2-D inputs are already channel-last, 3-D inputs are
//! transposed to channel-last around the op.
//!
//! In a quantized graph a standalone BatchNorm (one no Conv before it absorbs: a pre-activation
//! block's BN after an add, feeding the next Conv) runs quantized, never as a float island
//! (which a v68 HTP refuses): `passes::qdq::settle` rewrites its inputs to the per-channel
//! `[x, weights, bias]` of [`affine`] ([`AFFINE_INPUTS`]), the weights UFIXED_POINT_8 per
//! tensor and the bias int32 at input scale x weight scale ([`Weighted`]). Folding it into the
//! Conv it feeds is not exact where that Conv zero-pads: the padded border reads zeros, not the
//! BatchNorm's offset (`fold_conv` keeps such an offset for that reason).

use super::{const_vec, vec_tensor};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::ops::{Quant, Weighted};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const BATCH_NORMALIZATION: OpDef = OpDef {
    op_type: "BatchNormalization",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer: same,
    fold: None,
    expand: None,
    lower: Some(batch_norm),
    // Quantized on its affine form (module doc): UFIXED_POINT_8 weights, as PReLU's slope and
    // LayerNorm's gamma.
    quant: Quant::Weighted(Weighted {
        weight: 1,
        channel: None,
        bias: Some(2),
        weight_storage: Some(DType::U8),
        symmetric_u16: false,
    }),
};

/// The input count of a BatchNormalization rewritten to its affine form `[x, weights, bias]`
/// (`y = x * weights + bias` per channel), which [`batch_norm`] lowers as it is.
pub const AFFINE_INPUTS: usize = 3;

/// The per-channel affine map of an inference BatchNorm: `weights = scale / sqrt(var + eps)`,
/// `bias = B - mean * weights`.
pub fn affine(
    eps: f64,
    scale: &[f64],
    b: &[f64],
    mean: &[f64],
    var: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let w: Vec<f64> = scale
        .iter()
        .zip(var)
        .map(|(s, v)| s / (v + eps).sqrt())
        .collect();
    let bias = b
        .iter()
        .zip(mean)
        .zip(&w)
        .map(|((b, m), w)| b - m * w)
        .collect();
    (w, bias)
}

pub fn batch_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    if node.outputs.iter().skip(1).any(Option::is_some) || node.attr_i("training_mode", 0)? != 0 {
        return Err(node.err_attr("training_mode", "training-mode outputs are not supported"));
    }
    let (wt, bt) = if node.inputs.len() == AFFINE_INPUTS {
        // The affine form of a quantized graph: the encoded constants as they are.
        (cx.input(node, 1)?, cx.input(node, 2)?)
    } else {
        let eps = node.attr_f("epsilon", 1e-5)? as f64;
        let scale = const_vec(cx, node, 1, "scale")?;
        let b = const_vec(cx, node, 2, "B")?;
        let mean = const_vec(cx, node, 3, "input_mean")?;
        let var = const_vec(cx, node, 4, "input_var")?;
        let (w, bias) = affine(eps, &scale, &b, &mean, &var);
        (
            vec_tensor(cx, node, "weight", &w)?,
            vec_tensor(cx, node, "bias", &bias)?,
        )
    };
    let shape = cx.shape(node, 0);
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    match shape.len() {
        2 => cx.op(node, op::BATCHNORM, vec![x, wt, bt], vec![y], vec![]),
        4 if node.nhwc => cx.op(node, op::BATCHNORM, vec![x, wt, bt], vec![y], vec![]),
        3 => {
            let dt = cx.tensor_dtype(x);
            let ts = [shape[0], shape[2], shape[1]];
            let perm = Param::u32_vec(&[0, 2, 1]);
            let xt = cx.emit(
                node,
                op::TRANSPOSE,
                vec![x],
                dt,
                &ts,
                vec![(param::PERM, perm.clone())],
            );
            let n = cx.emit(node, op::BATCHNORM, vec![xt, wt, bt], dt, &ts, vec![]);
            cx.op(
                node,
                op::TRANSPOSE,
                vec![n],
                vec![y],
                vec![(param::PERM, perm)],
            );
        }
        r => return Err(node.err_op(format!("rank-{r} input is not supported"))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    fn model(shape: &[i64], attrs: &[(&str, A)]) -> ModelBuilder {
        let c = shape[1] as usize;
        ModelBuilder::new(15)
            .input("x", DType::F32, shape)
            .init("s", Tensor::from_f32(vec![c], &vec![1.0; c]))
            .init("b", Tensor::from_f32(vec![c], &vec![0.0; c]))
            .init("m", Tensor::from_f32(vec![c], &vec![0.0; c]))
            .init("v", Tensor::from_f32(vec![c], &vec![1.0; c]))
            .node(
                "BatchNormalization",
                &["x", "s", "b", "m", "v"],
                &["y"],
                attrs,
            )
            .output("y")
    }

    #[test]
    fn standalone_batchnorm_nhwc() {
        let p = lower(&model(&[1, 3, 4, 4], &[]));
        assert_eq!(p.op_types(), vec!["Transpose", "Batchnorm", "Transpose"]);
    }

    #[test]
    fn batchnorm_1d_transposes() {
        assert_eq!(
            lower(&model(&[2, 3, 5], &[])).op_types(),
            vec!["Transpose", "Batchnorm", "Transpose"]
        );
        assert_eq!(lower(&model(&[2, 3], &[])).op_types(), vec!["Batchnorm"]);
    }

    #[test]
    fn training_mode_unsupported() {
        assert!(lower_err(&model(&[2, 3], &[("training_mode", A::I(1))]))
            .contains("attribute 'training_mode'"));
    }
}
