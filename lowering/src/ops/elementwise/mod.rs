//! Element-wise ops that map 1:1 onto a QNN op: rows of the tables below.
//!
//! Spec: <https://onnx.ai/onnx/operators/> (Abs, Add, ..., Where). Binary ops broadcast like
//! numpy; QNN's element-wise ops broadcast too, and operands are first brought to equal rank
//! (static reshape for constants, a Reshape op otherwise). Variadic Max/Min/Sum become a chain.
//! A commutative op with one constant operand takes the other operand first ([`BINARY`]).
//! Reciprocal is `ElementWiseDivide(1, x)`. Constant operands are evaluated on the host: in f64
//! for floats, and with the op's integer semantics for integers where it has them (Div
//! truncates, Mod takes the divisor's sign); an integer op without them is left to the device.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::shape::broadcast;
use crate::ir::tensor::{broadcast_map, numel, Tensor};
use crate::ir::Node;
use crate::ops::infer::{same, In, Out};
use crate::ops::Quant;
use crate::ops::{Fold, Layout, LowerCx, OpDef, ShapeInput};
use crate::qnn_names::op;

pub mod mod_;

/// ONNX unary op → QNN op with the same semantics and no params.
pub const UNARY: &[(&str, &str)] = &[
    ("Abs", op::ELEMENT_WISE_ABS),
    ("Neg", op::ELEMENT_WISE_NEG),
    ("Exp", op::ELEMENT_WISE_EXP),
    ("Log", op::ELEMENT_WISE_LOG),
    ("Sqrt", op::ELEMENT_WISE_SQUARE_ROOT),
    ("Floor", op::ELEMENT_WISE_FLOOR),
    ("Ceil", op::ELEMENT_WISE_CEIL),
    ("Round", op::ELEMENT_WISE_ROUND),
    ("Sign", op::ELEMENT_WISE_SIGN),
    ("Sin", op::ELEMENT_WISE_SIN),
    ("Cos", op::ELEMENT_WISE_COS),
    ("Asin", op::ELEMENT_WISE_ASIN),
    ("Atan", op::ELEMENT_WISE_ATAN),
    ("Not", op::ELEMENT_WISE_NOT),
    ("Relu", op::RELU),
    ("Sigmoid", op::SIGMOID),
    ("Tanh", op::TANH),
    ("HardSwish", op::HARD_SWISH),
    ("Erf", op::ERF),
];

/// ONNX binary (or variadic) op → QNN binary op, and whether its two operands commute.
///
/// A commutative op with exactly one constant operand gets the activation as `in[0]`: the HTP
/// emulator (QNN 2.51, v73) runs `ElementWiseAdd(static bias, x)` several times slower than
/// `ElementWiseAdd(x, static bias)` (TransformerEncoderLayer 44 -> 23 ms), and the TorchScript
/// exporter writes the bias of `nn.Linear` first.
pub const BINARY: &[(&str, &str, bool)] = &[
    ("Add", op::ELEMENT_WISE_ADD, true),
    ("Sub", op::ELEMENT_WISE_SUBTRACT, false),
    ("Mul", op::ELEMENT_WISE_MULTIPLY, true),
    ("Div", op::ELEMENT_WISE_DIVIDE, false),
    ("Pow", op::ELEMENT_WISE_POWER, false),
    ("Max", op::ELEMENT_WISE_MAXIMUM, true),
    ("Min", op::ELEMENT_WISE_MINIMUM, true),
    ("Sum", op::ELEMENT_WISE_ADD, true),
    ("And", op::ELEMENT_WISE_AND, true),
    ("Or", op::ELEMENT_WISE_OR, true),
    ("Xor", op::ELEMENT_WISE_XOR, true),
    ("Equal", op::ELEMENT_WISE_EQUAL, true),
    ("Less", op::ELEMENT_WISE_LESS, false),
    ("Greater", op::ELEMENT_WISE_GREATER, false),
    ("LessOrEqual", op::ELEMENT_WISE_LESS_EQUAL, false),
    ("GreaterOrEqual", op::ELEMENT_WISE_GREATER_EQUAL, false),
];

/// QNN's fixed output encoding of a 16-bit Sigmoid (`real = scale * (q + offset)`): [0, 1)
/// over the whole range.
fn sigmoid_encoding(storage: DType) -> Option<(f32, i32)> {
    match storage {
        DType::U16 => Some((1.0 / 65536.0, 0)),
        DType::I16 => Some((1.0 / 32768.0, 0)),
        _ => None,
    }
}

/// QNN's fixed output encoding of a 16-bit Tanh: [-1, 1) over the whole range.
fn tanh_encoding(storage: DType) -> Option<(f32, i32)> {
    match storage {
        DType::U16 => Some((1.0 / 32768.0, -32768)),
        DType::I16 => Some((1.0 / 32768.0, 0)),
        _ => None,
    }
}

/// The entry of a [`UNARY`] row that is evaluated on the host when its input is constant.
const fn unary_op(op_type: &'static str, since: i64) -> OpDef {
    OpDef {
        op_type,
        since,
        layout: Layout::Agnostic,
        shape_input: ShapeInput::Kept,
        infer: same,
        fold: Some(Fold::Values(fold_unary)),
        expand: None,
        lower: Some(unary),
        quant: Quant::Float,
    }
}

/// The entry of a [`UNARY`] row with no host evaluation.
const fn device_unary_op(op_type: &'static str, since: i64) -> OpDef {
    OpDef {
        op_type,
        since,
        layout: Layout::Agnostic,
        shape_input: ShapeInput::Kept,
        infer: same,
        fold: None,
        expand: None,
        lower: Some(unary),
        quant: Quant::Float,
    }
}

/// `Pow(x, 2)` as `Mul(x, x)` (see the registry row); other exponents stay ElementWisePower.
fn square(b: &mut crate::ir::builder::Builder, node: &Node) -> Result<bool> {
    let (Some(x), Some(e), Some(y)) = (node.input(0), node.input(1), node.output(0)) else {
        return Ok(false);
    };
    let two =
        b.g.konst(e)
            .is_some_and(|t| t.numel() == 1 && t.get_f64(0) == 2.0);
    if !two || !b.g.dtype(x).is_float() {
        return Ok(false);
    }
    b.op_to("Mul", &[x, x], vec![], &[y]);
    Ok(true)
}

/// The entry of a two-input arithmetic [`BINARY`] row.
const fn binary_op(op_type: &'static str, since: i64) -> OpDef {
    OpDef {
        op_type,
        since,
        layout: Layout::Agnostic,
        shape_input: ShapeInput::None,
        infer: infer_binary,
        fold: Some(Fold::Values(fold_arith)),
        expand: None,
        lower: Some(binary),
        quant: Quant::Float,
    }
}

/// The entry of a variadic [`BINARY`] row (a chain of the binary op).
const fn variadic_op(op_type: &'static str, since: i64) -> OpDef {
    OpDef {
        op_type,
        since,
        layout: Layout::Agnostic,
        shape_input: ShapeInput::None,
        infer: infer_variadic,
        fold: Some(Fold::Values(fold_arith)),
        expand: None,
        lower: Some(binary),
        quant: Quant::Float,
    }
}

/// The entry of a comparison or logical [`BINARY`] row.
const fn compare_op(op_type: &'static str, since: i64) -> OpDef {
    OpDef {
        op_type,
        since,
        layout: Layout::Agnostic,
        shape_input: ShapeInput::None,
        infer: infer_compare,
        fold: Some(Fold::Values(fold_compare)),
        expand: None,
        lower: Some(binary),
        quant: Quant::Shared,
    }
}

pub const WHERE: OpDef = OpDef {
    op_type: "Where",
    since: 9,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: infer_where,
    fold: Some(Fold::Values(fold_where)),
    expand: None,
    lower: Some(where_),
    quant: Quant::Shared,
};

pub const RECIPROCAL: OpDef = OpDef {
    op_type: "Reciprocal",
    since: 1,
    layout: Layout::Agnostic,
    shape_input: ShapeInput::None,
    infer: same,
    fold: Some(Fold::Values(fold_unary)),
    expand: None,
    lower: Some(reciprocal),
    quant: Quant::Float,
};

/// Inferred only: no op table lists them.
pub const BIT_SHIFT: OpDef = OpDef {
    op_type: "BitShift",
    since: 11,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: infer_binary,
    fold: None,
    expand: None,
    lower: None,
    quant: Quant::Float,
};

pub const IS_INF: OpDef = OpDef {
    op_type: "IsInf",
    since: 10,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer: infer_mask,
    fold: None,
    expand: None,
    lower: None,
    quant: Quant::Float,
};

pub const OPS: &[OpDef] = &[
    unary_op("Abs", 1).with_quant(Quant::Direct),
    unary_op("Neg", 1).with_quant(Quant::Direct),
    unary_op("Exp", 1).with_quant(Quant::Direct),
    unary_op("Log", 1),
    unary_op("Sqrt", 1).with_quant(Quant::Direct),
    unary_op("Floor", 1),
    unary_op("Ceil", 1),
    unary_op("Round", 11),
    unary_op("Sign", 9),
    // Quantized on the model's encodings (RoPE's cos and sin of positions, which a v68 HTP has
    // no float path for): within one 16-bit output step of float on the QCS6490 and SoC 60
    // emulators (libQnnHtp 2.51) for inputs in [-4, 4].
    OpDef {
        quant: Quant::Direct,
        ..unary_op("Sin", 7)
    },
    OpDef {
        quant: Quant::Direct,
        ..unary_op("Cos", 7)
    },
    device_unary_op("Asin", 7),
    device_unary_op("Atan", 7),
    unary_op("Not", 1),
    unary_op("Relu", 1).with_quant(Quant::Direct),
    unary_op("Sigmoid", 1).with_quant(Quant::Fixed(sigmoid_encoding)),
    unary_op("Tanh", 1).with_quant(Quant::Fixed(tanh_encoding)),
    device_unary_op("HardSwish", 14).with_quant(Quant::Direct),
    device_unary_op("Erf", 9),
    binary_op("Add", 1).with_quant(Quant::Direct),
    binary_op("Sub", 1).with_quant(Quant::Direct),
    binary_op("Mul", 1).with_quant(Quant::Direct),
    binary_op("Div", 1).with_quant(Quant::Direct),
    // x^2 as x*x: QNN's ElementWisePower has no quantized form here (a float island, fp16 on
    // SoC 60, where the square of a residual stream at 300 already overflows, and refused on
    // v68), while ElementWiseMultiply runs on the quantized tensors at the Pow's own output
    // encoding. An RMSNorm left unfused (its intermediates read elsewhere, as the per-layer
    // report's outputs do) squared that way: measured on SmolLM2's 16a8w prefill graph.
    binary_op("Pow", 1).with_expand(square),
    variadic_op("Max", 1).with_quant(Quant::Direct),
    variadic_op("Min", 1).with_quant(Quant::Direct),
    variadic_op("Sum", 1).with_quant(Quant::Direct),
    compare_op("And", 1),
    compare_op("Or", 1),
    compare_op("Xor", 1),
    compare_op("Equal", 1),
    compare_op("Less", 1),
    compare_op("Greater", 1),
    compare_op("LessOrEqual", 12),
    compare_op("GreaterOrEqual", 12),
    WHERE,
    RECIPROCAL,
    mod_::MOD,
    BIT_SHIFT,
    IS_INF,
];

/// Two inputs broadcast, in the dtype of the first.
pub fn infer_binary(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    Ok(vec![(
        x.dtype(0)?,
        broadcast(n, &[x.shape(0)?, x.shape(1)?])?,
    )])
}

/// Every input broadcast, in the dtype of the first.
pub fn infer_variadic(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let shapes = (0..n.inputs.len())
        .map(|i| x.shape(i))
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![(x.dtype(0)?, broadcast(n, &shapes)?)])
}

/// Two inputs broadcast, as bool.
fn infer_compare(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    Ok(vec![(
        DType::Bool,
        broadcast(n, &[x.shape(0)?, x.shape(1)?])?,
    )])
}

/// The three inputs broadcast, in the dtype of the values.
fn infer_where(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    Ok(vec![(
        x.dtype(1)?,
        broadcast(n, &[x.shape(0)?, x.shape(1)?, x.shape(2)?])?,
    )])
}

/// A bool per element of input 0 (IsNaN, IsInf).
pub fn infer_mask(x: &In) -> Result<Vec<Out>> {
    Ok(vec![(DType::Bool, x.shape(0)?.to_vec())])
}

/// Add, Sub, Mul, Div, Pow, Mod, and the variadic Max, Min, Sum (left to right).
fn fold_arith(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let op = node.op_type.as_str();
    let dt0 = outs[0].0;
    let fmod = node.attr_i("fmod", 0)? != 0;
    let mut acc = ins[0].clone();
    for b in &ins[1..] {
        let shape = broadcast(node, &[&acc.shape, &b.shape])?;
        let fi = |v: &[i64]| binary_i(op, v[0], v[1]);
        let r = elementwise(
            dt0,
            &shape,
            &[&acc, b],
            |v| binary_f(op, v[0], v[1], fmod).unwrap_or(f64::NAN),
            Some(&fi),
        );
        match r {
            Some(t) => acc = t,
            None => return Ok(None),
        }
    }
    Ok(Some(vec![acc]))
}

fn fold_compare(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let op = node.op_type.as_str();
    let shape0 = outs[0].1.clone();
    let opn = op.to_string();
    Ok(elementwise(
        DType::Bool,
        &shape0,
        &ins[..2],
        |v| compare(&opn, v[0], v[1]).unwrap_or(false) as i64 as f64,
        None,
    )
    .map(|t| vec![t]))
}

fn fold_unary(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let op = node.op_type.as_str();
    let (dt0, shape0) = outs[0].clone();
    let t0 = ins[0];
    if unary_f(op, 0.0).is_none() {
        return Ok(None);
    }
    let fi = |v: &[i64]| match op {
        "Neg" => Some(v[0].wrapping_neg()),
        "Abs" => Some(v[0].wrapping_abs()),
        "Relu" => Some(v[0].max(0)),
        "Sign" => Some(v[0].signum()),
        "Not" => Some((v[0] == 0) as i64),
        _ => None,
    };
    Ok(elementwise(
        dt0,
        &shape0,
        &[t0],
        |v| unary_f(op, v[0]).unwrap_or(f64::NAN),
        Some(&fi),
    )
    .map(|t| vec![t]))
}

// Indexes the three operands' broadcast maps by the same position.
#[allow(clippy::needless_range_loop)]
fn fold_where(x: &In, outs: &[Out], ins: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    let node = x.n;
    let (dt0, shape0) = outs[0].clone();
    let maps: Vec<Vec<usize>> = ins
        .iter()
        .map(|t| broadcast_map(&shape0, &t.shape))
        .collect();
    let mut parts = Vec::with_capacity(numel(&shape0) * dt0.size());
    let es = dt0.size();
    for k in 0..numel(&shape0) {
        let src = if ins[0].get_i64(maps[0][k]) != 0 {
            1
        } else {
            2
        };
        let f = maps[src][k];
        parts.extend_from_slice(&ins[src].bytes()[f * es..(f + 1) * es]);
    }
    Tensor::from_bytes(dt0, shape0, parts)
        .map(|t| Some(vec![t]))
        .map_err(|e| node.err_invalid(e))
}

fn binary_f(op: &str, a: f64, b: f64, fmod: bool) -> Option<f64> {
    Some(match op {
        "Add" | "Sum" => a + b,
        "Sub" => a - b,
        "Mul" => a * b,
        "Div" => a / b,
        "Pow" => a.powf(b),
        "Max" => a.max(b),
        "Min" => a.min(b),
        "Mod" => {
            if fmod {
                a % b
            } else {
                a - b * (a / b).floor()
            }
        }
        _ => return None,
    })
}

fn binary_i(op: &str, a: i64, b: i64) -> Option<i64> {
    Some(match op {
        "Add" | "Sum" => a.wrapping_add(b),
        "Sub" => a.wrapping_sub(b),
        "Mul" => a.wrapping_mul(b),
        "Div" => a.checked_div(b)?,
        "Pow" => (a as f64).powf(b as f64) as i64,
        "Max" => a.max(b),
        "Min" => a.min(b),
        // Integer Mod with fmod=0 takes the divisor's sign, like Python.
        "Mod" => a
            .checked_rem_euclid(b)
            .map(|r| if b < 0 && r != 0 { r + b } else { r })?,
        _ => return None,
    })
}

fn compare(op: &str, a: f64, b: f64) -> Option<bool> {
    Some(match op {
        "Equal" => a == b,
        "Less" => a < b,
        "Greater" => a > b,
        "LessOrEqual" => a <= b,
        "GreaterOrEqual" => a >= b,
        "And" => a != 0.0 && b != 0.0,
        "Or" => a != 0.0 || b != 0.0,
        "Xor" => (a != 0.0) != (b != 0.0),
        _ => return None,
    })
}

fn unary_f(op: &str, x: f64) -> Option<f64> {
    Some(match op {
        "Neg" => -x,
        "Abs" => x.abs(),
        "Sqrt" => x.sqrt(),
        "Exp" => x.exp(),
        "Log" => x.ln(),
        "Reciprocal" => 1.0 / x,
        "Floor" => x.floor(),
        "Ceil" => x.ceil(),
        "Round" => {
            let r = x.round();
            // Round half to even.
            if (x - x.trunc()).abs() == 0.5 {
                2.0 * (x / 2.0).round()
            } else {
                r
            }
        }
        "Sign" => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        "Relu" => x.max(0.0),
        "Sigmoid" => 1.0 / (1.0 + (-x).exp()),
        "Tanh" => x.tanh(),
        "Sin" => x.sin(),
        "Cos" => x.cos(),
        "Not" => (x == 0.0) as i64 as f64,
        _ => return None,
    })
}

/// Integer variant of an element-wise function; `None` aborts folding (e.g. division by 0).
type IntFn<'a> = &'a dyn Fn(&[i64]) -> Option<i64>;

// Indexes several parallel arrays (operands and their broadcast maps) by the same position.
#[allow(clippy::needless_range_loop)]
fn elementwise(
    dt: DType,
    shape: &[usize],
    ins: &[&Tensor],
    f: impl Fn(&[f64]) -> f64,
    fi: Option<IntFn>,
) -> Option<Tensor> {
    let maps: Vec<Vec<usize>> = ins.iter().map(|t| broadcast_map(shape, &t.shape)).collect();
    let n = numel(shape);
    if let (false, Some(fi)) = (dt.is_float(), fi) {
        let mut out = Vec::with_capacity(n);
        let mut buf = vec![0i64; ins.len()];
        for k in 0..n {
            for (j, t) in ins.iter().enumerate() {
                buf[j] = t.get_i64(maps[j][k]);
            }
            out.push(fi(&buf)?);
        }
        return Some(Tensor::from_i64_as(dt, shape.to_vec(), &out));
    }
    let mut out = Vec::with_capacity(n);
    let mut buf = vec![0f64; ins.len()];
    for k in 0..n {
        for (j, t) in ins.iter().enumerate() {
            buf[j] = t.get_f64(maps[j][k]);
        }
        out.push(f(&buf));
    }
    Some(Tensor::from_f64_as(dt, shape.to_vec(), &out))
}

fn lookup(table: &[(&str, &'static str)], op_type: &str) -> &'static str {
    table
        .iter()
        .find(|(o, _)| *o == op_type)
        .map(|(_, q)| *q)
        .expect("rule registered with a table row")
}

pub fn unary(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let q = lookup(UNARY, &node.op_type);
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(node, q, vec![x], vec![y], vec![]);
    Ok(())
}

pub fn binary(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let &(_, q, commutative) = BINARY
        .iter()
        .find(|(o, _, _)| *o == node.op_type)
        .expect("rule registered with a table row");
    let n = node.inputs.len();
    let out_shape = cx.out_shape(node, 0);
    let rank = out_shape.len();
    let y = cx.output(node, 0)?;
    if n == 1 {
        let x = cx.input(node, 0)?;
        cx.op(node, op::RESHAPE, vec![x], vec![y], vec![]);
        return Ok(());
    }
    let mut order: Vec<usize> = (0..n).collect();
    if commutative && n == 2 && cx.konst(node, 0).is_some() && cx.konst(node, 1).is_none() {
        order.swap(0, 1);
    }
    let mut acc = cx.input_at_rank(node, order[0], rank)?;
    let mut acc_shape = cx.shape(node, order[0]);
    for (k, &i) in order.iter().enumerate().skip(1) {
        let b = cx.input_at_rank(node, i, rank)?;
        let s = broadcast(node, &[&acc_shape, &cx.shape(node, i)])?;
        if k + 1 == n {
            cx.op(node, q, vec![acc, b], vec![y], vec![]);
        } else {
            let dt = cx.tensor_dtype(acc);
            acc = cx.emit(node, q, vec![acc, b], dt, &s, vec![]);
            acc_shape = s;
        }
    }
    Ok(())
}

fn where_(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let rank = cx.out_shape(node, 0).len();
    let ins = (0..3)
        .map(|i| cx.input_at_rank(node, i, rank))
        .collect::<Result<Vec<_>>>()?;
    let y = cx.output(node, 0)?;
    cx.op(node, op::ELEMENT_WISE_SELECT, ins, vec![y], vec![]);
    Ok(())
}

fn reciprocal(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let dt = cx.dtype(node, 0);
    let one = cx.scalar(node, "one", 1.0, dt)?;
    let rank = cx.shape(node, 0).len();
    let one = if rank > 1 {
        cx.reshape(node, one, &vec![1; rank])
    } else {
        one
    };
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    cx.op(node, op::ELEMENT_WISE_DIVIDE, vec![one, x], vec![y], vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::binary_i;
    use super::{BINARY, OPS, UNARY};
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::lower;
    use crate::testing::ModelBuilder;

    #[test]
    fn a_quantized_square_is_a_multiply_not_a_float_island() {
        // Pow(x, 2) read elsewhere (no RMSNorm fusion): ElementWiseMultiply of the quantized x
        // by itself at the Pow's output encoding; another exponent stays ElementWisePower.
        let s = |v: f32| Tensor::scalar_f32(v);
        let u16 = |v: i64| Tensor::from_i64_as(DType::U16, vec![], &[v]);
        let model = |exponent: f32| {
            ModelBuilder::new(17)
                .input("x", DType::F32, &[1, 4])
                .init("xs", s(0.01))
                .init("xz", u16(32768))
                .init("ys", s(0.5))
                .init("yz", u16(0))
                .init("e", s(exponent))
                .node("QuantizeLinear", &["x", "xs", "xz"], &["xq"], &[])
                .node("DequantizeLinear", &["xq", "xs", "xz"], &["xd"], &[])
                .node("Pow", &["xd", "e"], &["sq"], &[])
                .node("QuantizeLinear", &["sq", "ys", "yz"], &["sqq"], &[])
                .node("DequantizeLinear", &["sqq", "ys", "yz"], &["y"], &[])
                .output("y")
        };
        let p = lower(&model(2.0));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            ["Quantize", "ElementWiseMultiply", "Dequantize"],
            "{d}"
        );
        let mul = &p.ops[1];
        assert_eq!(mul.inputs[0], mul.inputs[1], "{d}");
        assert_eq!(p.tensors[mul.outputs[0]].dtype, DType::U16, "{d}");
        let p = lower(&model(3.0));
        assert!(p.op_types().contains(&"ElementWisePower"), "{}", p.dump());
    }

    #[test]
    fn integer_div_and_mod_semantics() {
        assert_eq!(binary_i("Div", -7, 2), Some(-3));
        assert_eq!(binary_i("Mod", -7, 3), Some(2));
        assert_eq!(binary_i("Mod", 7, -3), Some(-2));
        assert_eq!(binary_i("Div", 1, 0), None);
    }

    #[test]
    fn every_row_has_an_entry_and_every_entry_a_row() {
        let rows: Vec<&str> = UNARY
            .iter()
            .map(|r| r.0)
            .chain(BINARY.iter().map(|r| r.0))
            .collect();
        for r in &rows {
            assert!(OPS.iter().any(|d| d.op_type == *r), "row {r} has no entry");
        }
        // The entries that are not rows: Where, Reciprocal, Mod, BitShift and IsInf.
        assert_eq!(OPS.len(), rows.len() + 5);
    }

    #[test]
    fn add_broadcasts_constant_to_equal_rank() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .init("c", Tensor::from_f32(vec![3], &[1., 2., 3.]))
            .node("Add", &["x", "c"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower(&b).dump(),
            "input x:f32[2, 3]\n\
             ElementWiseAdd(x:f32[2, 3], static c_r2:f32[1, 3]) -> y:f32[2, 3]\n\
             output y:f32[2, 3]\n"
        );
    }

    #[test]
    fn commutative_op_with_constant_first_takes_the_activation_first() {
        for op in ["Add", "Mul", "Max", "Min"] {
            let b = ModelBuilder::new(17)
                .input("x", DType::F32, &[2, 3])
                .init("c", Tensor::from_f32(vec![3], &[1., 2., 3.]))
                .node(op, &["c", "x"], &["y"], &[])
                .output("y");
            let d = lower(&b).dump();
            assert!(
                d.contains("(x:f32[2, 3], static c_r2:f32[1, 3]) -> y:f32[2, 3]"),
                "{op}: {d}"
            );
        }
    }

    #[test]
    fn non_commutative_op_keeps_operand_order() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .init("c", Tensor::from_f32(vec![3], &[1., 2., 3.]))
            .node("Sub", &["c", "x"], &["y"], &[])
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains("ElementWiseSubtract(static c_r2:f32[1, 3], x:f32[2, 3]) -> y:f32[2, 3]"),
            "{d}"
        );
    }

    #[test]
    fn variadic_max_is_a_chain() {
        let b = ModelBuilder::new(17)
            .input("a", DType::F32, &[4])
            .input("b", DType::F32, &[4])
            .input("c", DType::F32, &[4])
            .node("Max", &["a", "b", "c"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower(&b).op_types(),
            vec!["ElementWiseMaximum", "ElementWiseMaximum"]
        );
    }

    #[test]
    fn cos_and_sin_of_quantized_values_run_quantized() {
        let s = Tensor::scalar_f32(0.001);
        let z = Tensor::from_i64_as(DType::U16, vec![], &[32768]);
        let mut b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("s", s)
            .init("z", z)
            .node("QuantizeLinear", &["x", "s", "z"], &["xq"], &[])
            .node("DequantizeLinear", &["xq", "s", "z"], &["xd"], &[]);
        for op in ["Cos", "Sin"] {
            let (o, q, d) = (op.to_lowercase(), format!("{op}_q"), format!("{op}_d"));
            b = b
                .node(op, &["xd"], &[&o], &[])
                .node("QuantizeLinear", &[&o, "s", "z"], &[&q], &[])
                .node("DequantizeLinear", &[&q, "s", "z"], &[&d], &[])
                .output(&d);
        }
        let p = lower(&b);
        let d = p.dump();
        for op in ["ElementWiseCos", "ElementWiseSin"] {
            let o = p.ops.iter().find(|o| o.type_name == op).unwrap();
            assert!(p.tensors[o.inputs[0]].quant.is_some(), "{d}");
            assert!(p.tensors[o.outputs[0]].quant.is_some(), "{d}");
        }
    }

    #[test]
    fn unary_and_compare_and_where() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("z", Tensor::scalar_f32(0.0))
            .node("Exp", &["x"], &["e"], &[])
            .node("Less", &["x", "z"], &["m"], &[])
            .node("Where", &["m", "x", "e"], &["y"], &[])
            .output("y");
        assert_eq!(
            lower(&b).op_types(),
            vec!["ElementWiseExp", "ElementWiseLess", "ElementWiseSelect"]
        );
    }

    #[test]
    fn reciprocal_is_divide() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("Reciprocal", &["x"], &["y"], &[])
            .output("y");
        assert_eq!(lower(&b).op_types(), vec!["ElementWiseDivide"]);
    }

    #[test]
    fn erf_is_unsupported_on_htp() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .node("Erf", &["x"], &["y"], &[])
            .output("y");
        let e = crate::ops::test_util::lower_err(&b);
        assert!(
            e.starts_with("Node \"Erf_0\" (Erf): Erf is not supported on HTP"),
            "{e}"
        );
    }
}
