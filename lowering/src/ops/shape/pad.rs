//! Pad — <https://onnx.ai/onnx/operators/onnx__Pad.html> (attributes before opset 11,
//! constant inputs after; `axes` since 18). QNN `Pad`: `pad_amount` UINT_32 `[rank, 2]`
//! (tensor param), `scheme` UINT_32 scalar (constant/reflect/edge), `pad_constant_value`
//! FLOAT_32 scalar. Constraints: non-negative pads, constant pad value; `wrap` is unsupported.

use crate::error::Result;
use crate::ir::attr::norm_axes;
use crate::ir::{Graph, Node};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::Param;
use crate::qnn_names::{op, pad_scheme, param};

pub const PAD: OpDef = OpDef {
    op_type: "Pad",
    since: 1,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(pad),
    quant: Quant::Float,
};

/// The (begin, end) pads of every dim.
pub fn pad_amounts(g: &Graph, n: &Node) -> Result<Vec<(usize, usize)>> {
    let x = In { g, n };
    let r = x.rank(0)?;
    let pads = if g.opset() >= 11 {
        x.const_ints(1, "pads")?
    } else {
        n.attr_ints("pads", &[])?
    };
    let axes = if g.opset() >= 18 {
        x.opt_const_ints(3, "axes")?
    } else {
        None
    };
    let axes = match axes {
        Some(a) => norm_axes(n, "axes", &a, r)?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(n.err_invalid(format!(
            "'pads' has {} values for {} axes",
            pads.len(),
            axes.len()
        )));
    }
    let mut out = vec![(0usize, 0usize); r];
    for (k, &a) in axes.iter().enumerate() {
        let b = pads[k];
        let e = pads[k + axes.len()];
        if b < 0 || e < 0 {
            return Err(n.err_attr("pads", "negative pads (cropping) are not supported"));
        }
        out[a] = (b as usize, e as usize);
    }
    Ok(out)
}

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let g = x.g;
    let p = pad_amounts(g, n)?;
    Ok(vec![(
        x.dtype(0)?,
        x.shape(0)?
            .iter()
            .zip(&p)
            .map(|(&d, (b, e))| d.saturating_add(*b).saturating_add(*e))
            .collect(),
    )])
}

pub fn pad(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let pads = pad_amounts(cx.g, node)?;
    let scheme = match node.attr_s("mode", "constant")? {
        "constant" => pad_scheme::CONSTANT,
        "reflect" => pad_scheme::MIRROR_REFLECT,
        "edge" => pad_scheme::EDGE,
        m => return Err(node.err_attr("mode", format!("'{m}' is not supported"))),
    };
    let value = if cx.g.opset() >= 11 {
        match node.input(2) {
            None => 0.0,
            Some(_) => match cx.konst(node, 2) {
                Some(t) if t.numel() == 1 => t.get_f64(0) as f32,
                _ => return Err(node.err_op("input 'constant_value' must be a constant scalar")),
            },
        }
    } else {
        node.attr_f("value", 0.0)?
    };
    let flat: Vec<u32> = pads
        .iter()
        .flat_map(|&(b, e)| [b as u32, e as u32])
        .collect();
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(
        node,
        op::PAD,
        vec![x],
        vec![y],
        vec![
            (param::SCHEME, Param::u32(scheme)),
            (param::PAD_AMOUNT, Param::u32s(&[pads.len(), 2], &flat)),
            (param::PAD_CONSTANT_VALUE, Param::f32(value)),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    fn model(pads: &[i64], mode: &'static str) -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4])
            .init("p", Tensor::from_i64(vec![4], pads))
            .node("Pad", &["x", "p"], &["y"], &[("mode", A::S(mode))])
            .output("y")
    }

    #[test]
    fn pad_snapshot() {
        let d = lower(&model(&[0, 1, 0, 2], "reflect")).dump();
        assert!(d.contains("Pad(x:f32[1, 4]) scheme=2u pad_amount=u32[2, 2]{0,0,1,2} pad_constant_value=0f -> y:f32[1, 7]"), "{d}");
    }

    #[test]
    fn pad_rejections() {
        assert!(lower_err(&model(&[0, 1, 0, 2], "wrap")).contains("attribute 'mode'"));
        assert!(lower_err(&model(&[0, -1, 0, 0], "constant")).contains("negative pads"));
    }
}
