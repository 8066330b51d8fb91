//! Any bytes as a saved model file, through `saved::parse` (header ranges, manifest, binary size
//! and sha256): an error or a consistent layout, never a panic.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::saved_model(data));
