//! Graph passes, one per file, and the fixed order `prepare` runs them in.

use crate::dtype::DType;
use crate::error::{invalid, LowerError, Result};
use crate::frontend::load::Model;
use crate::ir::Graph;
use crate::table::OpTable;
use crate::LowerOptions;

pub mod const_fold;
pub mod dce;
pub mod empty;
pub mod expand;
pub mod fold_batchnorm;
pub mod fp16;
pub mod fuse_gelu;
pub mod fuse_l2norm;
pub mod fuse_linear_bias;
pub mod fuse_rmsnorm;
pub mod layout;
pub mod narrow_int64;
pub mod qdq;
pub mod rank6;
pub mod simplify;
pub mod tile_batch_broadcast;

/// A graph ready for the lowering rules.
pub struct Prepared {
    pub graph: Graph,
    /// Shape-inference errors by node name; the rules are not run on these nodes.
    pub node_errors: Vec<(String, LowerError)>,
    /// The model's own I/O dtypes (before int64 narrowing), parallel to graph inputs/outputs.
    pub input_host_dtypes: Vec<DType>,
    pub output_host_dtypes: Vec<DType>,
}

fn set_input_shapes(g: &mut Graph, model: &Model, opts: &LowerOptions) -> Result<()> {
    for (k, &v) in g.inputs.clone().iter().enumerate() {
        let name = g.values[v].name.clone();
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
                        fmt_dims(d)
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
        if !g.inputs.iter().any(|&v| &g.values[v].name == name) {
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
/// sweep folded it to a constant, with the input shapes of `opts`: what a value holds before any
/// pass rewrites the graph.
pub fn value_dtypes(
    model: &Model,
    opts: &LowerOptions,
) -> Result<std::collections::HashMap<String, (DType, bool)>> {
    let mut g = model.graph.clone();
    set_input_shapes(&mut g, model, opts)?;
    let _ = const_fold::run(&mut g);
    Ok(g.values
        .iter()
        .filter(|v| v.known)
        .map(|v| (v.name.clone(), (v.dtype, v.konst.is_some())))
        .collect())
}

/// Runs every pass in order: infer+fold, QDQ absorption, the L2Norm fusion, expansions, empty
/// tensors, simplify, rank-6 transposes, dce, fusions (batchnorm, RMSNorm, GELU, linear bias),
/// layout, settling quantized nodes, int64 narrowing, fp16.
pub fn prepare(model: &Model, opts: &LowerOptions) -> Result<Prepared> {
    let mut g = model.graph.clone();
    set_input_shapes(&mut g, model, opts)?;
    let mut input_host_dtypes: Vec<DType> = g.inputs.iter().map(|&v| g.values[v].dtype).collect();
    // Errors of the first sweep are reported again by the second one (or the node is gone).
    let _ = const_fold::run(&mut g);
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
    fold_batchnorm::run(&mut g);
    fuse_rmsnorm::run(&mut g);
    fuse_gelu::run(&mut g);
    fuse_linear_bias::run(&mut g, table);
    dce::run(&mut g);
    layout::run(&mut g, table);
    let errs = const_fold::run(&mut g);
    simplify::run(&mut g);
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
    })
}
