//! Raw FFI for the Qualcomm QNN (AI Engine Direct) C API.
//!
//! Nothing here links against QNN: libraries are opened at run time ([`loader`]) and every call
//! goes through the function table of the provider they return ([`CoreFunctions`],
//! [`SystemFunctions`]). The declarations are ours, written from the C API and checked against
//! the 2.4x libraries (sizes and offsets are asserted at compile time in each module). The
//! `bindgen` feature regenerates bindings from a local SDK's headers to cross-check them.
//!
//! This crate is all `unsafe` plumbing; use the `qnn` crate (`qnn-rs`) instead.

pub mod consts;
pub mod errors;
pub mod gpu;
pub mod htp;
pub mod interface;
pub mod loader;
pub mod mem;
pub mod profile;
pub mod releases;
pub mod system;
pub mod types;

#[cfg(feature = "bindgen")]
pub mod bindgen_check;

pub use interface::{CoreFunctions, Interface};
pub use loader::{BackendLibrary, LibraryKind, LoadError, SystemLibrary};
pub use system::{SystemFunctions, SystemInterface};
pub use types::*;
