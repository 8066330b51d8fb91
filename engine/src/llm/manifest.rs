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

/// One graph: `decode` (1 token) or a `prefill` bucket of `tokens` tokens; in a sharded
/// artifact, shard `shard` of it, running layers `layers[0]..layers[1]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphEntry {
    pub name: String,
    pub kind: String,
    pub tokens: usize,
    pub file: String,
    pub inputs: Vec<IoEntry>,
    pub outputs: Vec<IoEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<[usize; 2]>,
}

impl GraphEntry {
    /// The layers this graph runs, of a model of `layers` layers: all of them unless sharded.
    pub fn span(&self, layers: usize) -> (usize, usize) {
        self.layers.map_or((0, layers), |[a, b]| (a, b))
    }
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
    /// Graphs per decode or prefill step (each a span of layers), 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<usize>,
    /// What the build measured (stage times, peak memory), when it ran in child processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<serde_json::Value>,
}

pub(super) fn bad(dir: &Path, what: impl std::fmt::Display) -> Error {
    Error::SavedModel(format!("LLM artifact {}: {what}", dir.display()))
}

/// The graph input names in order, as `qnnx_backend/llm/export.py` writes them.
pub fn input_names(layers: usize) -> Vec<String> {
    shard_input_names(layers, (0, layers))
}

/// The graph output names in order.
pub fn output_names(layers: usize) -> Vec<String> {
    shard_output_names(layers, (0, layers))
}

/// The input names of the shard running layers `span.0..span.1` of `layers`: `hidden_in`
/// instead of `input_ids` after the first shard, its layers' cache.
pub fn shard_input_names(layers: usize, span: (usize, usize)) -> Vec<String> {
    let first = if span.0 == 0 {
        "input_ids"
    } else {
        "hidden_in"
    };
    let mut v: Vec<String> = [first, "position_ids", "attention_mask"]
        .map(String::from)
        .to_vec();
    for l in span.0..span.1.min(layers) {
        v.push(format!("past_key_{l}"));
        v.push(format!("past_value_{l}"));
    }
    v
}

/// The output names of that shard: `hidden_out` instead of `logits` before the last shard.
pub fn shard_output_names(layers: usize, span: (usize, usize)) -> Vec<String> {
    let first = if span.1 == layers {
        "logits"
    } else {
        "hidden_out"
    };
    let mut v = vec![first.to_string()];
    for l in span.0..span.1.min(layers) {
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
    let mut decode = 0;
    // Each step's shards, in order: (kind, tokens) -> spans; every step is split alike.
    let mut steps: BTreeMap<(&str, usize), Vec<(usize, usize)>> = BTreeMap::new();
    for g in &m.graphs {
        listed(&g.file)?;
        let span = g.span(s.layers);
        if span.0 >= span.1 || span.1 > s.layers {
            return Err(bad(
                dir,
                format!(
                    "graph {}: layers {}..{} of a model of {} layers",
                    g.name, span.0, span.1, s.layers
                ),
            ));
        }
        steps
            .entry((g.kind.as_str(), g.tokens))
            .or_default()
            .push(span);
        let (ins, outs) = (
            shard_input_names(s.layers, span),
            shard_output_names(s.layers, span),
        );
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
            ("decode", 1) if span.0 == 0 => decode += 1,
            ("decode", 1) => {}
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
    for spans in steps.values_mut() {
        spans.sort_unstable();
    }
    let mut shapes = steps.iter().map(|(step, spans)| {
        let mut covered = 0;
        for &(a, b) in spans {
            if a != covered {
                return Err(bad(
                    dir,
                    format!(
                        "the {} graph of {} tokens: shard of layers {a}..{b} after layer {covered}; \
                         shards must cover the layers in order",
                        step.0, step.1
                    ),
                ));
            }
            covered = b;
        }
        if covered != s.layers {
            return Err(bad(
                dir,
                format!(
                    "the {} graph of {} tokens: its shards end at layer {covered} of {}",
                    step.0, step.1, s.layers
                ),
            ));
        }
        Ok(spans)
    });
    if let Some(first) = shapes.next() {
        let first = first?;
        for other in shapes {
            if other? != first {
                return Err(bad(
                    dir,
                    "the decode and prefill graphs are sharded at different layers; every step \
                     must be split alike (each shard's cache serves them all)",
                ));
            }
        }
    }
    if m.shards.unwrap_or(1) != steps.values().next().map_or(1, Vec::len) {
        return Err(bad(
            dir,
            format!(
                "the manifest says {} shards but lists {} per step",
                m.shards.unwrap_or(1),
                steps.values().next().map_or(1, Vec::len)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(names: Vec<String>) -> Vec<IoEntry> {
        names
            .into_iter()
            .map(|name| IoEntry {
                name,
                dtype: "f32".into(),
                dims: vec![],
                encoding: serde_json::Value::Null,
            })
            .collect()
    }

    fn graph(kind: &str, tokens: usize, span: (usize, usize)) -> GraphEntry {
        GraphEntry {
            name: format!("{kind}-{tokens}.{}", span.0),
            kind: kind.into(),
            tokens,
            file: "g.qnnx".into(),
            inputs: io(shard_input_names(4, span)),
            outputs: io(shard_output_names(4, span)),
            shard: Some(span.0),
            layers: Some([span.0, span.1]),
        }
    }

    fn manifest(graphs: Vec<GraphEntry>, shards: usize) -> Manifest {
        let file = FileEntry {
            size: 0,
            sha256: String::new(),
        };
        Manifest {
            format: FORMAT.into(),
            qnnx_version: "0".into(),
            source: String::new(),
            model: ModelShape {
                family: "llama".into(),
                vocab_size: 8,
                hidden_size: 8,
                layers: 4,
                heads: 1,
                kv_heads: 1,
                head_dim: 8,
                max_positions: 64,
            },
            precision: "fp16".into(),
            target: ArtifactTarget {
                backend: "htp".into(),
                soc_model: 60,
                htp_arch: None,
                qnn_build_id: "v2".into(),
            },
            cache: CacheSpec {
                length: 32,
                layout: String::new(),
                dtype: "f32".into(),
                encoding: serde_json::Value::Null,
            },
            attention_mask: MaskSpec {
                kind: "additive".into(),
                masked: -1e4,
            },
            prefill_buckets: vec![8],
            graphs,
            tokens: SpecialTokens {
                bos: None,
                eos: 1,
                stop: vec![1],
                pad: None,
            },
            tokenizer: "tokenizer.json".into(),
            chat_template: None,
            files: [("g.qnnx", &file), ("tokenizer.json", &file)]
                .into_iter()
                .map(|(n, f)| (n.to_string(), f.clone()))
                .collect(),
            contexts: None,
            shards: Some(shards),
            build: None,
        }
    }

    #[test]
    fn shard_io_names_pass_hidden_states_between_shards() {
        assert_eq!(
            shard_input_names(4, (2, 4)),
            [
                "hidden_in",
                "position_ids",
                "attention_mask",
                "past_key_2",
                "past_value_2",
                "past_key_3",
                "past_value_3"
            ]
        );
        assert_eq!(
            shard_output_names(4, (0, 2)),
            [
                "hidden_out",
                "new_key_0",
                "new_value_0",
                "new_key_1",
                "new_value_1"
            ]
        );
        assert_eq!(input_names(1), shard_input_names(1, (0, 1)));
        assert_eq!(output_names(1)[0], "logits");
    }

    #[test]
    fn shards_must_cover_the_layers_in_order_and_split_every_step_alike() {
        let dir = Path::new("art");
        let ok = |spans: &[(usize, usize)], prefill: &[(usize, usize)]| {
            let mut g: Vec<GraphEntry> = spans.iter().map(|&s| graph("decode", 1, s)).collect();
            g.extend(prefill.iter().map(|&s| graph("prefill", 8, s)));
            check_structure(dir, &manifest(g, spans.len()))
        };
        ok(&[(0, 2), (2, 4)], &[(0, 2), (2, 4)]).unwrap();
        ok(&[(2, 4), (0, 2)], &[(0, 2), (2, 4)]).unwrap();
        let e = ok(&[(0, 1), (2, 4)], &[(0, 1), (2, 4)]).unwrap_err();
        assert!(e.to_string().contains("cover the layers in order"), "{e}");
        let e = ok(&[(0, 2), (2, 3)], &[(0, 2), (2, 3)]).unwrap_err();
        assert!(e.to_string().contains("end at layer 3 of 4"), "{e}");
        let e = ok(&[(0, 2), (2, 4)], &[(0, 1), (1, 4)]).unwrap_err();
        assert!(e.to_string().contains("sharded at different layers"), "{e}");
        let e = ok(&[(0, 2), (2, 6)], &[]).unwrap_err();
        assert!(e.to_string().contains("layers 2..6 of a model of 4"), "{e}");
        let mut m = manifest(
            vec![graph("decode", 1, (0, 2)), graph("decode", 1, (2, 4))],
            3,
        );
        let e = check_structure(dir, &m).unwrap_err();
        assert!(e.to_string().contains("says 3 shards but lists 2"), "{e}");
        m.graphs[1].inputs[0].name = "input_ids".into();
        let e = check_structure(dir, &m).unwrap_err();
        assert!(e.to_string().contains("expected"), "{e}");
    }
}
