//! Expands ONNX function ops (Attention, the losses, ...) into the primitive ONNX ops that the
//! rules lower, as ONNX function inlining does. Each expansion is the `expand` of its op's
//! registry entry ([`crate::ops::OpDef`]); this pass only splices the nodes it builds in place
//! of the original node.
//!
//! A node is expanded only when the op table accepts it (status, opset, input dtypes) and its
//! inputs' shapes are known. When an expansion refuses a node (an attribute variant it does not
//! cover), the node stays and the error is returned for lowering to report.

use crate::error::LowerError;
use crate::ir::builder::Builder;
use crate::ir::Graph;
use crate::table::OpTable;
use crate::Backend;

/// Expands every node that has an expansion and whose inputs are known. Returns how many nodes
/// were expanded and the expansions' refusals.
pub fn run(g: &mut Graph, backend: Backend, table: &OpTable) -> (usize, Vec<LowerError>) {
    let mut errors = Vec::new();
    let mut expanded = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        let node = g.nodes[i].clone();
        let Some(expand) = crate::ops::def(&node.op_type).and_then(|d| d.expand) else {
            i += 1;
            continue;
        };
        let known = node.inputs.iter().flatten().all(|&v| g.values[v].known);
        if !known || table.check_node(&node, g, backend).is_err() {
            i += 1;
            continue;
        }
        let mut b = Builder::new(g, &node.name);
        b.table_qnn = table
            .entry(&node.op_type)
            .map(|e| e.qnn.as_slice())
            .unwrap_or(&[]);
        match expand(&mut b, &node) {
            Ok(false) => i += 1,
            Ok(true) => {
                let nodes = std::mem::take(&mut b.nodes);
                let n = nodes.len();
                g.nodes.splice(i..=i, nodes);
                i += n;
                expanded += 1;
            }
            Err(e) => {
                errors.push(e);
                i += 1;
            }
        }
    }
    (expanded, errors)
}
