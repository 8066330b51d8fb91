//! `qnn::Error`: every failure of this crate, with the QNN call, code, family and message.

use std::fmt;
use std::path::PathBuf;

pub use qnn_sys::LoadError;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failure of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A QNN library could not be found, opened or used.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A QNN call returned an error.
    #[error(transparent)]
    Api(Box<ApiError>),
    /// The library's function table has no entry for this call.
    #[error("{call} is not provided by this QNN library ({library})")]
    NotProvided { call: &'static str, library: String },
    /// We refused to call QNN because the arguments are wrong (checked before the call, since
    /// QNN itself does not check them all: see the buffer-size checks of `Graph::execute`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Error {
    /// The QNN error code, for API errors.
    pub fn code(&self) -> Option<u32> {
        match self {
            Error::Api(e) => Some(e.code),
            _ => None,
        }
    }
}

/// A QNN call that returned an error.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The function-table slot name, such as `graphFinalize`.
    pub call: &'static str,
    /// `error & 0xFFFF`.
    pub code: u32,
    /// The full `Qnn_ErrorHandle_t` as returned.
    pub handle: u64,
    /// The header name of the code, such as `QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED`.
    pub name: Option<&'static str>,
    /// The code's family from QNN's documented ranges (`Graph`, `Context`, `System`, ...).
    pub family: &'static str,
    /// `errorGetMessage`'s text, when the library knows the code.
    pub message: Option<String>,
    /// What we were doing: the node and op, the graph or file.
    pub context: Option<String>,
    /// Error and warning lines QNN logged on this thread during the call.
    pub log: Vec<String>,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed", self.call)?;
        if let Some(ctx) = &self.context {
            write!(f, " for {ctx}")?;
        }
        write!(
            f,
            ": {} ({}, {})",
            self.name.unwrap_or("unknown QNN error"),
            self.code,
            self.family
        )?;
        if let Some(m) = &self.message {
            // errorGetMessage's text often starts with the code's name, said just before.
            let m = match self.name.and_then(|n| m.strip_prefix(n)) {
                Some(rest) => rest.trim_start_matches(':').trim_start(),
                None => m,
            };
            if !m.is_empty() {
                write!(f, ": {m}")?;
            }
        }
        if !self.log.is_empty() {
            write!(f, "; QNN log: {}", self.log.join(" | "))?;
        }
        Ok(())
    }
}

impl std::error::Error for ApiError {}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Error {
        Error::Api(Box::new(e))
    }
}

pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(message: Option<&str>) -> ApiError {
        ApiError {
            call: "backendCreate",
            code: 4000,
            handle: 4000,
            name: Some("QNN_BACKEND_ERROR_CANNOT_INITIALIZE"),
            family: "Backend",
            message: message.map(String::from),
            context: None,
            log: Vec::new(),
        }
    }

    #[test]
    fn the_code_name_is_said_once() {
        let want = "backendCreate failed: QNN_BACKEND_ERROR_CANNOT_INITIALIZE (4000, Backend): \
                    Backend failed to initialize";
        let doubled = "QNN_BACKEND_ERROR_CANNOT_INITIALIZE: Backend failed to initialize";
        assert_eq!(api(Some(doubled)).to_string(), want);
        assert_eq!(api(Some("Backend failed to initialize")).to_string(), want);
        assert_eq!(
            api(Some("QNN_BACKEND_ERROR_CANNOT_INITIALIZE")).to_string(),
            "backendCreate failed: QNN_BACKEND_ERROR_CANNOT_INITIALIZE (4000, Backend)"
        );
    }
}
