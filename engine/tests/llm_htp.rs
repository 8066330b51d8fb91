//! LLM artifacts through the Rust API ([`qnnx_engine::llm`]) on the emulated HTP (SoC 60): the
//! tiny artifact of `tests/models/llm_tiny/gen.py` (a random 2-layer Llama-style decoder built
//! by `qnnx_backend.llm`) gives eager PyTorch's greedy tokens with one and two prefill chunks,
//! its tokenizer gives transformers' ids, a seed repeats its samples, and a request beyond the
//! cache or an artifact for another SoC is refused. tests/python/test_llm_artifact.py runs the
//! same artifact through `qnnx generate`.
//!
//! Without the HTP library or python3 with torch, transformers and qnnx_backend a test prints
//! why and returns; with `QNNX_REQUIRE_HTP=1` (set by CI) either is a failure instead.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};

use qnnx_engine::llm::{Artifact, GenerateOptions, Generator, OpenOptions, Sampling};

mod common;
use common::{fnv1a, htp, repo, skip};

/// The generated folder (artifact/ and expected.json), made once per content of the builder
/// and the scripts and per QNN build (an artifact runs only with the release that built it).
fn generated() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let (backend, _) = htp()?;
        let build = backend.build_id().expect("the library's build id");
        let python = std::env::var("QNNX_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = repo().join("tests/models/llm_tiny/gen.py");
        let sources = [
            script.clone(),
            repo().join("tests/models/common/tiny_llm.py"),
            repo().join("tests/models/common/decoders.py"),
            repo().join("qnnx-py/python/qnnx_backend/llm/build.py"),
            repo().join("qnnx-py/python/qnnx_backend/llm/export.py"),
        ];
        let bytes: Vec<Vec<u8>> = sources
            .iter()
            .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
            .chain([build.into_bytes()])
            .collect();
        let parts: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let root = repo().join("target/test-models");
        let dir = root.join(format!("llm_tiny-{:016x}", fnv1a(&parts)));
        if dir.join("expected.json").is_file() {
            return Some(dir);
        }
        match Command::new(&python)
            .args(["-c", "import torch, transformers, qnnx_backend.llm.build"])
            .output()
        {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                skip(&format!(
                    "{python} cannot import torch, transformers and qnnx_backend: {}",
                    String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .last()
                        .unwrap_or("")
                ));
                return None;
            }
            Err(e) => {
                skip(&format!("{python} is not runnable: {e}"));
                return None;
            }
        }
        let tmp = root.join(format!(".llm_tiny-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).expect("create the model folder");
        let out = Command::new(&python)
            .arg(&script)
            .arg(&tmp)
            .output()
            .expect("run gen.py");
        assert!(
            out.status.success(),
            "gen.py failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Some(dir)
    })
    .as_ref()
}

fn opened() -> Option<(Arc<Artifact>, serde_json::Value)> {
    let dir = generated()?;
    let art = Artifact::open(&dir.join("artifact"), &OpenOptions::default()).expect("open");
    let expected = std::fs::read(dir.join("expected.json")).expect("expected.json");
    Some((
        Arc::new(art),
        serde_json::from_slice(&expected).expect("json"),
    ))
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("a list of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

#[test]
fn greedy_tokens_equal_eager_pytorch() {
    let Some((art, expected)) = opened() else {
        return;
    };
    let n = expected["new_tokens"].as_u64().unwrap() as usize;
    let mut g = Generator::new(art.clone());
    for case in expected["cases"].as_array().unwrap() {
        let prompt = art.encode(case["text"].as_str().unwrap(), true).unwrap();
        assert_eq!(
            prompt,
            ids(&case["prompt"]),
            "tokenizer ids differ from transformers'"
        );
        let want = ids(&case["greedy"]);
        let opts = GenerateOptions {
            max_new_tokens: n,
            ..Default::default()
        };
        let mut pieces = String::new();
        let got = g
            .generate(&prompt, &opts, &mut |p| {
                pieces.push_str(p);
                true
            })
            .unwrap();
        // EOS (id 1) may end it first; up to there the tokens are eager's.
        assert_eq!(
            got.tokens[..],
            want[..got.tokens.len()],
            "prompt {prompt:?}"
        );
        assert!(got.tokens.len() == n || want[got.tokens.len()] == 1);
        assert_eq!(pieces, got.text, "the streamed pieces make the text");
        assert_eq!(got.timings.prefill_chunks, prompt.len().div_ceil(16));
        assert_eq!(g.position(), prompt.len() + got.timings.decode_steps);
    }
}

#[test]
fn a_seed_repeats_its_samples() {
    let Some((art, _)) = opened() else {
        return;
    };
    let prompt = art.encode("the lazy dog", true).unwrap();
    let run = |seed| {
        let opts = GenerateOptions {
            max_new_tokens: 12,
            sampling: Sampling {
                temperature: 1.0,
                top_k: 50,
                top_p: 0.95,
                seed,
            },
            stop_strings: vec![],
        };
        Generator::new(art.clone())
            .generate(&prompt, &opts, &mut |_| true)
            .unwrap()
            .tokens
    };
    assert_eq!(run(3), run(3));
}

#[test]
fn requests_beyond_the_cache_and_other_socs_are_refused() {
    let Some((art, _)) = opened() else {
        return;
    };
    let mut g = Generator::new(art.clone());
    let opts = GenerateOptions {
        max_new_tokens: 64,
        ..Default::default()
    };
    let e = g.generate(&[2, 3], &opts, &mut |_| true).unwrap_err();
    assert!(e.to_string().contains("exceed the cache of 64"), "{e}");
    let e = g.generate(&[], &opts, &mut |_| true).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    let e = g.prefill(&[600]).unwrap_err();
    assert!(
        e.to_string().contains("outside the model's vocabulary"),
        "{e}"
    );
    let dir = generated().unwrap().join("artifact");
    let e = Artifact::open(
        &dir,
        &OpenOptions {
            soc_model: Some(57),
        },
    )
    .err()
    .expect("SoC 57 refused");
    assert!(e.to_string().contains("built for SoC"), "{e}");
}
