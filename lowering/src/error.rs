//! Errors of loading and lowering.

use std::fmt;

/// Why a model cannot be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    #[error("Node \"{node}\" ({op_type}): {reason}")]
    UnsupportedOp {
        node: String,
        op_type: String,
        reason: String,
    },
    #[error("Node \"{node}\" ({op_type}), attribute '{attr}': {reason}")]
    UnsupportedAttr {
        node: String,
        op_type: String,
        attr: String,
        reason: String,
    },
    #[error("Node \"{node}\" ({op_type}): {reason}")]
    UnsupportedDtype {
        node: String,
        op_type: String,
        reason: String,
    },
    #[error("invalid model: {0}")]
    InvalidModel(String),
    #[error("{} unsupported node(s):\n{}", .0.len(), list(.0))]
    Unsupported(Vec<Unsupported>),
}

fn list(v: &[Unsupported]) -> String {
    v.iter()
        .map(|u| format!("  {u}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One node that cannot run on the chosen backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    pub node: String,
    pub op_type: String,
    /// Full message, including the attribute name when one is at fault.
    pub reason: String,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl LowerError {
    /// Converts an error into list entries. An `InvalidModel` error that names a node is
    /// attributed to it; otherwise to `node`/`op_type`.
    pub fn to_unsupported(&self, node: &str, op_type: &str) -> Vec<Unsupported> {
        match self {
            LowerError::UnsupportedOp { node, op_type, .. }
            | LowerError::UnsupportedAttr { node, op_type, .. }
            | LowerError::UnsupportedDtype { node, op_type, .. } => vec![Unsupported {
                node: node.clone(),
                op_type: op_type.clone(),
                reason: self.to_string(),
            }],
            LowerError::InvalidModel(m) => {
                // Node-scoped messages start with `Node "<name>" (<op>)`.
                let parsed = m.strip_prefix("Node \"").and_then(|r| {
                    let (name, rest) = r.split_once("\" (")?;
                    let (op, _) = rest.split_once(')')?;
                    Some((name.to_string(), op.to_string()))
                });
                match parsed {
                    Some((n, o)) => vec![Unsupported {
                        node: n,
                        op_type: o,
                        reason: m.clone(),
                    }],
                    None => vec![Unsupported {
                        node: node.to_string(),
                        op_type: op_type.to_string(),
                        reason: m.clone(),
                    }],
                }
            }
            LowerError::Unsupported(v) => v.clone(),
        }
    }
}

pub type Result<T, E = LowerError> = std::result::Result<T, E>;

pub(crate) fn invalid(msg: impl Into<String>) -> LowerError {
    LowerError::InvalidModel(msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_node_error_is_attributed() {
        let e =
            LowerError::InvalidModel("Node \"a/b\" (Conv): weight rank 3 != input rank 4".into());
        let u = e.to_unsupported("", "");
        assert_eq!((u[0].node.as_str(), u[0].op_type.as_str()), ("a/b", "Conv"));
        let e = LowerError::InvalidModel("graph has no outputs".into());
        assert_eq!(e.to_unsupported("", "")[0].node, "");
    }
}
