//! Any bytes given to the ONNX loader: an error or a model, never a panic, never unbounded memory.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = lowering::Model::from_bytes(data, None);
});
