//! Rewrites of valid plans that a QNN library mishandles, applied after lowering. Each one names
//! the library releases it was observed with and how it was found, so that it can be dropped
//! once no supported release needs it.

use std::collections::HashSet;

use crate::plan::{Param, Plan, PlanOp, PlanTensor, TensorKind};
use crate::qnn_names::{op, param};
use crate::Backend;

/// Applies the rewrites `backend` needs.
pub fn apply(plan: &mut Plan, backend: Backend) {
    match backend {
        Backend::Htp => square_fully_connected_into_rank5(plan),
        Backend::Gpu | Backend::Cpu => {}
    }
}

/// HTP: a `FullyConnected` whose output is square (`[M, M]`, M >= 2) and is read, through
/// `Reshape`s only, as a rank-5 tensor by another op makes `graphExecute` die with SIGSEGV inside
/// `hmx_v73_convf16_1x1_stride1` (the HTP runs FullyConnected as a 1x1 convolution). The graph
/// validates and finalizes; only execute crashes. Transformers' `repeat_kv` with one KV head and
/// `seq_len == head_dim` builds exactly this (`[1, 1, 1, S, D]` expanded over the query heads),
/// so multi-query attention crashed the process (issue 13).
///
/// Found with hand-built graphs on libQnnHtp v2.51.0 (SoC 60, f32 and f16): every square M in
/// 5..=128 crashes, M = 2 and 3 run, every non-square shape tried runs, as do the same graphs with
/// the rank-5 view `[1, 1, M, 1, M]`, a rank-4 view, an op between the FullyConnected and the
/// view, a Conv2d 1x1 producer, or QNN `MatMul` as the producer. So such a FullyConnected becomes
/// `MatMul(x, W, transpose_in1 = true)` (+ `ElementWiseAdd` of the bias), which computes the same
/// values (`[N, K]` weights read transposed).
fn square_fully_connected_into_rank5(plan: &mut Plan) {
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); plan.tensors.len()];
    for (i, o) in plan.ops.iter().enumerate() {
        for &t in &o.inputs {
            readers[t].push(i);
        }
    }
    let hazardous = |i: usize| -> bool {
        let o = &plan.ops[i];
        let s = &plan.tensors[o.outputs[0]].shape;
        if o.type_name != op::FULLY_CONNECTED || s.len() != 2 || s[0] != s[1] || s[0] < 2 {
            return false;
        }
        // The crash is in the fp16 kernel; a quantized FullyConnected runs other kernels, and its
        // MatMul + Add form would need an encoding for the product that the model does not give.
        if plan.tensors[o.outputs[0]].quant.is_some() {
            return false;
        }
        let mut stack = vec![o.outputs[0]];
        let mut seen = HashSet::new();
        while let Some(t) = stack.pop() {
            if !seen.insert(t) {
                continue;
            }
            for &r in &readers[t] {
                let reader = &plan.ops[r];
                if reader.type_name == op::RESHAPE {
                    stack.push(reader.outputs[0]);
                } else if plan.tensors[t].shape.len() == 5 {
                    return true;
                }
            }
        }
        false
    };
    let targets: Vec<usize> = (0..plan.ops.len()).filter(|&i| hazardous(i)).collect();
    if targets.is_empty() {
        return;
    }
    let mut tensor_names: HashSet<String> = plan.tensors.iter().map(|t| t.name.clone()).collect();
    let mut op_names: HashSet<String> = plan.ops.iter().map(|o| o.name.clone()).collect();
    for &i in targets.iter().rev() {
        let fc = plan.ops[i].clone();
        let params = vec![
            (param::TRANSPOSE_IN0, Param::bool(false)),
            (param::TRANSPOSE_IN1, Param::bool(true)),
        ];
        let name = fresh(&mut op_names, &format!("{}_matmul", fc.name));
        let Some(&bias) = fc.inputs.get(2) else {
            plan.ops[i] = PlanOp {
                name,
                type_name: op::MAT_MUL,
                inputs: fc.inputs.clone(),
                params,
                ..fc
            };
            continue;
        };
        let out = &plan.tensors[fc.outputs[0]];
        let product = PlanTensor {
            name: fresh(&mut tensor_names, &format!("{}_product", fc.name)),
            dtype: out.dtype,
            shape: out.shape.clone(),
            kind: TensorKind::Native,
            quant: None,
            origin: None,
        };
        let b = &plan.tensors[bias];
        // QNN's elementwise ops take operands of equal rank: the bias [N] is read as [1, N].
        let bias_row = PlanTensor {
            name: fresh(&mut tensor_names, &format!("{}_row", b.name)),
            dtype: b.dtype,
            shape: vec![1, b.shape.iter().product()],
            kind: b.kind.clone(),
            quant: None,
            origin: None,
        };
        let (product_id, row_id) = (plan.tensors.len(), plan.tensors.len() + 1);
        plan.tensors.push(product);
        plan.tensors.push(bias_row);
        let (row_in, row_op) = if matches!(plan.tensors[bias].kind, TensorKind::Static(_)) {
            (row_id, None)
        } else {
            // A computed bias: reshape it in the graph (the row tensor is native then).
            plan.tensors[row_id].kind = TensorKind::Native;
            let reshape = PlanOp {
                name: fresh(&mut op_names, &format!("{}_bias_row", fc.name)),
                onnx_node: fc.onnx_node.clone(),
                type_name: op::RESHAPE,
                inputs: vec![bias],
                outputs: vec![row_id],
                params: vec![],
            };
            (row_id, Some(reshape))
        };
        let matmul = PlanOp {
            name,
            onnx_node: fc.onnx_node.clone(),
            type_name: op::MAT_MUL,
            inputs: vec![fc.inputs[0], fc.inputs[1]],
            outputs: vec![product_id],
            params,
        };
        let add = PlanOp {
            name: fresh(&mut op_names, &format!("{}_bias", fc.name)),
            onnx_node: fc.onnx_node.clone(),
            type_name: op::ELEMENT_WISE_ADD,
            inputs: vec![product_id, row_in],
            outputs: fc.outputs.clone(),
            params: vec![],
        };
        let replacement: Vec<PlanOp> = row_op.into_iter().chain([matmul, add]).collect();
        plan.ops.splice(i..=i, replacement);
    }
}

fn fresh(names: &mut HashSet<String>, hint: &str) -> String {
    let mut name = hint.to_string();
    let mut k = 1;
    while !names.insert(name.clone()) {
        name = format!("{hint}_{k}");
        k += 1;
    }
    name
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::ir::tensor::Tensor;
    use crate::ops::test_util::{lower, lower_with};
    use crate::testing::{rand_f32, ModelBuilder};
    use crate::LowerOptions;

    /// `x @ W` reshaped to `[1, 1, 1, S, D]` and expanded over two heads (`repeat_kv`).
    fn repeat_kv(s: usize, d: usize, bias: bool) -> ModelBuilder {
        let mut b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, s as i64, 64])
            .init("w", Tensor::from_f32(vec![64, d], &rand_f32(1, 64 * d)))
            .init(
                "u",
                Tensor::from_i64(vec![5], &[1, 1, 1, s as i64, d as i64]),
            )
            .init(
                "e",
                Tensor::from_i64(vec![5], &[1, 1, 2, s as i64, d as i64]),
            )
            .node("MatMul", &["x", "w"], &["m"], &[]);
        let mut head = "m";
        if bias {
            b = b
                .init("b", Tensor::from_f32(vec![d], &rand_f32(2, d)))
                .node("Add", &["m", "b"], &["mb"], &[]);
            head = "mb";
        }
        b.node("Reshape", &[head, "u"], &["r"], &[])
            .node("Expand", &["r", "e"], &["y"], &[])
            .output("y")
    }

    #[test]
    fn square_fully_connected_read_as_rank5_becomes_matmul() {
        let p = lower(&repeat_kv(32, 32, false));
        assert!(!p.op_types().contains(&"FullyConnected"), "{}", p.dump());
        assert!(
            p.dump()
                .contains("MatMul(x_reshaped:f32[32, 64], static MatMul_0_w:f32[32, 64]) transpose_in0=false transpose_in1=true"),
            "{}",
            p.dump()
        );
    }

    #[test]
    fn square_fully_connected_with_bias_adds_it_as_a_row() {
        let p = lower_with(&repeat_kv(16, 16, true), &LowerOptions::default());
        assert!(!p.op_types().contains(&"FullyConnected"), "{}", p.dump());
        let d = p.dump();
        assert!(d.contains("ElementWiseAdd("), "{d}");
        assert!(d.contains(":f32[1, 16]"), "{d}");
    }

    #[test]
    fn other_fully_connected_shapes_are_left_alone() {
        let p = lower(&repeat_kv(32, 16, false));
        assert!(p.op_types().contains(&"FullyConnected"), "{}", p.dump());
    }
}
