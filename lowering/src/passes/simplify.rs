//! Removes pass-through nodes: Identity, inference-mode Dropout, no-op Casts, Reshapes and
//! Slices.
//!
//! Runs after shape inference so that no-op Casts and Reshapes can be recognised. A pass-through
//! whose output is a graph output fed directly by a graph input is kept (lowered as a copy).

use crate::ir::Graph;
use crate::ops::shape::dropout::dropout_may_train;
use crate::ops::shape::slice::slice_params;

pub fn run(g: &mut Graph) {
    let mut i = 0;
    while i < g.nodes.len() {
        let n = &g.nodes[i];
        let (Some(inp), Some(out)) = (n.input(0), n.output(0)) else {
            i += 1;
            continue;
        };
        let known = g.values[inp].known && g.values[out].known;
        let same = known
            && g.values[inp].shape == g.values[out].shape
            && g.values[inp].dtype == g.values[out].dtype;
        let passthrough = match n.op_type.as_str() {
            "Identity" => true,
            // A Dropout whose mask is used cannot go; with ratio input dynamic training_mode is
            // what decides, and we only lower inference graphs.
            "Dropout" => !dropout_may_train(g, n) && n.output(1).none_or_unused(g),
            "Cast" | "CastLike" | "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" | "Expand" => {
                same
            }
            // The whole of every axis, forwards (a reversal keeps the shape too).
            "Slice" => {
                same && slice_params(g, n).is_ok_and(|r| r.iter().all(|&(_, _, _, st)| st > 0))
            }
            _ => false,
        };
        if passthrough && g.bypass(i, inp, out) {
            continue;
        }
        i += 1;
    }
}

trait Unused {
    fn none_or_unused(self, g: &Graph) -> bool;
}
impl Unused for Option<usize> {
    fn none_or_unused(self, g: &Graph) -> bool {
        match self {
            None => true,
            Some(v) => !g.is_output(v) && !g.nodes.iter().any(|n| n.inputs.contains(&Some(v))),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::testing::ModelBuilder;

    #[test]
    fn identity_and_dropout_removed() {
        let mut g = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .node("Identity", &["x"], &["a"], &[])
            .node("Dropout", &["a"], &["b"], &[])
            .node("Relu", &["b"], &["c"], &[])
            .node("Identity", &["c"], &["y"], &[])
            .output("y")
            .load()
            .graph;
        super::run(&mut g);
        assert_eq!(g.dump(), "Relu(x) -> y:f32[]\noutputs: y\n");
    }

    #[test]
    fn dropout_in_training_mode_is_kept() {
        let mut g = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .init("r", crate::ir::tensor::Tensor::scalar_f32(0.5))
            .init(
                "t",
                crate::ir::tensor::Tensor::from_i64_as(DType::Bool, vec![], &[1]),
            )
            .node("Dropout", &["x", "r", "t"], &["y"], &[])
            .output("y")
            .load()
            .graph;
        super::run(&mut g);
        assert_eq!(g.nodes.len(), 1);
    }

    #[test]
    fn identity_from_input_to_output_is_kept() {
        let mut g = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .node("Identity", &["x"], &["y"], &[])
            .output("y")
            .load()
            .graph;
        super::run(&mut g);
        assert_eq!(g.nodes.len(), 1);
    }
}
