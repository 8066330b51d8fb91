//! 1-D Conv, ConvTranspose, MaxPool and AveragePool — <https://onnx.ai/onnx/operators/onnx__Conv.html>
//! and siblings, every opset. HTP has no 1-D convolutions or pools (docs/qnn-notes.md §3.4), so a node
//! with a 3-D input `[N, C, L]` is expanded before lowering into the same op on `[N, C, 1, L]`
//! (Reshape in, Reshape out), with the spatial attributes given a leading unit dimension:
//! `kernel_shape`, `strides`, `dilations`, `output_padding`, `output_shape` `[v]` → `[1, v]`,
//! `pads` `[b, e]` → `[0, b, 0, e]`; weights `[M, C, K]` become `[M, C, 1, K]`. The 2-D rules
//! then apply with their own constraints. MaxPool with an `Indices` output is left alone (the
//! pool rule rejects it).

use crate::error::Result;
use crate::ir::builder::Builder;
use crate::ir::{Attr, Node};

pub fn as_2d(b: &mut Builder, node: &Node) -> Result<bool> {
    let Some(x) = node.input(0) else {
        return Ok(false);
    };
    let xs = b.g.shape(x).to_vec();
    if xs.len() != 3 || node.output(1).is_some() {
        return Ok(false);
    }
    let y = node
        .output(0)
        .ok_or_else(|| node.err_invalid("output 0 is missing"))?;
    let ys = b.g.shape(y).to_vec();
    let mut attrs: Vec<(&str, Attr)> = Vec::new();
    for (k, a) in &node.attrs {
        let a = match (k.as_str(), a) {
            (
                "kernel_shape" | "strides" | "dilations" | "output_padding" | "output_shape",
                Attr::Ints(v),
            ) => Attr::Ints([&[1], &v[..]].concat()),
            ("pads", Attr::Ints(v)) if v.len() == 2 => Attr::Ints(vec![0, v[0], 0, v[1]]),
            _ => a.clone(),
        };
        attrs.push((k.as_str(), a));
    }
    let x4 = b.reshape(x, &[xs[0], xs[1], 1, xs[2]]);
    let mut inputs = vec![x4];
    if let Some(w) = node.input(1) {
        let ws = b.g.shape(w).to_vec();
        if ws.len() != 3 {
            return Err(node.err_invalid(format!("weights have shape {ws:?}, expected 3-D")));
        }
        inputs.push(b.reshape(w, &[ws[0], ws[1], 1, ws[2]]));
    }
    if let Some(bias) = node.input(2) {
        inputs.push(bias);
    }
    let y4 = b.op(&node.op_type, &inputs, attrs);
    let s = b.ints(&ys.iter().map(|&d| d as i64).collect::<Vec<_>>());
    b.op_to("Reshape", &[y4, s], vec![], &[y]);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ops::test_util::{lower, lower_err};
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn conv1d_runs_as_conv2d() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 8])
            .input("w", DType::F32, &[3, 2, 3])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                &[("pads", A::Is(vec![1, 1])), ("strides", A::Is(vec![2]))],
            )
            .output("y");
        let d = lower(&b).dump();
        assert!(
            d.contains(
                "stride=u32[2]{1,2} pad_amount=u32[2, 2]{0,0,1,1} dilation=u32[2]{1,1} group=1u"
            ),
            "{d}"
        );
        assert!(d.contains("output y:f32[1, 3, 4]"), "{d}");
    }

    #[test]
    fn maxpool1d_runs_as_pool2d() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 8])
            .node(
                "MaxPool",
                &["x"],
                &["y"],
                &[("kernel_shape", A::Is(vec![2]))],
            )
            .output("y");
        let p = lower(&b);
        assert!(p.op_types().contains(&"PoolMax2d"), "{}", p.dump());
    }

    #[test]
    fn maxpool1d_indices_unsupported() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 2, 8])
            .node(
                "MaxPool",
                &["x"],
                &["y", "i"],
                &[("kernel_shape", A::Is(vec![2]))],
            )
            .output("y")
            .output("i");
        let e = lower_err(&b);
        assert!(e.contains("MaxPool"), "{e}");
    }
}
