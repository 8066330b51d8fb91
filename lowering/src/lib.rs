#![forbid(unsafe_code)]
//! ONNX graphs lowered to QNN op lists, in pipeline order: [`frontend`] decodes the ONNX
//! protobuf and loads it into the [`ir`] graph; [`lower`] runs the [`passes`] over it (shape
//! inference, constant folding and expansion through each op's registry entry in [`ops`], then
//! fusions, layout and dtype passes) and lowers every node with its entry's rule into a
//! [`plan::Plan`], which the engine crate (`qnnx-engine`) turns into QNN API calls. [`check`]
//! reports every node that cannot run on a backend. Nothing here touches QNN: ONNX in, `Plan`
//! out.

pub mod dtype;
pub mod error;
pub mod frontend;
pub mod ir;
pub mod ops;
pub mod passes;
pub mod plan;
pub mod qnn_names;
pub mod quantize;
pub mod table;
pub mod testing;

pub use frontend::{load, onnx};
pub use ir::tensor;

use std::collections::{BTreeMap, HashMap};

pub use dtype::DType;
pub use error::{LowerError, Unsupported};
pub use frontend::load::{Model, ModelSource};
pub use plan::Plan;

/// The QNN backend a plan is lowered for (each has its op table, `lowering/op-tables/<name>.toml`).
pub use qnnx_types::BackendKind as Backend;

#[derive(Clone, Debug)]
pub struct LowerOptions {
    pub backend: Backend,
    /// Compute in fp16: float weights are stored as f16 and float activations are f16. Graph
    /// I/O keeps the model's dtypes; Casts are inserted inside the graph.
    pub fp16: bool,
    /// Static shapes for graph inputs, by name. Required for inputs with symbolic dims.
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// In a quantized (QDQ) model, float graph inputs that the model quantizes first and float
    /// outputs it dequantizes last are passed and returned as their integers (the encoding's
    /// storage type) instead of being converted in the graph.
    pub quantized_io: bool,
    /// Also return every float or quantized intermediate that holds a model value (see
    /// [`plan::PlanTensor::origin`]) as a graph output, after the model's outputs: for
    /// calibrating a quantization and comparing layers. Their [`plan::PlanIo::onnx_name`] is the
    /// model value's name (a value may appear more than once, in NCHW and NHWC order).
    pub observe: bool,
    /// Graph inputs fixed to a constant at compile time, by name, with their value as the
    /// front ends spell it (`3`, `0.5`, `true`, `1,2,3`; see [`passes::fix_inputs::parse_value`];
    /// the dtype is the input's). They leave the compiled graph and are listed in
    /// [`Plan::assumed_inputs`].
    pub fix_inputs: BTreeMap<String, String>,
}

impl Default for LowerOptions {
    fn default() -> LowerOptions {
        LowerOptions {
            backend: Backend::Htp,
            fp16: false,
            input_shapes: BTreeMap::new(),
            quantized_io: false,
            observe: false,
            fix_inputs: BTreeMap::new(),
        }
    }
}

/// What [`lower`] accepts: a loaded model or a source to load.
pub enum LowerInput {
    Model(Box<Model>),
    Source(ModelSource),
}

impl From<Model> for LowerInput {
    fn from(m: Model) -> Self {
        LowerInput::Model(Box::new(m))
    }
}
impl<T: Into<ModelSource>> From<T> for LowerInput {
    fn from(s: T) -> Self {
        LowerInput::Source(s.into())
    }
}

/// Lowers a model to a QNN plan for `opts.backend`. Collects every unsupported node; one
/// problem is returned as its own error, several as [`LowerError::Unsupported`].
pub fn lower(model: impl Into<LowerInput>, opts: &LowerOptions) -> Result<Plan, LowerError> {
    let model = match model.into() {
        LowerInput::Model(m) => *m,
        LowerInput::Source(s) => Model::load(s)?,
    };
    lower_timed(&model, opts).map(|(plan, _)| plan)
}

/// Milliseconds [`lower_timed`] spent in each of its two halves.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LowerTimes {
    /// Shape inference, folding, expansion, layout and the other passes over the IR.
    pub passes_ms: f64,
    /// The per-op rules that turn the prepared IR into the plan.
    pub rules_ms: f64,
}

/// [`lower`] of a loaded model, timing its passes and its op rules (the compile-time
/// breakdown of `qnnx compile --timings`).
pub fn lower_timed(model: &Model, opts: &LowerOptions) -> Result<(Plan, LowerTimes), LowerError> {
    let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e3;
    let start = std::time::Instant::now();
    let prepared = passes::prepare(model, opts)?;
    let passes_ms = ms(start);
    let start = std::time::Instant::now();
    let (plan, mut errors) = lower_graph(&prepared, opts.backend, opts.observe);
    let times = LowerTimes {
        passes_ms,
        rules_ms: ms(start),
    };
    match errors.len() {
        0 => plan.map(|p| (p, times)),
        1 => Err(errors.pop().expect("len is 1")),
        _ => Err(LowerError::Unsupported(
            errors
                .iter()
                .flat_map(|e| e.to_unsupported("", ""))
                .collect(),
        )),
    }
}

/// Every node of `model` that cannot run on `backend`, without touching QNN. A model-level
/// problem is one entry with an empty node. An input with symbolic dims is such a problem: no
/// size is guessed for it (a guess of 1 makes kernels and concatenations that fit at the real
/// size look unsupported); [`check_with`] takes their shapes.
pub fn check(model: &Model, backend: Backend) -> Vec<Unsupported> {
    let opts = LowerOptions {
        backend,
        ..Default::default()
    };
    match check_with(model, &opts) {
        Ok(v) => v,
        Err(e) => e.to_unsupported("", ""),
    }
}

/// Like [`check`] with explicit options (input shapes, fixed inputs); model-level problems are
/// errors.
pub fn check_with(model: &Model, opts: &LowerOptions) -> Result<Vec<Unsupported>, LowerError> {
    let prepared = passes::prepare(model, opts)?;
    let (_, errors) = lower_graph(&prepared, opts.backend, false);
    Ok(errors
        .iter()
        .flat_map(|e| e.to_unsupported("", ""))
        .collect())
}

/// The dtype and shape lowering infers for every value of `model` it can (after constant
/// folding, If inlining and the inputs resolved from declared shapes; before fusions, layout
/// and dtype rewrites), by value name. Values downstream of a node that could not be inferred
/// are missing.
pub fn infer_shapes(
    model: &Model,
    opts: &LowerOptions,
) -> Result<BTreeMap<String, (DType, Vec<usize>)>, LowerError> {
    let inferred = passes::infer(model, opts)?;
    Ok(inferred
        .graph
        .values
        .iter()
        .filter(|v| v.known)
        .map(|v| (v.name.clone(), (v.dtype, v.shape.clone())))
        .collect())
}

fn lower_graph(
    p: &passes::Prepared,
    backend: Backend,
    observe: bool,
) -> (Result<Plan, LowerError>, Vec<LowerError>) {
    let g = &p.graph;
    let table = match table::OpTable::get(backend) {
        Ok(t) => t,
        Err(e) => return (Err(e), vec![]),
    };
    let mut errors: Vec<LowerError> = Vec::new();
    if backend != Backend::Htp && g.nodes.iter().any(|n| n.quantized) {
        let e = LowerError::InvalidModel(format!(
            "this model is quantized (QuantizeLinear/DequantizeLinear pairs); quantized graphs run \
             on the HTP, not on {}: use the HTP, or a float model",
            backend.label()
        ));
        return (Err(e), vec![]);
    }
    let infer_errors: HashMap<&str, &LowerError> =
        p.node_errors.iter().map(|(n, e)| (n.as_str(), e)).collect();
    let mut cx = match ops::LowerCx::new(g, backend, &p.input_host_dtypes) {
        Ok(cx) => cx,
        Err(e) => return (Err(e), vec![]),
    };
    for node in &g.nodes {
        // The `qdq` pass's conversions are not model ops: no table lists them.
        let internal = ops::quant::is_internal(&node.op_type);
        // The `qdq` pass says better than the table why a QuantizeLinear or DequantizeLinear
        // (a dynamic scale, an encoding QNN lacks) cannot be absorbed.
        let qdq = matches!(node.op_type.as_str(), "QuantizeLinear" | "DequantizeLinear");
        if let Some(e) = infer_errors.get(node.name.as_str()).filter(|_| qdq) {
            errors.push(clone_err(e));
            continue;
        }
        if let Err(e) = if internal {
            Ok(())
        } else {
            table.check_node(node, g, backend)
        } {
            errors.push(e);
            continue;
        }
        if let Some(e) = infer_errors.get(node.name.as_str()) {
            errors.push(clone_err(e));
            continue;
        }
        if node
            .inputs
            .iter()
            .flatten()
            .chain(node.outputs.iter().flatten())
            .any(|&v| !g.values[v].known)
        {
            // Downstream of a node already reported.
            continue;
        }
        let def = ops::def(&node.op_type);
        let Some(rule) = def.and_then(|d| ops::rule(d, backend)) else {
            errors.push(no_rule(node, def, backend));
            continue;
        };
        if let Err(e) = rule(&mut cx, node) {
            errors.push(e);
        }
    }
    if !errors.is_empty() {
        return (Err(LowerError::Unsupported(vec![])), errors);
    }
    for &o in &g.outputs {
        let produced = g.nodes.iter().any(|n| n.outputs.contains(&Some(o)));
        if !produced {
            if let Err(e) = cx.copy_to_output(o) {
                return (Err(e), vec![]);
            }
        }
    }
    let plan = cx.finish(&p.output_host_dtypes, observe).map(|mut plan| {
        plan.assumed_inputs = p.assumed.clone();
        plan
    });
    (plan, vec![])
}

/// Why `node` reached lowering without a rule for `backend`.
fn no_rule(node: &ir::Node, def: Option<&ops::OpDef>, backend: Backend) -> LowerError {
    match def {
        // The expansion did not run: `passes::expand` reports why when it refused the node.
        Some(d) if d.expand.is_some() => node.err_op(format!(
            "{} is lowered by expanding it, which did not happen here",
            node.op_type
        )),
        Some(d) if d.fold.is_some() => node
            .err_op("its inputs must be constant after folding (dynamic shapes are not supported)"),
        _ => node.err_op(format!(
            "no lowering rule for {} on {}",
            node.op_type,
            backend.label()
        )),
    }
}

fn clone_err(e: &LowerError) -> LowerError {
    match e {
        LowerError::UnsupportedOp {
            node,
            op_type,
            reason,
        } => LowerError::UnsupportedOp {
            node: node.clone(),
            op_type: op_type.clone(),
            reason: reason.clone(),
        },
        LowerError::UnsupportedAttr {
            node,
            op_type,
            attr,
            reason,
        } => LowerError::UnsupportedAttr {
            node: node.clone(),
            op_type: op_type.clone(),
            attr: attr.clone(),
            reason: reason.clone(),
        },
        LowerError::UnsupportedDtype {
            node,
            op_type,
            reason,
        } => LowerError::UnsupportedDtype {
            node: node.clone(),
            op_type: op_type.clone(),
            reason: reason.clone(),
        },
        LowerError::InvalidModel(m) => LowerError::InvalidModel(m.clone()),
        LowerError::Unsupported(v) => LowerError::Unsupported(v.clone()),
    }
}
