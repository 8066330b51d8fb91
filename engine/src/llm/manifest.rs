//! `manifest.json` of an LLM artifact ([`super::artifact`]): its types, as
//! `qnnx_backend/llm/build.py` writes them, and [`read_manifest`], which checks the manifest's
//! format and structure and every file's size and sha256 without QNN.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The manifest's `format`; another is refused.
pub const FORMAT: &str = "qnnx-llm/1";

/// The model's shape as the manifest records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelShape {
    pub family: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub max_positions: usize,
}

/// What the artifact was compiled for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactTarget {
    pub backend: String,
    pub soc_model: u32,
    pub htp_arch: Option<u32>,
    pub qnn_build_id: String,
}

/// The KV cache: `length` positions, laid out as `layout` says, at the graphs' own `dtype`
/// (with its fixed-point `encoding` for a quantized cache, null for float).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheSpec {
    pub length: usize,
    pub layout: String,
    pub dtype: String,
    #[serde(default)]
    pub encoding: serde_json::Value,
}

/// The attention mask input: additive, `masked` where a query must not look, 0 elsewhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MaskSpec {
    pub kind: String,
    pub masked: f32,
}

/// One graph tensor as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoEntry {
    pub name: String,
    pub dtype: String,
    pub dims: Vec<u32>,
    #[serde(default)]
    pub encoding: serde_json::Value,
}

/// One graph: `decode` (1 token) or a `prefill` bucket of `tokens` tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphEntry {
    pub name: String,
    pub kind: String,
    pub tokens: usize,
    pub file: String,
    pub inputs: Vec<IoEntry>,
    pub outputs: Vec<IoEntry>,
}

/// Special tokens: generation stops at any of `stop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: u32,
    pub stop: Vec<u32>,
    #[serde(default)]
    pub pad: Option<u32>,
}

/// A file of the artifact: its size and sha256 (hex).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    pub size: u64,
    pub sha256: String,
}

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub qnnx_version: String,
    #[serde(default)]
    pub source: String,
    pub model: ModelShape,
    pub precision: String,
    pub target: ArtifactTarget,
    pub cache: CacheSpec,
    pub attention_mask: MaskSpec,
    pub prefill_buckets: Vec<usize>,
    pub graphs: Vec<GraphEntry>,
    pub tokens: SpecialTokens,
    pub tokenizer: String,
    pub chat_template: Option<String>,
    pub files: BTreeMap<String, FileEntry>,
    /// How the graphs were put in contexts: `per-graph`, `one` (every graph in one context) or
    /// `shared` (one context with HTP weight sharing: devices only).
    #[serde(default)]
    pub contexts: Option<String>,
}

pub(super) fn bad(dir: &Path, what: impl std::fmt::Display) -> Error {
    Error::SavedModel(format!("LLM artifact {}: {what}", dir.display()))
}

/// The graph input names in order, as `qnnx_backend/llm/export.py` writes them.
pub fn input_names(layers: usize) -> Vec<String> {
    let mut v: Vec<String> = ["input_ids", "position_ids", "attention_mask"]
        .map(String::from)
        .to_vec();
    for l in 0..layers {
        v.push(format!("past_key_{l}"));
        v.push(format!("past_value_{l}"));
    }
    v
}

/// The graph output names in order.
pub fn output_names(layers: usize) -> Vec<String> {
    let mut v = vec!["logits".to_string()];
    for l in 0..layers {
        v.push(format!("new_key_{l}"));
        v.push(format!("new_value_{l}"));
    }
    v
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Reads and checks `manifest.json` of the artifact at `dir` and every file it lists (size and
/// sha256), without QNN.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    if dir.is_file() {
        return Err(bad(
            dir,
            "this is a file; an LLM artifact is the folder that `python -m qnnx_backend.llm \
             build` writes (manifest.json, decode.qnnx, ...)",
        ));
    }
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        bad(
            dir,
            format!(
                "cannot read manifest.json ({e}); make an artifact with `python -m \
                 qnnx_backend.llm build MODEL -o DIR`"
            ),
        )
    })?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        bad(
            dir,
            format!("manifest.json is not JSON ({e}): the file is damaged"),
        )
    })?;
    let format = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
    if format != FORMAT {
        return Err(bad(
            dir,
            format!(
                "manifest format {format:?}; this qnnx ({}) reads {FORMAT:?}: build the artifact \
                 again",
                env!("CARGO_PKG_VERSION")
            ),
        ));
    }
    let m: Manifest = serde_json::from_value(value).map_err(|e| {
        bad(
            dir,
            format!("manifest.json does not describe an artifact: {e}"),
        )
    })?;
    check_structure(dir, &m)?;
    for (name, f) in &m.files {
        if name.contains('/') || name.contains('\\') || name.starts_with('.') {
            return Err(bad(
                dir,
                format!("the manifest lists {name:?}, not a file name"),
            ));
        }
        let p = dir.join(name);
        let size = std::fs::metadata(&p)
            .map_err(|e| {
                bad(
                    dir,
                    format!("{name}: {e}; the artifact is incomplete: copy it whole"),
                )
            })?
            .len();
        if size != f.size {
            return Err(bad(
                dir,
                format!(
                    "{name} has {size} bytes, the manifest says {}: the file is truncated or \
                     replaced; copy the artifact again",
                    f.size
                ),
            ));
        }
        let sha = sha256_file(&p).map_err(|e| bad(dir, format!("{name}: {e}")))?;
        if sha != f.sha256 {
            return Err(bad(
                dir,
                format!(
                    "{name}: sha256 {sha}, the manifest says {}: the file is corrupt or was \
                     changed; copy or build the artifact again",
                    f.sha256
                ),
            ));
        }
    }
    Ok(m)
}

fn check_structure(dir: &Path, m: &Manifest) -> Result<()> {
    let listed = |f: &str| -> Result<()> {
        if m.files.contains_key(f) {
            Ok(())
        } else {
            Err(bad(dir, format!("{f} is not among the manifest's files")))
        }
    };
    listed(&m.tokenizer)?;
    if let Some(t) = &m.chat_template {
        listed(t)?;
    }
    let s = &m.model;
    if s.layers == 0 || s.kv_heads == 0 || s.head_dim == 0 || s.vocab_size == 0 {
        return Err(bad(dir, format!("the model shape {s:?} is empty")));
    }
    if m.cache.length == 0 {
        return Err(bad(dir, "the cache length is 0"));
    }
    if m.tokens.stop.is_empty() {
        return Err(bad(dir, "the manifest names no stop token"));
    }
    if m.attention_mask.kind != "additive" {
        return Err(bad(
            dir,
            format!(
                "attention mask kind {:?}; this qnnx knows \"additive\"",
                m.attention_mask.kind
            ),
        ));
    }
    let (ins, outs) = (input_names(s.layers), output_names(s.layers));
    let mut decode = 0;
    for g in &m.graphs {
        listed(&g.file)?;
        let names = |v: &[IoEntry]| v.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        if names(&g.inputs) != ins || names(&g.outputs) != outs {
            return Err(bad(
                dir,
                format!(
                    "graph {}: I/O {:?} -> {:?}, expected {ins:?} -> {outs:?}",
                    g.name,
                    names(&g.inputs),
                    names(&g.outputs)
                ),
            ));
        }
        match (g.kind.as_str(), g.tokens) {
            ("decode", 1) => decode += 1,
            ("prefill", n) if n >= 2 && n < m.cache.length => {}
            (k, n) => {
                return Err(bad(
                    dir,
                    format!(
                        "graph {}: a {k:?} graph of {n} tokens is not one this qnnx runs",
                        g.name
                    ),
                ))
            }
        }
    }
    if decode != 1 {
        return Err(bad(
            dir,
            format!("{decode} decode graphs; an artifact has one"),
        ));
    }
    Ok(())
}
