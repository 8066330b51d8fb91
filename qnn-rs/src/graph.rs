//! `GraphBuilder` (tensors, validated nodes, finalize) and `Graph` (execute).

use std::collections::HashSet;
use std::ffi::CString;
use std::sync::{Arc, Mutex};

use qnn_sys::Handle;

use crate::api::qnn_call;
use crate::backend::Backend;
use crate::context::ContextInner;
use crate::error::{Error, Result};
use crate::profile::Profile;
use crate::tensor::{
    check_buffer, DType, Element, Input, Output, Quantization, RawTensor, TensorInfo, TensorKind,
};

/// Held around `graphExecute` for libraries that cannot execute two graphs at once
/// ([`qnn_sys::releases::Release::htp_concurrent_execute`]).
static SERIAL_EXECUTE: Mutex<()> = Mutex::new(());

/// The op package of QNN's built-in ops.
pub const DEFAULT_PACKAGE: &str = "qti.aisw";

/// A tensor of a graph under construction (an index into the builder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorRef(usize);

/// A scalar op parameter (`Qnn_Scalar_t`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    F32(f32),
    U32(u32),
    I32(i32),
    U16(u16),
    I16(i16),
    U8(u8),
    I8(i8),
    Bool(bool),
}

impl Scalar {
    fn raw(self) -> qnn_sys::Scalar {
        use qnn_sys::consts::data_type as dt;
        use qnn_sys::ScalarValue as V;
        let (data_type, value) = match self {
            Scalar::F32(v) => (dt::FLOAT_32, V { f32: v }),
            Scalar::U32(v) => (dt::UINT_32, V { u32: v }),
            Scalar::I32(v) => (dt::INT_32, V { i32: v }),
            Scalar::U16(v) => (dt::UINT_16, V { u16: v }),
            Scalar::I16(v) => (dt::INT_16, V { i16: v }),
            Scalar::U8(v) => (dt::UINT_8, V { u8: v }),
            Scalar::I8(v) => (dt::INT_8, V { i8: v }),
            Scalar::Bool(v) => (dt::BOOL_8, V { bool8: v as u8 }),
        };
        // Zero the whole union first so no uninitialised bytes cross into C.
        let mut s = qnn_sys::Scalar {
            data_type,
            value: V { u64: 0 },
        };
        s.value = value;
        s
    }
}

/// An op parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Scalar(Scalar),
    /// A static tensor parameter; registered with `tensorCreateGraphTensor` before the node is
    /// added, as QNN requires (docs/qnn-notes.md gotcha 6).
    Tensor {
        dtype: DType,
        dims: Vec<u32>,
        data: Vec<u8>,
    },
}

/// One op to add: name, type, tensors and params.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub package: String,
    pub op_type: String,
    pub inputs: Vec<TensorRef>,
    pub outputs: Vec<TensorRef>,
    pub params: Vec<(String, ParamValue)>,
}

impl Node {
    /// A node of QNN's built-in package.
    pub fn new(name: impl Into<String>, op_type: impl Into<String>) -> Node {
        Node {
            name: name.into(),
            package: DEFAULT_PACKAGE.into(),
            op_type: op_type.into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            params: Vec::new(),
        }
    }
    /// Appends inputs.
    pub fn inputs(mut self, t: &[TensorRef]) -> Node {
        self.inputs.extend_from_slice(t);
        self
    }
    /// Appends outputs.
    pub fn outputs(mut self, t: &[TensorRef]) -> Node {
        self.outputs.extend_from_slice(t);
        self
    }
    /// Adds a scalar parameter.
    pub fn scalar(mut self, name: impl Into<String>, v: Scalar) -> Node {
        self.params.push((name.into(), ParamValue::Scalar(v)));
        self
    }
    /// Adds a tensor parameter of element type `T`.
    pub fn tensor_param<T: Element>(
        mut self,
        name: impl Into<String>,
        dims: &[u32],
        data: &[T],
    ) -> Node {
        self.params.push((
            name.into(),
            ParamValue::Tensor {
                dtype: T::DTYPE,
                dims: dims.to_vec(),
                data: Input::new(data).bytes.to_vec(),
            },
        ));
        self
    }
}

/// Builds one graph. Methods take `&mut self`: QNN graph construction is not re-entrant.
///
/// Only [`GraphBuilder::finalize`] yields a [`Graph`], so executing an unfinalized graph (QNN's
/// error 6023) cannot be written:
///
/// ```compile_fail
/// # fn f(g: qnn::GraphBuilder) {
/// g.execute(&[], &mut []);
/// # }
/// ```
pub struct GraphBuilder {
    ctx: Arc<ContextInner>,
    handle: Handle,
    name: String,
    tensors: Vec<TensorInfo>,
    tensor_names: HashSet<String>,
    node_names: HashSet<String>,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
    /// What the block-wise encodings of created tensors point at: QNN 2.51 keeps the pointer
    /// `tensorCreateGraphTensor` is given and reads through it again at graphAddNode (freed
    /// memory there fails with "Invalid Block expansion scales configuration"), so it lives as
    /// long as the builder, through finalize.
    kept: Vec<crate::tensor::Blockwise>,
}

// SAFETY: the graph handle is used only through `&mut self` (or after finalize, by `Graph`);
// `kept` is owned memory only QNN reads, during calls made through `&mut self`.
unsafe impl Send for GraphBuilder {}

impl GraphBuilder {
    pub(crate) fn new(ctx: Arc<ContextInner>, name: &str) -> Result<GraphBuilder> {
        let b = &ctx.backend;
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument(format!("graph name {name:?} contains NUL")))?;
        let mut customs = b.config.graph_customs()?;
        let configs = customs.list();
        let list_ptr = configs.as_ptr();
        let mut handle: Handle = std::ptr::null_mut();
        let _lock = b.building();
        // SAFETY: name and config list outlive the call; the context handle is live.
        unsafe {
            qnn_call!(b.api, graphCreate(ctx.handle, cname.as_ptr(), list_ptr, &mut handle);
                || format!("graph {name:?}"))
        }?;
        drop(_lock);
        Ok(GraphBuilder {
            ctx,
            handle,
            name: name.to_string(),
            tensors: Vec::new(),
            tensor_names: HashSet::new(),
            node_names: HashSet::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            kept: Vec::new(),
        })
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A graph input (`APP_WRITE`).
    pub fn input(&mut self, name: &str, dtype: DType, dims: &[u32]) -> Result<TensorRef> {
        self.tensor(
            name,
            TensorKind::Input,
            dtype,
            dims,
            Quantization::None,
            None,
        )
    }

    /// A graph output (`APP_READ`).
    pub fn output(&mut self, name: &str, dtype: DType, dims: &[u32]) -> Result<TensorRef> {
        self.tensor(
            name,
            TensorKind::Output,
            dtype,
            dims,
            Quantization::None,
            None,
        )
    }

    /// An intermediate tensor (`NATIVE`).
    pub fn native(&mut self, name: &str, dtype: DType, dims: &[u32]) -> Result<TensorRef> {
        self.tensor(
            name,
            TensorKind::Native,
            dtype,
            dims,
            Quantization::None,
            None,
        )
    }

    /// A constant (`STATIC`) of element type `T`; QNN copies the data.
    pub fn constant<T: Element>(
        &mut self,
        name: &str,
        dims: &[u32],
        data: &[T],
    ) -> Result<TensorRef> {
        let bytes = Input::new(data).bytes;
        self.tensor(
            name,
            TensorKind::Static,
            T::DTYPE,
            dims,
            Quantization::None,
            Some(bytes),
        )
    }

    /// A NULL tensor (`QNN_TENSOR_TYPE_NULL`) to pass for an optional op input that is left out
    /// (QNN Lstm's layer-norm, peephole and projection weights): dims `[0]` and data type
    /// UNDEFINED, as QNN's converters write it. One NULL tensor may fill several inputs.
    pub fn null(&mut self, name: &str) -> Result<TensorRef> {
        // The dtype is not passed to QNN (`RawTensor::new` writes UNDEFINED for NULL).
        self.tensor(
            name,
            TensorKind::Null,
            DType::F32,
            &[0],
            Quantization::None,
            None,
        )
    }

    /// Any tensor, with quantization and, for `Static`, its data. The data size must equal the
    /// tensor's size (QNN would over-read a short buffer).
    pub fn tensor(
        &mut self,
        name: &str,
        kind: TensorKind,
        dtype: DType,
        dims: &[u32],
        quantization: Quantization,
        data: Option<&[u8]>,
    ) -> Result<TensorRef> {
        if !self.tensor_names.insert(name.to_string()) {
            return Err(Error::InvalidArgument(format!(
                "graph {:?}: tensor name {name:?} is used twice",
                self.name
            )));
        }
        if kind == TensorKind::Null && (dims != [0] || quantization.is_quantized()) {
            return Err(Error::InvalidArgument(format!(
                "graph {:?}: NULL tensor {name:?} must have dims [0] and no encoding, has {dims:?}",
                self.name
            )));
        }
        if dims.contains(&0) && kind != TensorKind::Null {
            // The HTP emulator dies with SIGFPE finalizing a graph with an empty tensor.
            return Err(Error::InvalidArgument(format!(
                "graph {:?}: tensor {name:?} has shape {dims:?}; QNN tensors cannot be empty",
                self.name
            )));
        }
        let mut info = TensorInfo {
            id: 0,
            name: name.to_string(),
            kind,
            dtype,
            dims: dims.to_vec(),
            quantization,
        };
        match (kind, data) {
            (TensorKind::Static, Some(d)) => check_buffer(&info, dtype, d.len(), "constant")?,
            (TensorKind::Static, None) => {
                return Err(Error::InvalidArgument(format!(
                    "constant {name:?} needs data"
                )))
            }
            (_, Some(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "tensor {name:?}: only constants carry data at creation"
                )))
            }
            _ => {}
        }
        info.id = self.create_tensor(&info, data)?;
        let idx = self.tensors.len();
        self.tensors.push(info);
        match kind {
            TensorKind::Input => self.inputs.push(idx),
            TensorKind::Output => self.outputs.push(idx),
            _ => {}
        }
        Ok(TensorRef(idx))
    }

    fn create_tensor(&mut self, info: &TensorInfo, data: Option<&[u8]>) -> Result<u32> {
        let mut raw = RawTensor::new(info, data)?;
        let b = &self.ctx.backend;
        let _lock = b.building();
        // SAFETY: `raw` and the data it points at live across the call; QNN writes the id.
        unsafe {
            qnn_call!(b.api, tensorCreateGraphTensor(self.handle, raw.raw_mut());
                || format!("tensor {:?} of graph {:?}", info.name, self.name))
        }?;
        // SAFETY: we built a v2 tensor.
        let id = unsafe { raw.raw().v.v2.id };
        self.kept.extend(raw.take_blockwise());
        Ok(id)
    }

    /// The description of a tensor of this graph.
    pub fn info(&self, t: TensorRef) -> &TensorInfo {
        &self.tensors[t.0]
    }

    /// Validates `node` with `backendValidateOpConfig`, then adds it (`graphAddNode`). QNN's
    /// addNode accepts ops the backend cannot run and fails only at finalize, or computes
    /// garbage (docs/qnn-notes.md gotchas 4 and 5), so a validation failure is an error here, naming
    /// the node and op.
    pub fn add_node(&mut self, node: &Node) -> Result<()> {
        let graph_name = self.name.clone();
        let what = || {
            format!(
                "node {:?} ({}) of graph {:?}",
                node.name, node.op_type, graph_name
            )
        };
        if !self.node_names.insert(node.name.clone()) {
            return Err(Error::InvalidArgument(format!(
                "{}: node name used twice",
                what()
            )));
        }
        for &t in node.inputs.iter().chain(&node.outputs) {
            if t.0 >= self.tensors.len() {
                return Err(Error::InvalidArgument(format!(
                    "{}: unknown tensor",
                    what()
                )));
            }
        }
        let cstr = |s: &str| {
            CString::new(s)
                .map_err(|_| Error::InvalidArgument(format!("{}: {s:?} contains NUL", what())))
        };
        let name = cstr(&node.name)?;
        let package = cstr(&node.package)?;
        let op_type = cstr(&node.op_type)?;

        // Tensor params become STATIC graph tensors first; scalars need no registration.
        let mut param_names = Vec::with_capacity(node.params.len());
        let mut param_tensors: Vec<Option<RawTensor>> = Vec::with_capacity(node.params.len());
        for (pname, value) in &node.params {
            param_names.push(cstr(pname)?);
            param_tensors.push(match value {
                ParamValue::Scalar(_) => None,
                ParamValue::Tensor { dtype, dims, data } => {
                    let tname = format!("{}__{}", node.name, pname);
                    if !self.tensor_names.insert(tname.clone()) {
                        return Err(Error::InvalidArgument(format!(
                            "{}: tensor name {tname:?} is taken",
                            what()
                        )));
                    }
                    let mut info = TensorInfo {
                        id: 0,
                        name: tname,
                        kind: TensorKind::Static,
                        dtype: *dtype,
                        dims: dims.clone(),
                        quantization: Quantization::None,
                    };
                    check_buffer(&info, *dtype, data.len(), "tensor parameter")?;
                    info.id = self.create_tensor(&info, Some(data))?;
                    Some(RawTensor::new(&info, Some(data))?)
                }
            });
        }
        let mut params: Vec<qnn_sys::Param> = node
            .params
            .iter()
            .zip(&param_names)
            .zip(&param_tensors)
            .map(|(((_, value), pname), tensor)| match (value, tensor) {
                (ParamValue::Scalar(s), _) => qnn_sys::Param {
                    param_type: qnn_sys::consts::PARAMTYPE_SCALAR,
                    name: pname.as_ptr(),
                    value: zeroed_param_value(|v| v.scalar = s.raw()),
                },
                (ParamValue::Tensor { .. }, Some(t)) => qnn_sys::Param {
                    param_type: qnn_sys::consts::PARAMTYPE_TENSOR,
                    name: pname.as_ptr(),
                    value: qnn_sys::ParamValue { tensor: *t.raw() },
                },
                (ParamValue::Tensor { .. }, None) => {
                    unreachable!("tensor params were registered above")
                }
            })
            .collect();
        let raws = |list: &[TensorRef]| -> Result<Vec<RawTensor>> {
            list.iter()
                .map(|t| RawTensor::new(&self.tensors[t.0], None))
                .collect()
        };
        let in_owned = raws(&node.inputs)?;
        let out_owned = raws(&node.outputs)?;
        let mut ins: Vec<qnn_sys::Tensor> = in_owned.iter().map(|t| *t.raw()).collect();
        let mut outs: Vec<qnn_sys::Tensor> = out_owned.iter().map(|t| *t.raw()).collect();
        let op = qnn_sys::OpConfig {
            version: qnn_sys::consts::OPCONFIG_VERSION_1,
            v1: qnn_sys::OpConfigV1 {
                name: name.as_ptr(),
                package_name: package.as_ptr(),
                type_name: op_type.as_ptr(),
                num_of_params: params.len() as u32,
                params: params.as_mut_ptr(),
                num_of_inputs: ins.len() as u32,
                input_tensors: ins.as_mut_ptr(),
                num_of_outputs: outs.len() as u32,
                output_tensors: outs.as_mut_ptr(),
            },
        };
        let backend = Backend {
            inner: self.ctx.backend.clone(),
        };
        let b = &self.ctx.backend;
        let _lock = b.building();
        backend.validate(op, what)?;
        // SAFETY: every pointer in `op` targets memory owned by locals of this function.
        unsafe { qnn_call!(b.api, graphAddNode(self.handle, op); what) }
    }

    /// `graphFinalize`: prepares the graph for execution.
    pub fn finalize(self) -> Result<Graph> {
        self.finalize_with(None)
    }

    /// [`GraphBuilder::finalize`], recording finalize events in `profile` (on the HTP: the
    /// finalize time and, where the library has them, its performance estimates).
    pub fn finalize_profiled(self, profile: &Profile) -> Result<Graph> {
        self.finalize_with(Some(profile))
    }

    fn finalize_with(self, profile: Option<&Profile>) -> Result<Graph> {
        let b = &self.ctx.backend;
        let p = profile.map_or(std::ptr::null_mut(), Profile::handle);
        {
            let _lock = b.building();
            // QNN 2.47 to 2.49 print their finalize stages on stdout, which is a program's
            // output (`qnnx --json`): send it to stderr around the call.
            let _stdout = b
                .release
                .is_some_and(|r| b.kind == qnnx_types::BackendKind::Htp && r.htp_finalize_prints)
                .then(qnn_sys::loader::stdout_to_stderr);
            // SAFETY: live graph handle; the profile handle is NULL or a live profile of this
            // backend, borrowed for the call; no signal.
            unsafe {
                qnn_call!(b.api, graphFinalize(self.handle, p, std::ptr::null_mut());
                    || format!("graph {:?}", self.name))
            }?;
        }
        let pick = |idx: &[usize]| {
            idx.iter()
                .map(|&i| self.tensors[i].clone())
                .collect::<Vec<_>>()
        };
        Graph::new(
            self.ctx.clone(),
            self.handle,
            self.name.clone(),
            pick(&self.inputs),
            pick(&self.outputs),
        )
    }
}

fn zeroed_param_value(set: impl FnOnce(&mut qnn_sys::ParamValue)) -> qnn_sys::ParamValue {
    // A zeroed Tensor is the largest member: start from it so no bytes are uninitialised.
    // SAFETY: all-zero is a valid `Qnn_Tensor_t` (null pointers, zero counts).
    let mut v = qnn_sys::ParamValue {
        tensor: unsafe { std::mem::zeroed() },
    };
    set(&mut v);
    v
}

struct ExecState {
    ins: Vec<RawTensor>,
    outs: Vec<RawTensor>,
}

/// A finalized or retrieved graph, ready to execute. `Send + Sync`: calls on one graph are
/// serialised by an internal lock (QNN asks callers to serialise per graph handle); different
/// graphs execute concurrently.
pub struct Graph {
    ctx: Arc<ContextInner>,
    handle: Handle,
    name: String,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    state: Mutex<ExecState>,
}

// SAFETY: the handle is only used under `state`'s lock.
unsafe impl Send for Graph {}
// SAFETY: see above.
unsafe impl Sync for Graph {}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("name", &self.name)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl Graph {
    fn new(
        ctx: Arc<ContextInner>,
        handle: Handle,
        name: String,
        inputs: Vec<TensorInfo>,
        outputs: Vec<TensorInfo>,
    ) -> Result<Graph> {
        // Execute descriptors are built once; each call only points them at its buffers.
        let ins = inputs
            .iter()
            .map(|t| RawTensor::new(t, None))
            .collect::<Result<_>>()?;
        let outs = outputs
            .iter()
            .map(|t| RawTensor::new(t, None))
            .collect::<Result<_>>()?;
        Ok(Graph {
            ctx,
            handle,
            name,
            inputs,
            outputs,
            state: Mutex::new(ExecState { ins, outs }),
        })
    }

    pub(crate) fn retrieve(
        ctx: Arc<ContextInner>,
        name: &str,
        inputs: Vec<TensorInfo>,
        outputs: Vec<TensorInfo>,
    ) -> Result<Graph> {
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument(format!("graph name {name:?} contains NUL")))?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: live context; valid name and out-pointer.
        unsafe {
            qnn_call!(ctx.backend.api, graphRetrieve(ctx.handle, cname.as_ptr(), &mut handle);
                || format!("graph {name:?}"))
        }?;
        Graph::new(ctx, handle, name.to_string(), inputs, outputs)
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Inputs, in the order `execute` takes them.
    pub fn inputs(&self) -> &[TensorInfo] {
        &self.inputs
    }

    /// Outputs, in the order `execute` fills them.
    pub fn outputs(&self) -> &[TensorInfo] {
        &self.outputs
    }

    /// `graphExecute`. Every buffer is checked against its tensor (count, dtype, exact byte size)
    /// before QNN is called: QNN itself ignores `dataSize` and would overflow a short output.
    pub fn execute(&self, inputs: &[Input<'_>], outputs: &mut [Output<'_>]) -> Result<()> {
        self.execute_with(inputs, outputs, None)
    }

    /// [`Graph::execute`], recording execute events in `profile` (at
    /// [`ProfileLevel::Detailed`](crate::ProfileLevel::Detailed), one per node).
    pub fn execute_profiled(
        &self,
        inputs: &[Input<'_>],
        outputs: &mut [Output<'_>],
        profile: &Profile,
    ) -> Result<()> {
        self.execute_with(inputs, outputs, Some(profile))
    }

    fn execute_with(
        &self,
        inputs: &[Input<'_>],
        outputs: &mut [Output<'_>],
        profile: Option<&Profile>,
    ) -> Result<()> {
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(Error::InvalidArgument(format!(
                "graph {:?} takes {} inputs and {} outputs, got {} and {}",
                self.name,
                self.inputs.len(),
                self.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        for (info, b) in self.inputs.iter().zip(inputs) {
            check_buffer(info, b.dtype, b.bytes.len(), "input")?;
        }
        for (info, b) in self.outputs.iter().zip(outputs.iter()) {
            check_buffer(info, b.dtype, b.bytes.len(), "output")?;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let ExecState { ins, outs } = &mut *state;
        for (raw, b) in ins.iter_mut().zip(inputs) {
            set_client_buf(raw, b.bytes.as_ptr() as *mut _, b.bytes.len());
        }
        for (raw, b) in outs.iter_mut().zip(outputs.iter_mut()) {
            set_client_buf(raw, b.bytes.as_mut_ptr().cast(), b.bytes.len());
        }
        // The descriptor arrays are contiguous `Qnn_Tensor_t`s (RawTensor keeps its raw struct
        // inline, but with owned data beside it), so copy them into plain arrays for the call.
        let in_arr: Vec<qnn_sys::Tensor> = ins.iter().map(|t| *t.raw()).collect();
        let mut out_arr: Vec<qnn_sys::Tensor> = outs.iter().map(|t| *t.raw()).collect();
        let api = &self.ctx.backend.api;
        // One lock for the process: the graphs may belong to any backend of the library (the
        // emulator's worker threads are shared by all of them).
        let _serial = self
            .ctx
            .backend
            .serial_execute
            .then(|| SERIAL_EXECUTE.lock().unwrap_or_else(|e| e.into_inner()));
        let p = profile.map_or(std::ptr::null_mut(), Profile::handle);
        // SAFETY: input buffers are read-only for QNN (the `*mut` is the C signature), outputs
        // are exclusively borrowed and exactly sized; descriptors point at owned names/dims; the
        // profile handle is NULL or a live profile, borrowed for the call.
        let result = unsafe {
            qnn_call!(api, graphExecute(
                self.handle,
                in_arr.as_ptr(),
                in_arr.len() as u32,
                out_arr.as_mut_ptr(),
                out_arr.len() as u32,
                p,
                std::ptr::null_mut()
            ); || format!("graph {:?}", self.name))
        };
        // Do not leave pointers to the caller's buffers behind.
        for raw in ins.iter_mut().chain(outs.iter_mut()) {
            set_client_buf(raw, std::ptr::null_mut(), 0);
        }
        result
    }
}

fn set_client_buf(raw: &mut RawTensor, data: *mut std::ffi::c_void, len: usize) {
    // Sizes were checked against the tensor, whose byte size fits in u32 (QNN's limit) or the
    // tensor could not have been created; saturate rather than wrap regardless.
    let size = u32::try_from(len).unwrap_or(u32::MAX);
    raw.raw_mut().v.v2.memory.client_buf = qnn_sys::ClientBuffer {
        data,
        data_size: size,
    };
}
