//! RoiAlign — <https://onnx.ai/onnx/operators/onnx__RoiAlign.html>, opsets 10 and 16+
//! (`coordinate_transformation_mode`, default `half_pixel`; opset 10 behaves as
//! `output_half_pixel`). QNN `RoiAlign` (run NHWC by the layout pass): in[0] NHWC features,
//! in[1] rois `[R, 4]` (x1, y1, x2, y2), in[2] batch indices int32 `[R]`; the output
//! `[R, out_h, out_w, C]` gives the pooled size; params `img_size_ratio` FLOAT_32 `[2]`
//! (`1 / spatial_scale` for height and width), `num_samples_y`, `num_samples_x` INT_32
//! (`sampling_ratio`; 0 adaptive as in ONNX), `aligned` BOOL_8 (`half_pixel`), and
//! `allow_invalid_roi` BOOL_8 false. Constraints: 4-D input, `mode` avg (QNN averages only:
//! `max` is refused).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, param};

pub const ROI_ALIGN: OpDef = OpDef {
    op_type: "RoiAlign",
    since: 10,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(roi_align),
    quant: Quant::Float,
};

fn out_size(n: &Node) -> Result<(usize, usize)> {
    let h = n.attr_i("output_height", 1)?;
    let w = n.attr_i("output_width", 1)?;
    if h < 1 || w < 1 {
        return Err(n.err_invalid(format!("output size {h}x{w} is empty")));
    }
    Ok((h as usize, w as usize))
}

/// `[R, C, out_h, out_w]`, NHWC once the layout pass has run.
fn infer(x: &In) -> Result<Vec<Out>> {
    let (xs, rs) = (x.shape(0)?, x.shape(1)?);
    if xs.len() != 4 || rs.len() != 2 || rs[1] != 4 {
        return Err(x.n.err_invalid(format!(
            "input {xs:?} and rois {rs:?} are not [N, C, H, W] and [R, 4]"
        )));
    }
    let (h, w) = out_size(x.n)?;
    let o = if x.n.nhwc {
        vec![rs[0], h, w, xs[3]]
    } else {
        vec![rs[0], xs[1], h, w]
    };
    Ok(vec![(x.dtype(0)?, o)])
}

pub fn roi_align(cx: &mut LowerCx, node: &Node) -> Result<()> {
    if !node.nhwc {
        return Err(node.err_op("the input must be 4-D (run channel-last)"));
    }
    if node.attr_s("mode", "avg")? != "avg" {
        return Err(node.err_attr("mode", "only 'avg' is supported (QNN RoiAlign averages)"));
    }
    let default_ctm = if cx.g.opset() >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let aligned = match node.attr_s("coordinate_transformation_mode", default_ctm)? {
        "half_pixel" => true,
        "output_half_pixel" => false,
        m => {
            return Err(node.err_attr(
                "coordinate_transformation_mode",
                format!("'{m}' is not a mode"),
            ))
        }
    };
    let ratio = node.attr_i("sampling_ratio", 0)?;
    let scale = node.attr_f("spatial_scale", 1.0)?;
    if scale <= 0.0 {
        return Err(node.err_attr("spatial_scale", format!("{scale} is not positive")));
    }
    let samples = i32::try_from(ratio.max(0))
        .map_err(|_| node.err_attr("sampling_ratio", format!("{ratio} is out of range")))?;
    let x = cx.input(node, 0)?;
    let rois = cx.input(node, 1)?;
    let idx = cx.input(node, 2)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::ROI_ALIGN,
        vec![x, rois, idx],
        vec![y],
        vec![
            (
                param::IMG_SIZE_RATIO,
                Param::f32_vec(&[1.0 / scale, 1.0 / scale]),
            ),
            (param::NUM_SAMPLES_Y, Param::i32(samples)),
            (param::NUM_SAMPLES_X, Param::i32(samples)),
            (param::ALIGNED, Param::bool(aligned)),
            (param::ALLOW_INVALID_ROI, Param::bool(false)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    fn model(mode: &'static str) -> ModelBuilder {
        ModelBuilder::new(16)
            .input("x", DType::F32, &[1, 3, 10, 10])
            .input("rois", DType::F32, &[2, 4])
            .input("idx", DType::I64, &[2])
            .node(
                "RoiAlign",
                &["x", "rois", "idx"],
                &["y"],
                &[
                    ("mode", A::S(mode)),
                    ("output_height", A::I(4)),
                    ("output_width", A::I(5)),
                    ("spatial_scale", A::F(0.5)),
                    ("sampling_ratio", A::I(2)),
                ],
            )
            .output("y")
    }

    #[test]
    fn roi_align_snapshot() {
        let d = lower(&model("avg")).dump();
        assert!(d.contains("RoiAlign(x_nhwc:f32[1, 10, 10, 3], rois:f32[2, 4], idx:i32[2]) img_size_ratio=f32[2]{<8 bytes>} num_samples_y=2i num_samples_x=2i aligned=true allow_invalid_roi=false -> y_nhwc:f32[2, 4, 5, 3]"), "{d}");
    }

    #[test]
    fn max_mode_unsupported() {
        assert!(lower_err(&model("max")).contains("attribute 'mode': only 'avg'"));
    }

    #[test]
    fn roi_align_is_inferred() {
        let g = graph_with(&[
            ("x", DType::F16, vec![2, 3, 8, 8]),
            ("r", DType::F16, vec![5, 4]),
            ("i", DType::I32, vec![5]),
        ]);
        let n = node(
            "RoiAlign",
            &[Some(0), Some(1), Some(2)],
            &[("output_height", crate::ir::Attr::Int(2))],
        );
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F16, vec![5, 3, 2, 1])]);
    }
}
