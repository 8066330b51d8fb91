//! The Python exception classes, declared in `qnnx_backend._native` (so they pickle by
//! reference), and the one exhaustive mapping from the engine's errors to them.
//!
//! Every instance carries the same attributes, `None` where they do not apply: `node` (the ONNX
//! node at fault), `nodes` (list of `(node, op_type, reason)`), `operators` (set of op types),
//! `code` and `call` (the QNN error code and call), `device` (set by the Python package),
//! `graph` (the graph of a multi-graph compile). They are None on the classes themselves, so an
//! instance made in Python has them too. Python's `BaseException.__reduce__` keeps them through
//! pickling.

use pyo3::create_exception;
use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError};
use pyo3::prelude::*;

use lowering::LowerError;
use qnnx_engine::Error;

create_exception!(
    qnnx_backend._native,
    QnnxError,
    PyRuntimeError,
    "Base class of every qnnx_backend error."
);
create_exception!(
    qnnx_backend._native,
    LibraryLoadError,
    QnnxError,
    "A QNN library could not be found or opened."
);
create_exception!(
    qnnx_backend._native,
    QnnApiError,
    QnnxError,
    "A QNN call failed; `.code`, `.call`, `.node` say which."
);
create_exception!(
    qnnx_backend._native,
    UnsupportedOpError,
    QnnxError,
    "The model has nodes the backend cannot run; `.nodes` lists them."
);
create_exception!(
    qnnx_backend._native,
    LoweringError,
    QnnxError,
    "The model could not be lowered to QNN (invalid or unsupported input, or a target that cannot run it)."
);
create_exception!(
    qnnx_backend._native,
    CacheError,
    QnnxError,
    "The context-binary cache could not be used."
);
create_exception!(
    qnnx_backend._native,
    InputError,
    QnnxError,
    "The inputs of a call do not fit the compiled graph (count, dtype, shape, NaN, range)."
);
create_exception!(
    qnnx_backend._native,
    SavedModelError,
    QnnxError,
    "A saved model cannot be read or loaded (not one, truncated, corrupt, from another QNN release or SoC, or its manifest does not match its binary)."
);

/// Sets the attributes every qnnx exception has.
pub fn with_attrs(py: Python<'_>, err: PyErr, attrs: Attrs) -> PyErr {
    let v = err.value(py);
    // Attributes are best effort: the message already carries the facts.
    let _ = v.setattr("node", attrs.node);
    let _ = v.setattr("nodes", attrs.nodes.clone());
    let ops: Option<std::collections::BTreeSet<String>> = attrs
        .nodes
        .map(|n| n.into_iter().map(|(_, op, _)| op).collect());
    let _ = v.setattr("operators", ops);
    let _ = v.setattr("code", attrs.code);
    let _ = v.setattr("call", attrs.call);
    let _ = v.setattr("device", attrs.device);
    let _ = v.setattr("graph", attrs.graph);
    err
}

/// The attributes of a qnnx exception.
#[derive(Default)]
pub struct Attrs {
    pub node: Option<String>,
    pub nodes: Option<Vec<(String, String, String)>>,
    pub code: Option<u32>,
    pub call: Option<&'static str>,
    pub device: Option<String>,
    pub graph: Option<String>,
}

/// A file that is not there as Python's own `FileNotFoundError` (errno, message and
/// `.filename` set, as `open()` raises it), so `except FileNotFoundError` catches a wrong path
/// handed to `load()` and friends; `None` for other errors.
fn not_found(e: &qnn::Error) -> Option<PyErr> {
    let qnn::Error::Io { path, source } = e else {
        return None;
    };
    if source.kind() != std::io::ErrorKind::NotFound {
        return None;
    }
    let filename = path.display().to_string();
    Some(match source.raw_os_error() {
        Some(errno) => {
            // std's text of an OS error ends with " (os error N)", which Python's "[Errno N]"
            // says already.
            let text = source.to_string();
            let text = text
                .strip_suffix(&format!(" (os error {errno})"))
                .unwrap_or(&text)
                .to_string();
            PyFileNotFoundError::new_err((errno, text, filename))
        }
        None => PyFileNotFoundError::new_err(format!("{filename}: {source}")),
    })
}

/// A QNN error as `QnnApiError` (or `LibraryLoadError`), naming the ONNX node when one is known;
/// a missing file is `FileNotFoundError`.
pub fn qnn_error(py: Python<'_>, e: qnn::Error, node: Option<String>) -> PyErr {
    if let Some(err) = not_found(&e) {
        return err;
    }
    let msg = match &node {
        Some(n) => format!("ONNX node \"{n}\": {e}"),
        None => e.to_string(),
    };
    let (err, code, call) = match &e {
        qnn::Error::Load(_) => (LibraryLoadError::new_err(msg), None, None),
        qnn::Error::Api(api) => (QnnApiError::new_err(msg), Some(api.code), Some(api.call)),
        qnn::Error::NotProvided { call, .. } => (QnnApiError::new_err(msg), None, Some(*call)),
        qnn::Error::InvalidArgument(_) | qnn::Error::Io { .. } => {
            (QnnApiError::new_err(msg), None, None)
        }
    };
    with_attrs(
        py,
        err,
        Attrs {
            node,
            code,
            call,
            ..Attrs::default()
        },
    )
}

fn lower_error(py: Python<'_>, e: LowerError) -> PyErr {
    let unsupported = |list: Vec<lowering::Unsupported>, msg: String| {
        let nodes = list
            .into_iter()
            .map(|u| (u.node, u.op_type, u.reason))
            .collect();
        with_attrs(
            py,
            UnsupportedOpError::new_err(msg),
            Attrs {
                nodes: Some(nodes),
                ..Attrs::default()
            },
        )
    };
    match e {
        LowerError::UnsupportedOp { .. }
        | LowerError::UnsupportedAttr { .. }
        | LowerError::UnsupportedDtype { .. }
        | LowerError::Unsupported(_) => {
            let msg = e.to_string();
            unsupported(e.to_unsupported("", ""), msg)
        }
        LowerError::InvalidModel(m) => with_attrs(py, LoweringError::new_err(m), Attrs::default()),
    }
}

/// One exhaustive mapping from engine errors to exception classes.
pub fn engine_error(py: Python<'_>, e: Error) -> PyErr {
    match e {
        Error::Lower(e) => lower_error(py, e),
        Error::Qnn { node, source } => qnn_error(py, *source, node),
        Error::Input(m) => with_attrs(py, InputError::new_err(m), Attrs::default()),
        Error::Target(m) | Error::TargetLacks(m) => {
            with_attrs(py, LoweringError::new_err(m), Attrs::default())
        }
        Error::NoFloatPath { message, .. } => {
            with_attrs(py, LoweringError::new_err(message), Attrs::default())
        }
        Error::Cache(e) => with_attrs(py, CacheError::new_err(e.to_string()), Attrs::default()),
        Error::SavedModel(m) => with_attrs(py, SavedModelError::new_err(m), Attrs::default()),
    }
}

/// The attributes every qnnx exception has (see the module docs).
const ATTRS: [&str; 7] = [
    "node",
    "nodes",
    "operators",
    "code",
    "call",
    "device",
    "graph",
];

/// Registers the classes in the module.
pub fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // Class-level defaults, so that an instance made in Python (`QnnxError("...")`, as the
    // package and its users raise them) has every attribute too, None until set.
    let base = py.get_type::<QnnxError>();
    for name in ATTRS {
        base.setattr(name, py.None())?;
    }
    m.add("QnnxError", py.get_type::<QnnxError>())?;
    m.add("LibraryLoadError", py.get_type::<LibraryLoadError>())?;
    m.add("QnnApiError", py.get_type::<QnnApiError>())?;
    m.add("UnsupportedOpError", py.get_type::<UnsupportedOpError>())?;
    m.add("LoweringError", py.get_type::<LoweringError>())?;
    m.add("CacheError", py.get_type::<CacheError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("SavedModelError", py.get_type::<SavedModelError>())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_file_not_found() {
        let dir = std::env::temp_dir().join(format!("qnnx-py-missing-{}", std::process::id()));
        let path = dir.join("model.qnnx");
        // Fails opening the file, before any QNN library is needed.
        let Err(e) = qnnx_engine::saved::load(&path) else {
            panic!("loaded {}", path.display());
        };
        Python::initialize();
        Python::attach(|py| {
            let err = engine_error(py, e);
            assert!(err.is_instance_of::<PyFileNotFoundError>(py), "{err}");
            let v = err.value(py);
            let filename: String = v.getattr("filename").unwrap().extract().unwrap();
            assert_eq!(filename, path.display().to_string());
            let errno: i32 = v.getattr("errno").unwrap().extract().unwrap();
            assert_eq!(errno, 2);
            assert!(!err.to_string().contains("os error"), "{err}");
        });
    }
}
