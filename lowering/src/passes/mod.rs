//! Graph passes, one per file, and the fixed order `prepare` runs them in.

use crate::dtype::DType;
use crate::error::{invalid, LowerError, Result};
use crate::frontend::load::Model;
use crate::ir::Graph;
use crate::plan::AssumedInput;
use crate::table::OpTable;
use crate::{Backend, LowerOptions};

pub mod collapse_moves;
pub mod const_fold;
pub mod dce;
pub mod declared_shapes;
pub mod empty;
pub mod expand;
pub mod fix_inputs;
pub mod fold_conv;
pub mod fold_if;
pub mod fp16;
pub mod fuse_gelu;
pub mod fuse_hardswish;
pub mod fuse_l2norm;
pub mod fuse_linear_bias;
pub mod fuse_rmsnorm;
pub mod fuse_softmax_scale;
pub mod layout;
pub mod merge_reshapes;
pub mod narrow_int64;
pub mod qdq;
pub mod rank6;
pub mod simplify;
pub mod tile_batch_broadcast;

/// Makes one new `op_type(x)` node, named from `hint`, write `out` in place of the chain of
/// nodes that computed it (the fusions' last step), then removes what of the chain is dead.
pub(crate) fn replace_chain(
    g: &mut Graph,
    out: crate::ir::ValueId,
    hint: &str,
    op_type: &str,
    x: crate::ir::ValueId,
) {
    let tail = g.producers()[out].expect("out has a producer");
    let dead = g.add_value(&format!("{}_unfused", g.values[out].name));
    for o in g.nodes[tail].outputs.iter_mut().flatten() {
        if *o == out {
            *o = dead;
        }
    }
    let mut n = crate::ir::Node::new(g.unique_node_name(hint), op_type);
    n.inputs = vec![Some(x)];
    n.outputs = vec![Some(out)];
    g.nodes.insert(tail + 1, n);
    dce::run(g);
}

/// A graph ready for the lowering rules.
pub struct Prepared {
    pub graph: Graph,
    /// Shape-inference errors by node name; the rules are not run on these nodes.
    pub node_errors: Vec<(String, LowerError)>,
    /// The model's own I/O dtypes (before int64 narrowing), parallel to graph inputs/outputs.
    pub input_host_dtypes: Vec<DType>,
    pub output_host_dtypes: Vec<DType>,
    /// Model inputs that left the graph with an assumed value, in ONNX order.
    pub assumed: Vec<AssumedInput>,
}

/// Gives every graph input its static shape: the declared one, or `opts.input_shapes` for
/// symbolic dims. Inputs already fixed to a constant keep their value's shape.
fn set_input_shapes(g: &mut Graph, model: &Model, opts: &LowerOptions) -> Result<()> {
    for (k, &v) in model.graph.inputs.iter().enumerate() {
        let name = g.values[v].name.clone();
        if !g.inputs.contains(&v) {
            let fixed = &g.values[v].shape;
            match opts.input_shapes.get(&name) {
                Some(s) if s != fixed => {
                    return Err(invalid(format!(
                        "input '{name}': input_shapes gives {s:?} but its fixed value has shape {fixed:?}"
                    )))
                }
                _ => continue,
            }
        }
        let shape = match opts.input_shapes.get(&name) {
            Some(s) => {
                if let Some(Some(decl)) = model.input_dims.get(k) {
                    let clash = decl.len() != s.len() || decl.iter().zip(s).any(|(d, &x)| d.is_some_and(|d| d != x));
                    if clash {
                        return Err(invalid(format!(
                            "input '{name}': shape {s:?} does not match the declared dims {}",
                            fmt_dims(decl)
                        )));
                    }
                }
                s.clone()
            }
            None => match model.input_dims.get(k) {
                Some(Some(d)) if d.iter().all(Option::is_some) => d.iter().map(|x| x.unwrap()).collect(),
                Some(Some(d)) => {
                    return Err(invalid(format!(
                        "input '{name}' has symbolic dims {}; give a static shape in LowerOptions::input_shapes",
                        model.describe_input_dims(k).unwrap_or_else(|| fmt_dims(d))
                    )))
                }
                _ => {
                    return Err(invalid(format!(
                        "input '{name}' has no shape; give one in LowerOptions::input_shapes"
                    )))
                }
            },
        };
        if crate::ir::tensor::checked_numel(&shape, g.values[v].dtype).is_none() {
            return Err(invalid(format!(
                "input '{name}' shape {shape:?} exceeds the 4 GiB tensor limit"
            )));
        }
        let val = &mut g.values[v];
        val.shape = shape;
        val.known = true;
    }
    for name in opts.input_shapes.keys() {
        if !model
            .graph
            .inputs
            .iter()
            .any(|&v| &g.values[v].name == name)
        {
            return Err(invalid(format!(
                "LowerOptions::input_shapes names '{name}', which is not a graph input"
            )));
        }
    }
    Ok(())
}

fn fmt_dims(d: &[Option<usize>]) -> String {
    let v: Vec<String> = d
        .iter()
        .map(|x| x.map_or("?".to_string(), |x| x.to_string()))
        .collect();
    format!("[{}]", v.join(", "))
}

/// The dtype of every value of `model` the inference sweep reaches (by name), and whether the
/// sweep folded it to a constant, with the input shapes and fixed inputs of `opts`: what a value
/// holds before any pass rewrites the graph.
pub fn value_dtypes(
    model: &Model,
    opts: &LowerOptions,
) -> Result<std::collections::HashMap<String, (DType, bool)>> {
    let Inferred { graph: g, .. } = infer(model, opts)?;
    Ok(g.values
        .iter()
        .filter(|v| v.known)
        .map(|v| (v.name.clone(), (v.dtype, v.konst.is_some())))
        .collect())
}

/// Runs every pass in order: infer+fold (with If folding and declared-shape inputs), QDQ
/// absorption, the L2Norm fusion, expansions, empty tensors, simplify, rank-6 transposes, dce,
/// fusions (RMSNorm, GELU, HardSwish, softmax scale, linear bias), conv affine maps, layout, collapsing and merging moves, settling quantized nodes, int64
/// narrowing, fp16.
pub fn prepare(model: &Model, opts: &LowerOptions) -> Result<Prepared> {
    let Inferred { graph, assumed } = infer(model, opts)?;
    prepare_inferred(graph, assumed, opts)
}

/// A model's graph after shape inference and constant folding, before any rewrite: every value
/// has the dtype and shape the model computes (`known`), unless a node could not be inferred.
pub struct Inferred {
    pub graph: Graph,
    /// Inputs fixed or resolved from declared shapes, in ONNX order.
    pub assumed: Vec<AssumedInput>,
}

/// Input shapes and fixed inputs applied, then inference and folding, with If nodes of known
/// condition inlined and shape-defining inputs resolved from the declared shapes.
pub fn infer(model: &Model, opts: &LowerOptions) -> Result<Inferred> {
    let mut g = model.graph.clone();
    let mut assumed = fix_inputs::run(&mut g, model, &opts.fix_inputs)?;
    set_input_shapes(&mut g, model, opts)?;
    // Errors of the first sweep are reported again by the second one (or the node is gone).
    let _ = const_fold::run(&mut g);
    // If nodes with a known condition inlined, and shape-defining graph inputs resolved from
    // the declared shapes; each can make the next node's inputs known.
    let declared = declared_shapes::declared(model, &g);
    let index: std::collections::HashMap<_, _> = model
        .graph
        .inputs
        .iter()
        .enumerate()
        .map(|(k, &v)| (v, k))
        .collect();
    for _ in 0..8 {
        let inlined = fold_if::run(&mut g);
        if inlined + declared_shapes::run(&mut g, &declared, &index, &mut assumed) == 0 {
            break;
        }
        let _ = const_fold::run(&mut g);
    }
    assumed.sort_by_key(|a| a.index);
    Ok(Inferred { graph: g, assumed })
}

fn prepare_inferred(
    mut g: Graph,
    assumed: Vec<AssumedInput>,
    opts: &LowerOptions,
) -> Result<Prepared> {
    let mut input_host_dtypes: Vec<DType> = g.inputs.iter().map(|&v| g.values[v].dtype).collect();
    let qdq_errors = qdq::absorb(&mut g, opts.quantized_io);
    for (k, &v) in g.inputs.iter().enumerate() {
        if let Some(q) = &g.values[v].quant {
            // Raw quantized input: the caller passes the integers.
            input_host_dtypes[k] = q.storage;
        }
    }
    let _ = const_fold::run(&mut g);
    // Before the expansions, which would expand its ReduceL2.
    fuse_l2norm::run(&mut g);
    let table = OpTable::get(opts.backend)?;
    // An expansion's inputs are known only once the nodes before it are inferred, which may
    // need an earlier expansion (Attention feeding Attention).
    let mut expand_errors = Vec::new();
    for _ in 0..4 {
        let (n, errs) = expand::run(&mut g, opts.backend, table);
        expand_errors = errs;
        if n == 0 {
            break;
        }
        let _ = const_fold::run(&mut g);
    }
    empty::run(&mut g);
    simplify::run(&mut g);
    dce::run(&mut g);
    rank6::run(&mut g);
    fuse_rmsnorm::run(&mut g);
    fuse_gelu::run(&mut g, opts.backend == Backend::Htp);
    fuse_hardswish::run(&mut g, table);
    fuse_softmax_scale::run(&mut g);
    fuse_linear_bias::run(&mut g, table);
    // After the fusions: a fusion's trailing scalar (GELU's `Mul(·, 0.5)`, HardSwish's
    // `Mul(·, 1/6)`) before a Conv would otherwise go into that Conv's weights and leave the
    // pattern unmatched (timm's ConvNeXt, FastViT and EfficientFormerV2 MLPs).
    fold_conv::run(&mut g);
    dce::run(&mut g);
    layout::run(&mut g);
    let mut errs = const_fold::run(&mut g);
    declared_shapes::annotate(&g, &mut errs);
    simplify::run(&mut g);
    // After the folds: a Reshape's shape computed from its input's Shape reads the input too.
    collapse_moves::run(&mut g);
    merge_reshapes::run(&mut g);
    tile_batch_broadcast::run(&mut g);
    dce::run(&mut g);
    let settle_errors = qdq::settle(&mut g, opts.quantized_io);
    let output_host_dtypes: Vec<DType> = g
        .outputs
        .iter()
        .map(|&v| {
            let v = &g.values[v];
            v.quant.as_ref().map_or(v.dtype, |q| q.storage)
        })
        .collect();
    narrow_int64::run(&mut g);
    if opts.fp16 {
        fp16::run(&mut g, table);
    }
    dce::run(&mut g);
    // An expansion's refusal comes last so that it wins over "no shape inference" for its node.
    let node_errors = errs
        .into_iter()
        .chain(expand_errors)
        .chain(qdq_errors)
        .chain(settle_errors)
        .map(|e| {
            let node = match &e {
                LowerError::UnsupportedOp { node, .. }
                | LowerError::UnsupportedAttr { node, .. }
                | LowerError::UnsupportedDtype { node, .. } => node.clone(),
                LowerError::InvalidModel(m) => m
                    .strip_prefix("Node \"")
                    .and_then(|r| r.split('"').next())
                    .unwrap_or_default()
                    .to_string(),
                LowerError::Unsupported(_) => String::new(),
            };
            (node, e)
        })
        .collect();
    Ok(Prepared {
        graph: g,
        node_errors,
        input_host_dtypes,
        output_host_dtypes,
        assumed,
    })
}
