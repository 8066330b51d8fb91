//! `If` whose condition is known at compile time — a constant, a value folded from static
//! shapes, or one computed from a fixed input (`LowerOptions::fix_inputs`) — replaced by the
//! branch it takes: the branch's nodes are inlined in the If's place, their values renamed to
//! stay unique, the values it reads from enclosing graphs connected to the If's inputs (the
//! loader made them explicit, see [`crate::ir::SubGraph`]), and each If output computed by an
//! Identity of the branch's output (`simplify` removes those it can). An If whose condition is
//! only known at run time stays, and is refused as control flow.

use std::collections::HashMap;

use crate::ir::{Attr, Graph, Node, SubGraph, ValueId};

/// Inlines the taken branch of every If with a constant condition; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut done = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        let n = &g.nodes[i];
        let taken = (n.op_type == "If" && n.domain.is_empty())
            .then(|| branch(g, n))
            .flatten();
        match taken {
            Some(sub) => {
                let inlined = inline(g, i, &sub);
                g.nodes.splice(i..=i, inlined.iter().cloned());
                i += inlined.len();
                done += 1;
            }
            None => i += 1,
        }
    }
    done
}

/// The branch `n` takes, when its condition is a one-element constant and the branch loaded.
fn branch(g: &Graph, n: &Node) -> Option<std::sync::Arc<SubGraph>> {
    let cond = g.konst(n.input(0)?)?;
    if cond.numel() != 1 {
        return None;
    }
    let name = if cond.get_f64(0) != 0.0 {
        "then_branch"
    } else {
        "else_branch"
    };
    match n.attrs.get(name)? {
        Attr::Graph(sub) if sub.formal == 0 && sub.graph.outputs.len() >= n.outputs.len() => {
            Some(sub.clone())
        }
        _ => None,
    }
}

/// The nodes that replace If node `at` by branch `sub`, with their values added to `g`.
fn inline(g: &mut Graph, at: usize, sub: &SubGraph) -> Vec<Node> {
    let if_node = g.nodes[at].clone();
    let sg = &sub.graph;
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for (c, &slot) in sub.captures.iter().enumerate() {
        if let Some(outer) = if_node.input(slot) {
            map.insert(sg.inputs[sub.formal + c], outer);
        }
    }
    for (id, v) in sg.values.iter().enumerate() {
        if let Some(t) = &v.konst {
            let new = g.add_const(&v.name, t.clone());
            map.insert(id, new);
        }
    }
    let mut nodes = Vec::with_capacity(sg.nodes.len() + if_node.outputs.len());
    for n in &sg.nodes {
        let mut m = n.clone();
        m.name = g.unique_node_name(&format!("{}/{}", if_node.name, n.name));
        for o in m.outputs.iter_mut().flatten() {
            let new = g.add_value(&sg.values[*o].name);
            map.insert(*o, new);
            *o = new;
        }
        nodes.push(m);
    }
    // Inputs after every output is mapped: a branch's nodes are sorted, but a value may also be
    // read before the node that defines it in a malformed branch (then it stays unmapped and
    // inference reports it).
    for (m, n) in nodes.iter_mut().zip(&sg.nodes) {
        m.inputs = n
            .inputs
            .iter()
            .map(|i| i.and_then(|v| map.get(&v).copied()))
            .collect();
    }
    for (k, o) in if_node.outputs.iter().enumerate() {
        let (Some(o), Some(src)) = (o, map.get(&sg.outputs[k]).copied()) else {
            continue;
        };
        let mut id = Node::new(
            g.unique_node_name(&format!("{}/output_{k}", if_node.name)),
            "Identity",
        );
        id.inputs = vec![Some(src)];
        id.outputs = vec![Some(*o)];
        nodes.push(id);
    }
    nodes
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::frontend::onnx;
    use crate::ir::tensor::Tensor;
    use crate::testing::{value_info, ModelBuilder, A};
    use crate::{lower, LowerOptions};

    /// A branch graph: `nodes` (op, inputs, outputs), outputs `outs`.
    fn branch(nodes: &[(&str, &[&str], &[&str])], outs: &[&str]) -> onnx::GraphProto {
        let mut b = ModelBuilder::new(17);
        for (op, i, o) in nodes {
            b = b.node(op, i, o, &[]);
        }
        let mut g = b.model.graph.unwrap();
        g.output = outs
            .iter()
            .map(|o| value_info(o, DType::F32, &[]))
            .collect();
        g
    }

    /// y = If(cond, then: x * 2 (reading the outer `x` and `two`), else: x - 1).
    fn if_model(cond: ModelBuilder) -> ModelBuilder {
        let then = branch(&[("Mul", &["x", "two"], &["t"])], &["t"]);
        let els = branch(&[("Sub", &["x", "one"], &["e"])], &["e"]);
        cond.init("two", Tensor::from_f32(vec![], &[2.0]))
            .init("one", Tensor::from_f32(vec![], &[1.0]))
            .node(
                "If",
                &["c"],
                &["y"],
                &[("then_branch", A::G(then)), ("else_branch", A::G(els))],
            )
            .node("Relu", &["y"], &["z"], &[])
            .output("z")
    }

    #[test]
    fn constant_condition_takes_its_branch() {
        for (c, op) in [(1, "ElementWiseMultiply"), (0, "ElementWiseSubtract")] {
            let b = if_model(
                ModelBuilder::new(17)
                    .input("x", DType::F32, &[2, 3])
                    .init("c", Tensor::from_i64_as(DType::Bool, vec![], &[c])),
            );
            let p = lower(b.bytes(), &LowerOptions::default()).unwrap();
            assert_eq!(p.op_types(), vec![op, "Relu"], "{}", p.dump());
        }
    }

    #[test]
    fn condition_from_static_shapes_folds() {
        // if x.shape[1] > 2: the branch is chosen from the input's static shape.
        let b = if_model(
            ModelBuilder::new(17)
                .input("x", DType::F32, &[2, 3])
                .node("Shape", &["x"], &["s"], &[])
                .init("i1", Tensor::from_i64(vec![], &[1]))
                .node("Gather", &["s", "i1"], &["d1"], &[])
                .init("lim", Tensor::from_i64(vec![], &[2]))
                .node("Greater", &["d1", "lim"], &["c"], &[]),
        );
        let p = lower(b.bytes(), &LowerOptions::default()).unwrap();
        assert_eq!(
            p.op_types(),
            vec!["ElementWiseMultiply", "Relu"],
            "{}",
            p.dump()
        );
    }

    #[test]
    fn condition_from_a_fixed_input_folds_and_a_runtime_one_is_refused() {
        let b = if_model(
            ModelBuilder::new(17)
                .input("x", DType::F32, &[2, 3])
                .input("flag", DType::Bool, &[])
                .node("Identity", &["flag"], &["c"], &[]),
        );
        let e = lower(b.bytes(), &LowerOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("(If): If is not supported on HTP (control flow is not lowered)"),
            "{e}"
        );
        let mut o = LowerOptions::default();
        o.fix_inputs.insert("flag".into(), "false".into());
        let p = lower(b.bytes(), &o).unwrap();
        assert_eq!(p.op_types(), vec!["ElementWiseSubtract", "Relu"]);
        assert_eq!(p.assumed_inputs[0].onnx_name, "flag");
    }

    #[test]
    fn nested_branches_and_outer_outputs_inline() {
        // The then branch holds an If of its own, reading a value of the outer branch and the
        // main graph; the else branch returns a main-graph value directly.
        let inner_then = branch(&[("Add", &["h", "x"], &["ih"])], &["ih"]);
        let inner_else = branch(&[("Neg", &["h"], &["ie"])], &["ie"]);
        let mut then = branch(&[("Mul", &["x", "x"], &["h"])], &["io"]);
        then.node.push(onnx::NodeProto {
            name: Some("inner".into()),
            op_type: Some("If".into()),
            input: vec!["c".into()],
            output: vec!["io".into()],
            attribute: vec![
                crate::testing::attr("then_branch", &A::G(inner_then)),
                crate::testing::attr("else_branch", &A::G(inner_else)),
            ],
            ..Default::default()
        });
        let els = branch(&[], &["x"]);
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[4])
            .init("c", Tensor::from_i64_as(DType::Bool, vec![], &[1]))
            .node(
                "If",
                &["c"],
                &["y"],
                &[("then_branch", A::G(then)), ("else_branch", A::G(els))],
            )
            .output("y");
        let p = lower(b.bytes(), &LowerOptions::default()).unwrap();
        assert_eq!(
            p.op_types(),
            vec!["ElementWiseMultiply", "ElementWiseAdd"],
            "{}",
            p.dump()
        );
        assert_eq!(p.outputs[0].onnx_name, "y");
        let mut b = b;
        b.model.graph.as_mut().unwrap().initializer[0] =
            crate::testing::tensor_proto("c", &Tensor::from_i64_as(DType::Bool, vec![], &[0]));
        let p = lower(b.bytes(), &LowerOptions::default()).unwrap();
        assert_eq!(p.op_types(), vec!["Reshape"], "{}", p.dump());
    }
}
