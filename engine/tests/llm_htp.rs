//! LLM artifacts through the Rust API ([`qnnx_engine::llm`]) on the emulated HTP (SoC 60): the
//! tiny artifact assembled here from the parts `tests/models/llm_tiny/gen.py` exports (a random
//! 2-layer Llama-style decoder, through `qnnx_backend/llm/export.py`) gives eager PyTorch's greedy tokens with one and two prefill chunks,
//! its tokenizer gives transformers' ids, a seed repeats its samples, and a request beyond the
//! cache or an artifact for another SoC is refused. tests/python/test_llm_artifact.py runs the
//! same artifact through `qnnx generate`.
//!
//! Without the HTP library or python3 with torch and transformers a test prints
//! why and returns; with `QNNX_REQUIRE_HTP=1` (set by CI) either is a failure instead.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use qnnx_engine::llm::{
    Artifact, Cancel, GenerateOptions, Generator, OpenOptions, Sampling, StopReason,
};
use qnnx_engine::{compile, saved, CompileOptions, Target};
use qnnx_types::BackendKind;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

mod common;
use common::{generated_models, htp, repo};

/// The generated parts (`gen.py`: ONNX graphs, tokenizer, expected tokens), made once per
/// content of the scripts and the exporter; `None` (after `common::skip`) without python3 + torch +
/// transformers.
fn generated() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let sources = [
            repo().join("tests/models/llm_tiny/gen.py"),
            repo().join("tests/models/common/tiny_llm.py"),
            repo().join("tests/models/common/decoders.py"),
            repo().join("qnnx-py/python/qnnx_backend/llm/export.py"),
        ];
        generated_models(
            "llm_tiny",
            &sources,
            "expected.json",
            &["torch", "transformers", "tokenizers"],
        )
    })
    .as_ref()
}

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("read");
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The artifact of the generated parts, assembled as `qnnx_backend/llm/build.py` does (graphs
/// compiled in fp16 for SoC 60 and saved, manifest with every file's sha256) into a folder of
/// this process; `None` without the parts or the HTP library.
fn artifact() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| assemble(false)).as_ref()
}

/// The same model as two shards of one layer each (`build --shards 2`).
fn sharded_artifact() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| assemble(true)).as_ref()
}

fn assemble(sharded: bool) -> Option<PathBuf> {
    {
        let parts_dir = generated()?;
        htp()?;
        let parts: Value =
            serde_json::from_slice(&std::fs::read(parts_dir.join("parts.json")).expect("parts"))
                .expect("parts.json");
        // One per process; earlier processes' are removed (they are rebuilt in a second).
        let prefix = if sharded {
            "artifact-sharded-"
        } else {
            "artifact-"
        };
        for e in std::fs::read_dir(parts_dir)
            .expect("list the parts")
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(prefix) && (sharded || !name.starts_with("artifact-sharded-")) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = parts_dir.join(format!("{prefix}{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the artifact folder");
        let target = Target::host_default(BackendKind::Htp);
        let prefill = parts["prefill"].as_u64().unwrap();
        let mut graphs = Vec::new();
        let mut build = String::new();
        let shards: &[Option<(usize, [usize; 2])>] = if sharded {
            &[Some((0, [0, 1])), Some((1, [1, 2]))]
        } else {
            &[None]
        };
        let steps = [
            ("decode".to_string(), "decode", 1),
            (format!("prefill-{prefill}"), "prefill", prefill),
        ];
        for ((base, kind, tokens), shard) in steps
            .iter()
            .flat_map(|s| shards.iter().map(move |sh| (s, sh)))
        {
            let name = match shard {
                Some((i, _)) => format!("{base}.shard{i}"),
                None => base.clone(),
            };
            let onnx = std::fs::read(parts_dir.join(format!("{name}.onnx"))).expect("onnx");
            let opts = CompileOptions {
                name: name.clone(),
                fp16: true,
                ..Default::default()
            };
            let compiled = compile(&target, &onnx, &opts, None).expect("compile");
            let file = format!("{name}.qnnx");
            let saved = saved::save(
                &compiled,
                &dir.join(&file),
                Default::default(),
                Default::default(),
            )
            .expect("save");
            build = saved.qnn_build_id.clone();
            let g = &saved.graphs[0];
            let mut entry = json!({
                "name": name, "kind": kind, "tokens": tokens, "file": file,
                "inputs": g.inputs, "outputs": g.outputs,
            });
            if let Some((i, layers)) = shard {
                entry["shard"] = json!(i);
                entry["layers"] = json!(layers);
            }
            graphs.push(entry);
        }
        for f in ["tokenizer.json", "chat_template.jinja"] {
            std::fs::copy(parts_dir.join(f), dir.join(f)).expect("copy");
        }
        let mut files = serde_json::Map::new();
        for e in std::fs::read_dir(&dir).expect("list") {
            let p = e.expect("entry").path();
            let size = std::fs::metadata(&p).expect("size").len();
            files.insert(
                p.file_name().unwrap().to_string_lossy().into_owned(),
                json!({ "size": size, "sha256": sha256(&p) }),
            );
        }
        let cache_dtype = graphs[0]["inputs"][3]["dtype"].clone();
        let manifest = json!({
            "format": qnnx_engine::llm::FORMAT,
            "shards": shards.len(),
            "qnnx_version": env!("CARGO_PKG_VERSION"),
            "model": parts["model"],
            "precision": "fp16",
            "target": { "backend": "htp", "soc_model": target.soc_model, "htp_arch": 73, "qnn_build_id": build },
            "cache": { "length": parts["cache_len"], "layout": "[1, kv_heads, length, head_dim]", "dtype": cache_dtype, "encoding": null },
            "attention_mask": { "kind": "additive", "masked": parts["masked"] },
            "prefill_buckets": [prefill],
            "graphs": graphs,
            "tokens": parts["tokens"],
            "tokenizer": "tokenizer.json",
            "chat_template": "chat_template.jinja",
            "files": files,
        });
        std::fs::write(
            dir.join("manifest.json"),
            serde_json::to_vec_pretty(&manifest).unwrap(),
        )
        .expect("write manifest");
        Some(dir)
    }
}

fn opened() -> Option<(Arc<Artifact>, serde_json::Value)> {
    let art = Artifact::open(artifact()?, &OpenOptions::default()).expect("open");
    let expected = std::fs::read(generated()?.join("expected.json")).expect("expected.json");
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

/// Generation through two shards (hidden states passed from one to the next, each shard's
/// cache its own) gives the unsharded artifact's greedy tokens, and eager PyTorch's.
#[test]
fn sharded_generation_equals_the_unsharded_artifact() {
    let Some((art, expected)) = opened() else {
        return;
    };
    let sharded = Arc::new(
        Artifact::open(sharded_artifact().expect("parts"), &OpenOptions::default())
            .expect("open the sharded artifact"),
    );
    assert_eq!(sharded.decode.shards.len(), 2);
    assert_eq!(sharded.prefill[0].shards.len(), 2);
    let n = expected["new_tokens"].as_u64().unwrap() as usize;
    let opts = GenerateOptions {
        max_new_tokens: n,
        ..Default::default()
    };
    for case in expected["cases"].as_array().unwrap() {
        let prompt = ids(&case["prompt"]);
        let mut whole = Generator::new(art.clone());
        let mut parts = Generator::new(sharded.clone());
        let want = whole.generate(&prompt, &opts, &mut |_| true).unwrap();
        let got = parts.generate(&prompt, &opts, &mut |_| true).unwrap();
        assert_eq!(got.tokens, want.tokens, "prompt {prompt:?}");
        assert_eq!(
            got.tokens[..],
            ids(&case["greedy"])[..got.tokens.len()],
            "eager's tokens"
        );
        assert_eq!(got.timings.prefill_chunks, want.timings.prefill_chunks);
        // Each layer's cache is in its shard, with the rows the whole model wrote.
        for layer in 0..2 {
            let (k, _) = parts.cache(layer);
            let (k_whole, _) = whole.cache(layer);
            let (a, b) = (k.to_f32().unwrap(), k_whole.to_f32().unwrap());
            let diff = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(diff < 1e-2, "layer {layer}: cache differs by {diff}");
            assert!(a.iter().any(|&x| x != 0.0), "layer {layer}: empty cache");
        }
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
            ..Default::default()
        };
        Generator::new(art.clone())
            .generate(&prompt, &opts, &mut |_| true)
            .unwrap()
            .tokens
    };
    assert_eq!(run(3), run(3));
}

/// What `qnnx serve` relies on: one generator serves request after request with nothing of the
/// last one left in its cache (not even masked rows), and a cancel or a deadline stops a
/// generation before its next graph execute.
#[test]
fn generations_share_nothing_and_stop_when_cancelled_or_late() {
    let Some((art, _)) = opened() else {
        return;
    };
    let prompt = art.encode("the quick brown fox", true).unwrap();
    let greedy = GenerateOptions {
        max_new_tokens: 12,
        ..Default::default()
    };
    let fresh = Generator::new(art.clone())
        .generate(&prompt, &greedy, &mut |_| true)
        .unwrap();
    let mut g = Generator::new(art.clone());
    let other = art
        .encode("hello world, this is a tiny tokenizer for tests", true)
        .unwrap();
    let sampled = GenerateOptions {
        max_new_tokens: 30,
        sampling: Sampling {
            temperature: 1.0,
            seed: 5,
            ..Default::default()
        },
        ..Default::default()
    };
    g.generate(&other, &sampled, &mut |_| true).unwrap();
    let again = g.generate(&prompt, &greedy, &mut |_| true).unwrap();
    assert_eq!(again.tokens, fresh.tokens);
    // Rows past the position are zero: the longer sequence before left nothing.
    let (m, c) = (&art.manifest.model, art.cache_len());
    for layer in 0..m.layers {
        let (k, v) = g.cache(layer);
        for t in [k, v] {
            let row = m.head_dim * t.dtype.size();
            for h in 0..m.kv_heads {
                let rows = &t.data[(h * c + g.position()) * row..(h + 1) * c * row];
                assert!(rows.iter().all(|&b| b == 0), "layer {layer} head {h}");
            }
        }
    }

    let cancel = Cancel::new();
    cancel.cancel();
    let opts = GenerateOptions {
        cancel: Some(cancel),
        ..greedy.clone()
    };
    let out = g.generate(&prompt, &opts, &mut |_| true).unwrap();
    assert_eq!(out.stop, StopReason::Cancelled);
    assert_eq!((out.tokens.len(), out.timings.prefill_chunks), (0, 0));
    let late = GenerateOptions {
        deadline: Some(std::time::Instant::now()),
        ..greedy.clone()
    };
    let out = g.generate(&prompt, &late, &mut |_| true).unwrap();
    assert_eq!((out.stop, out.tokens.len()), (StopReason::Deadline, 0));
    // Cancelled from the callback's thread after the first piece of text: no step after it.
    let cancel = Cancel::new();
    let opts = GenerateOptions {
        cancel: Some(cancel.clone()),
        max_new_tokens: 40,
        ..greedy.clone()
    };
    let out = g
        .generate(&prompt, &opts, &mut |_| {
            cancel.cancel();
            true
        })
        .unwrap();
    assert_eq!(out.stop, StopReason::Cancelled);
    assert!(out.tokens.len() < 40 && out.timings.decode_steps + 1 == out.tokens.len());
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
    let e = Artifact::open(
        artifact().unwrap(),
        &OpenOptions {
            soc_model: Some(57),
            ..Default::default()
        },
    )
    .err()
    .expect("SoC 57 refused");
    assert!(e.to_string().contains("built for SoC"), "{e}");
}
