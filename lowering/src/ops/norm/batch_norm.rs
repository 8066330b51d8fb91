//! BatchNormalization — <https://onnx.ai/onnx/operators/onnx__BatchNormalization.html>,
//! inference mode (opsets 7–15 and 15+; training outputs are rejected). A BatchNorm after a
//! Conv is folded into it by `passes::fold_conv`; a standalone one becomes QNN
//! `Batchnorm` (channel-last input, in[1] weights `[C]` = `scale / sqrt(var + eps)`, in[2]
//! bias `[C]` = `B - mean * weights`, computed statically). Constraints: constant parameters;
//! 4-D inputs run NHWC (layout pass), 2-D inputs are already channel-last, 3-D inputs are
//! transposed to channel-last around the op.

use super::{const_vec, vec_tensor};
use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
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
    quant: Quant::Float,
};

pub fn batch_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    if node.outputs.iter().skip(1).any(Option::is_some) || node.attr_i("training_mode", 0)? != 0 {
        return Err(node.err_attr("training_mode", "training-mode outputs are not supported"));
    }
    let eps = node.attr_f("epsilon", 1e-5)? as f64;
    let scale = const_vec(cx, node, 1, "scale")?;
    let b = const_vec(cx, node, 2, "B")?;
    let mean = const_vec(cx, node, 3, "input_mean")?;
    let var = const_vec(cx, node, 4, "input_var")?;
    let w: Vec<f64> = scale
        .iter()
        .zip(&var)
        .map(|(s, v)| s / (v + eps).sqrt())
        .collect();
    let bias: Vec<f64> = b
        .iter()
        .zip(&mean)
        .zip(&w)
        .map(|((b, m), w)| b - m * w)
        .collect();
    let wt = vec_tensor(cx, node, "weight", &w)?;
    let bt = vec_tensor(cx, node, "bias", &bias)?;
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
