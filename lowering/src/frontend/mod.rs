//! The ONNX front end: protobuf declarations ([`onnx`]) and the loader that builds the IR
//! ([`load`]).

pub mod load;
pub mod onnx;
