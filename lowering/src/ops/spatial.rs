//! Spatial attributes and the channel-last layout shared by the conv-family ops (Conv,
//! ConvTranspose, the pools, the normalisations over channels, Resize, DepthToSpace, ...).
//! The layout pass marks these nodes `nhwc`; they are inferred in NCHW and permuted back.

use crate::error::Result;
use crate::ir::attr::to_usizes;
use crate::ir::Node;
use crate::ops::infer::{In, Out};
use crate::ops::u32s;
use crate::plan::Param;
use crate::qnn_names::param;

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

/// The NCHW view of `s`, the shape of a value of a node the layout pass marked `nhwc`.
pub fn nchw_view(n: &Node, s: &[usize]) -> Vec<usize> {
    if n.nhwc && s.len() >= 3 {
        let mut v = vec![s[0], s[s.len() - 1]];
        v.extend_from_slice(&s[1..s.len() - 1]);
        v
    } else {
        s.to_vec()
    }
}

/// The shape in the node's own layout of `s`, an NCHW shape.
pub fn from_nchw(n: &Node, s: Vec<usize>) -> Vec<usize> {
    if n.nhwc && s.len() >= 3 {
        let mut v = vec![s[0]];
        v.extend_from_slice(&s[2..]);
        v.push(s[1]);
        v
    } else {
        s
    }
}

/// Inference of a conv-family op: `f` maps the NCHW shape of input 0 (rank 3 or more) to the
/// NCHW output shape.
pub fn infer_nchw(x: &In, f: impl FnOnce(&[usize]) -> Result<Vec<usize>>) -> Result<Vec<Out>> {
    let n = x.n;
    let dt = x.dtype(0)?;
    let xs = nchw_view(n, x.shape(0)?);
    if xs.len() < 3 {
        return Err(n.err_invalid(format!("input must have rank >= 3, got {xs:?}")));
    }
    Ok(vec![(dt, from_nchw(n, f(&xs)?))])
}

/// The spatial params shared by Conv2d, DepthWiseConv2d, TransposeConv2d and the pools.
pub fn spatial_params(
    node: &Node,
    sp: &Spatial,
    with_dilation: bool,
) -> Result<Vec<(&'static str, Param)>> {
    let mut p = vec![
        (
            param::STRIDE,
            Param::u32_vec(&u32s(node, "strides", &sp.strides)?),
        ),
        (
            param::PAD_AMOUNT,
            Param::u32s(
                &[2, 2],
                &u32s(
                    node,
                    "pads",
                    &[sp.pads[0], sp.pads[2], sp.pads[1], sp.pads[3]],
                )?,
            ),
        ),
    ];
    if with_dilation {
        p.push((
            param::DILATION,
            Param::u32_vec(&u32s(node, "dilations", &sp.dilations)?),
        ));
    }
    Ok(p)
}

pub fn require_2d_nhwc(node: &Node, rank: usize) -> Result<()> {
    match rank {
        4 if node.nhwc => Ok(()),
        4 => Err(node.err_invalid("internal: layout pass did not convert this node to NHWC")),
        3 => Err(node.err_op("1-D spatial input is not supported (HTP has no Conv1d/Pool1d)")),
        r => Err(node.err_op(format!(
            "{}-D spatial input is not supported",
            r.saturating_sub(2)
        ))),
    }
}
