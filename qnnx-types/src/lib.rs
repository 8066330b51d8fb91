#![forbid(unsafe_code)]
//! The vocabulary every qnnx crate shares, defined once: element types ([`DType`]), QNN backends
//! ([`BackendKind`]), HTP architectures ([`HtpArch`]), Snapdragon SoCs ([`Soc`]) and fixed-point encodings
//! ([`Encoding`]).
//!
//! Each noun has one spelling ([`DType::name`], [`BackendKind::name`], [`HtpArch::name`]): the
//! op tables, the cache's metadata, the `qnnx` command, the Python module and messages all use
//! it. Matches over these enums are exhaustive everywhere: a new variant is a compile error in
//! every place that has to decide something about it.

mod backend;
mod dtype;
pub mod quant;
pub mod soc;

pub use backend::BackendKind;
pub use dtype::{parse_tensor_type, tensor_type_name, DType};
pub use quant::{Blocks, Encoding};
pub use soc::{HtpArch, Soc};
