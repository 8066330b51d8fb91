//! GroupNormalization — <https://onnx.ai/onnx/operators/onnx__GroupNormalization.html>.
//! Opset 21: scale/bias are per channel `[C]`; opset 18–20: per group `[G]`.
//!
//! 4-D input: QNN `GroupNorm` (run NHWC by the layout pass): in[0] NHWC, in[1] gamma `[C]`,
//! in[2] beta `[C]`; params `epsilon` FLOAT_32 scalar, `group` UINT_32 scalar. A per-group
//! scale or bias is repeated to `[C]`: on the host when constant, else by Reshape `[G, 1]` →
//! Tile `[1, C/G]` → Reshape `[C]`.
//!
//! Other ranks (3, 5; 2 has one element per channel): the input is viewed as `[N, G, C/G·S]`,
//! normalised over the last axis by QNN `LayerNorm` (unit gamma, zero beta), and scaled and
//! shifted per group in that view or per channel in the view `[N, C, S]`
//! (`ops/norm/mod.rs`, `normalize_rows`), with no transposes.

use super::{const_vec, normalize_rows, vec_tensor};
use crate::error::Result;
use crate::ir::Node;
use crate::ops::infer::{same, In, Out};
use crate::ops::Quant;
use crate::ops::{Layout, LowerCx, OpDef, ShapeInput};
use crate::plan::{Param, TensorId};
use crate::qnn_names::{op, param};

pub const GROUP_NORMALIZATION: OpDef = OpDef {
    op_type: "GroupNormalization",
    since: 18,
    layout: Layout::Sensitive,
    shape_input: ShapeInput::None,
    infer,
    fold: None,
    expand: None,
    lower: Some(group_norm),
    quant: Quant::Float,
};

/// `num_groups`, checked against the channel count `c`.
fn groups(node: &Node, c: usize) -> Result<usize> {
    let g = node.attr_i("num_groups", 0)?;
    if g <= 0 || c % g as usize != 0 {
        return Err(node.err_attr("num_groups", format!("{g} does not divide {c} channels")));
    }
    Ok(g as usize)
}

fn infer(x: &In) -> Result<Vec<Out>> {
    let s = x.shape(0)?;
    if s.len() < 2 {
        return Err(x
            .n
            .err_invalid(format!("input rank {} is below 2", s.len())));
    }
    // After the layout pass a 4-D node reads NHWC.
    groups(x.n, if x.n.nhwc { s[s.len() - 1] } else { s[1] })?;
    same(x)
}

/// Input `i` (scale or bias) as a `[C]` tensor for QNN GroupNorm.
fn per_channel(
    cx: &mut LowerCx,
    node: &Node,
    i: usize,
    hint: &str,
    c: usize,
    g: usize,
) -> Result<TensorId> {
    let n = cx.shape(node, i).iter().product::<usize>();
    if n != c && n != g {
        return Err(node.err_invalid(format!("input {i} has {n} elements, not {c} or {g}")));
    }
    if cx.konst(node, i).is_some() {
        let v = const_vec(cx, node, i, hint)?;
        let v: Vec<f64> = (0..c).map(|k| v[k * n / c]).collect();
        return vec_tensor(cx, node, hint, &v);
    }
    let t = cx.input(node, i)?;
    if n == c {
        return Ok(if cx.tshape(t) == [c] {
            t
        } else {
            cx.reshape(node, t, &[c])
        });
    }
    let dt = cx.tensor_dtype(t);
    let t = cx.reshape(node, t, &[g, 1]);
    let reps = [1, (c / g) as u32];
    let t = cx.emit(
        node,
        op::TILE,
        vec![t],
        dt,
        &[g, c / g],
        vec![(param::MULTIPLES, Param::u32_vec(&reps))],
    );
    Ok(cx.reshape(node, t, &[c]))
}

pub fn group_norm(cx: &mut LowerCx, node: &Node) -> Result<()> {
    let shape = cx.shape(node, 0);
    let eps = node.attr_f("epsilon", 1e-5)?;
    if shape.len() == 4 && node.nhwc {
        let c = shape[3];
        let g = groups(node, c)?;
        let gamma = per_channel(cx, node, 1, "gamma", c, g)?;
        let beta = per_channel(cx, node, 2, "beta", c, g)?;
        let x = cx.input(node, 0)?;
        let y = cx.output(node, 0)?;
        cx.op(
            node,
            op::GROUP_NORM,
            vec![x, gamma, beta],
            vec![y],
            vec![
                (param::EPSILON, Param::f32(eps)),
                (param::GROUP, Param::u32(g as u32)),
            ],
        );
        return Ok(());
    }
    let (n, c) = (shape[0], shape[1]);
    let g = groups(node, c)?;
    let s: usize = shape[2..].iter().product();
    let rows = [n, g, c / g * s];
    let scale_len: usize = cx.shape(node, 1).iter().product();
    let view = if scale_len == g { rows } else { [n, c, s] };
    if scale_len != c && scale_len != g {
        return Err(node.err_invalid(format!("scale has {scale_len} elements, not {c} or {g}")));
    }
    let x = cx.input(node, 0)?;
    let y = cx.output(node, 0)?;
    normalize_rows(cx, node, x, rows, eps, (1, 2, view), y)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{graph_with, infer, lower, lower_err, node};
    use crate::testing::{ModelBuilder, A};

    fn model(shape: &[i64], groups: i64, n: usize, opset: i64) -> ModelBuilder {
        ModelBuilder::new(opset)
            .input("x", DType::F32, shape)
            .init("s", Tensor::from_f32(vec![n], &vec![0.5; n]))
            .init("b", Tensor::from_f32(vec![n], &vec![0.0; n]))
            .node(
                "GroupNormalization",
                &["x", "s", "b"],
                &["y"],
                &[("num_groups", A::I(groups))],
            )
            .output("y")
    }

    #[test]
    fn group_norm_expands_per_group_scale() {
        let d = lower(&model(&[1, 4, 2, 2], 2, 2, 18)).dump();
        assert!(
            d.contains(
                "GroupNorm(x_nhwc:f32[1, 2, 2, 4], static GroupNormalization_0_gamma:f32[4]"
            ),
            "{d}"
        );
        assert!(d.contains("group=2u"), "{d}");
    }

    #[test]
    fn dynamic_per_group_scale_is_tiled() {
        let b = ModelBuilder::new(18)
            .input("x", DType::F32, &[1, 4, 2, 2])
            .input("s", DType::F32, &[2])
            .input("b", DType::F32, &[4])
            .node(
                "GroupNormalization",
                &["x", "s", "b"],
                &["y"],
                &[("num_groups", A::I(2))],
            )
            .output("y");
        let d = lower(&b).dump();
        assert!(d.contains("Tile(s_reshaped:f32[2, 1]) multiples=u32[2]{1,2} -> GroupNormalization_0_Tile:f32[2, 2]"), "{d}");
        assert!(d.contains("GroupNorm(x_nhwc:f32[1, 2, 2, 4], GroupNormalization_0_Tile_reshaped:f32[4], b:f32[4])"), "{d}");
    }

    #[test]
    fn rank3_is_a_layer_norm_over_groups() {
        // Per channel (opset 21): normalised as [1, 2, 6], scaled as [1, 4, 3].
        let p = lower(&model(&[1, 4, 3], 2, 4, 21));
        let d = p.dump();
        assert_eq!(
            p.op_types(),
            ["Reshape", "LayerNorm", "Reshape", "ElementWiseMultiply"],
            "{d}"
        );
        assert!(d.contains("-> x_reshaped:f32[1, 2, 6]"), "{d}");
        assert!(d.contains("ElementWiseMultiply(GroupNormalization_0_LayerNorm_reshaped:f32[1, 4, 3], static s_reshaped:f32[1, 4, 1]) -> y:f32[1, 4, 3]"), "{d}");
        // Per group (opset 18): scaled in the normalised view.
        let p = lower(&model(&[1, 4, 3], 2, 2, 18));
        assert_eq!(
            p.op_types(),
            ["Reshape", "LayerNorm", "ElementWiseMultiply", "Reshape"],
            "{}",
            p.dump()
        );
    }

    #[test]
    fn bad_group_count_unsupported() {
        assert!(lower_err(&model(&[1, 4, 2, 2], 3, 3, 18))
            .contains("attribute 'num_groups': 3 does not divide 4 channels"));
    }

    #[test]
    fn group_norm_is_inferred() {
        let g = graph_with(&[("x", DType::F16, vec![2, 6, 5])]);
        let n = node(
            "GroupNormalization",
            &[Some(0)],
            &[("num_groups", crate::ir::Attr::Int(3))],
        );
        assert_eq!(infer(&g, &n).unwrap(), vec![(DType::F16, vec![2, 6, 5])]);
        let n = node(
            "GroupNormalization",
            &[Some(0)],
            &[("num_groups", crate::ir::Attr::Int(4))],
        );
        assert!(infer(&g, &n).is_err());
    }
}
