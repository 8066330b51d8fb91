//! The safe layer's unit tests against function tables other than a plain library's, in one
//! place: `fake_table.rs` runs on a hand-made table (no QNN library needed: errors naming the
//! call, code, node and op, handles freed, configs passed, device-file context on failed
//! creates), `fault_injection.rs` wraps chosen slots of the real HTP library's table so that one
//! call fails (skips without the library unless `QNNX_REQUIRE_HTP` is set).

mod fake_table;
mod fault_injection;
