//! Shape-defining inputs given at run time, resolved from the shapes the model declares.
//!
//! Many exported models (and the ONNX node tests) pass a Reshape's `shape`, an Unsqueeze's or a
//! Reduce's `axes`, a Resize's `scales` or `sizes`, Expand's `shape`, Tile's `repeats`, TopK's
//! `K` or Split's `split` as graph inputs, while declaring the static shape of the node's
//! output (a graph output or a `value_info` entry). A QNN graph needs those values at compile
//! time. When such an input is a graph input (not computed) used only in such slots, and the
//! declared shapes determine the one value that gives them, the input becomes that constant
//! and leaves the graph; the plan records it ([`crate::plan::AssumedInput`]) with how a value
//! passed at run time is compared ([`Accept`]): by what it means for its node (a `shape` of
//! `[2, -1]` gives the same Reshape as `[2, 12]`), or exactly where meaning and value are one.
//! Where the declared shapes leave a choice (a Reduce without `keepdims` of `[3, 2, 2]` to
//! `[3, 2]` reduces dim 1 or dim 2) nothing is assumed, and the node's error names the input
//! and how to fix it ([`annotate`]).
//!
//! Declared shapes are carried back through ops that keep their input's shape (unary
//! element-wise ops, Cast, CastLike, Identity), as function-expanded models declare only the
//! final output (ReduceL2 = ReduceSum, Cast, Sqrt, CastLike).

use std::collections::HashMap;

use crate::dtype::DType;
use crate::error::LowerError;
use crate::frontend::load::Model;
use crate::ir::{Graph, Node, ValueId};
use crate::ops::registry::{Resolved, ShapeQuery};
use crate::ops::{def, ShapeInput};
use crate::plan::{AssumedInput, Source};

/// Static declared shapes by value: the model's, carried back through shape-keeping ops.
pub fn declared(model: &Model, g: &Graph) -> HashMap<ValueId, Vec<usize>> {
    let by_name = g.name_map();
    let mut out: HashMap<ValueId, Vec<usize>> = HashMap::new();
    for (name, dims) in &model.declared_shapes {
        if let (Some(&v), Some(d)) = (
            by_name.get(name.as_str()),
            dims.iter().copied().collect::<Option<Vec<usize>>>(),
        ) {
            out.insert(v, d);
        }
    }
    for n in g.nodes.iter().rev() {
        if !keeps_shape(&n.op_type) {
            continue;
        }
        if let (Some(o), Some(i)) = (n.output(0), n.input(0)) {
            if let Some(d) = out.get(&o).cloned() {
                out.entry(i).or_insert(d);
            }
        }
    }
    out
}

/// Whether output 0 of `op` has its input 0's shape ([`ShapeInput::Kept`]).
fn keeps_shape(op: &str) -> bool {
    def(op).is_some_and(|d| matches!(d.shape_input, ShapeInput::Kept))
}

/// The input slot of `n` that defines its output shape and may be resolved, if `n` has one.
fn shape_slot(g: &Graph, n: &Node) -> Option<usize> {
    match def(&n.op_type)?.shape_input {
        ShapeInput::Slot { slot, .. } => slot(g.opset(), n),
        ShapeInput::None | ShapeInput::Kept => None,
    }
}

/// The value of `n`'s shape slot that gives its declared outputs, and how a value passed at
/// run time is compared; `None` when the declarations are missing or leave a choice. `slot`
/// holds a graph input of dtype `dtype` and static shape `shape`.
fn resolve_node(
    g: &Graph,
    n: &Node,
    dtype: DType,
    shape: &[usize],
    declared: &HashMap<ValueId, Vec<usize>>,
) -> Option<Resolved> {
    let ShapeInput::Slot { resolve, .. } = def(&n.op_type)?.shape_input else {
        return None;
    };
    let len = match shape {
        [l] => *l,
        [] => 1,
        _ => return None,
    };
    resolve(&ShapeQuery {
        g,
        n,
        dtype,
        shape,
        len,
        declared,
    })
}

/// Resolves what it can (see the module docs): each graph input that only feeds shape slots
/// whose nodes' data inputs are inferred and whose declared outputs determine it becomes a
/// constant and leaves `g.inputs`; `assumed` gets its record. `index` gives each input's
/// position among the model's inputs. Returns how many were resolved.
pub fn run(
    g: &mut Graph,
    declared: &HashMap<ValueId, Vec<usize>>,
    index: &HashMap<ValueId, usize>,
    assumed: &mut Vec<AssumedInput>,
) -> usize {
    let mut resolved = 0;
    for v in g.inputs.clone() {
        let val = &g.values[v];
        if val.konst.is_some() || !val.known {
            continue;
        }
        let (dtype, shape) = (val.dtype, val.shape.clone());
        let mut uses = Vec::new();
        let mut only_shape_slots = true;
        for n in &g.nodes {
            for (slot, i) in n.inputs.iter().enumerate() {
                if *i != Some(v) {
                    continue;
                }
                if shape_slot(g, n) == Some(slot) {
                    uses.push(n);
                } else {
                    only_shape_slots = false;
                }
            }
        }
        if uses.is_empty() || !only_shape_slots || g.is_output(v) {
            continue;
        }
        let Some(found) = uses
            .iter()
            .map(|n| resolve_node(g, n, dtype, &shape, declared).map(|r| (n.name.clone(), r)))
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let (node, (value, _, out_name)) = &found[0];
        // Every use must accept the value the first one resolved.
        if !found.iter().all(|(_, (own, a, _))| a.accepts(own, value)) {
            continue;
        }
        let record = AssumedInput {
            onnx_name: g.values[v].name.clone(),
            index: index.get(&v).copied().unwrap_or(usize::MAX),
            value: value.clone(),
            origin: Source::Declared {
                node: node.clone(),
                value: out_name.clone(),
            },
            accept: found.iter().map(|(_, (_, a, _))| a.clone()).collect(),
        };
        g.set_const(v, record.value.clone());
        g.inputs.retain(|&i| i != v);
        assumed.push(record);
        resolved += 1;
    }
    resolved
}

/// Adds to each "must be a constant" error the graph inputs its node reads that are still
/// graph inputs, and how to give their value at compile time.
pub fn annotate(g: &Graph, errors: &mut [LowerError]) {
    for e in errors {
        let (LowerError::UnsupportedOp { node, reason, .. }
        | LowerError::UnsupportedAttr { node, reason, .. }) = e
        else {
            continue;
        };
        if !reason.contains("must be a constant") {
            continue;
        }
        let Some(n) = g.nodes.iter().find(|n| &n.name == node) else {
            continue;
        };
        // The small graph inputs the node reads past its data input (all of them for ops whose
        // first input is a shape or a scalar).
        let first = usize::from(!matches!(n.op_type.as_str(), "ConstantOfShape" | "Range"));
        let inputs: Vec<&str> = n
            .inputs
            .iter()
            .skip(first)
            .flatten()
            .filter(|&&v| {
                let val = &g.values[v];
                g.inputs.contains(&v)
                    && val.konst.is_none()
                    && val.shape.iter().product::<usize>() <= super::fix_inputs::MAX_VALUES
            })
            .map(|&v| g.values[v].name.as_str())
            .collect();
        if inputs.is_empty() {
            continue;
        }
        let flags: Vec<String> = inputs
            .iter()
            .map(|i| format!("--fix-input {i}=VALUE"))
            .collect();
        reason.push_str(&format!(
            "; it is read from graph input(s) {} at run time, whose value the model's declared \
             shapes do not determine: fix it at compile time ({}; Python fix_inputs)",
            inputs
                .iter()
                .map(|i| format!("'{i}'"))
                .collect::<Vec<_>>()
                .join(", "),
            flags.join(" ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::tensor::Tensor;
    use crate::plan::Accept;
    use crate::testing::{value_info, ModelBuilder, A};
    use crate::{lower, LowerOptions};

    /// `b` with output `name` declared as `shape`.
    fn declare(mut b: ModelBuilder, name: &str, dtype: DType, shape: &[i64]) -> ModelBuilder {
        let g = b.model.graph.as_mut().unwrap();
        g.output.retain(|o| o.name.as_deref() != Some(name));
        g.output.push(value_info(name, dtype, shape));
        b
    }

    fn plan(b: &ModelBuilder) -> crate::Plan {
        lower(b.bytes(), &LowerOptions::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(b: &ModelBuilder) -> String {
        lower(b.bytes(), &LowerOptions::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn reshape_unsqueeze_squeeze_expand_resolve() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3, 4])
            .input("shape", DType::I64, &[3])
            .input("axes", DType::I64, &[1])
            .input("sq", DType::I64, &[1])
            .input("ex", DType::I64, &[2])
            .node("Reshape", &["x", "shape"], &["r"], &[])
            .node("Unsqueeze", &["r", "axes"], &["u"], &[])
            .node("Squeeze", &["u", "sq"], &["s"], &[])
            .node("Expand", &["s", "ex"], &["y"], &[]);
        let b = declare(b, "y", DType::F32, &[4, 2, 6]);
        let e = err(&b);
        assert!(e.contains("input 'shape' must be a constant"), "{e}");
        assert!(
            e.contains("graph input(s) 'shape'") && e.contains("--fix-input shape=VALUE"),
            "{e}"
        );
        // Intermediate values declared in value_info.
        let mut b = b;
        let g = b.model.graph.as_mut().unwrap();
        g.value_info.push(value_info("r", DType::F32, &[4, 1, 6]));
        g.value_info
            .push(value_info("u", DType::F32, &[4, 1, 6, 1]));
        g.value_info.push(value_info("s", DType::F32, &[4, 1, 6]));
        let p = plan(&b);
        let a: Vec<(String, String, usize)> = p
            .assumed_inputs
            .iter()
            .map(|a| {
                (
                    a.onnx_name.clone(),
                    crate::plan::assumed::fmt_value(&a.value),
                    a.index,
                )
            })
            .collect();
        assert_eq!(
            a,
            [
                ("shape".into(), "[4, 1, 6]".into(), 1),
                ("axes".into(), "[3]".into(), 2),
                ("sq".into(), "[3]".into(), 3),
                ("ex".into(), "[2, 6]".into(), 4),
            ]
        );
        assert_eq!(p.inputs.len(), 1);
        let shape = &p.assumed_inputs[0];
        assert!(shape.check(&Tensor::from_i64(vec![3], &[4, -1, 6])).is_ok());
        let e = shape
            .check(&Tensor::from_i64(vec![3], &[6, 1, 4]))
            .unwrap_err();
        assert!(
            e.contains("declared shape of \"r\" (the output of node \"Reshape_0\")"),
            "{e}"
        );
    }

    #[test]
    fn reductions_resolve_only_when_the_declared_shape_decides() {
        let model = |keepdims: i64, out: &[i64], axes_len: i64| {
            let b = ModelBuilder::new(18)
                .input("x", DType::F32, &[3, 2, 2])
                .input("axes", DType::I64, &[axes_len])
                .node(
                    "ReduceMean",
                    &["x", "axes"],
                    &["y"],
                    &[("keepdims", A::I(keepdims))],
                );
            declare(b, "y", DType::F32, out)
        };
        // keepdims: the unit dims say what was reduced.
        let p = plan(&model(1, &[3, 1, 2], 1));
        assert_eq!(p.assumed_inputs[0].value.to_i64(), vec![1]);
        // No axes with the default noop_with_empty_axes = 0: every dim.
        let p = plan(&model(1, &[1, 1, 1], 0));
        assert_eq!(p.assumed_inputs[0].value.shape, vec![0]);
        let all = Tensor::from_i64(vec![3], &[0, 1, 2]);
        let a = &p.assumed_inputs[0];
        assert!(Accept::Reduce {
            input: vec![3, 2, 2],
            keepdims: true,
            noop_with_empty_axes: false
        }
        .accepts(&a.value, &all));
        // Without keepdims [3, 2, 2] -> [3, 2] reduces dim 1 or dim 2: nothing is assumed.
        let e = err(&model(0, &[3, 2], 1));
        assert!(
            e.contains("input 'axes' must be a constant") && e.contains("--fix-input axes="),
            "{e}"
        );
        // -> [2, 2] is dim 0 only.
        let p = plan(&model(0, &[2, 2], 1));
        assert_eq!(p.assumed_inputs[0].value.to_i64(), vec![0]);
    }

    #[test]
    fn declared_shapes_are_carried_back_through_shape_keeping_ops() {
        // ReduceL2 as its function expands: only the final output is declared.
        let b = ModelBuilder::new(18)
            .input("x", DType::F32, &[3, 2, 2])
            .input("axes", DType::I64, &[1])
            .node("Mul", &["x", "x"], &["sq"], &[])
            .node("ReduceSum", &["sq", "axes"], &["s"], &[])
            .node("Sqrt", &["s"], &["r"], &[])
            .node("CastLike", &["r", "x"], &["y"], &[]);
        let p = plan(&declare(b, "y", DType::F32, &[3, 2, 1]));
        assert_eq!(p.assumed_inputs[0].value.to_i64(), vec![2]);
    }

    #[test]
    fn resize_topk_tile_split_constant_of_shape_resolve() {
        let b = ModelBuilder::new(13)
            .input("x", DType::F32, &[1, 2, 3, 3])
            .input("scales", DType::F32, &[4])
            .input("k", DType::I64, &[1])
            .input("reps", DType::I64, &[4])
            .input("split", DType::I64, &[2])
            .input("cs", DType::I64, &[2])
            .node(
                "Resize",
                &["x", "", "scales"],
                &["r"],
                &[("mode", A::S("nearest"))],
            )
            .node("TopK", &["r", "k"], &["v", "i"], &[])
            .node("Tile", &["v", "reps"], &["t"], &[])
            .node("Split", &["t", "split"], &["a", "b"], &[("axis", A::I(1))])
            .node("ConstantOfShape", &["cs"], &["c"], &[]);
        let mut b = declare(b, "a", DType::F32, &[1, 1, 6, 4]);
        b = declare(b, "b", DType::F32, &[1, 3, 6, 4]);
        b = declare(b, "c", DType::F32, &[2, 5]);
        let g = b.model.graph.as_mut().unwrap();
        g.value_info
            .push(value_info("r", DType::F32, &[1, 2, 6, 6]));
        g.value_info
            .push(value_info("v", DType::F32, &[1, 2, 6, 2]));
        g.value_info
            .push(value_info("t", DType::F32, &[1, 4, 6, 4]));
        let p = plan(&b);
        let values: Vec<Vec<f64>> = p.assumed_inputs.iter().map(|a| a.value.to_f64()).collect();
        assert_eq!(
            values,
            [
                vec![1.0, 1.0, 2.0, 2.0],
                vec![2.0],
                vec![1.0, 2.0, 1.0, 2.0],
                vec![1.0, 3.0],
                vec![2.0, 5.0],
            ]
        );
    }

    #[test]
    fn inputs_with_other_uses_or_no_declaration_are_not_assumed() {
        // `s` is also data: a value of another spelling would change the sum.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .input("s", DType::I64, &[2])
            .node("Reshape", &["x", "s"], &["y"], &[])
            .node("Add", &["s", "s"], &["z"], &[]);
        let b = declare(declare(b, "y", DType::F32, &[3, 2]), "z", DType::I64, &[2]);
        assert!(err(&b).contains("input 'shape' must be a constant"));
        // A declaration that the input's shape cannot give (another rank).
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 3])
            .input("s", DType::I64, &[3])
            .node("Reshape", &["x", "s"], &["y"], &[]);
        assert!(err(&declare(b, "y", DType::F32, &[3, 2])).contains("--fix-input s=VALUE"));
    }
}
