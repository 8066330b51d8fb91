//! Any text as a cache entry's I/O binding, through `parse_io_binding` and `IoBinding::fits`:
//! it fits exactly the graphs it describes, never a panic.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::io_binding(data));
