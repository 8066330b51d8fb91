//! The QNN plan: a backend-neutral list of tensors and ops that `emit.rs` turns 1:1 into QNN
//! API calls.
//!
//! # What the emitter must do
//!
//! 1. Create one graph. For every `PlanTensor`, in `tensors` order, call
//!    `tensorCreateGraphTensor` with `name`, the `Qnn_DataType_t` of `dtype`, `shape` as `dimensions` (rank =
//!    `shape.len()`; a rank-0 tensor is passed with rank 0), dense data format, RAW memory, the
//!    quantization of `quant` (none: undefined; per tensor: `SCALE_OFFSET`; per axis:
//!    `AXIS_SCALE_OFFSET`; the data type is then the fixed-point type of `dtype`), and a tensor type from
//!    `kind`: `Input` → `APP_WRITE`, `Output` → `APP_READ`, `Native` → `NATIVE`,
//!    `Static(bytes)` → `STATIC` with `clientBuf = bytes` (the backend copies them; docs/qnn-notes.md
//!    §8.10), `Null` → `NULL` with data type UNDEFINED and dims `[0]` (an optional input left
//!    out). Keep the returned id per `TensorId` (ids bind I/O at execute, §8.7).
//! 2. For every `Param::Tensor` of every op, create one more `STATIC` tensor (§8.6: tensor params
//!    must be registered before `graphAddNode`). Its name must be unique in the graph; use
//!    [`PlanOp::param_tensor_name`].
//! 3. For every `PlanOp`, in order (ops are topologically sorted), build a `Qnn_OpConfig_t` with
//!    `name`, package [`PACKAGE`], `type_name`, the params (scalar params as `Qnn_Scalar_t` of the
//!    given type; tensor params referencing the tensors of step 2), inputs and outputs by id.
//!    Call `backendValidateOpConfig` first and treat any non-zero result as fatal, reporting
//!    `onnx_node` (§8.5: `graphAddNode` does not validate). Then `graphAddNode`.
//! 4. `graphFinalize`. At execute, bind `inputs[i].tensor` / `outputs[i].tensor` by id, and
//!    check buffer sizes against [`PlanTensor::nbytes`] yourself (§8.8).
//! 5. Host-side conversion: when `PlanIo::host_dtype` differs from the tensor's dtype (int64
//!    model I/O narrowed to int32), convert at the boundary, range-checking int64 → int32.
//!
//! All multi-byte data is little-endian. Bool is one byte per element (0 or 1).

use std::fmt::Write as _;
use std::sync::Arc;

pub mod assumed;
pub mod check;
pub mod workarounds;

pub use assumed::{Accept, AssumedInput, Source};

/// QNN op package of every op in a plan.
pub const PACKAGE: &str = "qti.aisw";

pub type TensorId = usize;

pub use crate::ir::Origin;
pub use crate::DType;
pub use qnnx_types::Encoding;

/// `d` if a QNN graph tensor can hold it (f32, f16, 8/16/32-bit integers, bool, and 4-bit
/// integers when quantized); `None` for the types the passes must have converted (i64, u64, f64,
/// bf16).
pub fn storable(d: DType) -> Option<DType> {
    match d {
        DType::F32
        | DType::F16
        | DType::I8
        | DType::U8
        | DType::I16
        | DType::U16
        | DType::I32
        | DType::U32
        | DType::Bool
        | DType::I4
        | DType::U4 => Some(d),
        DType::I64 | DType::U64 | DType::F64 | DType::BF16 => None,
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum TensorKind {
    /// Graph input (`QNN_TENSOR_TYPE_APP_WRITE`).
    Input,
    /// Graph output (`QNN_TENSOR_TYPE_APP_READ`). May also feed other ops.
    Output,
    /// Intermediate (`QNN_TENSOR_TYPE_NATIVE`).
    Native,
    /// Weights and other constants (`QNN_TENSOR_TYPE_STATIC`), little-endian, exactly
    /// `nbytes()` long.
    Static(Arc<[u8]>),
    /// An optional op input left out (`QNN_TENSOR_TYPE_NULL`): no data, shape `[0]`, only read
    /// by ops (QNN Lstm's layer-norm, peephole and projection inputs); made by
    /// [`crate::ops::LowerCx::null`].
    Null,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PlanTensor {
    /// Unique within the plan.
    pub name: String,
    /// The element type of the data; for a quantized tensor, the integers' type.
    pub dtype: DType,
    pub shape: Vec<u32>,
    pub kind: TensorKind,
    /// Fixed-point encoding (`quant.storage == dtype`), or `None` for float and plain integer
    /// tensors.
    pub quant: Option<Encoding>,
    /// The model value this tensor holds (in its order or permuted), if any: calibration and
    /// per-layer comparisons find model values in the plan through it.
    pub origin: Option<Origin>,
}

impl PlanTensor {
    pub fn numel(&self) -> usize {
        self.shape.iter().map(|&d| d as usize).product()
    }

    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F32(f32),
    U32(u32),
    I32(i32),
    Bool(bool),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// `QNN_PARAMTYPE_SCALAR`.
    Scalar(Scalar),
    /// `QNN_PARAMTYPE_TENSOR`: a STATIC tensor the emitter creates (see module docs).
    Tensor {
        dtype: DType,
        shape: Vec<u32>,
        data: Vec<u8>,
    },
}

impl Param {
    pub fn f32(v: f32) -> Param {
        Param::Scalar(Scalar::F32(v))
    }
    pub fn u32(v: u32) -> Param {
        Param::Scalar(Scalar::U32(v))
    }
    pub fn i32(v: i32) -> Param {
        Param::Scalar(Scalar::I32(v))
    }
    pub fn bool(v: bool) -> Param {
        Param::Scalar(Scalar::Bool(v))
    }
    /// A `UINT_32` tensor param of the given shape.
    pub fn u32s(shape: &[usize], v: &[u32]) -> Param {
        assert_eq!(
            shape.iter().product::<usize>(),
            v.len(),
            "param shape and data differ"
        );
        Param::Tensor {
            dtype: DType::U32,
            shape: shape.iter().map(|&d| d as u32).collect(),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
    /// A 1-D `UINT_32` tensor param.
    pub fn u32_vec(v: &[u32]) -> Param {
        Param::u32s(&[v.len()], v)
    }
    /// A 1-D `FLOAT_32` tensor param.
    pub fn f32_vec(v: &[f32]) -> Param {
        Param::Tensor {
            dtype: DType::F32,
            shape: vec![v.len() as u32],
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
    pub fn i32_vec(v: &[i32]) -> Param {
        Param::Tensor {
            dtype: DType::I32,
            shape: vec![v.len() as u32],
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PlanOp {
    /// Unique QNN node name.
    pub name: String,
    /// The ONNX node this op was lowered from, for error messages.
    pub onnx_node: String,
    /// QNN op type (`QnnOpDef.h` name), package [`PACKAGE`].
    pub type_name: &'static str,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    pub params: Vec<(&'static str, Param)>,
}

impl PlanOp {
    /// Name for the STATIC tensor that carries tensor param `param` of this op.
    pub fn param_tensor_name(&self, param: &str) -> String {
        format!("{}__{}", self.name, param)
    }
}

/// A graph input or output.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanIo {
    pub tensor: TensorId,
    /// The ONNX graph input/output name.
    pub onnx_name: String,
    /// The dtype the caller passes or receives. Differs from the tensor's dtype only for
    /// int64 I/O narrowed to i32 (the runtime converts); float I/O is converted in-graph.
    pub host_dtype: DType,
    /// The shape the caller passes or receives: the model's, rank 0 included (the graph tensor
    /// of a rank-0 value is `[1]`: QNN ops take rank >= 1).
    pub shape: Vec<usize>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub tensors: Vec<PlanTensor>,
    pub ops: Vec<PlanOp>,
    /// The graph inputs, in ONNX order (the model's inputs less `assumed_inputs`).
    pub inputs: Vec<PlanIo>,
    pub outputs: Vec<PlanIo>,
    /// Model inputs the graph does not take because it was built for one value of each (fixed
    /// at compile time, or resolved from the model's declared shapes); in ONNX order. A caller
    /// may still pass them: the host checks them ([`AssumedInput::check`]) and does not hand
    /// them to QNN.
    pub assumed_inputs: Vec<AssumedInput>,
}

impl Plan {
    /// Checks the invariants the emitter relies on. Lowering calls this before returning.
    pub fn validate(&self) -> Result<(), String> {
        let mut produced = vec![false; self.tensors.len()];
        let mut names = std::collections::HashSet::new();
        for (i, t) in self.tensors.iter().enumerate() {
            if !names.insert(t.name.as_str()) {
                return Err(format!("tensor name '{}' is used twice", t.name));
            }
            if storable(t.dtype).is_none() {
                return Err(format!(
                    "tensor '{}' is {}, which QNN graphs cannot hold",
                    t.name, t.dtype
                ));
            }
            if let Some(q) = &t.quant {
                let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
                if q.storage != t.dtype {
                    return Err(format!(
                        "tensor '{}' is {} but its encoding stores {}",
                        t.name, t.dtype, q.storage
                    ));
                }
                q.check_shape(&shape)
                    .map_err(|e| format!("tensor '{}': encoding {e}", t.name))?;
            }
            match &t.kind {
                TensorKind::Static(b) => {
                    if b.len() != t.nbytes() {
                        return Err(format!(
                            "static tensor '{}' has {} bytes, needs {}",
                            t.name,
                            b.len(),
                            t.nbytes()
                        ));
                    }
                    produced[i] = true;
                }
                TensorKind::Input | TensorKind::Null => produced[i] = true,
                TensorKind::Output | TensorKind::Native => {}
            }
        }
        let mut op_names = std::collections::HashSet::new();
        for op in &self.ops {
            if !op_names.insert(op.name.as_str()) {
                return Err(format!("op name '{}' is used twice", op.name));
            }
            for &i in &op.inputs {
                if !produced.get(i).copied().unwrap_or(false) {
                    return Err(format!(
                        "op '{}' reads tensor {i} before it is produced",
                        op.name
                    ));
                }
            }
            for &o in &op.outputs {
                match self.tensors.get(o).map(|t| &t.kind) {
                    Some(TensorKind::Native | TensorKind::Output) if !produced[o] => {
                        produced[o] = true
                    }
                    _ => {
                        return Err(format!(
                            "op '{}' writes tensor {o}, which is not a fresh native/output tensor",
                            op.name
                        ))
                    }
                }
            }
            for (p, v) in &op.params {
                if let Param::Tensor { dtype, shape, data } = v {
                    let n: usize = shape.iter().map(|&d| d as usize).product();
                    if n * dtype.size() != data.len() {
                        return Err(format!(
                            "param '{p}' of op '{}' has a bad byte count",
                            op.name
                        ));
                    }
                }
            }
        }
        for io in &self.outputs {
            if !produced[io.tensor] {
                return Err(format!("output '{}' is never produced", io.onnx_name));
            }
        }
        self.check_ops().map_err(|(i, e)| {
            let o = &self.ops[i];
            format!(
                "op '{}' ({}, ONNX node '{}') {e}",
                o.name, o.type_name, o.onnx_node
            )
        })
    }

    /// The first op whose tensors disagree with what it computes ([`check::check_op`]): its
    /// index and why. [`Plan::validate`] includes this.
    pub fn check_ops(&self) -> Result<(), (usize, String)> {
        for (i, o) in self.ops.iter().enumerate() {
            check::check_op(o, &self.tensors).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    /// A stable text rendering for snapshot tests.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        let tn = |i: &TensorId| {
            let t = &self.tensors[*i];
            let k = match t.kind {
                TensorKind::Static(_) => "static ",
                TensorKind::Null => "null ",
                TensorKind::Input | TensorKind::Output | TensorKind::Native => "",
            };
            let ty = qnnx_types::tensor_type_name(t.dtype, t.quant.is_some());
            // A block-wise encoding is named: it decides which ops may read the tensor.
            let blocked = match &t.quant {
                Some(q) if q.is_blocked() => format!(" <{q}>"),
                _ => String::new(),
            };
            format!("{}{}:{}{:?}{blocked}", k, t.name, ty, t.shape)
        };
        for io in &self.inputs {
            let _ = writeln!(s, "input {}", tn(&io.tensor));
        }
        for a in &self.assumed_inputs {
            let _ = writeln!(
                s,
                "assumed {} = {}",
                a.onnx_name,
                assumed::fmt_value(&a.value)
            );
        }
        for op in &self.ops {
            let ins: Vec<String> = op.inputs.iter().map(tn).collect();
            let outs: Vec<String> = op.outputs.iter().map(tn).collect();
            let _ = write!(s, "{}({})", op.type_name, ins.join(", "));
            for (k, p) in &op.params {
                let _ = write!(s, " {k}={}", fmt_param(p));
            }
            let _ = writeln!(s, " -> {}", outs.join(", "));
        }
        for io in &self.outputs {
            let _ = writeln!(s, "output {}", tn(&io.tensor));
        }
        s
    }

    /// Op type names in order, for compact assertions.
    pub fn op_types(&self) -> Vec<&'static str> {
        self.ops.iter().map(|o| o.type_name).collect()
    }
}

fn fmt_param(p: &Param) -> String {
    match p {
        Param::Scalar(Scalar::F32(v)) => format!("{v}f"),
        Param::Scalar(Scalar::U32(v)) => format!("{v}u"),
        Param::Scalar(Scalar::I32(v)) => format!("{v}i"),
        Param::Scalar(Scalar::Bool(v)) => format!("{v}"),
        Param::Tensor { dtype, shape, data } => {
            let vals: Vec<String> = match dtype {
                DType::U32 => data
                    .chunks(4)
                    .map(|c| u32::from_le_bytes(c.try_into().unwrap()).to_string())
                    .collect(),
                DType::I32 => data
                    .chunks(4)
                    .map(|c| i32::from_le_bytes(c.try_into().unwrap()).to_string())
                    .collect(),
                _ => vec![format!("<{} bytes>", data.len())],
            };
            format!("{}{:?}{{{}}}", dtype.name(), shape, vals.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(name: &str, shape: &[u32], kind: TensorKind) -> PlanTensor {
        PlanTensor {
            name: name.into(),
            dtype: DType::F32,
            shape: shape.to_vec(),
            kind,
            quant: None,
            origin: None,
        }
    }

    fn plan(write_null: bool) -> Plan {
        let (ins, outs) = if write_null {
            (vec![0], vec![1])
        } else {
            (vec![0, 1], vec![2])
        };
        Plan {
            tensors: vec![
                tensor("x", &[2], TensorKind::Input),
                tensor("null", &[0], TensorKind::Null),
                tensor("y", &[2], TensorKind::Output),
            ],
            ops: vec![PlanOp {
                name: "op".into(),
                onnx_node: "n".into(),
                type_name: "Op",
                inputs: ins,
                outputs: outs,
                params: vec![],
            }],
            inputs: vec![PlanIo {
                tensor: 0,
                onnx_name: "x".into(),
                host_dtype: DType::F32,
                shape: vec![2],
            }],
            outputs: vec![PlanIo {
                tensor: 2,
                onnx_name: "y".into(),
                host_dtype: DType::F32,
                shape: vec![2],
            }],
            assumed_inputs: vec![],
        }
    }

    #[test]
    fn null_tensors_are_read_and_never_written() {
        let p = plan(false);
        assert_eq!(p.validate(), Ok(()));
        assert!(
            p.dump()
                .contains("Op(x:f32[2], null null:f32[0]) -> y:f32[2]"),
            "{}",
            p.dump()
        );
        let e = plan(true).validate().unwrap_err();
        assert!(e.contains("not a fresh native/output"), "{e}");
    }
}
