#![forbid(unsafe_code)]
//! The compile/run core of qnnx, shared by the `qnnx` command and the Python package so that both
//! behave alike: one [`Target`] (backend, SoC, HTP arch and what they can compute), the
//! process-wide backend [`registry`], [`emit`] (a lowered plan to a QNN graph), the
//! [`compile`] driver (cache lookup, lowering, emit, finalize, cache store, with progress stages),
//! host I/O ([`io`]: int64 narrowing, NaN and shape checks) and the context-binary [`cache`] with
//! its key policy, [`saved`] models (a compiled binary with its manifest in one file), and
//! [`llm`] artifacts with their generation loop.
//!
//! ```text
//! ONNX bytes --lowering::lower--> Plan --emit--> qnn::Graph --io--> host tensors
//!                \____________ compile (cache keyed by model, target, settings) ___________/
//! ```

pub mod cache;
pub mod calibrate;
pub mod compare;
pub mod compile;
pub mod emit;
mod error;
pub mod io;
pub mod llm;
pub mod mixed;
pub mod power;
pub mod profile;
pub mod registry;
pub mod saved;
pub mod session;
pub mod target;

pub use compile::{
    compile, compile_with_progress, CompileOptions, Compiled, Stage, StageTimes, Timed,
};
pub use emit::Emitted;
pub use error::{Error, Result};
pub use io::HostTensor;
pub use registry::Runtime;
pub use session::{Session, SessionOptions};
pub use target::{Target, TargetSpec};
