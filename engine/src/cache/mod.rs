//! The persistent context-binary cache ([`store`]: files, integrity, locking, eviction, and the
//! key encoding, [`KeyBuilder`]), shared by the `qnnx` command and the Python package, so both
//! read each other's entries. What a key is made of (the key policy) is the compile driver's:
//! [`crate::compile::key`].

mod alias;
mod private;
mod store;

pub use alias::{parse_alias, parse_split_alias};
pub use store::*;
