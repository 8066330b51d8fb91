//! Dead-code removal: drops nodes none of whose outputs reach a graph output.

use crate::ir::Graph;

pub fn run(g: &mut Graph) {
    let mut live = vec![false; g.values.len()];
    for &o in &g.outputs {
        live[o] = true;
    }
    let mut keep = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate().rev() {
        if n.outputs.iter().flatten().any(|&o| live[o]) {
            keep[i] = true;
            for &v in n.inputs.iter().flatten() {
                live[v] = true;
            }
        }
    }
    let mut i = 0;
    g.nodes.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::testing::ModelBuilder;

    #[test]
    fn removes_unused_branch() {
        let mut g = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .node("Neg", &["x"], &["unused"], &[])
            .node("Exp", &["unused"], &["unused2"], &[])
            .node("Relu", &["x"], &["y"], &[])
            .output("y")
            .load()
            .graph;
        super::run(&mut g);
        assert_eq!(g.dump(), "Relu(x) -> y:f32[]\noutputs: y\n");
    }
}
