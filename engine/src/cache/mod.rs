//! The persistent context-binary cache ([`store`]: files, integrity, locking, eviction), shared
//! by the `qnnx` command and the Python package, and its key policy ([`key`]: what a compiled
//! binary depends on), so both compute the same keys and read each other's entries.

mod alias;
pub mod key;
mod private;
mod store;

pub use alias::{parse_alias, parse_split_alias};
pub use key::{model_key, multi_key, shapes_setting};
pub use store::*;
