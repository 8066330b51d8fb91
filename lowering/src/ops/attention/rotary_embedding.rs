//! RotaryEmbedding — <https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html>, opset 23+.
//!
//! Expanded before lowering, in the input's own layout (the function body transposes a 4-D
//! input to `[B, S, H, D]` and back; this does not): a 4-D `[B, H, S, D]` input takes the
//! caches as `[B, 1, S, d/2]`, a 3-D `[B, S, H·D]` one is viewed as `[B, S, H, D]` (`num_heads`)
//! with the caches as `[B, S, 1, d/2]`. The caches are gathered by `position_ids` when given
//! (folded when constant), else they are `[B, S, d/2]`. With `d = rotary_embedding_dim` (0: the
//! head size), `x1, x2` are the halves of `x[..., :d]` (or its even and odd elements,
//! `interleaved`), `real = cos·x1 - sin·x2`, `imag = sin·x1 + cos·x2`, concatenated (or
//! interleaved through a `[..., d/2, 2]` view) and followed by `x[..., d:]` when `d < D`.
//!
//! QNN has a RotaryEmbedding op on the HTP list, but its input layout is not documented where
//! this was written, so the expansion is used.

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::{Attr, Node, ValueId};
use crate::ops::infer::{same, In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, OpDef, ShapeInput};

pub const ROTARY_EMBEDDING: OpDef = OpDef {
    op_type: "RotaryEmbedding",
    since: 23,
    layout: Layout::Framework,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: Some(rotary_embedding),
    lower: None,
    quant: Quant::Float,
};

/// The head size, the rotated width `d` and, for a 3-D input, the number of heads.
fn dims(n: &Node, xs: &[usize]) -> Result<(usize, usize, Option<usize>)> {
    let (head, heads) = match xs {
        [_, _, _, d] => (*d, None),
        [_, _, hidden] => {
            let h = n.attr_i("num_heads", 0)?;
            if h <= 0 || *hidden % h as usize != 0 {
                return Err(n.err_attr(
                    "num_heads",
                    format!("{h} does not divide the hidden size {hidden} of a 3-D input"),
                ));
            }
            (*hidden / h as usize, Some(h as usize))
        }
        _ => return Err(n.err_invalid(format!("input {xs:?} is not 3-D or 4-D"))),
    };
    let d = match n.attr_i("rotary_embedding_dim", 0)? {
        0 => head,
        d if d > 0 && d as usize <= head && d % 2 == 0 => d as usize,
        d => {
            return Err(n.err_attr(
                "rotary_embedding_dim",
                format!("{d} is not an even size up to the head size {head}"),
            ))
        }
    };
    Ok((head, d, heads))
}

/// The table lists integer dtypes for `position_ids`; the data must be float.
fn infer(x: &In) -> Result<Vec<Out>> {
    dims(x.n, x.shape(0)?)?;
    if !x.dtype(0)?.is_float() {
        return Err(x
            .n
            .err_dtype(format!("input 'X' has dtype {}", x.dtype(0)?)));
    }
    same(x)
}

/// `x[..., start..end:step]` along the last axis.
fn last_axis(b: &mut Builder, x: ValueId, start: usize, end: usize, step: usize) -> ValueId {
    let s = b.ints(&[start as i64]);
    let e = b.ints(&[end as i64]);
    let a = b.ints(&[-1]);
    let st = b.ints(&[step as i64]);
    b.op("Slice", &[x, s, e, a, st], vec![])
}

pub fn rotary_embedding(b: &mut Builder, node: &Node) -> Result<bool> {
    let input = |i: usize, what: &str| {
        node.input(i)
            .ok_or_else(|| node.err_invalid(format!("input '{what}' is missing")))
    };
    let x0 = input(0, "X")?;
    let (cos, sin) = (input(1, "cos_cache")?, input(2, "sin_cache")?);
    let y = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 'Y' is missing"))?;
    let xs = b.g.shape(x0).to_vec();
    let (head, d, heads) = dims(node, &xs)?;
    let interleaved = node.attr_i("interleaved", 0)? != 0;
    let (batch, seq) = if heads.is_some() {
        (xs[0], xs[1])
    } else {
        (xs[0], xs[2])
    };
    let x4 = match heads {
        Some(h) => vec![batch, seq, h, head],
        None => xs.clone(),
    };
    let x = match heads {
        Some(_) => b.reshape(x0, &x4),
        None => x0,
    };
    let cache_shape = if heads.is_some() {
        [batch, seq, 1, d / 2]
    } else {
        [batch, 1, seq, d / 2]
    };
    let mut caches = [cos, sin];
    for c in &mut caches {
        let cs = b.g.shape(*c).to_vec();
        let n = match node.input(3) {
            Some(p) => b.g.shape(p).iter().product::<usize>() * cs[1..].iter().product::<usize>(),
            None => cs.iter().product(),
        };
        if n != batch * seq * d / 2 || cs.last() != Some(&(d / 2)) {
            return Err(node.err_invalid(format!(
                "the caches {cs:?} do not give [{batch}, {seq}, {}]",
                d / 2
            )));
        }
        if let Some(p) = node.input(3) {
            *c = b.op("Gather", &[*c, p], vec![("axis", Attr::Int(0))]);
        }
        *c = b.reshape(*c, &cache_shape);
    }
    let [cos, sin] = caches;
    let rot = if d == head {
        x
    } else {
        last_axis(b, x, 0, d, 1)
    };
    let (x1, x2) = if interleaved {
        (last_axis(b, rot, 0, d, 2), last_axis(b, rot, 1, d, 2))
    } else {
        (
            last_axis(b, rot, 0, d / 2, 1),
            last_axis(b, rot, d / 2, d, 1),
        )
    };
    let c1 = b.op("Mul", &[cos, x1], vec![]);
    let s2 = b.op("Mul", &[sin, x2], vec![]);
    let real = b.op("Sub", &[c1, s2], vec![]);
    let s1 = b.op("Mul", &[sin, x1], vec![]);
    let c2 = b.op("Mul", &[cos, x2], vec![]);
    let imag = b.op("Add", &[s1, c2], vec![]);
    let mut rotated_shape = x4.clone();
    *rotated_shape.last_mut().expect("rank 4") = d;
    let rotated = if interleaved {
        let mut pair = rotated_shape.clone();
        *pair.last_mut().expect("rank 4") = d / 2;
        pair.push(1);
        let re = b.reshape(real, &pair);
        let im = b.reshape(imag, &pair);
        let both = b.op("Concat", &[re, im], vec![("axis", Attr::Int(-1))]);
        b.reshape(both, &rotated_shape)
    } else {
        b.op("Concat", &[real, imag], vec![("axis", Attr::Int(-1))])
    };
    let out = if d == head {
        rotated
    } else {
        let pass = last_axis(b, x, d, head, 1);
        b.op("Concat", &[rotated, pass], vec![("axis", Attr::Int(-1))])
    };
    if heads.is_some() {
        let s: Vec<i64> = xs.iter().map(|&v| v as i64).collect();
        let s = b.ints(&s);
        b.op_to("Reshape", &[out, s], vec![], &[y]);
    } else {
        b.op_to("Identity", &[out], vec![], &[y]);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{rand_f32, ModelBuilder, A};

    fn model(x: &[i64], attrs: &[(&str, A)]) -> ModelBuilder {
        ModelBuilder::new(23)
            .input("x", DType::F32, x)
            .init("cos", Tensor::from_f32(vec![16, 4], &rand_f32(1, 64)))
            .init("sin", Tensor::from_f32(vec![16, 4], &rand_f32(2, 64)))
            .init("pos", Tensor::from_i64(vec![1, 3], &[0, 5, 9]))
            .node(
                "RotaryEmbedding",
                &["x", "cos", "sin", "pos"],
                &["y"],
                attrs,
            )
            .output("y")
    }

    #[test]
    fn rotary_4d_needs_no_transpose() {
        let p = lower(&model(&[1, 2, 3, 8], &[]));
        let t = p.op_types();
        assert!(!t.contains(&"Transpose"), "{t:?}");
        assert_eq!(
            t.iter().filter(|o| **o == "ElementWiseMultiply").count(),
            4,
            "{t:?}"
        );
        // The caches are gathered on the host: [1, 1, 3, 4] constants.
        assert!(p.dump().contains("static"), "{}", p.dump());
    }

    #[test]
    fn partial_interleaved_3d() {
        let d = lower(&model(
            &[1, 3, 24],
            &[
                ("num_heads", A::I(2)),
                ("rotary_embedding_dim", A::I(8)),
                ("interleaved", A::I(1)),
            ],
        ))
        .dump();
        assert!(
            d.contains("ranges=i32[4, 3]{0,1,1,0,3,1,0,2,1,0,8,2}"),
            "even elements: {d}"
        );
        assert!(d.contains("-> y:f32[1, 3, 24]"), "{d}");
    }

    #[test]
    fn bad_num_heads_unsupported() {
        let e = lower_err(&model(&[1, 3, 24], &[("num_heads", A::I(5))]));
        assert!(
            e.contains("attribute 'num_heads': 5 does not divide"),
            "{e}"
        );
    }

    #[test]
    fn rotary_is_inferred() {
        let g = graph_with(&[
            ("x", DType::F16, vec![1, 2, 3, 8]),
            ("c", DType::F16, vec![16, 4]),
        ]);
        let n = node("RotaryEmbedding", &[Some(0), Some(1), Some(1)], &[]);
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F16, vec![1, 2, 3, 8])]);
        let n = node(
            "RotaryEmbedding",
            &[Some(0), Some(1), Some(1)],
            &[("rotary_embedding_dim", crate::ir::Attr::Int(3))],
        );
        assert!(infer(&g, &n).is_err());
    }
}
