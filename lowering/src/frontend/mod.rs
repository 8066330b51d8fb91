//! The ONNX front end: protobuf declarations ([`onnx`]) and the loader that builds the IR
//! ([`load`]), with external data (`external.rs`), tensor decoding (`tensor.rs`) and graph
//! conversion (`convert.rs`) in modules of their own.

mod convert;
mod external;
pub mod load;
pub mod onnx;
mod tensor;
