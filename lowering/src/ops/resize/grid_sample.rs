//! GridSample — <https://onnx.ai/onnx/operators/onnx__GridSample.html>, opsets 16 (`bilinear`,
//! `nearest`, `bicubic`) and 20+ (`linear`, `nearest`, `cubic`; N-D). QNN `GridSample` (run
//! NHWC by the layout pass): in[0] NHWC data, in[1] grid `[N, H_out, W_out, 2]`; params
//! `align_corners` BOOL_8, `mode` UINT_32 (bilinear, nearest), `padding_mode` UINT_32 (zeros,
//! border, reflection). Constraints: 4-D input; cubic modes are refused.
//!
//! Nearest differs from ONNX at exact ties: QNN rounds a coordinate of k + 0.5 up where ONNX
//! (and PyTorch) round half to even (libQnnHtp 2.51, SoC 60: the three nearest node tests,
//! whose grids land on ties, get the upper neighbour for even k). Grids from affine_grid or a
//! predicted flow hit ties with probability zero, so nearest stays supported.

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{grid_sample, op, param};

pub const GRID_SAMPLE: OpDef = OpDef {
    op_type: "GridSample",
    since: 16,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(grid_sample),
    quant: Quant::Float,
};

/// `[N, C, D1_out, ...]` from `X [N, C, ...]` and `grid [N, D1_out, ..., r]`; NHWC once the
/// layout pass has run.
fn infer(x: &In) -> Result<Vec<Out>> {
    let (xs, gs) = (x.shape(0)?, x.shape(1)?);
    let r = xs.len();
    if r < 3 || gs.len() != r || gs[r - 1] != r - 2 || gs[0] != xs[0] {
        return Err(x.n.err_invalid(format!(
            "grid {gs:?} does not match input {xs:?} (needs [N, D1_out, ..., {}])",
            r.saturating_sub(2)
        )));
    }
    let spatial = &gs[1..r - 1];
    let o = if x.n.nhwc {
        [&[xs[0]], spatial, &[xs[r - 1]]].concat()
    } else {
        [&xs[..2], spatial].concat()
    };
    Ok(vec![(x.dtype(0)?, o)])
}

pub fn grid_sample(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let r = cx.shape(node, 0).len();
    if r != 4 || !node.nhwc {
        return Err(node.err_op(format!(
            "rank-{r} input is not supported (needs a 4-D input)"
        )));
    }
    let mode = match node.attr_s("mode", "linear")? {
        "bilinear" | "linear" => grid_sample::BILINEAR,
        "nearest" => grid_sample::NEAREST,
        m => {
            return Err(node.err_attr(
                "mode",
                format!("'{m}' is not supported (QNN GridSample has bilinear and nearest)"),
            ))
        }
    };
    let padding = match node.attr_s("padding_mode", "zeros")? {
        "zeros" => grid_sample::ZEROS,
        "border" => grid_sample::BORDER,
        "reflection" => grid_sample::REFLECTION,
        p => return Err(node.err_attr("padding_mode", format!("'{p}' is not a padding mode"))),
    };
    let align = node.attr_i("align_corners", 0)? != 0;
    let x = cx.input(node, 0)?;
    let grid = cx.input(node, 1)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::GRID_SAMPLE,
        vec![x, grid],
        vec![y],
        vec![
            (param::ALIGN_CORNERS, Param::bool(align)),
            (param::MODE, Param::u32(mode)),
            (param::PADDING_MODE, Param::u32(padding)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    fn model(x: &[i64], grid: &[i64], mode: &'static str) -> ModelBuilder {
        ModelBuilder::new(20)
            .input("x", DType::F32, x)
            .input("g", DType::F32, grid)
            .node(
                "GridSample",
                &["x", "g"],
                &["y"],
                &[("mode", A::S(mode)), ("padding_mode", A::S("border"))],
            )
            .output("y")
    }

    #[test]
    fn grid_sample_snapshot() {
        let d = lower(&model(&[1, 3, 4, 5], &[1, 6, 7, 2], "linear")).dump();
        assert!(d.contains("GridSample(x_nhwc:f32[1, 4, 5, 3], g:f32[1, 6, 7, 2]) align_corners=false mode=0u padding_mode=1u -> y_nhwc:f32[1, 6, 7, 3]"), "{d}");
    }

    #[test]
    fn cubic_and_volumetric_unsupported() {
        let e = lower_err(&model(&[1, 3, 4, 5], &[1, 6, 7, 2], "cubic"));
        assert!(
            e.contains("attribute 'mode': 'cubic' is not supported"),
            "{e}"
        );
        let e = lower_err(&model(&[1, 3, 2, 4, 5], &[1, 2, 6, 7, 3], "nearest"));
        assert!(e.contains("rank-5 input is not supported"), "{e}");
    }

    #[test]
    fn grid_sample_is_inferred() {
        let g = graph_with(&[
            ("x", DType::F16, vec![2, 3, 4, 5]),
            ("g", DType::F16, vec![2, 6, 7, 2]),
            ("bad", DType::F16, vec![2, 6, 7, 3]),
        ]);
        let n = node("GridSample", &[Some(0), Some(1)], &[]);
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F16, vec![2, 3, 6, 7])]);
        let n = node("GridSample", &[Some(0), Some(2)], &[]);
        assert!(infer(&g, &n).is_err());
    }
}
