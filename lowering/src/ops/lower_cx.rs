//! The state the rules share while one graph is lowered: plan tensors for IR values, fresh
//! names, and the helpers that emit QNN ops.

use std::collections::HashSet;

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::quant::{derive_per_tensor, quantize_tensor};
use crate::ir::tensor::Tensor;
use crate::ir::{Graph, Node, ValueId};
use crate::plan::{storable, Param, Plan, PlanIo, PlanOp, PlanTensor, TensorId, TensorKind};
use crate::qnn_names::{op, param};
use crate::Backend;
use qnnx_types::Encoding;

/// State shared by the rules while one graph is lowered.
pub struct LowerCx<'g> {
    pub g: &'g Graph,
    pub backend: Backend,
    pub plan: Plan,
    tensor_of: Vec<Option<TensorId>>,
    names: HashSet<String>,
    op_names: HashSet<String>,
}

/// A plan name from `hint` ([`crate::ir::fresh_name`]); a plan tensor or op is never unnamed.
fn fresh(set: &mut HashSet<String>, hint: &str) -> String {
    crate::ir::fresh_name(set, if hint.is_empty() { "t" } else { hint })
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
            if let Some(q) = val.quant.as_ref().filter(|q| q.is_sub_byte()) {
                // Measured: QNN 2.51 builds such a graph but the HTP computes it wrongly (a
                // 4-bit ReLU wrapped 1.2 to 0 instead of saturating to 0.7).
                return Err(crate::error::invalid(format!(
                    "value '{}' is quantized to {} (4-bit activations), which the HTP does not \
                     compute correctly; 4-bit is for constant weights: quantize activations to \
                     8 or 16 bits",
                    val.name, q.storage
                )));
            }
            let (dtype, quant) = match &val.quant {
                Some(q) => (q.storage, Some(q.clone())),
                None => (dtype, None),
            };
            let id = cx.push_tensor(
                &val.name.clone(),
                dtype,
                &val.shape.clone(),
                TensorKind::Input,
                quant,
            );
            cx.tensor_of[v] = Some(id);
            cx.plan.tensors[id].origin = val.origin.clone();
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
        quant: Option<Encoding>,
    ) -> TensorId {
        let name = fresh(&mut self.names, hint);
        self.plan.tensors.push(PlanTensor {
            name,
            dtype,
            shape: plan_shape(shape),
            kind,
            quant,
            origin: None,
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
            if val.quant.is_none() && node.quantized && t.dtype.is_float() {
                // A constant of a quantized op the model gave no encoding (an Add's operand, a
                // PRelu slope): derived for this use, so it is not cached for other nodes.
                return self.static_tensor(node, &val.name.clone(), t);
            }
            let q = if node.quantized {
                val.quant.clone()
            } else {
                None
            };
            self.static_tensor_enc(node, &val.name.clone(), t, q)?
        } else {
            let dtype = storable(val.dtype).ok_or_else(|| {
                node.err_dtype(format!(
                    "tensor '{}' has dtype {}, which QNN graphs cannot hold",
                    val.name, val.dtype
                ))
            })?;
            if let Some(q) = val.quant.as_ref().filter(|q| q.is_sub_byte()) {
                // As for graph inputs above.
                return Err(node.err_dtype(format!(
                    "value '{}' is quantized to {} (4-bit activations), which the HTP does not \
                     compute correctly; 4-bit is for constant weights: quantize activations to \
                     8 or 16 bits",
                    val.name, q.storage
                )));
            }
            let kind = if self.g.is_output(v) {
                TensorKind::Output
            } else {
                TensorKind::Native
            };
            let (dtype, quant) = match &val.quant {
                Some(q) => (q.storage, Some(q.clone())),
                None => (dtype, None),
            };
            let id = self.push_tensor(&val.name.clone(), dtype, &val.shape.clone(), kind, quant);
            self.plan.tensors[id].origin = val.origin.clone();
            id
        };
        self.tensor_of[v] = Some(id);
        Ok(id)
    }

    /// The encoding of input `i` of `node` when it is quantized.
    pub fn enc(&self, node: &Node, i: usize) -> Option<&'g Encoding> {
        node.input(i).and_then(|v| self.g.value(v).quant.as_ref())
    }

    /// The integer type a quantized node's activations are stored in (of its first quantized
    /// input, else its first output): constants derived for it use the same.
    fn act_storage(&self, node: &Node) -> DType {
        node.inputs
            .iter()
            .chain(&node.outputs)
            .flatten()
            .filter(|&&v| self.g.value(v).konst.is_none())
            .find_map(|&v| self.g.value(v).quant.as_ref().map(|q| q.storage))
            .unwrap_or(DType::U8)
    }

    /// Constant input `i` with its dims permuted by `perm` (weights into QNN's layouts), as a
    /// static tensor; a quantized node's keeps the value's encoding, its axis moved with the
    /// dims.
    pub fn permuted_const(
        &mut self,
        node: &Node,
        i: usize,
        perm: &[usize],
        hint: &str,
    ) -> Result<Option<TensorId>> {
        let Some(t) = self.konst(node, i) else {
            return Ok(None);
        };
        let q = self
            .enc(node, i)
            .filter(|_| node.quantized)
            .map(|e| e.permuted(perm));
        let t = t.transpose(perm);
        self.static_tensor_enc(node, hint, &t, q).map(Some)
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
    /// and bf16 become f32. A float constant of a quantized node gets a derived per-tensor
    /// encoding (the node's activation type, min/max of the values).
    pub fn static_tensor(&mut self, node: &Node, hint: &str, t: &Tensor) -> Result<TensorId> {
        let q = (node.quantized && t.dtype.is_float())
            .then(|| derive_per_tensor(t, self.act_storage(node)));
        self.static_tensor_enc(node, hint, t, q)
    }

    /// Static tensor from a constant, stored fixed-point in `quant` when given (its real values
    /// are quantized, saturating).
    pub fn static_tensor_enc(
        &mut self,
        node: &Node,
        hint: &str,
        t: &Tensor,
        quant: Option<Encoding>,
    ) -> Result<TensorId> {
        if let Some(q) = quant {
            q.check_shape(&t.shape).map_err(|e| {
                node.err_dtype(format!(
                    "constant '{hint}' of shape {:?}: encoding {e}",
                    t.shape
                ))
            })?;
            let qt = quantize_tensor(t, &q);
            let id = self.push_tensor(
                hint,
                q.storage,
                &qt.shape,
                TensorKind::Static(qt.shared_bytes()),
                Some(q),
            );
            return Ok(id);
        }
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
        let id = self.push_tensor(
            hint,
            dtype,
            &t.shape,
            TensorKind::Static(t.shared_bytes()),
            None,
        );
        Ok(id)
    }

    /// A NULL tensor (an optional op input left out, [`TensorKind::Null`]); one may fill several
    /// inputs of several ops. `dtype` is the op's compute type, for the plan's dump only.
    pub fn null(&mut self, hint: &str, dtype: DType) -> TensorId {
        self.push_tensor(hint, dtype, &[0], TensorKind::Null, None)
    }

    /// A fresh intermediate tensor for decompositions.
    pub fn native(&mut self, hint: &str, dtype: DType, shape: &[usize]) -> TensorId {
        self.push_tensor(hint, dtype, shape, TensorKind::Native, None)
    }

    /// A fresh intermediate stored fixed-point in `enc`.
    pub fn native_enc(&mut self, hint: &str, shape: &[usize], enc: Encoding) -> TensorId {
        self.push_tensor(hint, enc.storage, shape, TensorKind::Native, Some(enc))
    }

    /// The encoding of output `i` of `node` when it is quantized.
    pub fn enc_out(&self, node: &Node, i: usize) -> Option<&'g Encoding> {
        node.output(i).and_then(|v| self.g.value(v).quant.as_ref())
    }

    /// A fresh intermediate with the element type and encoding of tensor `like` (a reshaped or
    /// transposed view of it).
    pub fn native_like(&mut self, hint: &str, like: TensorId, shape: &[usize]) -> TensorId {
        let t = &self.plan.tensors[like];
        let (dtype, quant) = (t.dtype, t.quant.clone());
        self.push_tensor(hint, dtype, shape, TensorKind::Native, quant)
    }

    /// Emits a Transpose of tensor `src` by `perm` (output dim `i` is input dim `perm[i]`).
    pub fn transpose(&mut self, node: &Node, src: TensorId, perm: &[usize]) -> TensorId {
        let s = self.tshape(src);
        let shape: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
        let hint = format!("{}_Transpose", node.name);
        let out = self.native_like(&hint, src, &shape);
        let perm: Vec<u32> = perm.iter().map(|&p| p as u32).collect();
        self.op(
            node,
            op::TRANSPOSE,
            vec![src],
            vec![out],
            vec![(param::PERM, Param::u32_vec(&perm))],
        );
        out
    }

    /// Emits a StridedSlice of `src` into `out`: `ranges` holds (begin, end, step) per dim of
    /// `src`; `end_mask` and `shrink_axes` are QNN's bit masks (an end taken as the dim's limit,
    /// a dim dropped from the output).
    pub fn strided_slice(
        &mut self,
        node: &Node,
        src: TensorId,
        out: TensorId,
        ranges: &[[i32; 3]],
        end_mask: u32,
        shrink_axes: u32,
    ) {
        let ranges = Param::Tensor {
            dtype: DType::I32,
            shape: vec![ranges.len() as u32, 3],
            data: ranges
                .iter()
                .flatten()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        };
        self.op(
            node,
            op::STRIDED_SLICE,
            vec![src],
            vec![out],
            vec![
                (param::RANGES, ranges),
                (param::BEGIN_MASK, Param::u32(0)),
                (param::END_MASK, Param::u32(end_mask)),
                (param::SHRINK_AXES, Param::u32(shrink_axes)),
            ],
        );
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
            let t = t.with_shape(ns);
            return match self.enc(node, i).filter(|_| node.quantized) {
                Some(q) => {
                    let mut q = q.clone();
                    q.axis = q.axis.map(|a| a + rank - s.len());
                    self.static_tensor_enc(node, &hint, &t, Some(q))
                }
                None => self.static_tensor(node, &hint, &t),
            };
        }
        let src = self.input(node, i)?;
        let hint = format!("{}_r{rank}", self.plan.tensors[src].name);
        let out = self.native_like(&hint, src, &ns);
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
            // A per-axis encoding cannot follow a reshape in general; static tensors reshaped by
            // rules are scalars and per-tensor constants.
            let quant = self.plan.tensors[src]
                .quant
                .clone()
                .filter(|q| !q.is_per_axis());
            return self.push_tensor(&hint, dt, shape, TensorKind::Static(bytes), quant);
        }
        let out = self.native_like(&hint, src, shape);
        self.op(node, op::RESHAPE, vec![src], vec![out], vec![]);
        out
    }

    /// Emits `qnn_op(inputs)` into a fresh native tensor of `shape` and `dtype`. In a quantized
    /// node, an intermediate stored like the node's output has the output's encoding: such
    /// intermediates are the output before a final Reshape or Transpose (or a partial result of
    /// a chain that ends in it).
    pub fn emit(
        &mut self,
        node: &Node,
        qnn_op: &'static str,
        inputs: Vec<TensorId>,
        dtype: DType,
        shape: &[usize],
        params: Vec<(&'static str, Param)>,
    ) -> TensorId {
        let hint = format!("{}_{}", node.name, qnn_op);
        let quant = node
            .output(0)
            .and_then(|v| self.g.value(v).quant.clone())
            .filter(|q| node.quantized && q.storage == dtype);
        let out = self.push_tensor(&hint, dtype, shape, TensorKind::Native, quant);
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

    /// Whether plan tensor `t` is stored quantized (fixed point with an encoding).
    pub fn is_quantized(&self, t: TensorId) -> bool {
        self.plan.tensors[t].quant.is_some()
    }

    /// Registers the plan outputs once all rules have run (with `observe`, the intermediates
    /// holding model values too: see [`crate::LowerOptions::observe`]).
    pub(crate) fn finish(mut self, host_dtypes: &[DType], observe: bool) -> Result<Plan> {
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
        if observe {
            for (id, t) in self.plan.tensors.iter_mut().enumerate() {
                let Some(o) = &t.origin else { continue };
                // A quantized tensor is observed as its integers; its encoding in the plan
                // gives the values (a QDQ model's per-layer comparison reads them).
                if t.kind != TensorKind::Native || !(t.dtype.is_float() || t.quant.is_some()) {
                    continue;
                }
                t.kind = TensorKind::Output;
                let shape = t.shape.iter().map(|&d| d as usize).collect();
                self.plan.outputs.push(PlanIo {
                    tensor: id,
                    onnx_name: o.name.clone(),
                    host_dtype: t.dtype,
                    shape,
                });
            }
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
        let (dtype, quant) = (
            self.plan.tensors[src].dtype,
            self.plan.tensors[src].quant.clone(),
        );
        let out = self.push_tensor(
            &format!("{}_out", val.name),
            dtype,
            &val.shape.clone(),
            TensorKind::Output,
            quant,
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
