#![forbid(unsafe_code)]
//! ONNX graphs lowered to QNN op lists.
