//! `qnnx serve` refusing to start, before QNN is opened or a port is taken (no HTP library
//! needed): no artifact, bad options. Each exits non-zero with a message and never panics. The
//! server itself (routes, errors, load, faults) is tested on the emulated HTP by
//! tests/python/test_serve.py; its queue and request parsing by the unit tests in
//! qnnx-cli/src/serve/.

mod common;
use common::{refused, temp_dir};

#[test]
fn a_missing_artifact_and_bad_options_are_refused() {
    let dir = temp_dir("serve-refused");
    let d = dir.to_str().unwrap();
    refused(&["serve", d, "--port", "0"], 1, "make an artifact with");
    refused(&["serve", d, "--queue", "0"], 2, "--queue 0");
    refused(&["serve", d, "--deadline", "0"], 2, "--deadline 0");
    refused(
        &["serve", d, "--shutdown-grace=-1"],
        2,
        "--shutdown-grace -1",
    );
    refused(&["serve", d, "--port", "70000"], 2, "70000");
}
