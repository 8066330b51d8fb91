//! Any bytes as a cache entry's metadata (`<key>.json`): an error or metadata that
//! serialises back to itself, never a panic.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::cache_meta(data));
