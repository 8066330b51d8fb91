//! DepthToSpace / SpaceToDepth — <https://onnx.ai/onnx/operators/onnx__DepthToSpace.html>,
//! opset 1+ (DepthToSpace `mode` DCR/CRD since 11). QNN `DepthToSpace` / `SpaceToDepth` on
//! NHWC: `block_size` UINT_32 `[2]` (tensor param), `mode` UINT_32 scalar.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::spatial::{infer_nchw, require_2d_nhwc};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{d2s_mode, op, param};

pub const DEPTH_TO_SPACE: OpDef = OpDef {
    op_type: "DepthToSpace",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(depth_space),
    quant: Quant::Same,
};

pub const SPACE_TO_DEPTH: OpDef = OpDef {
    op_type: "SpaceToDepth",
    since: 1,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(depth_space),
    quant: Quant::Same,
};

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    infer_nchw(x, |xs| {
        let b = n.attr_i("blocksize", 0)?;
        if b <= 0 || xs.len() != 4 {
            return Err(n.err_invalid("needs a 4-D input and a positive blocksize"));
        }
        let b = b as usize;
        if n.op_type == "DepthToSpace" {
            if xs[1] % (b * b) != 0 {
                return Err(n.err_invalid("channels are not divisible by blocksize^2"));
            }
            Ok(vec![xs[0], xs[1] / (b * b), xs[2] * b, xs[3] * b])
        } else {
            if xs[2] % b != 0 || xs[3] % b != 0 {
                return Err(n.err_invalid("spatial dims are not divisible by blocksize"));
            }
            Ok(vec![xs[0], xs[1] * b * b, xs[2] / b, xs[3] / b])
        }
    })
}

pub fn depth_space(cx: &mut LowerCx, node: &Node) -> Result<()> {
    require_2d_nhwc(node, cx.shape(node, 0).len())?;
    let b = node.attr_u32("blocksize", 0)?;
    let (q, mode) = if node.op_type == "DepthToSpace" {
        let m = match node.attr_s("mode", "DCR")? {
            "DCR" => d2s_mode::DCR,
            "CRD" => d2s_mode::CRD,
            m => return Err(node.err_attr("mode", format!("'{m}' is not supported"))),
        };
        (op::DEPTH_TO_SPACE, m)
    } else {
        (op::SPACE_TO_DEPTH, d2s_mode::DCR)
    };
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        q,
        vec![x],
        vec![y],
        vec![
            (param::BLOCK_SIZE, Param::u32_vec(&[b, b])),
            (param::MODE, Param::u32(mode)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn pixel_shuffle_crd() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 8, 2, 2])
            .node(
                "DepthToSpace",
                &["x"],
                &["y"],
                &[("blocksize", A::I(2)), ("mode", A::S("CRD"))],
            )
            .output("y");
        assert!(lower(&b).dump().contains("DepthToSpace(x_nhwc:f32[1, 2, 2, 8]) block_size=u32[2]{2,2} mode=1u -> y_nhwc:f32[1, 4, 4, 2]"));
    }

    #[test]
    fn unknown_mode_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 8, 2, 2])
            .node(
                "DepthToSpace",
                &["x"],
                &["y"],
                &[("blocksize", A::I(2)), ("mode", A::S("XYZ"))],
            )
            .output("y");
        assert!(lower_err(&b).contains("attribute 'mode'"));
    }
}
