//! What can go wrong between ONNX bytes and outputs, in one type for the front ends to map.

use lowering::LowerError;

/// A failure of the compile/run core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model cannot be lowered for the backend (unsupported nodes, invalid model).
    #[error(transparent)]
    Lower(#[from] LowerError),
    /// QNN refused a graph built from a plan, or a call failed; `node` is the ONNX node whose op
    /// failed, when the failure belongs to one op (validation, addNode).
    #[error("{}{source}", node.as_ref().map(|n| format!("ONNX node \"{n}\": ")).unwrap_or_default())]
    Qnn {
        node: Option<String>,
        #[source]
        source: Box<qnn::Error>,
    },
    /// The caller's inputs do not fit the compiled graph (count, dtype, shape, NaN, int64 range).
    #[error("{0}")]
    Input(String),
    /// The target cannot be resolved (unknown SoC, arch mismatch) or an option does not apply to
    /// its backend.
    #[error("{0}")]
    Target(String),
    /// The model needs what the target's HTP lacks (block-wise weights below v69), refused
    /// before QNN is asked.
    #[error("{0}")]
    TargetLacks(String),
    /// A float model for an HTP without a float path (v68 class), refused before QNN is asked.
    #[error("{message}")]
    NoFloatPath {
        message: String,
        /// How many float tensors the lowered graph has.
        float_tensors: usize,
    },
    /// A saved model cannot be read or loaded: not one, truncated, corrupt, from another QNN
    /// release or for another SoC, or its manifest does not match its binary. The message names
    /// the file and what differs.
    #[error("{0}")]
    SavedModel(String),
    /// The context-binary cache could not be used.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
}

impl Error {
    /// A QNN failure that belongs to no single op.
    pub fn qnn(source: qnn::Error) -> Error {
        Error::Qnn {
            node: None,
            source: Box::new(source),
        }
    }

    /// Whether this is `graphFinalize` failing with `QNN_COMMON_ERROR_MEM_ALLOC` (1002). Every op
    /// was validated before it was added, so on the HTP this is the memory planner: the tensors
    /// that must live at once (every graph output does, for the whole execute) do not fit, as
    /// when every value of a large model is an output (measured on the x86_64 2.51 library:
    /// between 2.05 and 2.57 GB of f32 outputs). The same code is also seen for an op QNN
    /// validates but cannot build (docs/qnn-notes.md: PRelu with a u16 slope).
    pub fn is_finalize_mem_alloc(&self) -> bool {
        match self {
            Error::Qnn { source, .. } => {
                matches!(&**source, qnn::Error::Api(a) if a.call == "graphFinalize" && a.code == 1002)
            }
            _ => false,
        }
    }
}

impl From<qnn::Error> for Error {
    fn from(e: qnn::Error) -> Error {
        Error::qnn(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
