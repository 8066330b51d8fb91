//! Attention — <https://onnx.ai/onnx/operators/onnx__Attention.html> (opset 23, 24).
//! Expanded before lowering (like ONNX function inlining) into the reference computation:
//! 3-D Q/K/V are split into heads (Reshape, Transpose); `past_key`/`past_value` are
//! concatenated in front of K/V along the sequence axis (those are `present_key`/`present_value`);
//! grouped-query K/V heads are repeated (Reshape, Expand, Reshape); then
//! `softmax(softcap(Q·√s × (K·√s)ᵀ) + bias) × V`, where `bias` is the float mask, a boolean
//! mask as `Where(mask, 0, -inf)`, a mask shorter than the key sequence padded with -inf, and
//! the causal mask (`-inf` where `j > i + past`). `qk_matmul_output` follows the reference:
//! modes 0 and 1 give the (softcapped) QK product, 2 adds the bias, 3 is the softmax.
//! QNN ops: MatMul, Softmax, ElementWiseMultiply/Add, Tanh, Transpose, Reshape, Concat,
//! ElementWiseSelect. Constraints: `nonpad_kv_seqlen` is not supported; head counts must divide
//! the hidden sizes and Q heads a multiple of K/V heads; `softmax_precision` is ignored (HTP
//! computes float in fp16 either way).

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Node, ValueId};
use crate::ops::infer::{In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, OpDef, ShapeInput};

pub const ATTENTION: OpDef = OpDef {
    op_type: "Attention",
    since: 23,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(attention),
    lower: None,
    quant: Quant::Float,
};

fn required(node: &Node, i: usize, what: &str) -> Result<ValueId> {
    node.input(i)
        .ok_or_else(|| node.err_invalid(format!("input '{what}' is missing")))
}

/// Splits a 3-D `[B, S, H·D]` input into heads `[B, H, S, D]`.
fn heads(b: &mut Builder, x: ValueId, s: &[usize], h: usize) -> ValueId {
    let r = b.reshape(x, &[s[0], s[1], h, s[2] / h]);
    b.transpose(r, &[0, 2, 1, 3])
}

/// Repeats each of the `kvh` heads of `x` (`[B, kvh, T, D]`) `rep` times: `[h0, h0, h1, h1, ..]`.
fn repeat_heads(b: &mut Builder, x: ValueId, s: &[usize], rep: usize) -> ValueId {
    let (bs, kvh, t, d) = (s[0], s[1], s[2], s[3]);
    let r = b.reshape(x, &[bs, kvh, 1, t, d]);
    let shape = b.ints(&[bs as i64, kvh as i64, rep as i64, t as i64, d as i64]);
    let e = b.op("Expand", &[r, shape], vec![]);
    b.reshape(e, &[bs, kvh * rep, t, d])
}

fn infer(x: &In) -> Result<Vec<Out>> {
    let n = x.n;
    let dm = dims(n, x.shape(0)?, x.shape(1)?, x.shape(2)?)?;
    let past = if x.has(4) {
        x.shape(4)?.get(2).copied().unwrap_or(0)
    } else {
        0
    };
    let (kdt, vdt) = if x.has(4) && x.has(5) {
        (x.dtype(4)?, x.dtype(5)?)
    } else {
        (x.dtype(1)?, x.dtype(2)?)
    };
    let [y, pk, pv, qk] = output_shapes(&dm, past);
    let dt = x.dtype(0)?;
    Ok(vec![(dt, y), (kdt, pk), (vdt, pv), (dt, qk)])
}

/// The geometry of Q, K and V, read from their shapes (and, for 3-D inputs, the head-count
/// attributes).
pub struct Dims {
    pub rank: usize,
    pub batch: usize,
    /// Query and key/value sequence lengths (without the past).
    pub sq: usize,
    pub skv: usize,
    /// Query and key/value head counts.
    pub qh: usize,
    pub kvh: usize,
    /// Head sizes of Q and K (equal) and of V.
    pub d: usize,
    pub dv: usize,
}

/// Reads and checks the geometry of Q, K and V (shapes `qs`, `ks`, `vs`).
pub fn dims(node: &Node, qs: &[usize], ks: &[usize], vs: &[usize]) -> Result<Dims> {
    let rank = qs.len();
    if !(rank == 3 || rank == 4) || ks.len() != rank || vs.len() != rank {
        return Err(node.err_invalid(format!(
            "Q, K and V must all be 3-D or all 4-D, got {qs:?}, {ks:?}, {vs:?}"
        )));
    }
    let (qh, kvh) = if rank == 3 {
        let attr = |name: &str| -> Result<usize> {
            let h = node
                .attr_i_opt(name)?
                .ok_or_else(|| node.err_attr(name, "is required for 3-D inputs"))?;
            usize::try_from(h)
                .ok()
                .filter(|&h| h > 0)
                .ok_or_else(|| node.err_attr(name, format!("must be positive, got {h}")))
        };
        let (qh, kvh) = (attr("q_num_heads")?, attr("kv_num_heads")?);
        if qs[2] % qh != 0 || ks[2] % kvh != 0 || vs[2] % kvh != 0 {
            return Err(node.err_invalid(format!(
                "hidden sizes {}, {}, {} are not multiples of the head counts {qh}, {kvh}",
                qs[2], ks[2], vs[2]
            )));
        }
        (qh, kvh)
    } else {
        (qs[1], ks[1])
    };
    let (sq, skv) = if rank == 3 {
        (qs[1], ks[1])
    } else {
        (qs[2], ks[2])
    };
    let d = if rank == 3 { qs[2] / qh } else { qs[3] };
    let dk = if rank == 3 { ks[2] / kvh } else { ks[3] };
    let dv = if rank == 3 { vs[2] / kvh } else { vs[3] };
    if dk != d || kvh == 0 || qh % kvh != 0 {
        return Err(node.err_invalid(format!(
            "Q has {qh} heads of size {d}, K has {kvh} of size {dk}: sizes must match and K/V \
             heads divide Q heads"
        )));
    }
    Ok(Dims {
        rank,
        batch: qs[0],
        sq,
        skv,
        qh,
        kvh,
        d,
        dv,
    })
}

/// Output shapes: `Y`, `present_key`, `present_value` and `qk_matmul_output`. `past` is the
/// sequence length of `past_key` (0 without one).
pub fn output_shapes(dm: &Dims, past: usize) -> [Vec<usize>; 4] {
    let total = dm.skv + past;
    let y = if dm.rank == 3 {
        vec![dm.batch, dm.sq, dm.qh * dm.dv]
    } else {
        vec![dm.batch, dm.qh, dm.sq, dm.dv]
    };
    [
        y,
        vec![dm.batch, dm.kvh, total, dm.d],
        vec![dm.batch, dm.kvh, total, dm.dv],
        vec![dm.batch, dm.qh, dm.sq, total],
    ]
}

pub fn attention(b: &mut Builder, node: &Node) -> Result<bool> {
    let (q, k, v) = (
        required(node, 0, "Q")?,
        required(node, 1, "K")?,
        required(node, 2, "V")?,
    );
    if node.input(6).is_some() {
        return Err(node.err_op("input 'nonpad_kv_seqlen' is not supported"));
    }
    let (qs, ks, vs) = (
        b.g.shape(q).to_vec(),
        b.g.shape(k).to_vec(),
        b.g.shape(v).to_vec(),
    );
    let dm = dims(node, &qs, &ks, &vs)?;
    let dt = b.g.dtype(q);
    let (q4, k4, v4) = if dm.rank == 3 {
        (
            heads(b, q, &qs, dm.qh),
            heads(b, k, &ks, dm.kvh),
            heads(b, v, &vs, dm.kvh),
        )
    } else {
        (q, k, v)
    };
    let Dims {
        rank,
        batch,
        sq,
        skv,
        qh,
        kvh,
        d,
        dv,
    } = dm;
    let (kc, vc, past) = match (node.input(4), node.input(5)) {
        (Some(pk), Some(pv)) => {
            let past = b.g.shape(pk).get(2).copied().unwrap_or(0);
            let axis = || vec![("axis", Attr::Int(2))];
            let kc = b.op("Concat", &[pk, k4], axis());
            let vc = b.op("Concat", &[pv, v4], axis());
            (kc, vc, past)
        }
        (None, None) => (k4, v4, 0),
        _ => return Err(node.err_invalid("past_key and past_value must be given together")),
    };
    let total = skv + past;
    if let Some(o) = node.output(1) {
        b.op_to("Identity", &[kc], vec![], &[o]);
    }
    if let Some(o) = node.output(2) {
        b.op_to("Identity", &[vc], vec![], &[o]);
    }
    let (kr, vr) = if qh != kvh {
        let rep = qh / kvh;
        (
            repeat_heads(b, kc, &[batch, kvh, total, d], rep),
            repeat_heads(b, vc, &[batch, kvh, total, dv], rep),
        )
    } else {
        (kc, vc)
    };
    let scale = match node.attr_f_opt("scale")? {
        Some(s) => s as f64,
        None => 1.0 / (d as f64).sqrt(),
    };
    let s = b.scalar(dt, scale.sqrt());
    let qsc = b.op("Mul", &[q4, s], vec![]);
    let ksc = b.op("Mul", &[kr, s], vec![]);
    let kt = b.transpose(ksc, &[0, 1, 3, 2]);
    let mut qk = b.op("MatMul", &[qsc, kt], vec![]);
    let softcap = node.attr_f("softcap", 0.0)? as f64;
    if softcap > 0.0 {
        let inv = b.scalar(dt, 1.0 / softcap);
        let x = b.op("Mul", &[qk, inv], vec![]);
        let t = b.op("Tanh", &[x], vec![]);
        let c = b.scalar(dt, softcap);
        qk = b.op("Mul", &[t, c], vec![]);
    }
    let mut bias = None;
    if let Some(m) = node.input(3) {
        let ms = b.g.shape(m).to_vec();
        let mdt = b.g.dtype(m);
        let last = ms.last().copied().unwrap_or(0);
        let mut m = m;
        if last < total {
            let mut ps = ms.clone();
            *ps.last_mut().expect("mask has a rank") = total - last;
            let n: usize = ps.iter().product();
            let fill = if mdt == DType::Bool {
                Tensor::from_i64_as(DType::Bool, ps, &vec![0; n])
            } else {
                Tensor::from_f64_as(mdt, ps, &vec![f64::NEG_INFINITY; n])
            };
            let fill = b.konst("mask_pad", fill);
            m = b.op("Concat", &[m, fill], vec![("axis", Attr::Int(-1))]);
        }
        if mdt == DType::Bool {
            let zero = b.scalar(dt, 0.0);
            let ninf = b.scalar(dt, f64::NEG_INFINITY);
            m = b.op("Where", &[m, zero, ninf], vec![]);
        }
        bias = Some(m);
    }
    if node.attr_i("is_causal", 0)? != 0 {
        let mut c = Vec::with_capacity(sq * total);
        for i in 0..sq {
            for j in 0..total {
                c.push(if j > i + past { f64::NEG_INFINITY } else { 0.0 });
            }
        }
        let c = b.konst("causal", Tensor::from_f64_as(dt, vec![sq, total], &c));
        bias = Some(match bias {
            Some(m) => b.op("Add", &[m, c], vec![]),
            None => c,
        });
    }
    let qkb = match bias {
        Some(m) => b.op("Add", &[qk, m], vec![]),
        None => qk,
    };
    let sm = b.softmax_last("Softmax", qkb, 4);
    if let Some(o) = node.output(3) {
        let src = match node.attr_i("qk_matmul_output_mode", 0)? {
            0 | 1 => qk,
            2 => qkb,
            3 => sm,
            m => return Err(node.err_attr("qk_matmul_output_mode", format!("unknown mode {m}"))),
        };
        b.op_to("Identity", &[src], vec![], &[o]);
    }
    let y = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 'Y' is missing"))?;
    if rank == 3 {
        let y4 = b.op("MatMul", &[sm, vr], vec![]);
        let t = b.transpose(y4, &[0, 2, 1, 3]);
        let shape = b.ints(&[batch as i64, sq as i64, (qh * dv) as i64]);
        b.op_to("Reshape", &[t, shape], vec![], &[y]);
    } else {
        b.op_to("MatMul", &[sm, vr], vec![], &[y]);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::Attr;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn attention_3d_with_past_is_inferred() {
        let g = graph_with(&[
            ("q", DType::F32, vec![2, 3, 16]),
            ("k", DType::F32, vec![2, 5, 8]),
            ("v", DType::F32, vec![2, 5, 12]),
            ("pk", DType::F32, vec![2, 2, 4, 4]),
            ("pv", DType::F32, vec![2, 2, 4, 6]),
        ]);
        let heads = [
            ("q_num_heads", Attr::Int(4)),
            ("kv_num_heads", Attr::Int(2)),
        ];
        let ins = [Some(0), Some(1), Some(2), None, Some(3), Some(4)];
        let shapes: Vec<Vec<usize>> = infer(&g, &node("Attention", &ins, &heads))
            .unwrap()
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        assert_eq!(
            shapes,
            vec![
                vec![2, 3, 24],
                vec![2, 2, 9, 4],
                vec![2, 2, 9, 6],
                vec![2, 4, 3, 9]
            ]
        );
    }

    fn model(q: &[i64], k: &[i64], v: &[i64], attrs: &[(&str, A)]) -> ModelBuilder {
        ModelBuilder::new(23)
            .input("q", DType::F32, q)
            .input("k", DType::F32, k)
            .input("v", DType::F32, v)
            .node("Attention", &["q", "k", "v"], &["y"], attrs)
            .output("y")
    }

    #[test]
    fn attention_4d_snapshot() {
        let b = model(&[1, 2, 3, 4], &[1, 2, 5, 4], &[1, 2, 5, 6], &[]);
        assert_eq!(
            lower(&b).dump(),
            "input q:f32[1, 2, 3, 4]\n\
             input k:f32[1, 2, 5, 4]\n\
             input v:f32[1, 2, 5, 6]\n\
             ElementWiseMultiply(q:f32[1, 2, 3, 4], static Attention_0/scalar_r4:f32[1, 1, 1, 1]) -> Attention_0/Mul:f32[1, 2, 3, 4]\n\
             ElementWiseMultiply(k:f32[1, 2, 5, 4], static Attention_0/scalar_r4_1:f32[1, 1, 1, 1]) -> Attention_0/Mul_1:f32[1, 2, 5, 4]\n\
             Transpose(Attention_0/Mul_1:f32[1, 2, 5, 4]) perm=u32[4]{0,1,3,2} -> Attention_0/Transpose:f32[1, 2, 4, 5]\n\
             MatMul(Attention_0/Mul:f32[1, 2, 3, 4], Attention_0/Transpose:f32[1, 2, 4, 5]) transpose_in0=false transpose_in1=false -> Attention_0/MatMul:f32[1, 2, 3, 5]\n\
             Softmax(Attention_0/MatMul:f32[1, 2, 3, 5]) beta=1f -> Attention_0/Softmax:f32[1, 2, 3, 5]\n\
             MatMul(Attention_0/Softmax:f32[1, 2, 3, 5], v:f32[1, 2, 5, 6]) transpose_in0=false transpose_in1=false -> y:f32[1, 2, 3, 6]\n\
             output y:f32[1, 2, 3, 6]\n"
        );
    }

    #[test]
    fn attention_3d_gqa_causal_softcap() {
        let b = model(
            &[1, 3, 16],
            &[1, 3, 8],
            &[1, 3, 8],
            &[
                ("q_num_heads", A::I(4)),
                ("kv_num_heads", A::I(2)),
                ("is_causal", A::I(1)),
                ("softcap", A::F(2.0)),
            ],
        );
        let p = lower(&b);
        let ops = p.op_types();
        assert!(ops.contains(&"Tanh") && ops.contains(&"Softmax"), "{ops:?}");
        let d = p.dump();
        assert!(
            d.contains("static Attention_0/causal_r4:f32[1, 1, 3, 3]"),
            "{d}"
        );
        assert!(d.contains("-> y:f32[1, 3, 16]"), "{d}");
    }

    #[test]
    fn attention_3d_needs_head_counts() {
        let b = model(&[1, 3, 16], &[1, 3, 8], &[1, 3, 8], &[]);
        assert!(
            lower_err(&b).contains("attribute 'q_num_heads': is required for 3-D inputs"),
            "{}",
            lower_err(&b)
        );
    }

    #[test]
    fn attention_heads_must_divide() {
        let b = model(&[1, 3, 3, 4], &[1, 2, 5, 4], &[1, 2, 5, 4], &[]);
        assert!(lower_err(&b).contains("K/V heads divide Q heads"));
    }

    #[test]
    fn attention_nonpad_kv_seqlen_unsupported() {
        let b = ModelBuilder::new(24)
            .input("q", DType::F32, &[1, 1, 2, 4])
            .input("k", DType::F32, &[1, 1, 2, 4])
            .input("v", DType::F32, &[1, 1, 2, 4])
            // Typed f32 so that the op table accepts the node and the expansion refuses it.
            .input("n", DType::F32, &[1])
            .node("Attention", &["q", "k", "v", "", "", "", "n"], &["y"], &[])
            .output("y");
        assert!(lower_err(&b).contains("'nonpad_kv_seqlen' is not supported"));
    }
}
