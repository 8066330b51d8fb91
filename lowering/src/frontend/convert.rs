//! Graph conversion: an ONNX `GraphProto` (and its subgraphs) into the IR graph: attributes,
//! value types and declared shapes, constants, topological order, and the checks that no value
//! is read before it is written or written twice.

use std::collections::{BTreeMap, HashMap};

use crate::dtype::{DType, OnnxCode};
use crate::error::{invalid, Result};
use crate::frontend::onnx::{self, attribute_type as at};
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Graph, Node, Value, ValueId};

use super::external::ExternalData;
use super::tensor::{sparse_to_dense, tensor_from_proto};

pub(super) fn convert_attr(
    a: &onnx::AttributeProto,
    ext: &mut ExternalData,
) -> std::result::Result<Attr, String> {
    let ty = match a.r#type {
        Some(t) if t != at::UNDEFINED => t,
        // IR 1/2 writers omitted the type; infer it from the populated field.
        _ => {
            if a.f.is_some() {
                at::FLOAT
            } else if a.i.is_some() {
                at::INT
            } else if a.s.is_some() {
                at::STRING
            } else if a.t.is_some() {
                at::TENSOR
            } else if a.g.is_some() {
                at::GRAPH
            } else if !a.floats.is_empty() {
                at::FLOATS
            } else if !a.ints.is_empty() {
                at::INTS
            } else if !a.strings.is_empty() {
                at::STRINGS
            } else {
                return Err("attribute has no type and no value".into());
            }
        }
    };
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok(match ty {
        at::FLOAT => Attr::Float(a.f.unwrap_or(0.0)),
        at::INT => Attr::Int(a.i.unwrap_or(0)),
        at::STRING => Attr::String(s(a.s.as_deref().unwrap_or(&[]))),
        at::TENSOR => Attr::Tensor(tensor_from_proto(
            a.t.as_ref().ok_or("tensor attribute has no tensor")?,
            ext,
        )?),
        at::FLOATS => Attr::Floats(a.floats.clone()),
        at::INTS => Attr::Ints(a.ints.clone()),
        at::STRINGS => Attr::Strings(a.strings.iter().map(|b| s(b)).collect()),
        at::SPARSE_TENSOR => Attr::Tensor(
            sparse_to_dense(
                a.sparse_tensor
                    .as_ref()
                    .ok_or("sparse attribute has no tensor")?,
                ext,
            )?
            .1,
        ),
        at::GRAPH | at::GRAPHS => Attr::Other("graph"),
        at::TENSORS | at::SPARSE_TENSORS => Attr::Other("tensors"),
        at::TYPE_PROTO | at::TYPE_PROTOS => Attr::Other("type"),
        other => return Err(format!("unknown attribute type {other}")),
    })
}

/// Name, element type, declared dims (`None` when the shape or a dim is symbolic) and the
/// `dim_param` name of each dim that has one.
pub(super) type ValueType = (
    String,
    DType,
    Option<Vec<Option<usize>>>,
    Vec<Option<String>>,
);

pub(super) fn value_type(vi: &onnx::ValueInfoProto, what: &str) -> Result<ValueType> {
    let name = vi.name.clone().unwrap_or_default();
    let tt = vi
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .ok_or_else(|| invalid(format!("{what} '{name}' is not a tensor")))?;
    let code = tt.elem_type.unwrap_or(0);
    let dtype = DType::from_onnx(code).ok_or_else(|| {
        invalid(format!(
            "{what} '{name}' has unsupported element type {code}"
        ))
    })?;
    let dims = match &tt.shape {
        None => None,
        Some(s) => Some(
            s.dim
                .iter()
                .map(|d| match &d.value {
                    // Paddle and older exporters write a dynamic dim as -1: symbolic, like a
                    // dim_param.
                    Some(onnx::DimensionValue::DimValue(-1)) => Ok(None),
                    Some(onnx::DimensionValue::DimValue(v)) => usize::try_from(*v)
                        .map(Some)
                        .map_err(|_| invalid(format!("{what} '{name}' has negative dim {v}"))),
                    _ => Ok(None),
                })
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    let params = tt
        .shape
        .iter()
        .flat_map(|s| &s.dim)
        .map(|d| match &d.value {
            Some(onnx::DimensionValue::DimParam(p)) if !p.is_empty() => Some(p.clone()),
            _ => None,
        })
        .collect();
    Ok((name, dtype, dims, params))
}

/// The declared shapes of `gp`'s outputs and `value_info` (see [`Model::declared_shapes`]).
/// Entries that are not tensors, have no shape, or have a negative dim other than `-1` are
/// left out: a declaration only helps, so a bad one is no reason to refuse the model.
pub(super) fn declared_shapes(gp: &onnx::GraphProto) -> HashMap<String, Vec<Option<usize>>> {
    let mut out = HashMap::new();
    for vi in gp.output.iter().chain(&gp.value_info) {
        let Some(name) = vi.name.clone().filter(|n| !n.is_empty()) else {
            continue;
        };
        let Some(shape) = vi
            .r#type
            .as_ref()
            .and_then(|t| t.tensor_type.as_ref())
            .and_then(|t| t.shape.as_ref())
        else {
            continue;
        };
        let dims: Option<Vec<Option<usize>>> = shape
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(onnx::DimensionValue::DimValue(-1)) => Some(None),
                Some(onnx::DimensionValue::DimValue(v)) => usize::try_from(*v).ok().map(Some),
                _ => Some(None),
            })
            .collect();
        if let Some(dims) = dims {
            out.insert(name, dims);
        }
    }
    out
}

pub(super) type InputDims = Vec<Option<Vec<Option<usize>>>>;

pub(super) type InputDimParams = Vec<Vec<Option<String>>>;

pub(super) fn convert_graph(
    gp: &onnx::GraphProto,
    ext: &mut ExternalData,
) -> Result<(Graph, InputDims, InputDimParams)> {
    let c = convert_scope(gp, ext, false)?;
    Ok((c.graph, c.input_dims, c.input_dim_params))
}

/// A graph as converted: the IR graph, its declared input dims, and (for a subgraph) the names
/// of the enclosing graphs' values it reads, whose placeholders follow its formal inputs in
/// `graph.inputs`.
pub(super) struct Converted {
    graph: Graph,
    input_dims: InputDims,
    input_dim_params: InputDimParams,
    captures: Vec<String>,
}

/// A subgraph attribute (If branch, Loop or Scan body) as an [`Attr::Graph`], and the names of
/// the outer values it reads, which become inputs of its node.
pub(super) fn convert_subgraph(
    gp: &onnx::GraphProto,
    ext: &mut ExternalData,
) -> Result<(crate::ir::SubGraph, Vec<String>)> {
    let c = convert_scope(gp, ext, true)?;
    let formal = c.graph.inputs.len() - c.captures.len();
    Ok((
        crate::ir::SubGraph {
            graph: c.graph,
            formal,
            captures: vec![],
        },
        c.captures,
    ))
}

/// Converts a graph; with `sub`, names it reads but does not define are values of an
/// enclosing graph (captures) rather than errors.
pub(super) fn convert_scope(
    gp: &onnx::GraphProto,
    ext: &mut ExternalData,
    sub: bool,
) -> Result<Converted> {
    let mut g = Graph::default();
    let mut ids: HashMap<String, ValueId> = HashMap::new();
    let define = |g: &mut Graph, ids: &mut HashMap<String, ValueId>, v: Value| -> Result<ValueId> {
        if v.name.is_empty() {
            return Err(invalid("a graph value has an empty name"));
        }
        if ids.contains_key(&v.name) {
            return Err(invalid(format!(
                "value '{}' is defined more than once",
                v.name
            )));
        }
        let name = v.name.clone();
        let mut v = v;
        v.origin = Some(crate::ir::Origin::of(&name));
        let id = g.push_value_raw(v);
        ids.insert(name, id);
        Ok(id)
    };
    let konst = |name: &str, t: Tensor| Value {
        name: name.to_string(),
        dtype: t.dtype,
        shape: t.shape.clone(),
        known: true,
        konst: Some(t),
        quant: None,
        origin: None,
    };

    let mut inits: Vec<(String, Tensor)> = Vec::new();
    for t in &gp.initializer {
        let name = t.name.clone().unwrap_or_default();
        let tensor =
            tensor_from_proto(t, ext).map_err(|e| invalid(format!("initializer '{name}' {e}")))?;
        inits.push((name, tensor));
    }
    for s in &gp.sparse_initializer {
        let values_name = s.values.as_ref().and_then(|v| v.name.as_deref());
        let (name, t) = sparse_to_dense(s, ext).map_err(|e| {
            invalid(format!(
                "sparse initializer '{}': {e}",
                values_name.unwrap_or_default()
            ))
        })?;
        inits.push((name, t));
    }
    let init_names: std::collections::HashSet<&str> =
        inits.iter().map(|(n, _)| n.as_str()).collect();

    let mut input_dims = Vec::new();
    let mut input_dim_params = Vec::new();
    for vi in &gp.input {
        let (name, dtype, dims, params) = value_type(vi, "graph input")?;
        // Before IR 4 initializers were also listed as inputs; they are constants here.
        if init_names.contains(name.as_str()) {
            continue;
        }
        if dtype.is_sub_byte() {
            return Err(invalid(format!(
                "graph input '{name}' is {dtype}: QNN holds 4-bit values only as constant \
                 weights behind a DequantizeLinear; pass the input as int8 or uint8"
            )));
        }
        let known = dims.as_ref().is_some_and(|d| d.iter().all(Option::is_some));
        let shape = dims
            .as_ref()
            .map(|d| d.iter().map(|x| x.unwrap_or(0)).collect())
            .unwrap_or_default();
        let id = define(
            &mut g,
            &mut ids,
            Value {
                name,
                dtype,
                shape,
                known,
                konst: None,
                quant: None,
                origin: None,
            },
        )?;
        g.inputs.push(id);
        input_dims.push(dims);
        input_dim_params.push(params);
    }
    for (name, t) in inits {
        define(&mut g, &mut ids, konst(&name, t))?;
    }

    // Outputs first (nodes may be unsorted), then inputs, so that dangling reads are caught.
    let mut pending = Vec::new();
    for (idx, np) in gp.node.iter().enumerate() {
        let op_type = np.op_type.clone().unwrap_or_default();
        if op_type.is_empty() {
            return Err(invalid(format!("node #{idx} has no op_type")));
        }
        let name = match np.name.as_deref() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => format!("{op_type}_{idx}"),
        };
        let mut attrs = BTreeMap::new();
        let mut reads: Vec<String> = np.input.clone();
        for a in &np.attribute {
            let an = a.name.clone().unwrap_or_default();
            let is_graph = match a.r#type {
                Some(t) if t != at::UNDEFINED => t == at::GRAPH,
                _ => a.g.is_some(),
            };
            if let (true, Some(sg)) = (is_graph, a.g.as_deref()) {
                // A subgraph that does not load (a Loop body over sequences, say) is kept as an
                // attribute that is only reported: its node cannot be lowered either way.
                let v = match convert_subgraph(sg, ext) {
                    Ok((mut sub, captures)) => {
                        for c in captures {
                            let slot = match reads.iter().skip(np.input.len()).position(|r| *r == c)
                            {
                                Some(p) => np.input.len() + p,
                                None => {
                                    reads.push(c);
                                    reads.len() - 1
                                }
                            };
                            sub.captures.push(slot);
                        }
                        Attr::Graph(std::sync::Arc::new(sub))
                    }
                    Err(_) => Attr::Other("graph"),
                };
                attrs.insert(an, v);
                continue;
            }
            let v = convert_attr(a, ext).map_err(|e| {
                invalid(format!(
                    "Node \"{name}\" ({op_type}), attribute '{an}': {e}"
                ))
            })?;
            attrs.insert(an, v);
        }
        let mut domain = normalize_domain(np.domain.as_deref().unwrap_or(""));
        // ONNX Runtime's contrib QuantizeLinear/DequantizeLinear carry 16-bit types before
        // opset 21 with the standard ops' semantics.
        if domain == "com.microsoft"
            && matches!(op_type.as_str(), "QuantizeLinear" | "DequantizeLinear")
        {
            domain = String::new();
        }
        if crate::ops::quant::is_internal(&op_type) {
            return Err(invalid(format!(
                "Node \"{name}\" has op type {op_type}, which is reserved for qnnx's own conversions"
            )));
        }
        if op_type == "Constant" && domain.is_empty() {
            let t = constant_value(&name, &attrs)?;
            let out = np
                .output
                .first()
                .filter(|o| !o.is_empty())
                .ok_or_else(|| invalid(format!("Node \"{name}\" (Constant) has no output")))?;
            define(&mut g, &mut ids, konst(out, t))?;
            continue;
        }
        let mut outputs = Vec::new();
        for o in &np.output {
            if o.is_empty() {
                outputs.push(None);
            } else {
                let id = define(
                    &mut g,
                    &mut ids,
                    Value {
                        name: o.clone(),
                        dtype: DType::F32,
                        shape: vec![],
                        known: false,
                        konst: None,
                        quant: None,
                        origin: None,
                    },
                )?;
                outputs.push(Some(id));
            }
        }
        let mut node = Node::new(name, op_type);
        node.domain = domain;
        node.attrs = attrs;
        node.outputs = outputs;
        pending.push((node, reads));
    }
    // A name a subgraph reads without defining it is an enclosing graph's value: a placeholder.
    let mut captures: Vec<(String, ValueId)> = Vec::new();
    let mut capture = |g: &mut Graph, ids: &mut HashMap<String, ValueId>, name: &str| {
        let id = g.push_value_raw(Value {
            name: name.to_string(),
            dtype: DType::F32,
            shape: vec![],
            known: false,
            konst: None,
            quant: None,
            origin: None,
        });
        ids.insert(name.to_string(), id);
        captures.push((name.to_string(), id));
        id
    };
    for (mut node, inputs) in pending {
        for i in &inputs {
            if i.is_empty() {
                node.inputs.push(None);
                continue;
            }
            let id = match ids.get(i).copied() {
                Some(id) => id,
                None if sub => capture(&mut g, &mut ids, i),
                None => {
                    return Err(invalid(format!(
                    "Node \"{}\" ({}) reads '{i}', which no node, input or initializer produces",
                    node.name, node.op_type
                )))
                }
            };
            node.inputs.push(Some(id));
        }
        g.nodes.push(node);
    }
    for vi in &gp.output {
        let name = vi.name.clone().unwrap_or_default();
        let id = match ids.get(&name).copied() {
            Some(id) => id,
            None if sub && !name.is_empty() => capture(&mut g, &mut ids, &name),
            None => {
                return Err(invalid(format!(
                    "graph output '{name}' is not produced by the graph"
                )))
            }
        };
        if g.outputs.contains(&id) {
            return Err(invalid(format!(
                "graph output '{name}' is listed more than once"
            )));
        }
        g.outputs.push(id);
    }
    if g.outputs.is_empty() {
        return Err(invalid("graph has no outputs"));
    }
    {
        let mut seen = std::collections::HashSet::new();
        for n in &mut g.nodes {
            if !seen.insert(n.name.clone()) {
                let mut i = 1;
                while !seen.insert(format!("{}_{i}", n.name)) {
                    i += 1;
                }
                n.name = format!("{}_{i}", n.name);
            }
        }
    }
    g.inputs.extend(captures.iter().map(|(_, id)| *id));
    g.reserve_names();
    g.toposort()?;
    Ok(Converted {
        graph: g,
        input_dims,
        input_dim_params,
        captures: captures.into_iter().map(|(n, _)| n).collect(),
    })
}

pub(super) fn constant_value(name: &str, attrs: &BTreeMap<String, Attr>) -> Result<Tensor> {
    let err = |m: &str| invalid(format!("Node \"{name}\" (Constant): {m}"));
    if attrs.len() != 1 {
        return Err(err("needs exactly one value attribute"));
    }
    let (k, a) = attrs.iter().next().expect("len checked");
    Ok(match (k.as_str(), a) {
        ("value" | "sparse_value", Attr::Tensor(t)) => t.clone(),
        ("value_float", Attr::Float(f)) => Tensor::scalar_f32(*f),
        ("value_floats", Attr::Floats(v)) => Tensor::from_f32(vec![v.len()], v),
        ("value_int", Attr::Int(i)) => Tensor::from_i64(vec![], &[*i]),
        ("value_ints", Attr::Ints(v)) => Tensor::from_i64(vec![v.len()], v),
        ("value_string" | "value_strings", _) => {
            return Err(err("string constants are not supported"))
        }
        _ => {
            return Err(err(&format!(
                "unexpected attribute '{k}' of kind {}",
                a.kind()
            )))
        }
    })
}

pub(super) fn normalize_domain(d: &str) -> String {
    if d == "ai.onnx" {
        String::new()
    } else {
        d.to_string()
    }
}

#[cfg(test)]
mod tests {

    use crate::dtype::DType;
    use crate::frontend::onnx;
    use crate::ir::tensor::Tensor;
    use crate::ir::Attr;

    use crate::frontend::load::Model;
    use crate::testing::{input_dims, load_error as err, relu_model, ModelBuilder, A};

    #[test]
    fn cycle_rejected() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Add", &["x", "b"], &["a"], &[])
            .node("Relu", &["a"], &["b"], &[])
            .output("a");
        assert!(err(&b.model).contains("graph has a cycle"));
    }

    #[test]
    fn dangling_input_rejected() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Add", &["x", "nope"], &["y"], &[])
            .output("y");
        assert_eq!(
            err(&b.model),
            "invalid model: Node \"Add_0\" (Add) reads 'nope', which no node, input or initializer produces"
        );
    }

    #[test]
    fn duplicate_outputs_rejected() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Relu", &["x"], &["y"], &[])
            .node("Neg", &["x"], &["y"], &[])
            .output("y");
        assert_eq!(
            err(&b.model),
            "invalid model: value 'y' is defined more than once"
        );
        let b = relu_model().output("y");
        assert!(err(&b.model).contains("graph output 'y' is listed more than once"));
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Relu", &["x"], &["x"], &[])
            .output("x");
        assert!(err(&b.model).contains("'x' is defined more than once"));
    }

    #[test]
    fn unsorted_nodes_are_sorted() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Neg", &["a"], &["y"], &[])
            .node("Relu", &["x"], &["a"], &[])
            .output("y");
        let m = b.load();
        assert_eq!(m.graph.nodes[0].op_type, "Relu");
    }

    #[test]
    fn constant_nodes_become_constants() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .node("Constant", &[], &["c1"], &[("value_float", A::F(2.5))])
            .node(
                "Constant",
                &[],
                &["c2"],
                &[("value_ints", A::Is(vec![1, 2]))],
            )
            .node(
                "Constant",
                &[],
                &["c3"],
                &[("value_floats", A::Fs(vec![1.0, 2.0]))],
            )
            .node("Constant", &[], &["c4"], &[("value_int", A::I(7))])
            .node(
                "Constant",
                &[],
                &["c5"],
                &[("value", A::T(Tensor::from_f32(vec![2], &[3.0, 4.0])))],
            )
            .node("Add", &["x", "c3"], &["y"], &[])
            .output("y");
        let m = b.load();
        let g = &m.graph;
        assert_eq!(g.nodes.len(), 1);
        let by = g.name_map();
        assert_eq!(g.konst(by["c1"]).unwrap().to_f64(), vec![2.5]);
        assert_eq!(g.konst(by["c2"]).unwrap().to_i64(), vec![1, 2]);
        assert_eq!(g.konst(by["c3"]).unwrap().shape, vec![2]);
        assert_eq!(g.konst(by["c4"]).unwrap().shape, Vec::<usize>::new());
        assert_eq!(g.konst(by["c5"]).unwrap().to_f64(), vec![3.0, 4.0]);
    }

    #[test]
    fn initializer_listed_as_input_is_constant() {
        let b = ModelBuilder::new(9)
            .input("x", DType::F32, &[2])
            .input("w", DType::F32, &[2])
            .init("w", Tensor::from_f32(vec![2], &[1.0, 2.0]))
            .node("Add", &["x", "w"], &["y"], &[])
            .output("y");
        let m = b.load();
        assert_eq!(m.graph.inputs.len(), 1);
    }

    /// A model whose input `x` declares dims `dims` as `dim_value`s (negative ones included).
    fn dim_value_model(dims: &[i64]) -> onnx::ModelProto {
        let mut m = relu_model().model;
        *input_dims(&mut m, 0) = dims
            .iter()
            .map(|&d| onnx::Dimension {
                value: Some(onnx::DimensionValue::DimValue(d)),
                denotation: None,
            })
            .collect();
        m
    }

    #[test]
    fn minus_one_dims_are_symbolic() {
        let m = Model::from_proto(&dim_value_model(&[-1, 4]), None).unwrap();
        assert_eq!(m.input_dims, vec![Some(vec![None, Some(4)])]);
        assert_eq!(m.describe_input_dims(0).unwrap(), "[?, 4]");
        assert_eq!(
            m.symbolic_inputs(),
            vec![("x".to_string(), "[?, 4]".to_string())]
        );
        assert!(!m.graph.value(m.graph.inputs[0]).known);
        // Only -1 means "dynamic"; other negative dims stay invalid.
        let e = Model::from_proto(&dim_value_model(&[-2, 4]), None).unwrap_err();
        assert!(e.to_string().contains("negative dim -2"), "{e}");
    }

    #[test]
    fn dim_params_are_named() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, &[-1, 4])
            .node("Relu", &["x"], &["y"], &[])
            .output("y")
            .load();
        assert_eq!(m.input_dim_params, vec![vec![Some("N".to_string()), None]]);
        assert_eq!(m.describe_input_dims(0).unwrap(), "[N, 4]");
    }

    #[test]
    fn subgraphs_load_with_their_outer_reads_as_node_inputs() {
        let then = ModelBuilder::new(17)
            .node("Mul", &["x", "w"], &["t"], &[])
            .output("t")
            .model
            .graph
            .unwrap();
        let els = ModelBuilder::new(17).output("x").model.graph.unwrap();
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .input("c", DType::Bool, &[])
            .init("w", Tensor::from_f32(vec![2], &[1.0, 2.0]))
            .node(
                "If",
                &["c"],
                &["y"],
                &[("then_branch", A::G(then)), ("else_branch", A::G(els))],
            )
            .output("y");
        let m = b.load();
        let g = &m.graph;
        let n = &g.nodes[0];
        let names: Vec<&str> = n
            .inputs
            .iter()
            .map(|i| g.value(i.unwrap()).name.as_str())
            .collect();
        assert_eq!(names, ["c", "x", "w"]);
        let Some(Attr::Graph(t)) = n.attrs.get("then_branch") else {
            panic!("{:?}", n.attrs)
        };
        assert_eq!((t.formal, t.captures.clone()), (0, vec![1, 2]));
        assert_eq!(t.graph.inputs.len(), 2);
        let Some(Attr::Graph(e)) = n.attrs.get("else_branch") else {
            panic!()
        };
        // The else branch returns the outer x itself.
        assert_eq!(e.captures, vec![1]);
        assert_eq!(e.graph.outputs, vec![e.graph.inputs[0]]);
        // A subgraph that cannot load (a non-tensor formal input) is only reported.
        let mut body = ModelBuilder::new(17).output("x").model.graph.unwrap();
        body.input.push(onnx::ValueInfoProto {
            name: Some("seq".into()),
            r#type: Some(onnx::TypeProto::default()),
            ..Default::default()
        });
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .node("Loop", &["", ""], &["y"], &[("body", A::G(body))])
            .output("y");
        let m = b.load();
        assert_eq!(m.graph.nodes[0].attrs["body"], Attr::Other("graph"));
    }

    #[test]
    fn symbolic_dims_are_recorded() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[-1, 4])
            .node("Relu", &["x"], &["y"], &[])
            .output("y");
        let m = b.load();
        assert_eq!(m.input_dims, vec![Some(vec![None, Some(4)])]);
        assert!(!m.graph.value(m.graph.inputs[0]).known);
    }
}
