//! Everything lowering knows per ONNX op, one module per op family. Each op's file defines its
//! registry entry ([`OpDef`]) and all it refers to: attribute parsing, shape inference,
//! constant folding, expansion and the lowering rule. Each family's `mod.rs` lists its entries,
//! and the [`registry`] looks them up by op type for the passes and for lowering. Rules emit QNN
//! ops through [`LowerCx`]; [`infer`] and [`spatial`] hold what several families share.

pub mod activation;
pub mod attention;
pub mod cast;
pub mod conv;
pub mod elementwise;
pub mod folded;
pub mod infer;
pub mod loss;
pub mod lower_cx;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod quant;
pub mod reduce;
pub mod registry;
pub mod resize;
pub mod rnn;
pub mod shape;
pub mod spatial;

pub use lower_cx::{plan_shape, u32s, LowerCx};
pub use registry::{
    def, defs, family, layout, rule, AxesOp, Expander, Fold, InferFn, Layout, OpDef, Quant, Rule,
    ShapeInput, Weighted,
};

#[cfg(test)]
pub(crate) mod test_util {
    use crate::dtype::DType;
    use crate::error::Result;
    use crate::ir::{Attr, Graph, Node};
    use crate::ops::infer::{In, Out};
    use crate::plan::Plan;
    use crate::testing::ModelBuilder;
    use crate::{Backend, LowerOptions};

    pub fn lower(b: &ModelBuilder) -> Plan {
        lower_with(b, &LowerOptions::default())
    }

    pub fn lower_with(b: &ModelBuilder, o: &LowerOptions) -> Plan {
        match crate::lower(b.load(), o) {
            Ok(p) => p,
            Err(e) => panic!("lowering failed: {e}"),
        }
    }

    pub fn lower_err(b: &ModelBuilder) -> String {
        lower_err_on(b, Backend::Htp)
    }

    pub fn lower_err_on(b: &ModelBuilder, backend: Backend) -> String {
        let o = LowerOptions {
            backend,
            ..Default::default()
        };
        match crate::lower(b.load(), &o) {
            Ok(p) => panic!("expected an error, got plan:\n{}", p.dump()),
            Err(e) => e.to_string(),
        }
    }

    /// A graph of typed, known values (opset 17), for inference tests.
    pub fn graph_with(shapes: &[(&str, DType, Vec<usize>)]) -> Graph {
        let mut g = Graph::default();
        g.opsets.insert(String::new(), 17);
        for (n, d, s) in shapes {
            g.add_typed(n, *d, s.clone());
        }
        g
    }

    /// A node `op` reading the values `inputs` of a [`graph_with`] graph.
    pub fn node(op: &str, inputs: &[Option<usize>], attrs: &[(&str, Attr)]) -> Node {
        let mut n = Node::new("n", op);
        n.inputs = inputs.to_vec();
        for (k, a) in attrs {
            n.attrs.insert(k.to_string(), a.clone());
        }
        n
    }

    /// The outputs `n`'s registry entry infers.
    pub fn infer(g: &Graph, n: &Node) -> Result<Vec<Out>> {
        let def = crate::ops::def(&n.op_type).expect("op has a registry entry");
        (def.infer)(&In { g, n })
    }
}
