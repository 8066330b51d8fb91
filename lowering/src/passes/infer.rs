//! Static shape and dtype inference for every op we lower or fold.
//!
//! `infer_node` computes output dtypes and shapes from input shapes and from constant inputs
//! that define shapes (Reshape's `shape`, Slice's `starts`, ...). Dynamic shapes are rejected
//! here: a shape-defining input that is not constant after folding is an error on that node.
//! Conv-family nodes marked `nhwc` by the layout pass are inferred in NCHW and permuted back.

use crate::dtype::{DType, OnnxCode};
use crate::error::Result;
use crate::ir::attr::{norm_axes, norm_axis, to_usizes};
use crate::ir::shape::broadcast;
use crate::ir::tensor::{checked_numel, Tensor};
use crate::ir::{Graph, Node};

pub type Out = (DType, Vec<usize>);

pub struct In<'a> {
    pub g: &'a Graph,
    pub n: &'a Node,
}

impl<'a> In<'a> {
    pub fn has(&self, i: usize) -> bool {
        self.n.input(i).is_some()
    }

    pub fn shape(&self, i: usize) -> Result<&'a [usize]> {
        let v = self
            .n
            .input(i)
            .ok_or_else(|| self.n.err_invalid(format!("input {i} is missing")))?;
        Ok(self.g.shape(v))
    }

    pub fn dtype(&self, i: usize) -> Result<DType> {
        let v = self
            .n
            .input(i)
            .ok_or_else(|| self.n.err_invalid(format!("input {i} is missing")))?;
        Ok(self.g.dtype(v))
    }

    pub fn konst(&self, i: usize) -> Option<&'a Tensor> {
        self.n.input(i).and_then(|v| self.g.konst(v))
    }

    /// A shape-defining input that must be constant; `what` names it in the error.
    pub fn const_ints(&self, i: usize, what: &str) -> Result<Vec<i64>> {
        match self.konst(i) {
            Some(t) => Ok(t.to_i64()),
            None if self.has(i) => Err(self.n.err_op(format!(
                "input '{what}' must be a constant after folding (dynamic shapes are not supported)"
            ))),
            None => Err(self.n.err_invalid(format!("input '{what}' is missing"))),
        }
    }

    pub fn opt_const_ints(&self, i: usize, what: &str) -> Result<Option<Vec<i64>>> {
        if !self.has(i) {
            return Ok(None);
        }
        self.const_ints(i, what).map(Some)
    }

    pub fn rank(&self, i: usize) -> Result<usize> {
        Ok(self.shape(i)?.len())
    }
}

/// ONNX conv/pool output size. `ceil` is the pools' `ceil_mode`.
pub fn pool_out(
    n: &Node,
    inp: usize,
    k: usize,
    s: usize,
    d: usize,
    (p0, p1): (usize, usize),
    ceil: bool,
) -> Result<usize> {
    let eff = d * (k.max(1) - 1) + 1;
    let padded = inp + p0 + p1;
    if padded < eff || s == 0 {
        return Err(n.err_invalid(format!(
            "kernel {k} (dilation {d}) does not fit input {inp} with pads {p0}+{p1}"
        )));
    }
    let num = padded - eff;
    let mut o = if ceil { num.div_ceil(s) } else { num / s } + 1;
    // ONNX/PyTorch: the last window must start inside the input or left padding.
    if ceil && (o - 1) * s >= inp + p0 {
        o -= 1;
    }
    Ok(o)
}

/// Spatial attributes shared by Conv, ConvTranspose and the pools, resolved for `spatial` dims.
#[derive(Clone, Debug, PartialEq)]
pub struct Spatial {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// `[begin_0, begin_1, ..., end_0, end_1, ...]` like ONNX `pads`.
    pub pads: Vec<usize>,
}

impl Spatial {
    /// `in_sp` are the input spatial dims; `kernel` falls back to the weight's spatial dims.
    pub fn parse(
        n: &Node,
        in_sp: &[usize],
        kernel: Option<&[usize]>,
        transpose_out: Option<&[usize]>,
    ) -> Result<Spatial> {
        let r = in_sp.len();
        let kernel = match n.attr_ints_opt("kernel_shape")? {
            Some(k) => to_usizes(n, "kernel_shape", &k)?,
            None => kernel
                .map(<[usize]>::to_vec)
                .ok_or_else(|| n.err_invalid("attribute 'kernel_shape' is missing"))?,
        };
        let strides = to_usizes(n, "strides", &n.attr_ints("strides", &vec![1; r])?)?;
        let dilations = to_usizes(n, "dilations", &n.attr_ints("dilations", &vec![1; r])?)?;
        if kernel.len() != r || strides.len() != r || dilations.len() != r {
            return Err(n.err_invalid(format!(
                "kernel_shape/strides/dilations must have {r} values for {r} spatial dims"
            )));
        }
        if strides.contains(&0) || dilations.contains(&0) {
            return Err(n.err_invalid("strides and dilations must be positive"));
        }
        let auto_pad = n.attr_s("auto_pad", "NOTSET")?;
        let pads = match auto_pad {
            "NOTSET" => {
                let p = to_usizes(n, "pads", &n.attr_ints("pads", &vec![0; 2 * r])?)?;
                if p.len() != 2 * r {
                    return Err(
                        n.err_invalid(format!("attribute 'pads' must have {} values", 2 * r))
                    );
                }
                p
            }
            "VALID" => vec![0; 2 * r],
            "SAME_UPPER" | "SAME_LOWER" => {
                let mut p = vec![0; 2 * r];
                for i in 0..r {
                    let total = if let Some(out) = transpose_out {
                        let _ = out;
                        // ConvTranspose SAME: output = input * stride.
                        (strides[i] * in_sp[i].saturating_sub(1)
                            + dilations[i] * kernel[i].saturating_sub(1)
                            + 1)
                        .saturating_sub(in_sp[i] * strides[i])
                    } else {
                        let out = in_sp[i].div_ceil(strides[i]);
                        (out.saturating_sub(1) * strides[i]
                            + dilations[i] * kernel[i].saturating_sub(1)
                            + 1)
                        .saturating_sub(in_sp[i])
                    };
                    let small = total / 2;
                    let big = total - small;
                    if auto_pad == "SAME_UPPER" {
                        p[i] = small;
                        p[i + r] = big;
                    } else {
                        p[i] = big;
                        p[i + r] = small;
                    }
                }
                p
            }
            other => return Err(n.err_attr("auto_pad", format!("unknown value '{other}'"))),
        };
        Ok(Spatial {
            kernel,
            strides,
            dilations,
            pads,
        })
    }
}

fn nchw_view(n: &Node, s: &[usize]) -> Vec<usize> {
    if n.nhwc && s.len() >= 3 {
        let mut v = vec![s[0], s[s.len() - 1]];
        v.extend_from_slice(&s[1..s.len() - 1]);
        v
    } else {
        s.to_vec()
    }
}

fn from_nchw(n: &Node, s: Vec<usize>) -> Vec<usize> {
    if n.nhwc && s.len() >= 3 {
        let mut v = vec![s[0]];
        v.extend_from_slice(&s[2..]);
        v.push(s[1]);
        v
    } else {
        s
    }
}

// Spatial loops index the input dims and the parsed attributes in parallel.
#[allow(clippy::needless_range_loop)]
fn conv_like(x: &In, n: &Node) -> Result<Vec<Out>> {
    let dt = x.dtype(0)?;
    let xs = nchw_view(n, x.shape(0)?);
    if xs.len() < 3 {
        return Err(n.err_invalid(format!("input must have rank >= 3, got {xs:?}")));
    }
    let sp_in = &xs[2..];
    let out = match n.op_type.as_str() {
        "Conv" => {
            let ws = x.shape(1)?;
            if ws.len() != xs.len() {
                return Err(n.err_invalid(format!(
                    "weight rank {} != input rank {}",
                    ws.len(),
                    xs.len()
                )));
            }
            // The layout pass stores 2-D conv weights as OIHW still; only data is NHWC.
            let sp = Spatial::parse(n, sp_in, Some(&ws[2..]), None)?;
            let group = n.attr_i("group", 1)?;
            if group <= 0 || xs[1] != ws[1] * group as usize {
                return Err(n.err_invalid(format!(
                    "input channels {} != weight channels {} x group {group}",
                    xs[1], ws[1]
                )));
            }
            let mut o = vec![xs[0], ws[0]];
            for i in 0..sp_in.len() {
                let r = sp_in.len();
                o.push(pool_out(
                    n,
                    sp_in[i],
                    sp.kernel[i],
                    sp.strides[i],
                    sp.dilations[i],
                    (sp.pads[i], sp.pads[i + r]),
                    false,
                )?);
            }
            o
        }
        "ConvTranspose" => {
            let ws = x.shape(1)?;
            let group = n.attr_i("group", 1)?.max(1) as usize;
            if ws.len() != xs.len() || ws[0] != xs[1] {
                return Err(n.err_invalid(format!("weight {ws:?} does not match input {xs:?}")));
            }
            let r = sp_in.len();
            let sp = Spatial::parse(n, sp_in, Some(&ws[2..]), Some(&[]))?;
            let out_pad = to_usizes(
                n,
                "output_padding",
                &n.attr_ints("output_padding", &vec![0; r])?,
            )?;
            let mut o = vec![xs[0], ws[1] * group];
            if let Some(os) = n.attr_ints_opt("output_shape")? {
                let os = to_usizes(n, "output_shape", &os)?;
                o.extend_from_slice(&os[os.len().saturating_sub(r)..]);
            } else {
                for i in 0..r {
                    let full = sp.strides[i] * sp_in[i].saturating_sub(1)
                        + out_pad.get(i).copied().unwrap_or(0)
                        + sp.kernel[i].saturating_sub(1) * sp.dilations[i]
                        + 1;
                    o.push(
                        full.checked_sub(sp.pads[i] + sp.pads[i + r])
                            .ok_or_else(|| n.err_invalid("pads exceed output size"))?,
                    );
                }
            }
            o
        }
        "MaxPool" | "AveragePool" | "LpPool" => {
            let sp = Spatial::parse(n, sp_in, None, None)?;
            let ceil = n.attr_i("ceil_mode", 0)? != 0;
            let mut o = vec![xs[0], xs[1]];
            let r = sp_in.len();
            for i in 0..r {
                o.push(pool_out(
                    n,
                    sp_in[i],
                    sp.kernel[i],
                    sp.strides[i],
                    sp.dilations[i],
                    (sp.pads[i], sp.pads[i + r]),
                    ceil,
                )?);
            }
            o
        }
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let mut o = xs.clone();
            for d in &mut o[2..] {
                *d = 1;
            }
            o
        }
        "BatchNormalization" | "InstanceNormalization" | "GroupNormalization" | "LRN" => xs.clone(),
        "Resize" | "Upsample" => resize_shape(x, n, &xs)?,
        "DepthToSpace" | "SpaceToDepth" => {
            let b = n.attr_i("blocksize", 0)?;
            if b <= 0 || xs.len() != 4 {
                return Err(n.err_invalid("needs a 4-D input and a positive blocksize"));
            }
            let b = b as usize;
            if n.op_type == "DepthToSpace" {
                if xs[1] % (b * b) != 0 {
                    return Err(n.err_invalid("channels are not divisible by blocksize^2"));
                }
                vec![xs[0], xs[1] / (b * b), xs[2] * b, xs[3] * b]
            } else {
                if xs[2] % b != 0 || xs[3] % b != 0 {
                    return Err(n.err_invalid("spatial dims are not divisible by blocksize"));
                }
                vec![xs[0], xs[1] * b * b, xs[2] / b, xs[3] / b]
            }
        }
        _ => unreachable!("conv_like called for {}", n.op_type),
    };
    let mut outs = vec![(dt, from_nchw(n, out))];
    if n.op_type == "MaxPool" && n.outputs.len() > 1 {
        let s = outs[0].1.clone();
        outs.push((DType::I64, s));
    }
    Ok(outs)
}

fn resize_shape(x: &In, n: &Node, xs: &[usize]) -> Result<Vec<usize>> {
    let (scales_i, sizes_i) = if n.op_type == "Upsample" || x.g.opset() < 11 {
        (1, usize::MAX)
    } else {
        (2, 3)
    };
    if sizes_i != usize::MAX && x.has(sizes_i) {
        let s = x.const_ints(sizes_i, "sizes")?;
        if !s.is_empty() {
            if s.len() != xs.len() {
                return Err(n.err_invalid("'sizes' must have one value per input dim"));
            }
            return to_usizes(n, "sizes", &s);
        }
    }
    let scales = match x.konst(scales_i) {
        Some(t) if t.numel() > 0 => t.to_f64(),
        None if x.has(scales_i) => {
            return Err(n.err_op("input 'scales' must be a constant after folding"))
        }
        _ => match n.attr_floats_opt("scales")? {
            Some(s) => s.iter().map(|&v| v as f64).collect(),
            None => return Err(n.err_invalid("neither 'scales' nor 'sizes' is given")),
        },
    };
    if scales.len() != xs.len() {
        return Err(n.err_invalid("'scales' must have one value per input dim"));
    }
    Ok(xs
        .iter()
        .zip(&scales)
        .map(|(&d, &s)| (d as f64 * s).floor() as usize)
        .collect())
}

fn reduce_axes(x: &In, n: &Node, rank: usize) -> Result<Option<Vec<usize>>> {
    // ReduceSum moved axes to an input in opset 13, the other reductions in opset 18.
    let axes_from_input = if n.op_type == "ReduceSum" {
        x.g.opset() >= 13
    } else {
        x.g.opset() >= 18
    };
    let axes = if axes_from_input {
        x.opt_const_ints(1, "axes")?
    } else {
        n.attr_ints_opt("axes")?
    };
    match axes {
        Some(a) if !a.is_empty() => Ok(Some(norm_axes(n, "axes", &a, rank)?)),
        _ => {
            if n.attr_i("noop_with_empty_axes", 0)? != 0 {
                Ok(None)
            } else {
                Ok(Some((0..rank).collect()))
            }
        }
    }
}

pub fn reduce_params(g: &Graph, n: &Node) -> Result<(Option<Vec<usize>>, bool)> {
    let x = In { g, n };
    let rank = x.rank(0)?;
    Ok((reduce_axes(&x, n, rank)?, n.attr_i("keepdims", 1)? != 0))
}

/// Slice parameters resolved to per-axis (start, end, step) with ONNX clamping.
pub fn slice_params(g: &Graph, n: &Node) -> Result<Vec<(usize, i64, i64, i64)>> {
    let x = In { g, n };
    let shape = x.shape(0)?;
    let (starts, ends, axes, steps) = if g.opset() < 10 {
        (
            n.attr_ints("starts", &[])?,
            n.attr_ints("ends", &[])?,
            n.attr_ints_opt("axes")?,
            None,
        )
    } else {
        (
            x.const_ints(1, "starts")?,
            x.const_ints(2, "ends")?,
            x.opt_const_ints(3, "axes")?,
            x.opt_const_ints(4, "steps")?,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(n.err_invalid("starts, ends, axes and steps must have the same length"));
    }
    let mut out = Vec::new();
    for i in 0..starts.len() {
        let ax = norm_axis(n, "axes", axes[i], shape.len())?;
        let d = shape[ax] as i64;
        let step = steps[i];
        if step == 0 {
            return Err(n.err_invalid("slice step must not be 0"));
        }
        let clampi = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
        let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (s, e) = if step > 0 {
            (clampi(fix(starts[i]), 0, d), clampi(fix(ends[i]), 0, d))
        } else {
            (
                clampi(fix(starts[i]), 0, d - 1),
                clampi(fix(ends[i]), -1, d - 1),
            )
        };
        out.push((ax, s, e, step));
    }
    Ok(out)
}

pub fn slice_len(s: i64, e: i64, step: i64) -> usize {
    if step > 0 {
        if e > s {
            ((e - s + step - 1) / step) as usize
        } else {
            0
        }
    } else if s > e {
        ((s - e - step - 1) / (-step)) as usize
    } else {
        0
    }
}

pub fn split_sizes(g: &Graph, n: &Node) -> Result<(usize, Vec<usize>)> {
    let x = In { g, n };
    let shape = x.shape(0)?;
    let axis = norm_axis(n, "axis", n.attr_i("axis", 0)?, shape.len())?;
    let split = if g.opset() >= 13 {
        x.opt_const_ints(1, "split")?
    } else {
        n.attr_ints_opt("split")?
    };
    let d = shape[axis];
    let sizes = match split {
        Some(s) if !s.is_empty() => to_usizes(n, "split", &s)?,
        _ => {
            let k = match n.attr_i_opt("num_outputs")? {
                Some(k) => k as usize,
                None => n.outputs.len(),
            };
            if k == 0 {
                return Err(n.err_invalid("split has no outputs"));
            }
            let chunk = d.div_ceil(k);
            (0..k)
                .map(|i| chunk.min(d.saturating_sub(i * chunk)))
                .collect()
        }
    };
    if sizes.iter().sum::<usize>() != d {
        return Err(n.err_invalid(format!("split sizes {sizes:?} do not add up to {d}")));
    }
    Ok((axis, sizes))
}

pub fn reshape_target(
    n: &Node,
    in_shape: &[usize],
    spec: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>> {
    let total: usize = in_shape.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer_at = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 => {
                if infer_at.replace(i).is_some() {
                    return Err(n.err_invalid("reshape has more than one -1"));
                }
                out.push(1);
            }
            0 if !allowzero => out.push(
                *in_shape
                    .get(i)
                    .ok_or_else(|| n.err_invalid("reshape 0 refers past the input rank"))?,
            ),
            d if d < 0 => return Err(n.err_invalid(format!("reshape dim {d} is invalid"))),
            d => out.push(d as usize),
        }
    }
    let known = out
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| n.err_invalid(format!("reshape target {spec:?} is too large")))?;
    if let Some(i) = infer_at {
        if known == 0 || total % known != 0 {
            return Err(n.err_invalid(format!("cannot reshape {in_shape:?} to {spec:?}")));
        }
        out[i] = total / known;
    } else if known != total {
        return Err(n.err_invalid(format!("cannot reshape {in_shape:?} to {spec:?}")));
    }
    Ok(out)
}

pub fn unsqueeze_shape(n: &Node, shape: &[usize], axes: &[i64]) -> Result<Vec<usize>> {
    let r = shape.len() + axes.len();
    let axes = norm_axes(n, "axes", axes, r)?;
    let mut out = Vec::with_capacity(r);
    let mut it = shape.iter();
    for i in 0..r {
        if axes.contains(&i) {
            out.push(1);
        } else {
            out.push(
                *it.next()
                    .ok_or_else(|| n.err_invalid("duplicate unsqueeze axes"))?,
            );
        }
    }
    Ok(out)
}

pub fn squeeze_axes(g: &Graph, n: &Node) -> Result<Vec<usize>> {
    let x = In { g, n };
    let shape = x.shape(0)?;
    let axes = if g.opset() >= 13 {
        x.opt_const_ints(1, "axes")?
    } else {
        n.attr_ints_opt("axes")?
    };
    match axes {
        Some(a) => {
            let a = norm_axes(n, "axes", &a, shape.len())?;
            for &i in &a {
                if shape[i] != 1 {
                    return Err(
                        n.err_invalid(format!("cannot squeeze dim {i} of size {}", shape[i]))
                    );
                }
            }
            Ok(a)
        }
        None => Ok((0..shape.len()).filter(|&i| shape[i] == 1).collect()),
    }
}

pub fn unsqueeze_axes(g: &Graph, n: &Node) -> Result<Vec<i64>> {
    let x = In { g, n };
    if g.opset() >= 13 {
        x.const_ints(1, "axes")
    } else {
        n.attr_ints_opt("axes")?
            .ok_or_else(|| n.err_invalid("attribute 'axes' is missing"))
    }
}

pub fn transpose_perm(n: &Node, rank: usize) -> Result<Vec<usize>> {
    let perm = match n.attr_ints_opt("perm")? {
        Some(p) => to_usizes(n, "perm", &p)?,
        None => (0..rank).rev().collect(),
    };
    let mut seen = vec![false; rank];
    if perm.len() != rank
        || perm
            .iter()
            .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
    {
        return Err(n.err_invalid(format!("perm {perm:?} is not a permutation of rank {rank}")));
    }
    Ok(perm)
}

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

pub fn matmul_shape(n: &Node, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    if a.is_empty() || b.is_empty() {
        return Err(n.err_invalid("MatMul inputs must have rank >= 1"));
    }
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k1) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, nn) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k1 != k2 {
        return Err(n.err_invalid(format!("MatMul inner dims differ: {a:?} x {b:?}")));
    }
    let mut out = broadcast(n, &[&a2[..a2.len() - 2], &b2[..b2.len() - 2]])?;
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(nn);
    }
    Ok(out)
}

/// Parses an einsum equation into per-input labels and output labels (no ellipsis).
pub fn einsum_parse(n: &Node) -> Result<(Vec<Vec<char>>, Vec<char>)> {
    let eq: String = n
        .attr_s("equation", "")?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    if eq.contains("...") {
        return Err(n.err_attr("equation", "ellipsis is not supported"));
    }
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let ins: Vec<Vec<char>> = lhs.split(',').map(|s| s.chars().collect()).collect();
    if ins.iter().flatten().any(|c| !c.is_ascii_alphabetic()) {
        return Err(n.err_attr("equation", format!("cannot parse '{eq}'")));
    }
    let out = match rhs {
        Some(r) => r.chars().collect(),
        None => {
            let mut counts = std::collections::BTreeMap::new();
            for c in ins.iter().flatten() {
                *counts.entry(*c).or_insert(0) += 1;
            }
            counts
                .into_iter()
                .filter(|(_, k)| *k == 1)
                .map(|(c, _)| c)
                .collect()
        }
    };
    Ok((ins, out))
}

pub fn infer_node(g: &Graph, n: &Node) -> Result<Vec<Out>> {
    let x = In { g, n };
    let op = n.op_type.as_str();
    if !n.domain.is_empty() {
        return Err(n.err_op(format!("domain '{}' is not supported", n.domain)));
    }
    let same = |x: &In| -> Result<Vec<Out>> { Ok(vec![(x.dtype(0)?, x.shape(0)?.to_vec())]) };
    let outs: Vec<Out> = match op {
        "Relu" | "Sigmoid" | "Tanh" | "Exp" | "Log" | "Abs" | "Neg" | "Sqrt" | "Reciprocal"
        | "Erf" | "Gelu" | "HardSwish" | "HardSigmoid" | "LeakyRelu" | "Elu" | "Selu" | "Celu"
        | "Softplus" | "Softsign" | "Mish" | "Clip" | "Floor" | "Ceil" | "Round" | "Sign"
        | "Sin" | "Cos" | "Asin" | "Atan" | "Identity" | "Softmax" | "LogSoftmax"
        | "ThresholdedRelu" | "Not" | "Swish" | "LpNormalization" | "RMSNormalization"
        | "CumSum" | "Tan" => same(&x)?,
        "Dropout" => {
            let mut v = same(&x)?;
            if n.outputs.len() > 1 {
                v.push((DType::Bool, v[0].1.clone()));
            }
            v
        }
        "IsNaN" | "IsInf" => vec![(DType::Bool, x.shape(0)?.to_vec())],
        "Cast" => {
            let to = n.attr_i("to", 0)?;
            let dt = DType::from_onnx(to as i32)
                .ok_or_else(|| n.err_attr("to", format!("unsupported target type {to}")))?;
            vec![(dt, x.shape(0)?.to_vec())]
        }
        "CastLike" => vec![(x.dtype(1)?, x.shape(0)?.to_vec())],
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "PRelu" | "BitShift" => {
            vec![(x.dtype(0)?, broadcast(n, &[x.shape(0)?, x.shape(1)?])?)]
        }
        "Max" | "Min" | "Sum" | "Mean" => {
            let shapes = (0..n.inputs.len())
                .map(|i| x.shape(i))
                .collect::<Result<Vec<_>>>()?;
            vec![(x.dtype(0)?, broadcast(n, &shapes)?)]
        }
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or" | "Xor" => {
            vec![(DType::Bool, broadcast(n, &[x.shape(0)?, x.shape(1)?])?)]
        }
        "Where" => vec![(
            x.dtype(1)?,
            broadcast(n, &[x.shape(0)?, x.shape(1)?, x.shape(2)?])?,
        )],
        "Conv"
        | "ConvTranspose"
        | "MaxPool"
        | "AveragePool"
        | "LpPool"
        | "GlobalAveragePool"
        | "GlobalMaxPool"
        | "BatchNormalization"
        | "InstanceNormalization"
        | "GroupNormalization"
        | "LRN"
        | "Resize"
        | "Upsample"
        | "DepthToSpace"
        | "SpaceToDepth" => {
            if matches!(
                op,
                "BatchNormalization" | "InstanceNormalization" | "GroupNormalization" | "LRN"
            ) && x.rank(0)? < 3
            {
                same(&x)?
            } else {
                conv_like(&x, n)?
            }
        }
        "LayerNormalization" => {
            let mut v = same(&x)?;
            let r = x.rank(0)?;
            let axis = norm_axis(n, "axis", n.attr_i("axis", -1)?, r)?;
            let mut red = x.shape(0)?.to_vec();
            for d in &mut red[axis..] {
                *d = 1;
            }
            for _ in 1..n.outputs.len() {
                v.push((DType::F32, red.clone()));
            }
            v
        }
        "Gemm" => {
            let (a, b) = (x.shape(0)?, x.shape(1)?);
            if a.len() != 2 || b.len() != 2 {
                return Err(n.err_invalid("Gemm inputs must be 2-D"));
            }
            let (m, k1) = if n.attr_i("transA", 0)? != 0 {
                (a[1], a[0])
            } else {
                (a[0], a[1])
            };
            let (k2, nn) = if n.attr_i("transB", 0)? != 0 {
                (b[1], b[0])
            } else {
                (b[0], b[1])
            };
            if k1 != k2 {
                return Err(n.err_invalid(format!("Gemm inner dims differ: {a:?} x {b:?}")));
            }
            vec![(x.dtype(0)?, vec![m, nn])]
        }
        "MatMul" => vec![(x.dtype(0)?, matmul_shape(n, x.shape(0)?, x.shape(1)?)?)],
        "Einsum" => {
            let (ins, out) = einsum_parse(n)?;
            if ins.len() != n.inputs.len() {
                return Err(n.err_attr("equation", "operand count does not match the inputs"));
            }
            let mut dims = std::collections::HashMap::new();
            for (i, labels) in ins.iter().enumerate() {
                let s = x.shape(i)?;
                if s.len() != labels.len() {
                    return Err(n.err_attr(
                        "equation",
                        format!(
                            "operand {i} has rank {} but {} labels",
                            s.len(),
                            labels.len()
                        ),
                    ));
                }
                for (c, &d) in labels.iter().zip(s) {
                    let e = dims.entry(*c).or_insert(d);
                    if *e != d && d != 1 && *e != 1 {
                        return Err(n.err_invalid(format!("label '{c}' has sizes {e} and {d}")));
                    }
                    *e = (*e).max(d);
                }
            }
            let shape = out
                .iter()
                .map(|c| {
                    dims.get(c).copied().ok_or_else(|| {
                        n.err_attr(
                            "equation",
                            format!("output label '{c}' is not an input label"),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            vec![(x.dtype(0)?, shape)]
        }
        "Reshape" => {
            let spec = x.const_ints(1, "shape")?;
            let allowzero = n.attr_i("allowzero", 0)? != 0;
            vec![(
                x.dtype(0)?,
                reshape_target(n, x.shape(0)?, &spec, allowzero)?,
            )]
        }
        "Flatten" => {
            let s = x.shape(0)?;
            // Flatten's axis is in [-r, r] and a negative one counts from r (not r + 1).
            let a = n.attr_i("axis", 1)?;
            let axis = if a < 0 {
                norm_axis(n, "axis", a, s.len())?
            } else {
                norm_axis(n, "axis", a, s.len() + 1)?
            };
            vec![(
                x.dtype(0)?,
                vec![s[..axis].iter().product(), s[axis..].iter().product()],
            )]
        }
        "Squeeze" => {
            let axes = squeeze_axes(g, n)?;
            let s = x.shape(0)?;
            vec![(
                x.dtype(0)?,
                s.iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, &d)| d)
                    .collect(),
            )]
        }
        "Unsqueeze" => {
            let axes = unsqueeze_axes(g, n)?;
            vec![(x.dtype(0)?, unsqueeze_shape(n, x.shape(0)?, &axes)?)]
        }
        "Transpose" => {
            let s = x.shape(0)?;
            let p = transpose_perm(n, s.len())?;
            vec![(x.dtype(0)?, p.iter().map(|&i| s[i]).collect())]
        }
        "Concat" => {
            let s0 = x.shape(0)?;
            let axis = norm_axis(n, "axis", n.attr_i("axis", 0)?, s0.len())?;
            let mut out = s0.to_vec();
            out[axis] = 0;
            for i in 0..n.inputs.len() {
                let s = x.shape(i)?;
                if s.len() != s0.len()
                    || s.iter()
                        .zip(s0)
                        .enumerate()
                        .any(|(k, (a, b))| k != axis && a != b)
                {
                    return Err(n.err_invalid(format!(
                        "input shapes {s0:?} and {s:?} cannot be concatenated on axis {axis}"
                    )));
                }
                out[axis] += s[axis];
            }
            vec![(x.dtype(0)?, out)]
        }
        "Split" => {
            let (axis, sizes) = split_sizes(g, n)?;
            if sizes.len() != n.outputs.len() {
                return Err(n.err_invalid(format!(
                    "{} split sizes for {} outputs",
                    sizes.len(),
                    n.outputs.len()
                )));
            }
            let s = x.shape(0)?;
            sizes
                .iter()
                .map(|&k| {
                    let mut o = s.to_vec();
                    o[axis] = k;
                    Ok((x.dtype(0)?, o))
                })
                .collect::<Result<Vec<_>>>()?
        }
        "Slice" => {
            let mut s = x.shape(0)?.to_vec();
            for (ax, st, e, step) in slice_params(g, n)? {
                s[ax] = slice_len(st, e, step);
            }
            vec![(x.dtype(0)?, s)]
        }
        "Gather" => {
            let s = x.shape(0)?;
            let axis = norm_axis(n, "axis", n.attr_i("axis", 0)?, s.len())?;
            let mut o = s[..axis].to_vec();
            o.extend_from_slice(x.shape(1)?);
            o.extend_from_slice(&s[axis + 1..]);
            vec![(x.dtype(0)?, o)]
        }
        "GatherElements" => vec![(x.dtype(0)?, x.shape(1)?.to_vec())],
        "ScatterElements" | "ScatterND" => same(&x)?,
        "Expand" => {
            let spec = x.const_ints(1, "shape")?;
            let spec = to_usizes(n, "shape", &spec)?;
            vec![(x.dtype(0)?, broadcast(n, &[x.shape(0)?, &spec])?)]
        }
        "Tile" => {
            let reps = to_usizes(n, "repeats", &x.const_ints(1, "repeats")?)?;
            let s = x.shape(0)?;
            if reps.len() != s.len() {
                return Err(n.err_invalid("'repeats' must have one value per dim"));
            }
            vec![(
                x.dtype(0)?,
                s.iter()
                    .zip(&reps)
                    .map(|(a, b)| a.saturating_mul(*b))
                    .collect(),
            )]
        }
        "Pad" => {
            let p = pad_amounts(g, n)?;
            vec![(
                x.dtype(0)?,
                x.shape(0)?
                    .iter()
                    .zip(&p)
                    .map(|(&d, (b, e))| d.saturating_add(*b).saturating_add(*e))
                    .collect(),
            )]
        }
        "Shape" => {
            let r = x.rank(0)? as i64;
            let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
            let s = clamp(n.attr_i("start", 0)?);
            let e = clamp(n.attr_i("end", r)?);
            vec![(DType::I64, vec![(e - s).max(0) as usize])]
        }
        "Size" => vec![(DType::I64, vec![])],
        "ConstantOfShape" => {
            let s = to_usizes(n, "input", &x.const_ints(0, "input")?)?;
            let dt = n.attr_t_opt("value")?.map_or(DType::F32, |t| t.dtype);
            vec![(dt, s)]
        }
        "Range" => {
            let dt = x.dtype(0)?;
            let get = |i: usize, w: &str| -> Result<f64> {
                x.konst(i)
                    .filter(|t| t.numel() == 1)
                    .map(|t| t.get_f64(0))
                    .ok_or_else(|| n.err_op(format!("input '{w}' must be a constant scalar")))
            };
            let (s, l, d) = (get(0, "start")?, get(1, "limit")?, get(2, "delta")?);
            if d == 0.0 {
                return Err(n.err_invalid("Range delta is 0"));
            }
            let len = ((l - s) / d).ceil().max(0.0);
            if len > 1e9 {
                return Err(n.err_invalid("Range is too long"));
            }
            vec![(dt, vec![len as usize])]
        }
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL2"
        | "ReduceL1" | "ReduceSumSquare" | "ReduceLogSumExp" => {
            let (axes, keep) = reduce_params(g, n)?;
            let s = x.shape(0)?;
            let o = match axes {
                None => s.to_vec(),
                Some(axes) => s
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &d)| {
                        if axes.contains(&i) {
                            keep.then_some(1)
                        } else {
                            Some(d)
                        }
                    })
                    .collect(),
            };
            vec![(x.dtype(0)?, o)]
        }
        "ArgMax" | "ArgMin" => {
            let s = x.shape(0)?;
            let axis = norm_axis(n, "axis", n.attr_i("axis", 0)?, s.len())?;
            let mut o = s.to_vec();
            if n.attr_i("keepdims", 1)? != 0 {
                o[axis] = 1;
            } else {
                o.remove(axis);
            }
            vec![(DType::I64, o)]
        }
        "TopK" => {
            let s = x.shape(0)?;
            let axis = norm_axis(n, "axis", n.attr_i("axis", -1)?, s.len())?;
            let k = if g.opset() >= 10 {
                x.const_ints(1, "K")?.first().copied().unwrap_or(-1)
            } else {
                n.attr_i("k", -1)?
            };
            if k < 0 || k as usize > s[axis] {
                return Err(n.err_invalid(format!("K={k} is out of range for dim {}", s[axis])));
            }
            let mut o = s.to_vec();
            o[axis] = k as usize;
            vec![(x.dtype(0)?, o.clone()), (DType::I64, o)]
        }
        "Attention" => {
            use crate::ops::attention::attention::{dims, output_shapes};
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
            vec![(dt, y), (kdt, pk), (vdt, pv), (dt, qk)]
        }
        "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => {
            let xs = x.shape(0)?;
            let loss = crate::ops::loss::nll_loss::loss_shape(n, xs, x.shape(1)?)?;
            let dt = x.dtype(0)?;
            let mut v = vec![(dt, loss)];
            if op == "SoftmaxCrossEntropyLoss" {
                v.push((dt, xs.to_vec()));
            }
            v
        }
        "CausalConvWithState" => {
            let (xs, ws) = (x.shape(0)?, x.shape(1)?);
            if xs.len() != 3 || ws.len() != 3 || ws[0] != xs[1] || ws[1] != 1 {
                return Err(n.err_invalid(format!(
                    "input {xs:?} and weight {ws:?} are not [B, C, L] and [C, 1, k]"
                )));
            }
            let dt = x.dtype(0)?;
            let state = vec![xs[0], xs[1], ws[2].saturating_sub(1)];
            vec![(dt, xs.to_vec()), (dt, state)]
        }
        "QuantizeLinear" => {
            let dt = if x.has(2) { x.dtype(2)? } else { DType::U8 };
            vec![(dt, x.shape(0)?.to_vec())]
        }
        "DequantizeLinear" => {
            let dt = x.dtype(1)?;
            vec![(dt, x.shape(0)?.to_vec())]
        }
        _ => return Err(n.err_op("no shape inference for this op")),
    };
    for (dt, s) in &outs {
        if checked_numel(s, *dt).is_none() {
            return Err(n.err_invalid(format!(
                "output shape {s:?} of {dt} exceeds the 4 GiB tensor limit"
            )));
        }
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Attr;

    fn graph_with(shapes: &[(&str, DType, Vec<usize>)]) -> Graph {
        let mut g = Graph::default();
        g.opsets.insert(String::new(), 17);
        for (n, d, s) in shapes {
            g.add_typed(n, *d, s.clone());
        }
        g
    }

    #[test]
    fn conv_same_upper_and_strides() {
        let g = graph_with(&[
            ("x", DType::F32, vec![1, 3, 7, 7]),
            ("w", DType::F32, vec![8, 3, 3, 3]),
        ]);
        let mut n = Node::new("c", "Conv")
            .with_attr("strides", Attr::Ints(vec![2, 2]))
            .with_attr("auto_pad", Attr::String("SAME_UPPER".into()));
        n.inputs = vec![Some(0), Some(1)];
        n.outputs = vec![None];
        assert_eq!(
            infer_node(&g, &n).unwrap(),
            vec![(DType::F32, vec![1, 8, 4, 4])]
        );
        n.nhwc = true;
        let g = graph_with(&[
            ("x", DType::F32, vec![1, 7, 7, 3]),
            ("w", DType::F32, vec![8, 3, 3, 3]),
        ]);
        assert_eq!(
            infer_node(&g, &n).unwrap(),
            vec![(DType::F32, vec![1, 4, 4, 8])]
        );
    }

    #[test]
    fn maxpool_ceil_mode() {
        let g = graph_with(&[("x", DType::F32, vec![1, 1, 6, 6])]);
        let mut n = Node::new("p", "MaxPool")
            .with_attr("kernel_shape", Attr::Ints(vec![3, 3]))
            .with_attr("strides", Attr::Ints(vec![2, 2]))
            .with_attr("ceil_mode", Attr::Int(1));
        n.inputs = vec![Some(0)];
        n.outputs = vec![None];
        assert_eq!(infer_node(&g, &n).unwrap()[0].1, vec![1, 1, 3, 3]);
    }

    #[test]
    fn matmul_batched_broadcast() {
        let n = Node::new("m", "MatMul");
        assert_eq!(
            matmul_shape(&n, &[2, 1, 3, 4], &[5, 4, 6]).unwrap(),
            vec![2, 5, 3, 6]
        );
        assert_eq!(matmul_shape(&n, &[4], &[4, 6]).unwrap(), vec![6]);
        assert!(matmul_shape(&n, &[3, 4], &[5, 6]).is_err());
    }

    #[test]
    fn reshape_zero_and_minus_one() {
        let n = Node::new("r", "Reshape");
        assert_eq!(
            reshape_target(&n, &[2, 3, 4], &[0, -1], false).unwrap(),
            vec![2, 12]
        );
        assert!(reshape_target(&n, &[2, 3, 4], &[5, -1], false).is_err());
        assert!(reshape_target(&n, &[2, 3], &[-1, -1], false).is_err());
    }

    #[test]
    fn flatten_negative_axis_counts_from_rank() {
        let g = graph_with(&[("x", DType::F32, vec![3, 4, 5])]);
        let flat = |axis: i64| {
            let mut n = Node::new("f", "Flatten").with_attr("axis", Attr::Int(axis));
            n.inputs = vec![Some(0)];
            n.outputs = vec![None];
            infer_node(&g, &n).map(|o| o[0].1.clone())
        };
        assert_eq!(flat(-1).unwrap(), vec![12, 5]);
        assert_eq!(flat(-3).unwrap(), vec![1, 60]);
        assert_eq!(flat(3).unwrap(), vec![60, 1]);
        assert!(flat(-4).is_err());
        assert!(flat(4).is_err());
    }

    #[test]
    fn slice_clamps_like_onnx() {
        assert_eq!(slice_len(0, 5, 1), 5);
        assert_eq!(slice_len(4, -1, -1), 5);
        assert_eq!(slice_len(1, 5, 2), 2);
        assert_eq!(slice_len(3, 3, 1), 0);
    }

    fn infer_with(
        g: &Graph,
        op: &str,
        inputs: &[Option<usize>],
        attrs: &[(&str, Attr)],
    ) -> Vec<Out> {
        let mut n = Node::new("n", op);
        n.inputs = inputs.to_vec();
        for (k, a) in attrs {
            n.attrs.insert(k.to_string(), a.clone());
        }
        infer_node(g, &n).unwrap()
    }

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
        let shapes: Vec<Vec<usize>> = infer_with(&g, "Attention", &ins, &heads)
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

    #[test]
    fn losses_are_inferred() {
        let g = graph_with(&[
            ("x", DType::F32, vec![3, 5, 2]),
            ("t", DType::I64, vec![3, 2]),
        ]);
        let ins = [Some(0), Some(1)];
        let none = [("reduction", Attr::String("none".into()))];
        let nll = "NegativeLogLikelihoodLoss";
        assert_eq!(
            infer_with(&g, nll, &ins, &none),
            vec![(DType::F32, vec![3, 2])]
        );
        assert_eq!(infer_with(&g, nll, &ins, &[]), vec![(DType::F32, vec![])]);
        assert_eq!(
            infer_with(&g, "SoftmaxCrossEntropyLoss", &ins, &[]),
            vec![(DType::F32, vec![]), (DType::F32, vec![3, 5, 2])]
        );
    }

    #[test]
    fn causal_conv_and_tan_are_inferred() {
        let g = graph_with(&[
            ("x", DType::F16, vec![1, 4, 8]),
            ("w", DType::F16, vec![4, 1, 3]),
        ]);
        assert_eq!(
            infer_with(&g, "CausalConvWithState", &[Some(0), Some(1)], &[]),
            vec![(DType::F16, vec![1, 4, 8]), (DType::F16, vec![1, 4, 2])]
        );
        assert_eq!(
            infer_with(&g, "Tan", &[Some(0)], &[]),
            vec![(DType::F16, vec![1, 4, 8])]
        );
    }

    #[test]
    fn unknown_op_is_unsupported() {
        let g = graph_with(&[("x", DType::F32, vec![1])]);
        let mut n = Node::new("n", "FancyOp");
        n.inputs = vec![Some(0)];
        let e = infer_node(&g, &n).unwrap_err().to_string();
        assert_eq!(e, "Node \"n\" (FancyOp): no shape inference for this op");
    }
}
