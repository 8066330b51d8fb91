//! Any metadata and binary in a cache folder, through `Cache::get`: a hit whose binary has
//! the recorded size and sha256, or a miss that removed the entry; never a panic.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::cache_get(data));
