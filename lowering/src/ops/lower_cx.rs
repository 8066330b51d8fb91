//! The state the rules share while one graph is lowered: plan tensors for IR values, fresh
//! names, and the helpers that emit QNN ops.

use std::collections::HashSet;

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::{Graph, Node, ValueId};
use crate::plan::{storable, Param, Plan, PlanIo, PlanOp, PlanTensor, TensorId, TensorKind};
use crate::qnn_names::op;
use crate::Backend;

/// State shared by the rules while one graph is lowered.
pub struct LowerCx<'g> {
    pub g: &'g Graph,
    pub backend: Backend,
    pub plan: Plan,
    tensor_of: Vec<Option<TensorId>>,
    names: HashSet<String>,
    op_names: HashSet<String>,
}

fn fresh(set: &mut HashSet<String>, hint: &str) -> String {
    let hint = if hint.is_empty() { "t" } else { hint };
    if set.insert(hint.to_string()) {
        return hint.to_string();
    }
    let mut i = 1;
    loop {
        let n = format!("{hint}_{i}");
        if set.insert(n.clone()) {
            return n;
        }
        i += 1;
    }
}

/// Rank-0 tensors become `[1]`: QNN ops expect rank >= 1 and the element count is the same.
pub fn plan_shape(shape: &[usize]) -> Vec<u32> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.iter().map(|&d| d as u32).collect()
    }
}

impl<'g> LowerCx<'g> {
    pub fn new(g: &'g Graph, backend: Backend, host_dtypes: &[DType]) -> Result<LowerCx<'g>> {
        let mut cx = LowerCx {
            g,
            backend,
            plan: Plan::default(),
            tensor_of: vec![None; g.values.len()],
            names: HashSet::new(),
            op_names: HashSet::new(),
        };
        for (k, &v) in g.inputs.iter().enumerate() {
            let val = g.value(v);
            let dtype = storable(val.dtype).ok_or_else(|| {
                crate::error::invalid(format!(
                    "graph input '{}' has dtype {}, which QNN cannot hold",
                    val.name, val.dtype
                ))
            })?;
            let id = cx.push_tensor(
                &val.name.clone(),
                dtype,
                &val.shape.clone(),
                TensorKind::Input,
            );
            cx.tensor_of[v] = Some(id);
            cx.plan.inputs.push(PlanIo {
                tensor: id,
                onnx_name: val.name.clone(),
                host_dtype: host_dtypes.get(k).copied().unwrap_or(val.dtype),
                shape: val.shape.clone(),
            });
        }
        Ok(cx)
    }

    fn push_tensor(
        &mut self,
        hint: &str,
        dtype: DType,
        shape: &[usize],
        kind: TensorKind,
    ) -> TensorId {
        let name = fresh(&mut self.names, hint);
        self.plan.tensors.push(PlanTensor {
            name,
            dtype,
            shape: plan_shape(shape),
            kind,
        });
        self.plan.tensors.len() - 1
    }

    /// The plan tensor holding IR value `v`, created on first use.
    pub fn tensor(&mut self, node: &Node, v: ValueId) -> Result<TensorId> {
        if let Some(t) = self.tensor_of[v] {
            return Ok(t);
        }
        let val = self.g.value(v);
        let id = if let Some(t) = &val.konst {
            self.static_tensor(node, &val.name.clone(), t)?
        } else {
            let dtype = storable(val.dtype).ok_or_else(|| {
                node.err_dtype(format!(
                    "tensor '{}' has dtype {}, which QNN graphs cannot hold",
                    val.name, val.dtype
                ))
            })?;
            let kind = if self.g.is_output(v) {
                TensorKind::Output
            } else {
                TensorKind::Native
            };
            self.push_tensor(&val.name.clone(), dtype, &val.shape.clone(), kind)
        };
        self.tensor_of[v] = Some(id);
        Ok(id)
    }

    pub fn input(&mut self, node: &Node, i: usize) -> Result<TensorId> {
        let v = node
            .input(i)
            .ok_or_else(|| node.err_invalid(format!("input {i} is missing")))?;
        self.tensor(node, v)
    }

    pub fn output(&mut self, node: &Node, i: usize) -> Result<TensorId> {
        let v = node
            .output(i)
            .ok_or_else(|| node.err_invalid(format!("output {i} is missing")))?;
        self.tensor(node, v)
    }

    /// Static tensor from a constant. Wide types are narrowed: i64/u64 must fit 32 bits, f64
    /// and bf16 become f32.
    pub fn static_tensor(&mut self, node: &Node, hint: &str, t: &Tensor) -> Result<TensorId> {
        let t = match t.dtype {
            DType::F64 | DType::BF16 => t.cast(DType::F32),
            DType::I64 | DType::U64 => {
                let v = t.to_i64();
                if v.iter().any(|&x| i32::try_from(x).is_err()) {
                    return Err(node.err_dtype(format!(
                        "constant '{hint}' has int64 values outside the int32 range"
                    )));
                }
                t.cast(DType::I32)
            }
            _ => t.clone(),
        };
        let dtype = storable(t.dtype).expect("narrowed above");
        let id = self.push_tensor(hint, dtype, &t.shape, TensorKind::Static(t.shared_bytes()));
        Ok(id)
    }

    /// A fresh intermediate tensor for decompositions.
    pub fn native(&mut self, hint: &str, dtype: DType, shape: &[usize]) -> TensorId {
        self.push_tensor(hint, dtype, shape, TensorKind::Native)
    }

    pub fn op(
        &mut self,
        node: &Node,
        type_name: &'static str,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
        params: Vec<(&'static str, Param)>,
    ) {
        let name = fresh(&mut self.op_names, &node.name);
        self.plan.ops.push(PlanOp {
            name,
            onnx_node: node.name.clone(),
            type_name,
            inputs,
            outputs,
            params,
        });
    }

    pub fn shape(&self, node: &Node, i: usize) -> Vec<usize> {
        node.input(i)
            .map(|v| self.g.shape(v).to_vec())
            .unwrap_or_default()
    }

    pub fn out_shape(&self, node: &Node, i: usize) -> Vec<usize> {
        node.output(i)
            .map(|v| self.g.shape(v).to_vec())
            .unwrap_or_default()
    }

    pub fn dtype(&self, node: &Node, i: usize) -> DType {
        node.input(i).map(|v| self.g.dtype(v)).unwrap_or(DType::F32)
    }

    pub fn pdtype(&self, node: &Node, i: usize) -> Result<DType> {
        let d = self.dtype(node, i);
        storable(d).ok_or_else(|| {
            node.err_dtype(format!(
                "input {i} has dtype {d}, which QNN graphs cannot hold"
            ))
        })
    }

    pub fn konst(&self, node: &Node, i: usize) -> Option<&'g Tensor> {
        node.input(i).and_then(|v| self.g.konst(v))
    }

    /// A scalar constant in the float type `like` (the node's compute type), shaped `[1]`.
    pub fn scalar(&mut self, node: &Node, hint: &str, v: f64, like: DType) -> Result<TensorId> {
        let t = Tensor::from_f64_as(like, vec![1], &[v]);
        self.static_tensor(node, &format!("{}_{hint}", node.name), &t)
    }

    /// Input `i` reshaped to `rank` by leading 1s, so that QNN's elementwise ops see equal
    /// ranks (constants are reshaped statically, activations with a Reshape op).
    pub fn input_at_rank(&mut self, node: &Node, i: usize, rank: usize) -> Result<TensorId> {
        let s = self.shape(node, i);
        if s.len() >= rank {
            return self.input(node, i);
        }
        let mut ns = vec![1; rank - s.len()];
        ns.extend_from_slice(&s);
        if let Some(t) = self.konst(node, i) {
            let hint = format!("{}_r{rank}", self.g.value(node.input(i).unwrap()).name);
            return self.static_tensor(node, &hint, &t.with_shape(ns));
        }
        let src = self.input(node, i)?;
        let dt = self.plan.tensors[src].dtype;
        let hint = format!("{}_r{rank}", self.plan.tensors[src].name);
        let out = self.native(&hint, dt, &ns);
        self.op(node, op::RESHAPE, vec![src], vec![out], vec![]);
        Ok(out)
    }

    /// Emits a Reshape of tensor `src` to `shape`, returning the new tensor. A static `src`
    /// becomes another static tensor over the same bytes instead: a Reshape op on a constant
    /// costs a dispatch on every execute (mobilenet_v3_small had 18, one per HardSigmoid
    /// parameter).
    pub fn reshape(&mut self, node: &Node, src: TensorId, shape: &[usize]) -> TensorId {
        let dt = self.plan.tensors[src].dtype;
        let hint = format!("{}_reshaped", self.plan.tensors[src].name);
        if let TensorKind::Static(bytes) = &self.plan.tensors[src].kind {
            let bytes = bytes.clone();
            return self.push_tensor(&hint, dt, shape, TensorKind::Static(bytes));
        }
        let out = self.native(&hint, dt, shape);
        self.op(node, op::RESHAPE, vec![src], vec![out], vec![]);
        out
    }

    /// Emits `qnn_op(inputs)` into a fresh native tensor of `shape` and `dtype`.
    pub fn emit(
        &mut self,
        node: &Node,
        qnn_op: &'static str,
        inputs: Vec<TensorId>,
        dtype: DType,
        shape: &[usize],
        params: Vec<(&'static str, Param)>,
    ) -> TensorId {
        let out = self.native(&format!("{}_{}", node.name, qnn_op), dtype, shape);
        self.op(node, qnn_op, inputs, vec![out], params);
        out
    }

    /// Shape of a plan tensor as usize (rank-0 values appear as `[1]`).
    pub fn tshape(&self, t: TensorId) -> Vec<usize> {
        self.plan.tensors[t]
            .shape
            .iter()
            .map(|&d| d as usize)
            .collect()
    }

    pub fn tensor_dtype(&self, t: TensorId) -> DType {
        self.plan.tensors[t].dtype
    }

    /// Registers the plan outputs once all rules have run.
    pub(crate) fn finish(mut self, host_dtypes: &[DType]) -> Result<Plan> {
        for (k, &v) in self.g.outputs.iter().enumerate() {
            let val = self.g.value(v);
            let Some(t) = self.tensor_of[v] else {
                return Err(crate::error::invalid(format!(
                    "graph output '{}' was not produced",
                    val.name
                )));
            };
            self.plan.outputs.push(PlanIo {
                tensor: t,
                onnx_name: val.name.clone(),
                host_dtype: host_dtypes.get(k).copied().unwrap_or(val.dtype),
                shape: val.shape.clone(),
            });
        }
        crate::plan::workarounds::apply(&mut self.plan, self.backend);
        // A rule that builds an op its tensors disagree with is a lowering bug; QNN might
        // finalize such a graph and crash at execute, so it is refused here, naming the node
        // (a fallback error for the front ends).
        if let Err((i, why)) = self.plan.check_ops() {
            let o = &self.plan.ops[i];
            let op_type = self
                .g
                .nodes
                .iter()
                .find(|n| n.name == o.onnx_node)
                .map(|n| n.op_type.clone())
                .unwrap_or_default();
            return Err(crate::LowerError::UnsupportedOp {
                node: o.onnx_node.clone(),
                op_type,
                reason: format!(
                    "lowered to an inconsistent QNN {} op (a qnnx bug, please report it): {why}",
                    o.type_name
                ),
            });
        }
        self.plan.validate().map_err(|e| {
            crate::error::invalid(format!("internal: lowered plan is inconsistent: {e}"))
        })?;
        Ok(self.plan)
    }

    /// Makes `v`, a graph output that no op writes (an input or constant passed through),
    /// the result of a copy.
    pub(crate) fn copy_to_output(&mut self, v: ValueId) -> Result<()> {
        let val = self.g.value(v);
        let node = Node::new(format!("{}_copy", val.name), "Identity");
        let src = self.tensor(&node, v)?;
        let dtype = self.plan.tensors[src].dtype;
        let out = self.push_tensor(
            &format!("{}_out", val.name),
            dtype,
            &val.shape.clone(),
            TensorKind::Output,
        );
        self.op(&node, op::RESHAPE, vec![src], vec![out], vec![]);
        self.tensor_of[v] = Some(out);
        Ok(())
    }
}

/// Converts a list of usize to u32 param values, failing on overflow.
pub fn u32s(node: &Node, what: &str, v: &[usize]) -> Result<Vec<u32>> {
    v.iter()
        .map(|&x| {
            u32::try_from(x).map_err(|_| node.err_attr(what, format!("value {x} does not fit u32")))
        })
        .collect()
}
