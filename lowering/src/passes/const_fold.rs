//! Shape inference plus constant folding, in one topological sweep. Every node is inferred by
//! its registry entry's `infer` ([`crate::ops::OpDef`]).
//!
//! torch exports shape arithmetic (Shape → Gather → Unsqueeze → Concat → Reshape, Range,
//! ConstantOfShape, ...) that QNN cannot run; with static input shapes all of it folds to
//! constants here. A node is folded when its inputs are constant (or, for Shape/Size, when its
//! input's shape is known) and its output is small enough to evaluate on the host.

use crate::dtype::DType;
use crate::error::{LowerError, Result};
use crate::ir::attr::norm_axis;
use crate::ir::shape::broadcast;
use crate::ir::tensor::checked_numel;
use crate::ir::tensor::{broadcast_map, map_indices, numel, strides, Tensor};
use crate::ir::{Graph, Node};
use crate::ops::infer::{In, Out};
use crate::ops::reduce::reduce::reduce_params;
use crate::ops::shape::dropout::dropout_may_train;
use crate::ops::shape::slice::slice_params;
use crate::ops::shape::transpose::transpose_perm;

/// Outputs larger than this are left to the device rather than evaluated on the host.
const FOLD_LIMIT: usize = 1 << 24;

/// Infers every node's outputs and folds constant nodes. Returns the per-node errors; the
/// outputs of a failing node (and everything downstream) are left `known == false`.
pub fn run(g: &mut Graph) -> Vec<LowerError> {
    let mut errors = Vec::new();
    let mut dead = vec![false; g.nodes.len()];
    for (idx, is_dead) in dead.iter_mut().enumerate() {
        let node = &g.nodes[idx];
        if node.inputs.iter().flatten().any(|&v| !g.values[v].known) {
            mark_unknown(g, idx);
            continue;
        }
        let outs = match infer_node(g, node) {
            Ok(o) => o,
            Err(e) => {
                errors.push(e);
                mark_unknown(g, idx);
                continue;
            }
        };
        if outs.len() < node.outputs.len() {
            errors.push(node.err_invalid(format!(
                "has {} outputs but the op produces {}",
                node.outputs.len(),
                outs.len()
            )));
            mark_unknown(g, idx);
            continue;
        }
        for (slot, (dt, shape)) in node.outputs.clone().iter().zip(outs.iter()) {
            if let Some(v) = slot {
                let val = &mut g.values[*v];
                val.dtype = *dt;
                val.shape = shape.clone();
                val.known = true;
                val.konst = None;
            }
        }
        let node = &g.nodes[idx];
        match fold(g, node, &outs) {
            Ok(Some(ts)) => {
                for (slot, t) in node.outputs.clone().iter().zip(ts) {
                    if let Some(v) = slot {
                        g.set_const(*v, t);
                    }
                }
                *is_dead = true;
            }
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    let mut i = 0;
    g.nodes.retain(|_| {
        i += 1;
        !dead[i - 1]
    });
    errors
}

/// The outputs of `n`, from its registry entry's `infer`.
pub fn infer_node(g: &Graph, n: &Node) -> Result<Vec<Out>> {
    if !n.domain.is_empty() {
        return Err(n.err_op(format!("domain '{}' is not supported", n.domain)));
    }
    let def =
        crate::ops::def(&n.op_type).ok_or_else(|| n.err_op("no shape inference for this op"))?;
    let outs = (def.infer)(&In { g, n })?;
    for (dt, s) in &outs {
        if checked_numel(s, *dt).is_none() {
            return Err(n.err_invalid(format!(
                "output shape {s:?} of {dt} exceeds the 4 GiB tensor limit"
            )));
        }
    }
    Ok(outs)
}

fn mark_unknown(g: &mut Graph, idx: usize) {
    for v in g.nodes[idx].outputs.clone().into_iter().flatten() {
        g.values[v].known = false;
        g.values[v].konst = None;
    }
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

/// Evaluates `node` on the host if possible. `outs` are its inferred outputs.
#[allow(clippy::needless_range_loop)]
pub fn fold(g: &Graph, node: &Node, outs: &[Out]) -> Result<Option<Vec<Tensor>>> {
    let op = node.op_type.as_str();
    let x = In { g, n: node };
    if outs.iter().any(|(_, s)| numel(s) > FOLD_LIMIT) {
        return Ok(None);
    }
    let (dt0, shape0) = outs[0].clone();
    match op {
        "Shape" => {
            let s = x.shape(0)?;
            let r = s.len() as i64;
            let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) } as usize;
            let (a, b) = (
                clamp(node.attr_i("start", 0)?),
                clamp(node.attr_i("end", r)?),
            );
            let v: Vec<i64> = s[a..b.max(a)].iter().map(|&d| d as i64).collect();
            return Ok(Some(vec![Tensor::from_i64(vec![v.len()], &v)]));
        }
        "Size" => {
            return Ok(Some(vec![Tensor::from_i64(
                vec![],
                &[numel(x.shape(0)?) as i64],
            )]))
        }
        "ConstantOfShape" => {
            let v = node.attr_t_opt("value")?.map_or(0.0, |t| {
                if t.numel() > 0 {
                    t.get_f64(0)
                } else {
                    0.0
                }
            });
            return Ok(Some(vec![Tensor::from_f64_as(
                dt0,
                shape0.clone(),
                &vec![v; numel(&shape0)],
            )]));
        }
        _ => {}
    }
    let mut ins: Vec<&Tensor> = Vec::new();
    for v in node.inputs.iter().flatten() {
        match g.konst(*v) {
            Some(t) => ins.push(t),
            None => return Ok(None),
        }
    }
    if ins.is_empty() {
        return Ok(None);
    }
    let t0 = ins[0];
    let one = |t: Tensor| Ok(Some(vec![t]));
    match op {
        "Identity" | "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => one(t0.with_shape(shape0)),
        "Dropout" if !dropout_may_train(g, node) => {
            let mut v = vec![t0.clone()];
            if outs.len() > 1 {
                v.push(Tensor::from_i64_as(
                    DType::Bool,
                    shape0.clone(),
                    &vec![1; numel(&shape0)],
                ));
            }
            Ok(Some(v))
        }
        "Cast" | "CastLike" => one(t0.cast(dt0)),
        "Range" => {
            let (s, d) = (t0.get_f64(0), ins[2].get_f64(0));
            let v: Vec<f64> = (0..shape0[0]).map(|i| s + d * i as f64).collect();
            one(Tensor::from_f64_as(dt0, shape0, &v))
        }
        "Transpose" => one(t0.transpose(&transpose_perm(node, t0.shape.len())?)),
        "Expand" => one(t0.broadcast_to(&shape0)),
        "Tile" => {
            let st = strides(&t0.shape);
            let map = map_indices(&shape0, |idx| {
                idx.iter()
                    .enumerate()
                    .map(|(k, &i)| (i % t0.shape[k]) * st[k])
                    .sum()
            });
            one(t0.gather_flat(shape0, &map))
        }
        "Concat" => {
            let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, shape0.len())?;
            let mut srcs = Vec::new();
            for (ti, t) in ins.iter().enumerate() {
                for k in 0..t.shape[axis] {
                    srcs.push((ti, k));
                }
            }
            let sts: Vec<Vec<usize>> = ins.iter().map(|t| strides(&t.shape)).collect();
            let mut parts: Vec<(usize, usize)> = Vec::new();
            let map = map_indices(&shape0, |idx| {
                let (ti, k) = srcs[idx[axis]];
                let mut f = 0;
                for (d, &i) in idx.iter().enumerate() {
                    f += if d == axis { k } else { i } * sts[ti][d];
                }
                parts.push((ti, f));
                0
            });
            drop(map);
            let mut bytes = Vec::with_capacity(numel(&shape0) * dt0.size());
            let es = dt0.size();
            for (ti, f) in parts {
                bytes.extend_from_slice(&ins[ti].bytes()[f * es..(f + 1) * es]);
            }
            Tensor::from_bytes(dt0, shape0, bytes)
                .map(|t| Some(vec![t]))
                .map_err(|e| node.err_invalid(e))
        }
        "Gather" => {
            let axis = norm_axis(node, "axis", node.attr_i("axis", 0)?, t0.shape.len())?;
            let idx_t = ins[1];
            let d = t0.shape[axis] as i64;
            let mut idxs = Vec::with_capacity(idx_t.numel());
            for i in idx_t.to_i64() {
                let j = if i < 0 { i + d } else { i };
                if j < 0 || j >= d {
                    return Err(
                        node.err_invalid(format!("gather index {i} is out of range for dim {d}"))
                    );
                }
                idxs.push(j as usize);
            }
            let st = strides(&t0.shape);
            let ir = idx_t.shape.len();
            let map = map_indices(&shape0, |o| {
                let ist = strides(&idx_t.shape);
                let flat_idx: usize = o[axis..axis + ir]
                    .iter()
                    .zip(&ist)
                    .map(|(a, b)| a * b)
                    .sum();
                let mut f = idxs[flat_idx] * st[axis];
                for k in 0..axis {
                    f += o[k] * st[k];
                }
                for k in axis + 1..t0.shape.len() {
                    f += o[k - 1 + ir] * st[k];
                }
                f
            });
            one(t0.gather_flat(shape0, &map))
        }
        "Slice" => {
            let params = slice_params(g, node)?;
            let mut start = vec![0i64; t0.shape.len()];
            let mut step = vec![1i64; t0.shape.len()];
            for (ax, s, _, st) in params {
                start[ax] = s;
                step[ax] = st;
            }
            let st = strides(&t0.shape);
            let map = map_indices(&shape0, |o| {
                o.iter()
                    .enumerate()
                    .map(|(k, &i)| ((start[k] + i as i64 * step[k]) as usize) * st[k])
                    .sum()
            });
            one(t0.gather_flat(shape0, &map))
        }
        "Where" => {
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
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or" | "Xor" => {
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
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "Max" | "Min" | "Sum" => {
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
            one(acc)
        }
        "Neg" | "Abs" | "Sqrt" | "Exp" | "Log" | "Reciprocal" | "Floor" | "Ceil" | "Round"
        | "Sign" | "Relu" | "Sigmoid" | "Tanh" | "Sin" | "Cos" | "Not" => {
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
        "ReduceProd" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceMean" => {
            let (axes, _) = reduce_params(g, node)?;
            let axes = axes.unwrap_or_default();
            let r = t0.shape.len();
            let red_shape: Vec<usize> = (0..r)
                .map(|i| if axes.contains(&i) { 1 } else { t0.shape[i] })
                .collect();
            let out_st = strides(&red_shape);
            let n_out = numel(&red_shape);
            let init = match op {
                "ReduceProd" => 1.0,
                "ReduceMax" => f64::NEG_INFINITY,
                "ReduceMin" => f64::INFINITY,
                _ => 0.0,
            };
            let mut acc = vec![init; n_out];
            let mut cnt = vec![0usize; n_out];
            let vals = t0.to_f64();
            let map = map_indices(&t0.shape, |idx| {
                idx.iter()
                    .enumerate()
                    .map(|(k, &i)| if axes.contains(&k) { 0 } else { i * out_st[k] })
                    .sum()
            });
            for (k, &o) in map.iter().enumerate() {
                let v = vals[k];
                acc[o] = match op {
                    "ReduceProd" => acc[o] * v,
                    "ReduceMax" => acc[o].max(v),
                    "ReduceMin" => acc[o].min(v),
                    _ => acc[o] + v,
                };
                cnt[o] += 1;
            }
            if op == "ReduceMean" {
                for (a, c) in acc.iter_mut().zip(&cnt) {
                    *a /= (*c).max(1) as f64;
                }
            }
            one(Tensor::from_f64_as(dt0, shape0, &acc))
        }
        "DequantizeLinear" => {
            let scale = ins[1];
            let zp = ins.get(2).copied();
            let axis = norm_axis(node, "axis", node.attr_i("axis", 1)?, t0.shape.len().max(1))?;
            let st = strides(&t0.shape);
            let per_axis = scale.numel() > 1;
            let v: Vec<f64> = (0..t0.numel())
                .map(|k| {
                    let c = if per_axis {
                        (k / st[axis]) % t0.shape[axis]
                    } else {
                        0
                    };
                    let z = zp.map_or(0.0, |z| z.get_f64(c));
                    (t0.get_f64(k) - z) * scale.get_f64(c)
                })
                .collect();
            one(Tensor::from_f64_as(dt0, shape0, &v))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ModelBuilder, A};

    fn fold_model(b: ModelBuilder) -> Graph {
        let mut g = b.load().graph;
        let errs = run(&mut g);
        assert!(errs.is_empty(), "{errs:?}");
        crate::passes::dce::run(&mut g);
        g
    }

    #[test]
    fn torch_shape_chain_folds_to_static_reshape() {
        // x.view(x.size(0), -1) as torch exports it.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .node("Shape", &["x"], &["s"], &[])
            .node(
                "Constant",
                &[],
                &["zero"],
                &[("value", A::T(Tensor::from_i64(vec![], &[0])))],
            )
            .node("Gather", &["s", "zero"], &["n"], &[("axis", A::I(0))])
            .node(
                "Constant",
                &[],
                &["ax"],
                &[("value", A::T(Tensor::from_i64(vec![1], &[0])))],
            )
            .node("Unsqueeze", &["n", "ax"], &["n1"], &[])
            .node(
                "Constant",
                &[],
                &["m1"],
                &[("value", A::T(Tensor::from_i64(vec![1], &[-1])))],
            )
            .node("Concat", &["n1", "m1"], &["shape"], &[("axis", A::I(0))])
            .node("Reshape", &["x", "shape"], &["y"], &[])
            .output("y");
        let g = fold_model(b);
        assert_eq!(g.dump(), "Reshape(x, shape) -> y:f32[2, 12]\noutputs: y\n");
        let shape = g.name_map()["shape"];
        assert_eq!(g.konst(shape).unwrap().to_i64(), vec![2, -1]);
    }

    #[test]
    fn range_constant_of_shape_cast_slice_fold() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 6])
            .node("Shape", &["x"], &["s"], &[])
            .init("st", Tensor::from_i64(vec![1], &[1]))
            .init("en", Tensor::from_i64(vec![1], &[2]))
            .node("Slice", &["s", "st", "en"], &["len1"], &[])
            .node("Squeeze", &["len1"], &["len"], &[])
            .init("zero", Tensor::from_i64(vec![], &[0]))
            .init("one", Tensor::from_i64(vec![], &[1]))
            .node("Range", &["zero", "len", "one"], &["r"], &[])
            .node("Cast", &["r"], &["rf"], &[("to", A::I(1))])
            .node(
                "ConstantOfShape",
                &["s"],
                &["ones"],
                &[("value", A::T(Tensor::from_f32(vec![1], &[1.0])))],
            )
            .node("Mul", &["ones", "rf"], &["w"], &[])
            .node("Add", &["x", "w"], &["y"], &[])
            .output("y");
        let g = fold_model(b);
        assert_eq!(g.nodes.len(), 1);
        let w = g.name_map()["w"];
        assert_eq!(
            g.konst(w).unwrap().to_f64(),
            vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        );
        assert_eq!(g.konst(w).unwrap().shape, vec![1, 6]);
    }

    #[test]
    fn transpose_and_where_fold() {
        let t = Tensor::from_f32(vec![2, 3], &[1., 2., 3., 4., 5., 6.]);
        let tt = t.transpose(&[1, 0]);
        assert_eq!(tt.to_f64(), vec![1., 4., 2., 5., 3., 6.]);
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[3])
            .init("c", Tensor::from_i64_as(DType::Bool, vec![3], &[1, 0, 1]))
            .init("a", Tensor::from_f32(vec![3], &[1., 2., 3.]))
            .init("b", Tensor::from_f32(vec![1], &[9.]))
            .node("Where", &["c", "a", "b"], &["w"], &[])
            .node("Add", &["x", "w"], &["y"], &[])
            .output("y");
        let g = fold_model(b);
        assert_eq!(
            g.konst(g.name_map()["w"]).unwrap().to_f64(),
            vec![1., 9., 3.]
        );
    }

    #[test]
    fn dynamic_reshape_shape_is_reported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .input("s", DType::I64, &[2])
            .node("Reshape", &["x", "s"], &["y"], &[])
            .node("Relu", &["y"], &["z"], &[])
            .output("z");
        let mut g = b.load().graph;
        let errs = run(&mut g);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0]
                .to_string()
                .contains("input 'shape' must be a constant"),
            "{}",
            errs[0]
        );
        assert!(!g.values[g.name_map()["z"]].known);
    }

    #[test]
    fn unknown_op_is_unsupported() {
        let mut g = Graph::default();
        g.opsets.insert(String::new(), 17);
        g.add_typed("x", DType::F32, vec![1]);
        let mut n = Node::new("n", "FancyOp");
        n.inputs = vec![Some(0)];
        let e = infer_node(&g, &n).unwrap_err().to_string();
        assert_eq!(e, "Node \"n\" (FancyOp): no shape inference for this op");
    }

    #[test]
    fn integer_div_and_mod_semantics() {
        assert_eq!(binary_i("Div", -7, 2), Some(-3));
        assert_eq!(binary_i("Mod", -7, 3), Some(2));
        assert_eq!(binary_i("Mod", 7, -3), Some(-2));
        assert_eq!(binary_i("Div", 1, 0), None);
    }
}
