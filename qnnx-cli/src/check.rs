//! `qnnx check`: which nodes of a model lower to the backend and why the others do not, and
//! whether the target can run it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lowering::Unsupported;
use qnnx_engine::Error;
use serde_json::{json, Value};

use crate::build::{compile_failure, load_onnx, parse_fixed, parse_shapes, unsupported_json};
use crate::target::TargetArgs;
use crate::{emit, Cli, Failure, EXIT_UNSUPPORTED};

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The ONNX model.
    pub model: PathBuf,
    // The backend and target, as for `compile`: a SoC or HTP arch without a float path (v68:
    // QCS6490, SM8350) refuses a float model, or float nodes of a quantized one, as `compile`
    // does.
    #[command(flatten)]
    pub target: TargetArgs,
    /// List every tensor of the lowered graph with its dtype and, when quantized, its encoding
    /// (a quantized model lists its I/O and a summary without this).
    #[arg(long)]
    pub tensors: bool,
    /// Static shape for an input with symbolic dims, as NAME=D,D,... (repeatable). Without
    /// one for each such input, check lists them instead of guessing sizes.
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// Fix an input to a value, as NAME=VALUE (as for `compile`; repeatable).
    #[arg(long = "fix-input", value_name = "NAME=VALUE")]
    pub fix_inputs: Vec<String>,
}

/// The lowered plan's tensors for `check`: all with `all`, else a quantized plan's I/O and the
/// nodes that compute in float; `None` for a float plan without `all`.
fn plan_tensors(plan: &lowering::Plan, all: bool) -> Option<(Value, String)> {
    let quantized = plan.tensors.iter().any(|t| t.quant.is_some());
    if !quantized && !all {
        return None;
    }
    use lowering::plan::TensorKind;
    let mut rows = Vec::new();
    let mut text = String::new();
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    for t in &plan.tensors {
        let ty = qnnx_types::tensor_type_name(t.dtype, t.quant.is_some());
        *by_type.entry(ty.clone()).or_default() += 1;
        let kind = match t.kind {
            TensorKind::Input => "input",
            TensorKind::Output => "output",
            TensorKind::Native => "native",
            TensorKind::Static(_) => "static",
            TensorKind::Null => "null",
        };
        let enc = t.quant.as_ref().map(|q| q.to_string()).unwrap_or_default();
        if all || matches!(t.kind, TensorKind::Input | TensorKind::Output) {
            text += &format!("  {kind:<6} {:<32} {ty:<5} {:?} {enc}\n", t.name, t.shape);
        }
        rows.push(json!({
            "name": t.name,
            "kind": kind,
            "dtype": ty,
            "shape": t.shape,
            "encoding": t.quant.as_ref().map(|q| json!({
                "storage": q.storage.name(),
                "axis": q.axis,
                "scales": q.scales,
                "offsets": q.offsets,
            })),
        }));
    }
    let float_nodes: Vec<&str> = {
        let mut v: Vec<&str> = Vec::new();
        for o in plan
            .ops
            .iter()
            .filter(|o| !matches!(o.type_name, "Quantize" | "Dequantize"))
        {
            let float = o
                .inputs
                .iter()
                .chain(&o.outputs)
                .any(|&t| plan.tensors[t].dtype.is_float());
            if quantized && float && !v.contains(&o.onnx_node.as_str()) {
                v.push(&o.onnx_node);
            }
        }
        v
    };
    let summary: Vec<String> = by_type.iter().map(|(t, n)| format!("{n} {t}")).collect();
    let mut head = format!("tensors: {}\n", summary.join(", "));
    if quantized {
        head += &match float_nodes.len() {
            0 => "every op runs on quantized tensors\n".to_string(),
            n => format!(
                "{n} node(s) compute in float (impossible on v68 SoCs): {}\n",
                float_nodes.join(", ")
            ),
        };
    }
    Some((
        json!({ "tensors": rows, "float_nodes": float_nodes, "quantized": quantized }),
        head + &text,
    ))
}

/// The failure of `check` for a model whose inputs `symbolic` (name, declared dims) have no
/// static shape: sizes decide whether kernels fit, concatenations agree and reshapes are valid,
/// so none is guessed.
fn symbolic_failure(model: &Path, symbolic: &[(String, String)]) -> Failure {
    let lines: Vec<String> = symbolic.iter().map(|(n, d)| format!("  {n} {d}")).collect();
    let flags: Vec<String> = symbolic
        .iter()
        .map(|(n, d)| {
            let dims = d
                .trim_start_matches('[')
                .trim_end_matches(']')
                .split(", ")
                .map(|x| {
                    if x.parse::<usize>().is_ok() {
                        x.to_string()
                    } else {
                        format!("<{x}>")
                    }
                })
                .collect::<Vec<_>>()
                .join(",");
            format!("--input-shape {n}={dims}")
        })
        .collect();
    Failure {
        code: crate::EXIT_FAILURE,
        msg: format!(
            "{}: {} input(s) have symbolic dims, and whether a node lowers depends on sizes \
             (kernels that fit, concatenations that agree), so check guesses none:\n{}\nhint: \
             give the sizes the model runs at: {}",
            model.display(),
            symbolic.len(),
            lines.join("\n"),
            flags.join(" ")
        ),
        details: Some(json!({
            "symbolic_inputs": symbolic
                .iter()
                .map(|(n, d)| json!({ "name": n, "dims": d }))
                .collect::<Vec<_>>(),
        })),
    }
}

pub fn check(cli: &Cli, args: &CheckArgs) -> Result<ExitCode, Failure> {
    let target = crate::target::resolve(cli, &args.target, None)?;
    let backend = target.backend;
    let file = load_onnx(&args.model)?;
    let opts = lowering::LowerOptions {
        backend,
        input_shapes: parse_shapes(&args.input_shapes)?,
        fix_inputs: parse_fixed(&args.fix_inputs)?,
        ..Default::default()
    };
    let symbolic: Vec<(String, String)> = file
        .model
        .symbolic_inputs()
        .into_iter()
        .filter(|(n, _)| !opts.input_shapes.contains_key(n) && !opts.fix_inputs.contains_key(n))
        .collect();
    if !symbolic.is_empty() {
        return Err(symbolic_failure(&args.model, &symbolic));
    }
    let unsupported = lowering::check_with(&file.model, &opts)
        .map_err(|e| compile_failure(Error::Lower(e), &args.model, backend))?;
    let bad: BTreeMap<&str, &Unsupported> = unsupported
        .iter()
        .filter(|u| !u.node.is_empty())
        .map(|u| (u.node.as_str(), u))
        .collect();
    let nodes: Vec<Value> = file
        .model
        .graph
        .nodes
        .iter()
        .map(|n| {
            let why = bad.get(n.name.as_str());
            json!({
                "name": n.name,
                "op_type": n.op_type,
                "supported": why.is_none(),
                "reason": why.map(|u| u.reason.clone()),
            })
        })
        .collect();
    let mut ops: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for n in &file.model.graph.nodes {
        let e = ops.entry(n.op_type.as_str()).or_default();
        e.0 += 1;
        if bad.contains_key(n.name.as_str()) {
            e.1 += 1;
        }
    }
    let supported_count = nodes.iter().filter(|n| n["supported"] == true).count();
    let plan = unsupported
        .is_empty()
        .then(|| lowering::lower(file.model.clone(), &opts).ok())
        .flatten();
    // What `compile` refuses for the target before QNN is asked: float on a v68-class HTP.
    let no_float_path = match plan.as_ref().map(|p| target.check_plan(p)) {
        Some(Err(Error::NoFloatPath { message, .. })) => Some(message),
        Some(Err(e)) => return Err(compile_failure(e, &args.model, backend)),
        Some(Ok(())) | None => None,
    };
    let ok = unsupported.is_empty() && no_float_path.is_none();
    let tensors = plan.as_ref().and_then(|p| plan_tensors(p, args.tensors));
    let soc = target.soc();
    let report = json!({
        "model": args.model,
        "backend": backend.name(),
        "target": target.describe(),
        "soc_model": target.soc_model,
        "soc": soc.map(|s| s.name),
        "htp_arch": target.arch().map(|a| a.number()),
        "no_float_path": no_float_path,
        "supported": ok,
        "node_count": nodes.len(),
        "supported_count": supported_count,
        "ops": ops.iter().map(|(op, (n, bad))| json!({ "op_type": op, "count": n, "unsupported": bad })).collect::<Vec<_>>(),
        "unsupported": unsupported_json(&unsupported),
        "nodes": nodes,
        "plan": tensors.as_ref().map(|t| t.0.clone()),
    });
    emit(cli, &report, || {
        let name = backend.label();
        let mut s = format!(
            "{}: {supported_count} of {} nodes lower to {name}\n",
            args.model.display(),
            nodes.len()
        );
        s += &format!("  {:<28} {:>5}  {}\n", "op", "nodes", "unsupported");
        for (op, (n, bad)) in &ops {
            let bad = if *bad > 0 {
                bad.to_string()
            } else {
                String::new()
            };
            s += &format!("  {op:<28} {n:>5}  {bad}\n");
        }
        if let Some(m) = &no_float_path {
            s += &format!("cannot run on the target: {m}\n");
            if let Some((_, t)) = &tensors {
                s += t;
            }
        } else if ok {
            s += &format!("every node can run on {}\n", target.describe());
            if let Some((_, t)) = &tensors {
                s += t;
            }
        } else {
            s += &format!("cannot run on {name}:\n");
            for u in &unsupported {
                s += &format!("  {}\n", u.reason);
            }
        }
        s
    });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_UNSUPPORTED)
    })
}
