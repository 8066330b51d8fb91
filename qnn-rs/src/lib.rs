//! Safe Rust access to Qualcomm's QNN (AI Engine Direct): HTP (NPU) and GPU backends, loaded at
//! run time.
//!
//! ```no_run
//! use qnn::{Backend, BackendOptions, Context, DType, Device, HtpConfig, Input, Node, Output};
//! # fn main() -> qnn::Result<()> {
//! // SoC 60 on x86_64 (the emulator computes in fp16 like the NPU), the device's own SoC elsewhere.
//! let backend = Backend::open(HtpConfig::host_default(), &BackendOptions::default())?;
//! let device = Device::new(&backend)?;
//! let ctx = Context::new(&backend, Some(&device))?;
//! let mut g = ctx.build_graph("relu")?;
//! let x = g.input("x", DType::F32, &[1, 4])?;
//! let y = g.output("y", DType::F32, &[1, 4])?;
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
//! to serialise calls per handle); different graphs execute concurrently, except on the HTP
//! libraries of QNN 2.47 and 2.48, whose emulator computes wrong outputs or hangs then: there all
//! executes of the process are serialised ([`qnn_sys::releases::Release::htp_concurrent_execute`]).
//! `GraphBuilder` is `Send` and takes `&mut self`.

mod api;
mod backend;
mod config;
mod context;
mod device;
pub mod diagnostics;
mod error;
mod graph;
pub mod log;
mod mem;
mod power;
pub mod profile;
mod system;
mod tensor;

#[cfg(test)]
mod tests;

pub use backend::{
    probe, Backend, BackendKind, BackendOptions, HardwareDevice, HtpDeviceInfo, OperationName,
};
pub use config::{
    BackendConfig, GpuConfig, GpuContextConfig, GpuGraphConfig, GpuPerfHint, GpuPrecision,
    HtpConfig, HtpContextConfig, HtpDeviceConfig, HtpGraphConfig, Precision,
};
pub use context::{write_atomic, Context, ExpectedBinary, MappedFile};
pub use device::Device;
pub use error::{ApiError, Error, LoadError, Result};
pub use graph::{Graph, GraphBuilder, Node, ParamValue, Scalar, TensorRef, DEFAULT_PACKAGE};
pub use log::LogLevel;
pub use mem::{RegisteredMemory, SharedMemory};
pub use power::{HtpPerformanceMode, PowerConfig};
pub use profile::{Event, EventUnit, Profile, ProfileLevel};
pub use qnnx_types::{soc, DType, HtpArch};
pub use system::{binary_info, BinaryInfo, GraphInfo, HtpGraphInfo};
pub use tensor::{
    first_nan, from_qnn_data_type, qnn_data_type, Element, Input, Output, Quantization, TensorInfo,
    TensorKind,
};

pub use half::f16;
pub use qnn_sys;
