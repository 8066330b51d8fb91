//! LayerNormalization — <https://onnx.ai/onnx/operators/onnx__LayerNormalization.html>,
//! opset 17+. QNN `LayerNorm`: in[0] data, in[1] gamma (shape of the normalised dims), in[2]
//! beta; params `epsilon` FLOAT_32 scalar, `axes` UINT_32 `[k]` = `axis..rank`.
//! Constraints: the Mean/InvStdDev outputs must be unused; a missing bias becomes zeros.

use crate::attr::norm_axis;
use crate::error::Result;
use crate::ir::Node;
use crate::ops::LowerCx;
use crate::plan::Param;
use crate::qnn_names::{op, param};
use crate::tensor::Tensor;

pub fn layer_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    if node.outputs.iter().skip(1).any(Option::is_some) {
        return Err(node.err_op("the Mean and InvStdDev outputs are not supported"));
    }
    let shape = cx.shape(node, 0);
    let r = shape.len();
    let axis = norm_axis(node, "axis", node.attr_i("axis", -1)?, r)?;
    let eps = node.attr_f("epsilon", 1e-5)?;
    let norm_shape = shape[axis..].to_vec();
    let x = cx.input(node, 0)?;
    let gamma = cx.input(node, 1)?;
    let beta = match node.input(2) {
        Some(_) => cx.input(node, 2)?,
        None => {
            let dt = cx.dtype(node, 0);
            let n: usize = norm_shape.iter().product();
            cx.static_tensor(
                node,
                &format!("{}_beta", node.name),
                &Tensor::from_f64_as(dt, norm_shape.clone(), &vec![0.0; n]),
            )?
        }
    };
    let axes: Vec<u32> = (axis as u32..r as u32).collect();
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::LAYER_NORM,
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
    use crate::ops::test_util::{lower, lower_err};
    use crate::tensor::Tensor;
    use crate::testing::ModelBuilder;

    #[test]
    fn layer_norm_snapshot() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4, 8])
            .init("g", Tensor::from_f32(vec![8], &[1.0; 8]))
            .init("b", Tensor::from_f32(vec![8], &[0.0; 8]))
            .node("LayerNormalization", &["x", "g", "b"], &["y"], &[])
            .output("y");
        assert!(lower(&b).dump().contains("LayerNorm(x:f32[1, 4, 8], static g:f32[8], static b:f32[8]) epsilon=0.00001f axes=u32[1]{2} -> y:f32[1, 4, 8]"));
    }

    #[test]
    fn mean_output_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 8])
            .init("g", Tensor::from_f32(vec![8], &[1.0; 8]))
            .node("LayerNormalization", &["x", "g"], &["y", "mean"], &[])
            .output("y")
            .output("mean");
        assert!(lower_err(&b).contains("Mean and InvStdDev outputs are not supported"));
    }
}
