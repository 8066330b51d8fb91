//! RMSNormalization — <https://onnx.ai/onnx/operators/onnx__RMSNormalization.html>, opset 23,
//! also produced by `passes::fuse_rmsnorm` from the Llama pattern. QNN `RmsNorm`: in[0] data,
//! in[1] gamma, in[2] beta (zeros); params `epsilon` FLOAT_32 scalar, `axes` UINT_32 `[k]`.

use crate::attr::norm_axis;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::LowerCx;
use crate::plan::Param;
use crate::qnn_names::{op, param};
use crate::tensor::Tensor;

pub fn rms_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let shape = cx.shape(node, 0);
    let r = shape.len();
    let axis = norm_axis(node, "axis", node.attr_i("axis", -1)?, r)?;
    let eps = node.attr_f("epsilon", 1e-5)?;
    let gshape = cx.shape(node, 1);
    let x = cx.input(node, 0)?;
    let gamma = cx.input(node, 1)?;
    let dt = cx.dtype(node, 0);
    let n: usize = gshape.iter().product();
    let beta = cx.static_tensor(
        node,
        &format!("{}_beta", node.name),
        &Tensor::from_f64_as(dt, gshape.clone(), &vec![0.0; n]),
    )?;
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

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::lower;
    use crate::tensor::Tensor;
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
}
