//! `qnnx generate` refusing what it cannot run, before QNN is opened (no HTP library or Python
//! needed): no artifact, a file instead of the folder, a damaged or foreign manifest, a file
//! that is not what the manifest says, bad options. Each exits non-zero with a message and
//! never panics. Generation itself is tested on the emulated HTP by
//! tests/python/test_llm_artifact.py and engine/tests/llm_htp.rs.

use std::path::Path;

mod common;
use common::{json, qnnx, refused, temp_dir};

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[test]
fn missing_and_damaged_artifacts_are_refused_with_what_to_do() {
    let dir = temp_dir("generate-damaged");
    let d = dir.to_str().unwrap();
    refused(
        &["generate", d, "--prompt", "hi"],
        1,
        "make an artifact with",
    );
    let file = dir.join("decode.qnnx");
    write(&file, "x");
    refused(
        &["generate", file.to_str().unwrap(), "--prompt", "hi"],
        1,
        "an LLM artifact is the folder",
    );
    write(&dir.join("manifest.json"), "{ not json");
    refused(&["generate", d, "--prompt", "hi"], 1, "is not JSON");
    write(&dir.join("manifest.json"), r#"{"format": "qnnx-llm/99"}"#);
    refused(
        &["generate", d, "--prompt", "hi"],
        1,
        "build the artifact again",
    );
    write(&dir.join("manifest.json"), r#"{"format": "qnnx-llm/1"}"#);
    refused(
        &["generate", d, "--prompt", "hi"],
        1,
        "does not describe an artifact",
    );
    // JSON errors carry the message too.
    let out = qnnx(&["--json", "generate", d, "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(json(&out)["error"]
        .as_str()
        .unwrap()
        .contains("does not describe"));
}

#[test]
fn bad_options_are_usage_errors() {
    let d = temp_dir("generate-options");
    let d = d.to_str().unwrap();
    refused(&["generate", d], 2, "--prompt");
    refused(
        &["generate", d, "--prompt", "a", "--chat", "b"],
        2,
        "cannot be used with",
    );
    refused(
        &["generate", d, "--prompt", "a", "--top-p", "0"],
        2,
        "top_p",
    );
    refused(
        &["generate", d, "--prompt", "a", "--temperature=-1"],
        2,
        "temperature",
    );
    refused(
        &["generate", d, "--prompt", "a", "--max-new-tokens", "0"],
        2,
        "at least 1",
    );
    refused(
        &["generate", d, "--prompt", "a", "--soc", "SM9999"],
        2,
        "SM9999",
    );
}
