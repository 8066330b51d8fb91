//! Typed attribute getters and node-scoped error constructors. Every error names the node, its
//! op type and the attribute.

use crate::error::{LowerError, Result};
use crate::ir::tensor::Tensor;
use crate::ir::{Attr, Node};

impl Node {
    /// Input 0 and output 0 of a one-in one-out node (what an expansion of it rewires), or an
    /// error naming the node when either is missing.
    pub fn unary_io(&self) -> Result<(crate::ir::ValueId, crate::ir::ValueId)> {
        let x = self
            .input(0)
            .ok_or_else(|| self.err_invalid("input 0 is missing"))?;
        let y = self
            .output(0)
            .ok_or_else(|| self.err_invalid("output 0 is missing"))?;
        Ok((x, y))
    }

    pub fn err_op(&self, reason: impl Into<String>) -> LowerError {
        LowerError::UnsupportedOp {
            node: self.name.clone(),
            op_type: self.op_type.clone(),
            reason: reason.into(),
        }
    }

    pub fn err_attr(&self, attr: &str, reason: impl Into<String>) -> LowerError {
        LowerError::UnsupportedAttr {
            node: self.name.clone(),
            op_type: self.op_type.clone(),
            attr: attr.to_string(),
            reason: reason.into(),
        }
    }

    pub fn err_dtype(&self, reason: impl Into<String>) -> LowerError {
        LowerError::UnsupportedDtype {
            node: self.name.clone(),
            op_type: self.op_type.clone(),
            reason: reason.into(),
        }
    }

    pub fn err_invalid(&self, reason: impl std::fmt::Display) -> LowerError {
        LowerError::InvalidModel(format!(
            "Node \"{}\" ({}): {reason}",
            self.name, self.op_type
        ))
    }

    fn wrong_kind(&self, name: &str, want: &str, got: &Attr) -> LowerError {
        LowerError::InvalidModel(format!(
            "Node \"{}\" ({}), attribute '{name}': expected {want}, found {}",
            self.name,
            self.op_type,
            got.kind()
        ))
    }

    pub fn has_attr(&self, name: &str) -> bool {
        self.attrs.contains_key(name)
    }

    pub fn attr_i_opt(&self, name: &str) -> Result<Option<i64>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Int(i)) => Ok(Some(*i)),
            Some(a) => Err(self.wrong_kind(name, "int", a)),
        }
    }

    pub fn attr_i(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.attr_i_opt(name)?.unwrap_or(default))
    }

    pub fn attr_f_opt(&self, name: &str) -> Result<Option<f32>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Float(f)) => Ok(Some(*f)),
            Some(Attr::Int(i)) => Ok(Some(*i as f32)),
            Some(a) => Err(self.wrong_kind(name, "float", a)),
        }
    }

    pub fn attr_f(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.attr_f_opt(name)?.unwrap_or(default))
    }

    pub fn attr_s_opt(&self, name: &str) -> Result<Option<&str>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::String(s)) => Ok(Some(s)),
            Some(a) => Err(self.wrong_kind(name, "string", a)),
        }
    }

    pub fn attr_s<'a>(&'a self, name: &str, default: &'a str) -> Result<&'a str> {
        Ok(self.attr_s_opt(name)?.unwrap_or(default))
    }

    pub fn attr_ints_opt(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(Attr::Int(i)) => Ok(Some(vec![*i])),
            Some(a) => Err(self.wrong_kind(name, "ints", a)),
        }
    }

    pub fn attr_ints(&self, name: &str, default: &[i64]) -> Result<Vec<i64>> {
        Ok(self
            .attr_ints_opt(name)?
            .unwrap_or_else(|| default.to_vec()))
    }

    pub fn attr_floats_opt(&self, name: &str) -> Result<Option<Vec<f32>>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Floats(v)) => Ok(Some(v.clone())),
            Some(Attr::Float(f)) => Ok(Some(vec![*f])),
            Some(a) => Err(self.wrong_kind(name, "floats", a)),
        }
    }

    pub fn attr_strings_opt(&self, name: &str) -> Result<Option<Vec<String>>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Strings(v)) => Ok(Some(v.clone())),
            Some(Attr::String(s)) => Ok(Some(vec![s.clone()])),
            Some(a) => Err(self.wrong_kind(name, "strings", a)),
        }
    }

    pub fn attr_t_opt(&self, name: &str) -> Result<Option<&Tensor>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Tensor(t)) => Ok(Some(t)),
            Some(a) => Err(self.wrong_kind(name, "tensor", a)),
        }
    }

    /// A non-negative attribute that must fit a QNN `UINT_32`.
    pub fn attr_u32(&self, name: &str, default: i64) -> Result<u32> {
        let v = self.attr_i(name, default)?;
        u32::try_from(v).map_err(|_| self.err_attr(name, format!("value {v} is out of range")))
    }
}

/// Resolves a possibly negative axis against `rank`.
pub fn norm_axis(node: &Node, attr: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r.max(1) {
        return Err(node.err_invalid(format!(
            "attribute '{attr}': axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// Resolves `axes` (possibly negative) against `rank`, sorted and de-duplicated.
pub fn norm_axes(n: &Node, what: &str, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut v = axes
        .iter()
        .map(|&a| norm_axis(n, what, a, rank))
        .collect::<Result<Vec<_>>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Non-negative values that fit QNN's `UINT_32` params, which also keeps shape arithmetic on
/// them from overflowing.
pub fn to_usizes(n: &Node, attr: &str, v: &[i64]) -> Result<Vec<usize>> {
    if let Some(x) = v.iter().find(|&&x| x > u32::MAX as i64) {
        return Err(n.err_invalid(format!("attribute '{attr}' value {x} is too large")));
    }
    v.iter()
        .map(|&x| {
            usize::try_from(x)
                .map_err(|_| n.err_invalid(format!("attribute '{attr}' has negative value {x}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_kind_names_node_and_attr() {
        let n = Node::new("blk/Softmax", "Softmax").with_attr("axis", Attr::Float(1.0));
        let e = n.attr_i("axis", -1).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid model: Node \"blk/Softmax\" (Softmax), attribute 'axis': expected int, found float"
        );
    }

    #[test]
    fn err_attr_message_format() {
        let n = Node::new("blk3/Softmax", "Softmax");
        let e = n.err_attr("axis", "only the last axis is supported on HTP");
        assert_eq!(
            e.to_string(),
            "Node \"blk3/Softmax\" (Softmax), attribute 'axis': only the last axis is supported on HTP"
        );
    }

    #[test]
    fn norm_axis_bounds() {
        let n = Node::new("n", "Concat");
        assert_eq!(norm_axis(&n, "axis", -1, 4).unwrap(), 3);
        assert!(norm_axis(&n, "axis", 4, 4).is_err());
        assert!(norm_axis(&n, "axis", -5, 4).is_err());
    }
}
