//! Shape and dtype agreement of each QNN op with its tensors, checked before a plan reaches QNN.
//!
//! QNN's validator does not catch every inconsistent op: a graph whose tensors disagree with what
//! an op writes can finalize and then crash or write out of bounds at execute (docs/qnn-notes.md §8.8,
//! issue 13). Every rule below is QNN's documented relation between inputs, params and outputs
//! (`QnnOpDef.h`); ops without a rule here are left to QNN's validator.

use crate::plan::{DType, Param, PlanOp, PlanTensor, Scalar, TensorKind};
use crate::qnn_names::{op, param};

/// Why `o` disagrees with its tensors, or `Ok`.
pub fn check_op(o: &PlanOp, tensors: &[PlanTensor]) -> Result<(), String> {
    let t = |i: usize| -> &PlanTensor { &tensors[i] };
    let ins: Vec<&PlanTensor> = o.inputs.iter().map(|&i| t(i)).collect();
    let outs: Vec<&PlanTensor> = o.outputs.iter().map(|&i| t(i)).collect();
    let arity = |n_in: std::ops::RangeInclusive<usize>, n_out: usize| -> Result<(), String> {
        if !n_in.contains(&ins.len()) || outs.len() != n_out {
            return Err(format!(
                "takes {n_in:?} inputs and {n_out} output(s), has {} and {}",
                ins.len(),
                outs.len()
            ));
        }
        Ok(())
    };
    check_quant(o, &ins, &outs)?;
    check_blocked(o, &ins, &outs)?;
    match o.type_name {
        op::RESHAPE => {
            arity(1..=1, 1)?;
            same_dtype(&ins, &outs)?;
            if numel(ins[0]) != numel(outs[0]) {
                return Err(format!(
                    "reshapes {} ({} elements) to {} ({} elements)",
                    desc(ins[0]),
                    numel(ins[0]),
                    desc(outs[0]),
                    numel(outs[0])
                ));
            }
        }
        op::TRANSPOSE => {
            arity(1..=1, 1)?;
            same_dtype(&ins, &outs)?;
            let perm = u32_param(o, param::PERM)?;
            let (i, y) = (&ins[0].shape, &outs[0].shape);
            let mut seen = vec![false; i.len()];
            let is_perm = perm.len() == i.len()
                && perm.iter().all(|&p| {
                    let ok = (p as usize) < i.len() && !seen[p as usize];
                    if ok {
                        seen[p as usize] = true;
                    }
                    ok
                });
            if !is_perm {
                return Err(format!("perm {perm:?} does not permute rank {}", i.len()));
            }
            let want: Vec<u32> = perm.iter().map(|&p| i[p as usize]).collect();
            if &want != y {
                return Err(format!(
                    "transposes {} by {perm:?} into {}, which should be {want:?}",
                    desc(ins[0]),
                    desc(outs[0])
                ));
            }
        }
        op::TILE => {
            arity(1..=1, 1)?;
            same_dtype(&ins, &outs)?;
            let m = u32_param(o, param::MULTIPLES)?;
            let (i, y) = (&ins[0].shape, &outs[0].shape);
            let want: Option<Vec<u32>> =
                (m.len() == i.len()).then(|| i.iter().zip(&m).map(|(&a, &b)| a * b).collect());
            if want.as_ref() != Some(y) {
                return Err(format!(
                    "tiles {} by {m:?} into {}: ranks or sizes disagree",
                    desc(ins[0]),
                    desc(outs[0])
                ));
            }
        }
        op::CONCAT => {
            arity(1..=usize::MAX, 1)?;
            same_dtype(&ins, &outs)?;
            let axis = u32_scalar(o, param::AXIS)? as usize;
            let y = &outs[0].shape;
            if axis >= y.len() {
                return Err(format!("axis {axis} is outside rank {}", y.len()));
            }
            let mut sum = 0;
            for x in &ins {
                let agree = x.shape.len() == y.len()
                    && x.shape
                        .iter()
                        .zip(y)
                        .enumerate()
                        .all(|(k, (a, b))| k == axis || a == b);
                if !agree {
                    return Err(format!(
                        "input {} does not fit output {} outside axis {axis}",
                        desc(x),
                        desc(outs[0])
                    ));
                }
                sum += x.shape[axis];
            }
            if sum != y[axis] {
                return Err(format!(
                    "inputs sum to {sum} along axis {axis}, output has {}",
                    y[axis]
                ));
            }
        }
        op::FULLY_CONNECTED => {
            arity(2..=3, 1)?;
            let (x, w, y) = (&ins[0].shape, &ins[1].shape, &outs[0].shape);
            let k = x.last().copied().unwrap_or(0);
            if w.len() != 2 || w[1] != k {
                return Err(format!(
                    "weights {} do not match input {} ([N, K] with K = {k})",
                    desc(ins[1]),
                    desc(ins[0])
                ));
            }
            let rows: u64 = x[..x.len().saturating_sub(1)]
                .iter()
                .map(|&d| d as u64)
                .product();
            let out_ok = y.last() == Some(&w[0]) && numel(outs[0]) == rows * w[0] as u64;
            if !out_ok {
                return Err(format!(
                    "writes {} but computes {rows} x {} values",
                    desc(outs[0]),
                    w[0]
                ));
            }
            if let Some(b) = ins.get(2) {
                if numel(b) != w[0] as u64 {
                    return Err(format!("bias {} has not {} elements", desc(b), w[0]));
                }
            }
        }
        op::MAT_MUL => {
            arity(2..=3, 1)?;
            let (a, b, y) = (&ins[0].shape, &ins[1].shape, &outs[0].shape);
            let ta = bool_scalar(o, param::TRANSPOSE_IN0);
            let tb = bool_scalar(o, param::TRANSPOSE_IN1);
            if a.len() < 2 || b.len() < 2 || y.len() != a.len().max(b.len()) {
                return Err(format!(
                    "ranks of {} x {} -> {} disagree",
                    desc(ins[0]),
                    desc(ins[1]),
                    desc(outs[0])
                ));
            }
            let (m, ka) = mat_dims(a, ta);
            let (kb, n) = mat_dims(b, tb);
            let batch = broadcast(&a[..a.len() - 2], &b[..b.len() - 2]);
            let mut want = match batch {
                Some(v) => v,
                None => return Err(format!("batch dims of {a:?} and {b:?} do not broadcast")),
            };
            want.extend([m, n]);
            if ka != kb || &want != y {
                return Err(format!(
                    "{} x {} (transposed: {ta}, {tb}) writes {}, should be {want:?}",
                    desc(ins[0]),
                    desc(ins[1]),
                    desc(outs[0])
                ));
            }
        }
        t if is_binary(t) => {
            arity(2..=2, 1)?;
            broadcast_into(&ins, outs[0])?;
            let arith = !matches!(
                t,
                op::ELEMENT_WISE_EQUAL
                    | op::ELEMENT_WISE_NOT_EQUAL
                    | op::ELEMENT_WISE_GREATER
                    | op::ELEMENT_WISE_GREATER_EQUAL
                    | op::ELEMENT_WISE_LESS
                    | op::ELEMENT_WISE_LESS_EQUAL
            );
            if arith {
                same_dtype(&ins, &outs)?;
            } else if outs[0].dtype != DType::Bool {
                return Err(format!("a comparison writes {}, not bool", desc(outs[0])));
            }
        }
        op::ELEMENT_WISE_SELECT => {
            arity(3..=3, 1)?;
            broadcast_into(&ins, outs[0])?;
            same_dtype(&ins[1..], &outs)?;
        }
        t if is_unary(t) => {
            arity(1..=1, 1)?;
            if ins[0].shape != outs[0].shape {
                return Err(format!(
                    "reads {} and writes {}: an elementwise op keeps the shape",
                    desc(ins[0]),
                    desc(outs[0])
                ));
            }
            if !matches!(t, op::CAST) && !matches!(t, op::ELEMENT_WISE_NOT) {
                same_dtype(&ins, &outs)?;
            }
        }
        op::LSTM => lstm(&ins, &outs)?,
        _ => {}
    }
    Ok(())
}

/// QNN Lstm on one time step (`x_t` 2-D), without projection: 24 inputs in the op definition's
/// order, outputs `[B, H]` (all hidden states, cell state, hidden state).
fn lstm(ins: &[&PlanTensor], outs: &[&PlanTensor]) -> Result<(), String> {
    if ins.len() != 24 || outs.len() != 3 {
        return Err(format!(
            "takes 24 inputs and 3 outputs, has {} and {}",
            ins.len(),
            outs.len()
        ));
    }
    let [b, i] = ins[0].shape[..] else {
        return Err(format!("takes a 2-D x_t [B, I], has {}", desc(ins[0])));
    };
    let h = ins[1].shape.first().copied().unwrap_or(0);
    let null = |k: usize| ins[k].kind == TensorKind::Null;
    let want = |k: usize| -> Option<Vec<u32>> {
        match k {
            1..=3 | 16 => Some(vec![h, i]),
            4..=6 | 17 => Some(vec![h, h]),
            7..=9 | 21 => Some(vec![h]),
            10 | 11 => Some(vec![b, h]),
            // The peepholes, NULL or [H].
            18..=20 if !null(k) => Some(vec![h]),
            _ => None,
        }
    };
    for (k, t) in ins.iter().enumerate().skip(1) {
        match want(k) {
            Some(s) if t.shape != s || null(k) => {
                return Err(format!("input {k} is {}, want {s:?}", desc(t)))
            }
            None if !null(k) => {
                return Err(format!(
                    "input {k} is {}, want NULL (layer norm, projection)",
                    desc(t)
                ))
            }
            _ => {}
        }
    }
    for (k, t) in outs.iter().enumerate() {
        if t.shape != [b, h] {
            return Err(format!("output {k} is {}, want [{b}, {h}]", desc(t)));
        }
    }
    Ok(())
}

fn is_binary(t: &str) -> bool {
    matches!(
        t,
        op::ELEMENT_WISE_ADD
            | op::ELEMENT_WISE_SUBTRACT
            | op::ELEMENT_WISE_MULTIPLY
            | op::ELEMENT_WISE_DIVIDE
            | op::ELEMENT_WISE_MAXIMUM
            | op::ELEMENT_WISE_MINIMUM
            | op::ELEMENT_WISE_POWER
            | op::ELEMENT_WISE_MOD
            | op::ELEMENT_WISE_AND
            | op::ELEMENT_WISE_OR
            | op::ELEMENT_WISE_XOR
            | op::ELEMENT_WISE_EQUAL
            | op::ELEMENT_WISE_NOT_EQUAL
            | op::ELEMENT_WISE_GREATER
            | op::ELEMENT_WISE_GREATER_EQUAL
            | op::ELEMENT_WISE_LESS
            | op::ELEMENT_WISE_LESS_EQUAL
    )
}

fn is_unary(t: &str) -> bool {
    matches!(
        t,
        op::ELEMENT_WISE_ABS
            | op::ELEMENT_WISE_ASIN
            | op::ELEMENT_WISE_ATAN
            | op::ELEMENT_WISE_CEIL
            | op::ELEMENT_WISE_COS
            | op::ELEMENT_WISE_EXP
            | op::ELEMENT_WISE_FLOOR
            | op::ELEMENT_WISE_LOG
            | op::ELEMENT_WISE_NEG
            | op::ELEMENT_WISE_NOT
            | op::ELEMENT_WISE_ROUND
            | op::ELEMENT_WISE_RSQRT
            | op::ELEMENT_WISE_SIGN
            | op::ELEMENT_WISE_SIN
            | op::ELEMENT_WISE_SQUARE_ROOT
            | op::ELEMENT_WISE_NEURON
            | op::ELEMENT_WISE_UNARY
            | op::RELU
            | op::RELU_MIN_MAX
            | op::SIGMOID
            | op::TANH
            | op::ELU
            | op::GELU
            | op::HARD_SWISH
            | op::ERF
            | op::SOFTMAX
            | op::LOG_SOFTMAX
            | op::CAST
    )
}

fn numel(t: &PlanTensor) -> u64 {
    t.shape.iter().map(|&d| d as u64).product()
}

fn desc(t: &PlanTensor) -> String {
    let ty = qnnx_types::tensor_type_name(t.dtype, t.quant.is_some());
    format!("'{}' {ty}{:?}", t.name, t.shape)
}

/// Block-wise encodings (QNN's block expansion) are MatMul weights only, as the rules emit
/// them: `in[1]` `[in, out]` with the channels on the last dim and the blocks along dim 0, the
/// one it reduces over (QNN has no field for the block axis; the op implies it).
fn check_blocked(o: &PlanOp, ins: &[&PlanTensor], outs: &[&PlanTensor]) -> Result<(), String> {
    let blocked = |t: &&PlanTensor| t.quant.as_ref().is_some_and(|q| q.is_blocked());
    if let Some(t) = outs.iter().find(|t| blocked(t)) {
        return Err(format!("writes {}, which is block-wise quantized", desc(t)));
    }
    for (k, t) in ins.iter().enumerate().filter(|(_, t)| blocked(t)) {
        let q = t.quant.as_ref().expect("blocked");
        let weight = o.type_name == op::MAT_MUL
            && k == 1
            && t.shape.len() == 2
            && q.axis == Some(1)
            && q.blocks.as_ref().is_some_and(|b| b.axis == 0);
        if !weight {
            return Err(format!(
                "reads {} as input {k}, whose block-wise encoding QNN takes only as the \
                 [in, out] weight of MatMul with blocks along `in`",
                desc(t)
            ));
        }
    }
    Ok(())
}

/// Fixed-point and float tensors meet only in the conversions: a quantized op given a float
/// tensor (or writing one) would be refused by QNN's validator at best.
fn check_quant(o: &PlanOp, ins: &[&PlanTensor], outs: &[&PlanTensor]) -> Result<(), String> {
    let float = |t: &&PlanTensor| t.dtype.is_float();
    let quant = |t: &&PlanTensor| t.quant.is_some();
    let (want_in, want_out) = match o.type_name {
        op::QUANTIZE => ("float", "quantized"),
        op::DEQUANTIZE => ("quantized", "float"),
        op::CONVERT if ins.iter().any(quant) || outs.iter().any(quant) => {
            ("quantized", "quantized")
        }
        _ => {
            let q = ins.iter().chain(outs).find(|t| quant(t));
            let f = ins.iter().chain(outs).find(|t| float(t));
            return match (q, f) {
                (Some(q), Some(f)) => Err(format!(
                    "mixes quantized {} with float {}",
                    desc(q),
                    desc(f)
                )),
                _ => Ok(()),
            };
        }
    };
    let is = |t: &&PlanTensor, want: &str| if want == "float" { float(t) } else { quant(t) };
    if let Some(t) = ins.iter().find(|t| !is(t, want_in)) {
        return Err(format!("reads {}, which is not {want_in}", desc(t)));
    }
    if let Some(t) = outs.iter().find(|t| !is(t, want_out)) {
        return Err(format!("writes {}, which is not {want_out}", desc(t)));
    }
    Ok(())
}

fn same_dtype(ins: &[&PlanTensor], outs: &[&PlanTensor]) -> Result<(), String> {
    let Some(first) = ins.first().or(outs.first()) else {
        return Ok(());
    };
    match ins.iter().chain(outs).find(|t| t.dtype != first.dtype) {
        Some(other) => Err(format!("mixes dtypes: {} and {}", desc(first), desc(other))),
        None => Ok(()),
    }
}

/// Numpy broadcasting of two shapes, aligned at the last dim.
fn broadcast(a: &[u32], b: &[u32]) -> Option<Vec<u32>> {
    let rank = a.len().max(b.len());
    let at = |s: &[u32], k: usize| -> u32 {
        let off = rank - s.len();
        if k < off {
            1
        } else {
            s[k - off]
        }
    };
    (0..rank)
        .map(|k| match (at(a, k), at(b, k)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Each input broadcasts into the output, whose shape is the broadcast of the inputs.
fn broadcast_into(ins: &[&PlanTensor], out: &PlanTensor) -> Result<(), String> {
    let mut acc: Vec<u32> = Vec::new();
    for x in ins {
        acc = broadcast(&acc, &x.shape).ok_or_else(|| {
            format!(
                "inputs {} do not broadcast",
                ins.iter().map(|t| desc(t)).collect::<Vec<_>>().join(", ")
            )
        })?;
    }
    if acc != out.shape {
        return Err(format!(
            "inputs {} broadcast to {acc:?}, but the output is {}",
            ins.iter().map(|t| desc(t)).collect::<Vec<_>>().join(", "),
            desc(out)
        ));
    }
    Ok(())
}

fn mat_dims(s: &[u32], transposed: bool) -> (u32, u32) {
    let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
    if transposed {
        (c, r)
    } else {
        (r, c)
    }
}

fn find<'o>(o: &'o PlanOp, name: &str) -> Option<&'o Param> {
    o.params.iter().find(|(n, _)| *n == name).map(|(_, p)| p)
}

fn u32_param(o: &PlanOp, name: &str) -> Result<Vec<u32>, String> {
    match find(o, name) {
        Some(Param::Tensor {
            dtype: DType::U32,
            data,
            ..
        }) => Ok(data
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()),
        _ => Err(format!("has no UINT_32 tensor param '{name}'")),
    }
}

fn u32_scalar(o: &PlanOp, name: &str) -> Result<u32, String> {
    match find(o, name) {
        Some(Param::Scalar(Scalar::U32(v))) => Ok(*v),
        None => Ok(0),
        _ => Err(format!("param '{name}' is not a UINT_32 scalar")),
    }
}

fn bool_scalar(o: &PlanOp, name: &str) -> bool {
    matches!(find(o, name), Some(Param::Scalar(Scalar::Bool(true))))
}

#[cfg(test)]
mod tests {
    use super::check_op;
    use crate::plan::{DType, Param, PlanOp, PlanTensor, TensorKind};
    use crate::qnn_names::{op, param};

    fn t(name: &str, dtype: DType, shape: &[u32]) -> PlanTensor {
        PlanTensor {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            quant: None,
            origin: None,
            kind: TensorKind::Native,
        }
    }

    fn one(type_name: &'static str, params: Vec<(&'static str, Param)>) -> PlanOp {
        PlanOp {
            name: "op".into(),
            onnx_node: "node".into(),
            type_name,
            inputs: vec![0],
            outputs: vec![1],
            params,
        }
    }

    #[test]
    fn lstm_takes_its_inputs_in_the_op_definitions_order() {
        let (b, i, h) = (2, 3, 4);
        let mut ts = vec![t("x", DType::F16, &[b, i])];
        let shape = |k: usize| -> Vec<u32> {
            match k {
                1..=3 | 16 => vec![h, i],
                4..=6 | 17 => vec![h, h],
                7..=9 | 21 => vec![h],
                10 | 11 => vec![b, h],
                _ => vec![0],
            }
        };
        for k in 1..24 {
            let mut x = t(&format!("in{k}"), DType::F16, &shape(k));
            if shape(k) == [0] {
                x.kind = TensorKind::Null;
            }
            ts.push(x);
        }
        for k in 0..3 {
            ts.push(t(&format!("out{k}"), DType::F16, &[b, h]));
        }
        let o = PlanOp {
            name: "op".into(),
            onnx_node: "node".into(),
            type_name: op::LSTM,
            inputs: (0..24).collect(),
            outputs: (24..27).collect(),
            params: vec![],
        };
        assert_eq!(check_op(&o, &ts), Ok(()));
        // The input gate's weights where the forget gate's go.
        let mut swapped = o.clone();
        swapped.inputs.swap(1, 4);
        let e = check_op(&swapped, &ts).unwrap_err();
        assert!(e.contains("input 1 is 'in4' f16[4, 4], want [4, 3]"), "{e}");
        // A layer-norm weight given.
        let mut ln = o.clone();
        ln.inputs[12] = 7;
        let e = check_op(&ln, &ts).unwrap_err();
        assert!(e.contains("input 12") && e.contains("want NULL"), "{e}");
    }

    #[test]
    fn tile_whose_ranks_disagree_is_refused() {
        let ts = [
            t("x", DType::F32, &[1, 32, 32]),
            t("y", DType::F32, &[1, 1, 2, 32, 32]),
        ];
        let o = one(
            op::TILE,
            vec![(param::MULTIPLES, Param::u32_vec(&[1, 2, 1]))],
        );
        let e = check_op(&o, &ts).unwrap_err();
        assert!(e.contains("ranks or sizes disagree"), "{e}");
        let ts = [
            t("x", DType::F32, &[1, 1, 1, 32, 32]),
            t("y", DType::F32, &[1, 1, 2, 32, 32]),
        ];
        let o = one(
            op::TILE,
            vec![(param::MULTIPLES, Param::u32_vec(&[1, 1, 2, 1, 1]))],
        );
        check_op(&o, &ts).unwrap();
    }

    #[test]
    fn block_wise_weights_are_matmul_weights_only() {
        let blocked =
            qnnx_types::Encoding::from_onnx_blocked(DType::I4, &[4, 2], 0, 2, &[0.1; 4], &[], 4)
                .unwrap();
        let q = |mut t: PlanTensor, e: &qnnx_types::Encoding| {
            t.dtype = e.storage;
            t.quant = Some(e.clone());
            t
        };
        let act = qnnx_types::Encoding::per_tensor(DType::U16, 0.01, -32768);
        let ts = [
            q(t("x", DType::F32, &[3, 4]), &act),
            q(t("w", DType::F32, &[4, 2]), &blocked),
            q(t("y", DType::F32, &[3, 2]), &act),
        ];
        let mut o = one(op::MAT_MUL, vec![]);
        o.inputs = vec![0, 1];
        o.outputs = vec![2];
        check_op(&o, &ts).unwrap();
        // As a FullyConnected weight, or with its blocks along the channels' dim: refused.
        o.type_name = op::FULLY_CONNECTED;
        let e = check_op(&o, &ts).unwrap_err();
        assert!(
            e.contains("block-wise encoding") && e.contains("MatMul"),
            "{e}"
        );
        let ts = [
            ts[0].clone(),
            q(t("w", DType::F32, &[2, 4]), &blocked.permuted(&[1, 0])),
            ts[2].clone(),
        ];
        o.type_name = op::MAT_MUL;
        assert!(check_op(&o, &ts).is_err());
    }

    #[test]
    fn reshape_must_keep_the_element_count() {
        let ts = [t("x", DType::F32, &[2, 3]), t("y", DType::F32, &[7])];
        let e = check_op(&one(op::RESHAPE, vec![]), &ts).unwrap_err();
        assert!(e.contains("6 elements") && e.contains("7 elements"), "{e}");
    }

    #[test]
    fn transpose_output_follows_the_perm() {
        let ts = [
            t("x", DType::F32, &[2, 3, 4]),
            t("y", DType::F32, &[2, 4, 3]),
        ];
        let p = |v: &[u32]| vec![(param::PERM, Param::u32_vec(v))];
        check_op(&one(op::TRANSPOSE, p(&[0, 2, 1])), &ts).unwrap();
        assert!(check_op(&one(op::TRANSPOSE, p(&[1, 0, 2])), &ts).is_err());
        assert!(check_op(&one(op::TRANSPOSE, p(&[0, 0, 1])), &ts).is_err());
    }

    #[test]
    fn elementwise_output_is_the_broadcast_and_keeps_the_dtype() {
        let mut o = one(op::ELEMENT_WISE_ADD, vec![]);
        o.inputs = vec![0, 1];
        o.outputs = vec![2];
        let ok = [
            t("a", DType::F32, &[2, 1, 4]),
            t("b", DType::F32, &[1, 3, 1]),
            t("y", DType::F32, &[2, 3, 4]),
        ];
        check_op(&o, &ok).unwrap();
        let short = [ok[0].clone(), ok[1].clone(), t("y", DType::F32, &[2, 3, 1])];
        assert!(check_op(&o, &short).is_err());
        let mixed = [ok[0].clone(), t("b", DType::F16, &[1, 3, 1]), ok[2].clone()];
        assert!(check_op(&o, &mixed).unwrap_err().contains("mixes dtypes"));
    }

    #[test]
    fn fully_connected_and_matmul_shapes() {
        let mut fc = one(op::FULLY_CONNECTED, vec![]);
        fc.inputs = vec![0, 1];
        fc.outputs = vec![2];
        let ts = [
            t("x", DType::F32, &[8, 64]),
            t("w", DType::F32, &[16, 64]),
            t("y", DType::F32, &[8, 16]),
        ];
        check_op(&fc, &ts).unwrap();
        let bad = [ts[0].clone(), t("w", DType::F32, &[16, 32]), ts[2].clone()];
        assert!(check_op(&fc, &bad).is_err());
        let mut mm = fc.clone();
        mm.type_name = op::MAT_MUL;
        mm.params = vec![
            (param::TRANSPOSE_IN0, Param::bool(false)),
            (param::TRANSPOSE_IN1, Param::bool(true)),
        ];
        check_op(&mm, &ts).unwrap();
        mm.params[1].1 = Param::bool(false);
        assert!(check_op(&mm, &ts).is_err());
    }
}
