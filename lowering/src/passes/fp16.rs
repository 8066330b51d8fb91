//! fp16 compute: float activations and static weights become f16; graph I/O keeps its dtype.
//!
//! HTP computes float in fp16 on FP16-capable SoCs and an op must not mix float widths
//! (docs/qnn-notes.md §8.4: mixed fp32/fp16 operands fail validation or give garbage). So every f32
//! value inside the graph becomes f16, f32 graph inputs get a Cast to f16 after them and f32
//! outputs a Cast from f16 before them. Ops whose table entry lists `f32` but not `f16` keep
//! computing in f32 with Casts around them. Quantized values and the constants of quantized
//! nodes are left alone: they are stored fixed-point, and only float islands compute in fp16.

use std::collections::HashMap;

use crate::dtype::{DType, OnnxCode};
use crate::ir::{Attr, Graph, Node, ValueId};
use crate::ops::quant::{DEQUANTIZE, QUANTIZE};
use crate::table::OpTable;

fn cast_node(g: &mut Graph, hint: &str, from: ValueId, to: ValueId, dt: DType) -> Node {
    let mut n =
        Node::new(g.unique_node_name(hint), "Cast").with_attr("to", Attr::Int(dt.to_onnx() as i64));
    n.inputs = vec![Some(from)];
    n.outputs = vec![Some(to)];
    n
}

// Node indices address `keep_f32` and `g.nodes` while nodes are edited in place.
#[allow(clippy::needless_range_loop)]
pub fn run(g: &mut Graph, table: &OpTable) {
    let keep_f32: Vec<bool> = g
        .nodes
        .iter()
        .map(|n| {
            table
                .entry(&n.op_type)
                .is_some_and(|e| e.has_dtype("f32") && !e.has_dtype("f16"))
        })
        .collect();
    let io: Vec<ValueId> = g.inputs.iter().chain(g.outputs.iter()).copied().collect();
    // Internal f32 activations become f16.
    // Indexed by the values that exist now; values added below are never "converted".
    let mut converted = vec![false; g.values.len()];
    for (i, v) in g.values.iter_mut().enumerate() {
        if v.dtype == DType::F32
            && v.konst.is_none()
            && v.known
            && v.quant.is_none()
            && !io.contains(&i)
        {
            v.dtype = DType::F16;
            converted[i] = true;
        }
    }
    let mut new_nodes: Vec<Node> = Vec::new();
    // f32 graph inputs: cast once, readers use the f16 copy. An input that only feeds QNN
    // Quantize (a QDQ model's input) stays f32: quantizing an fp16 copy would first round it to
    // 11 bits, which moves values across quantization steps, and the result would differ from
    // ONNX Runtime's QNN EP (whose fp16 precision leaves the quantized path alone).
    let consumers = g.consumers();
    let only_quantized = |g: &Graph, x: ValueId| {
        let readers = &consumers[x];
        !readers.is_empty() && readers.iter().all(|&n| g.nodes[n].op_type == QUANTIZE)
    };
    for &x in &g.inputs.clone() {
        if g.dtype(x) != DType::F32 || g.values[x].quant.is_some() || only_quantized(g, x) {
            continue;
        }
        let shape = g.shape(x).to_vec();
        let x16 = g.add_typed(&format!("{}_f16", g.value(x).name), DType::F16, shape);
        g.replace_uses(x, x16);
        let n = cast_node(
            g,
            &format!("{}_to_f16", g.value(x).name),
            x,
            x16,
            DType::F16,
        );
        new_nodes.insert(0, n);
    }
    // f32 graph outputs: the producer writes f16, a Cast restores f32.
    let producers = g.producers();
    for &y in &g.outputs.clone() {
        if g.dtype(y) != DType::F32 || g.values[y].quant.is_some() {
            continue;
        }
        let Some(p) = producers[y] else { continue };
        // A QNN Dequantize writes the f32 output itself (the same reason as for inputs).
        if keep_f32[p] || g.nodes[p].op_type == DEQUANTIZE {
            continue;
        }
        let shape = g.shape(y).to_vec();
        let y16 = g.add_typed(&format!("{}_f16", g.value(y).name), DType::F16, shape);
        for o in g.nodes[p].outputs.iter_mut().flatten() {
            if *o == y {
                *o = y16;
            }
        }
        g.replace_uses(y, y16);
        let n = cast_node(
            g,
            &format!("{}_to_f32", g.value(y).name),
            y16,
            y,
            DType::F32,
        );
        new_nodes.push(n);
    }
    // Constants are converted per use so that f32-only ops keep f32 weights.
    let mut f16_copy: HashMap<ValueId, ValueId> = HashMap::new();
    let mut wrapped: Vec<Node> = Vec::new();
    for i in 0..g.nodes.len() {
        if g.nodes[i].quantized {
            continue;
        }
        if keep_f32[i] {
            for k in 0..g.nodes[i].inputs.len() {
                let Some(v) = g.nodes[i].inputs[k] else {
                    continue;
                };
                if g.dtype(v) == DType::F16 && g.konst(v).is_none() {
                    let shape = g.shape(v).to_vec();
                    let v32 = g.add_typed(&format!("{}_f32", g.value(v).name), DType::F32, shape);
                    wrapped.push(cast_node(
                        g,
                        &format!("{}_to_f32", g.value(v).name),
                        v,
                        v32,
                        DType::F32,
                    ));
                    g.nodes[i].inputs[k] = Some(v32);
                }
            }
            for k in 0..g.nodes[i].outputs.len() {
                let Some(v) = g.nodes[i].outputs[k] else {
                    continue;
                };
                if converted.get(v).copied().unwrap_or(false) {
                    let shape = g.shape(v).to_vec();
                    let v32 = g.add_typed(&format!("{}_f32", g.value(v).name), DType::F32, shape);
                    g.nodes[i].outputs[k] = Some(v32);
                    wrapped.push(cast_node(
                        g,
                        &format!("{}_to_f16", g.value(v).name),
                        v32,
                        v,
                        DType::F16,
                    ));
                }
            }
            continue;
        }
        for k in 0..g.nodes[i].inputs.len() {
            let Some(v) = g.nodes[i].inputs[k] else {
                continue;
            };
            let Some(t) = g.konst(v) else { continue };
            if t.dtype != DType::F32 {
                continue;
            }
            let c = match f16_copy.get(&v) {
                Some(&c) => c,
                None => {
                    let t16 = t.cast(DType::F16);
                    let c = g.add_const(&format!("{}_f16", g.value(v).name), t16);
                    f16_copy.insert(v, c);
                    c
                }
            };
            g.nodes[i].inputs[k] = Some(c);
        }
        let n = &mut g.nodes[i];
        if n.op_type == "Cast" && n.attrs.get("to") == Some(&Attr::Int(DType::F32.to_onnx() as i64))
        {
            // The output may be a value created above (an f32 graph output's f16 copy).
            if let Some(o) = n.output(0) {
                if g.values[o].dtype == DType::F16 {
                    n.attrs
                        .insert("to".into(), Attr::Int(DType::F16.to_onnx() as i64));
                }
            }
        }
    }
    g.nodes.extend(new_nodes);
    g.nodes.extend(wrapped);
    let _ = g.toposort();
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::testing::ModelBuilder;
    use crate::{passes, Backend, LowerOptions};

    #[test]
    fn io_stays_f32_inside_is_f16() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4])
            .init("w", Tensor::from_f32(vec![4, 2], &[0.5; 8]))
            .node("MatMul", &["x", "w"], &["m"], &[])
            .node("Relu", &["m"], &["y"], &[])
            .output("y")
            .load();
        let o = LowerOptions {
            backend: Backend::Htp,
            fp16: true,
            ..Default::default()
        };
        let p = passes::prepare(&m, &o).unwrap();
        assert_eq!(
            p.graph.dump(),
            "Cast(x) to=10 -> x_f16:f16[1, 4]\n\
             MatMul(x_f16, w_f16) -> m:f16[1, 2]\n\
             Relu(m) -> y_f16:f16[1, 2]\n\
             Cast(y_f16) to=1 -> y:f32[1, 2]\n\
             outputs: y\n"
        );
    }

    #[test]
    fn cast_from_f16_input_to_f32_output() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F16, &[3])
            .node("Cast", &["x"], &["y"], &[("to", crate::testing::A::I(1))])
            .output("y")
            .load();
        let o = LowerOptions {
            fp16: true,
            ..Default::default()
        };
        let p = passes::prepare(&m, &o).unwrap();
        assert_eq!(
            p.graph.dump(),
            "Cast(x) to=10 -> y_f16:f16[3]\n\
             Cast(y_f16) to=1 -> y:f32[3]\n\
             outputs: y\n"
        );
    }
}
