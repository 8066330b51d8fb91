//! Safe Rust access to Qualcomm's QNN (AI Engine Direct): HTP (NPU) and GPU backends, loaded at
//! run time.
//!
//! ```no_run
//! use qnn::{Backend, BackendKind, Context, DataType, Device, DeviceOptions, GraphOptions, Input, Node, Output};
//! # fn main() -> qnn::Result<()> {
//! let backend = Backend::new(BackendKind::Htp)?;
//! let device = Device::new(&backend, &DeviceOptions::host_default())?;
//! let ctx = Context::new(&backend, Some(&device))?;
//! let mut g = ctx.build_graph("relu", &GraphOptions::default())?;
//! let x = g.input("x", DataType::F32, &[1, 4])?;
//! let y = g.output("y", DataType::F32, &[1, 4])?;
//! g.add_node(&Node::new("relu", "Relu").inputs(&[x]).outputs(&[y]))?;
//! let graph = g.finalize()?;
//! let mut out = vec![0f32; 4];
//! graph.execute(&[Input::new(&[-1f32, 2., -3., 4.])], &mut [Output::new(&mut out)])?;
//! # Ok(()) }
//! ```
//!
//! # Ownership and threads
//!
//! Children keep their parents alive through `Arc`s: `Graph` → `Context` → `Device`/`Backend` →
//! library. `Backend`, `Device`, `Context` and `Graph` are `Send + Sync`: graph construction is
//! serialised per backend, and executions of one graph are serialised per graph (QNN asks callers
//! to serialise calls per handle); different graphs execute concurrently. `GraphBuilder` is `Send`
//! and takes `&mut self`.

mod api;
mod backend;
pub mod cache;
mod context;
mod device;
mod error;
mod graph;
pub mod log;
pub mod soc;
mod system;
mod tensor;

#[cfg(test)]
mod fault_tests;

pub use backend::{
    probe, Backend, BackendKind, BackendOptions, HardwareDevice, HtpDeviceInfo, OperationName,
};
pub use context::{write_atomic, Context, ContextOptions};
pub use device::{Device, DeviceOptions, EMULATOR_DEFAULT_SOC};
pub use error::{ApiError, Error, LoadError, Result};
pub use graph::{
    Graph, GraphBuilder, GraphOptions, Node, ParamValue, Precision, Scalar, TensorRef,
    DEFAULT_PACKAGE,
};
pub use log::LogLevel;
pub use system::{binary_info, BinaryInfo, GraphInfo, HtpGraphInfo};
pub use tensor::{
    first_nan, DataType, Element, Input, Output, Quantization, TensorInfo, TensorKind,
};

pub use half::f16;
pub use qnn_sys;
