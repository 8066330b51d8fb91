//! What an entry's `infer` reads a node through ([`In`]) and returns ([`Out`]): output dtypes
//! and shapes from input shapes and dtypes, attributes, and constant inputs that define shapes
//! (Reshape's `shape`, Slice's `starts`, ...). Dynamic shapes are rejected: a shape-defining
//! input that is not constant after folding is an error on that node.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::tensor::Tensor;
use crate::ir::{Graph, Node};

/// Output dtype and shape of one node output.
pub type Out = (DType, Vec<usize>);

/// A node and its graph as an entry's `infer` (and `fold`) reads them.
pub struct In<'a> {
    pub g: &'a Graph,
    pub n: &'a Node,
}

impl<'a> In<'a> {
    pub fn has(&self, i: usize) -> bool {
        self.n.input(i).is_some()
    }

    pub fn shape(&self, i: usize) -> Result<&'a [usize]> {
        let v = self
            .n
            .input(i)
            .ok_or_else(|| self.n.err_invalid(format!("input {i} is missing")))?;
        Ok(self.g.shape(v))
    }

    pub fn dtype(&self, i: usize) -> Result<DType> {
        let v = self
            .n
            .input(i)
            .ok_or_else(|| self.n.err_invalid(format!("input {i} is missing")))?;
        Ok(self.g.dtype(v))
    }

    pub fn konst(&self, i: usize) -> Option<&'a Tensor> {
        self.n.input(i).and_then(|v| self.g.konst(v))
    }

    /// A shape-defining input that must be constant; `what` names it in the error.
    pub fn const_ints(&self, i: usize, what: &str) -> Result<Vec<i64>> {
        match self.konst(i) {
            Some(t) => Ok(t.to_i64()),
            None if self.has(i) => Err(self.n.err_op(format!(
                "input '{what}' must be a constant after folding (dynamic shapes are not supported)"
            ))),
            None => Err(self.n.err_invalid(format!("input '{what}' is missing"))),
        }
    }

    pub fn opt_const_ints(&self, i: usize, what: &str) -> Result<Option<Vec<i64>>> {
        if !self.has(i) {
            return Ok(None);
        }
        self.const_ints(i, what).map(Some)
    }

    pub fn rank(&self, i: usize) -> Result<usize> {
        Ok(self.shape(i)?.len())
    }
}

/// Inference of the ops whose one output has the dtype and shape of input 0.
pub fn same(x: &In) -> Result<Vec<Out>> {
    Ok(vec![(x.dtype(0)?, x.shape(0)?.to_vec())])
}
