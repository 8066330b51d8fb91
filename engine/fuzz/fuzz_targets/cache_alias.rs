//! Any fingerprint and alias file bytes, through `parse_alias` and `Cache::get_alias`: the
//! same key or none, and alias paths that stay in the alias folder; never a panic.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::cache_alias(data));
