//! Quantization ops. The model's QuantizeLinear/DequantizeLinear pairs do not reach lowering:
//! the `qdq` pass ([`crate::passes::qdq`]) turns them into encodings on the values between ops,
//! and what it cannot (an unpaired or dynamic one) is refused here with its reason. What does
//! reach lowering are the conversions that pass inserts, internal op types with float
//! semantics (the IR value keeps its real type; its encoding says how it is stored):
//! [`QUANTIZE`] (float → fixed-point, QNN `Quantize`), [`DEQUANTIZE`] (QNN `Dequantize`) and
//! [`REQUANTIZE`] (one encoding to another, QNN `Convert`).

use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::same;
use crate::ops::{Layout, LowerCx, OpDef, Quant, ShapeInput};
use crate::qnn_names::op;

pub mod dequantize_linear;
pub mod quantize_linear;

/// Internal op types: not ONNX ops, made only by the `qdq` pass (the loader refuses them in a
/// model).
pub const QUANTIZE: &str = "qnnx.Quantize";
pub const DEQUANTIZE: &str = "qnnx.Dequantize";
pub const REQUANTIZE: &str = "qnnx.Requantize";

/// Whether `op_type` is one of the internal conversions.
pub fn is_internal(op_type: &str) -> bool {
    op_type.starts_with("qnnx.")
}

pub const OPS: &[OpDef] = &[
    quantize_linear::QUANTIZE_LINEAR,
    dequantize_linear::DEQUANTIZE_LINEAR,
    internal(QUANTIZE, quantize),
    internal(DEQUANTIZE, dequantize),
    internal(REQUANTIZE, requantize),
];

const fn internal(op_type: &'static str, lower: fn(&mut LowerCx, &Node) -> Result<()>) -> OpDef {
    OpDef {
        op_type,
        since: 1,
        layout: Layout::Framework,
        shape_input: ShapeInput::None,
        infer: same,
        fold: None,
        expand: None,
        lower: Some(lower),
        quant: Quant::Float,
    }
}

fn convert(cx: &mut LowerCx, node: &Node, qnn_op: &'static str) -> Result<()> {
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(node, qnn_op, vec![x], vec![y], vec![]);
    Ok(())
}

fn quantize(cx: &mut LowerCx, node: &Node) -> Result<()> {
    convert(cx, node, op::QUANTIZE)
}

fn dequantize(cx: &mut LowerCx, node: &Node) -> Result<()> {
    convert(cx, node, op::DEQUANTIZE)
}

fn requantize(cx: &mut LowerCx, node: &Node) -> Result<()> {
    convert(cx, node, op::CONVERT)
}

/// The rule of a QuantizeLinear or DequantizeLinear the `qdq` pass left in the graph.
pub fn unpaired(_: &mut LowerCx, node: &Node) -> Result<()> {
    Err(node.err_op(format!(
        "{} is lowered as the encoding of the tensor between a QuantizeLinear and a \
         DequantizeLinear with the same constant scale and zero point (or of a constant, or of a \
         quantized graph input or output); this one is not part of such a pair",
        node.op_type
    )))
}

/// The encoding a QuantizeLinear or DequantizeLinear node gives its quantized tensor (input 0 of
/// a DequantizeLinear, output 0 of a QuantizeLinear), stored as `storage`: scale and zero point
/// must be constants; per-axis when the scale has more than one element.
pub fn node_encoding(
    g: &crate::ir::Graph,
    node: &Node,
    storage: crate::dtype::DType,
    data_shape: &[usize],
) -> Result<qnnx_types::Encoding> {
    let what = |i: usize| {
        node.input(i)
            .map(|v| g.value(v).name.clone())
            .unwrap_or_default()
    };
    let Some(scale) = node.input(1).and_then(|v| g.konst(v)) else {
        return Err(node.err_op(format!(
            "its scale '{}' must be a constant (dynamic quantization is not supported: quantize \
             the model statically)",
            what(1)
        )));
    };
    let zp = match node.input(2) {
        None => None,
        Some(v) => Some(g.konst(v).ok_or_else(|| {
            node.err_op(format!(
                "its zero point '{}' must be a constant (dynamic quantization is not supported)",
                what(2)
            ))
        })?),
    };
    let block_size = node.attr_i("block_size", 0)?;
    if block_size != 0 {
        return blocked_encoding(node, &what(0), storage, data_shape, scale, zp, block_size);
    }
    if let Some(z) = zp {
        if z.shape != scale.shape {
            return Err(node.err_invalid(format!(
                "scale '{}' has shape {:?} but zero point '{}' has {:?}",
                what(1),
                scale.shape,
                what(2),
                z.shape
            )));
        }
    }
    let axis = if scale.numel() > 1 {
        if scale.shape.len() != 1 {
            return Err(node.err_invalid(format!(
                "scale '{}' has shape {:?}; a per-axis scale is 1-D",
                what(1),
                scale.shape
            )));
        }
        let a = node.attr_i("axis", 1)?;
        let rank = data_shape.len() as i64;
        let a = if a < 0 { a + rank } else { a };
        if a < 0 || a >= rank {
            return Err(node.err_attr(
                "axis",
                format!("axis {a} does not exist in a rank-{rank} tensor"),
            ));
        }
        Some(a as usize)
    } else {
        None
    };
    let zps = zp.map(|z| z.to_i64()).unwrap_or_default();
    let enc = qnnx_types::Encoding::from_onnx(storage, axis, &scale.to_f64(), &zps)
        .map_err(|e| node.err_dtype(format!("the encoding of '{}' {e}", what(0))))?;
    enc.check_shape(data_shape)
        .map_err(|e| node.err_invalid(format!("the encoding of '{}' {e}", what(0))))?;
    Ok(enc)
}

/// The encoding of a blocked QuantizeLinear/DequantizeLinear (opset 21's `block_size`): a 2-D
/// int4 weight with a float scale per block of `block_size` elements along `axis`, stored as
/// QNN's block expansion ([`qnnx_types::Blocks`]: per-channel scale x 4-bit integer per block,
/// HTP v69+; the engine refuses it for older targets).
fn blocked_encoding(
    node: &Node,
    name: &str,
    storage: crate::dtype::DType,
    data_shape: &[usize],
    scale: &crate::ir::tensor::Tensor,
    zp: Option<&crate::ir::tensor::Tensor>,
    block_size: i64,
) -> Result<qnnx_types::Encoding> {
    let rank = data_shape.len() as i64;
    let a = node.attr_i("axis", 1)?;
    let a = if a < 0 { a + rank } else { a };
    if a < 0 || a >= rank {
        return Err(node.err_attr(
            "axis",
            format!("axis {a} does not exist in a rank-{rank} tensor"),
        ));
    }
    let a = a as usize;
    if block_size < 0 {
        return Err(node.err_attr("block_size", "must be positive"));
    }
    let b = block_size as usize;
    let mut want = data_shape.to_vec();
    want[a] = data_shape[a].div_ceil(b.max(1));
    if scale.shape != want {
        return Err(node.err_invalid(format!(
            "its scale has shape {:?}; blocks of {b} along axis {a} of a {:?} tensor need {:?}",
            scale.shape, data_shape, want
        )));
    }
    let zps = zp.map(|z| z.to_i64()).unwrap_or_default();
    let enc = qnnx_types::Encoding::from_onnx_blocked(
        storage,
        data_shape,
        a,
        b,
        &scale.to_f64(),
        &zps,
        BLOCK_SCALE_BITS,
    )
    .map_err(|e| node.err_attr("block_size", format!("the encoding of '{name}' {e}")))?;
    enc.check_shape(data_shape)
        .map_err(|e| node.err_invalid(format!("the encoding of '{name}' {e}")))?;
    Ok(enc)
}

/// The width of QNN's integer block scales for 4-bit weights: they expand them to 8 bits.
pub const BLOCK_SCALE_BITS: u32 = 4;
