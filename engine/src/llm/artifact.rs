//! The LLM artifact: a folder made by `python -m qnnx_backend.llm build` (docs/llm.md) holding
//! `manifest.json`, one saved model ([`crate::saved`]) per graph (`decode.qnnx`,
//! `prefill-<N>.qnnx`), `tokenizer.json` and `chat_template.jinja`. [`Artifact::open`] checks
//! everything it can before QNN sees a byte: the manifest's format and structure, each file's
//! size and sha256, the SoC asked for, and the QNN build of the library; then it loads the
//! graphs (memory-mapped saved models, checked again by [`crate::saved::load`]) and checks
//! their I/O against the manifest.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::compile::Compiled;
use crate::error::{Error, Result};
use crate::registry;
use crate::target::{Target, TargetSpec};
use qnnx_types::{BackendKind, DType};

use super::chat::ChatTemplate;

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
}

/// How [`Artifact::open`] checks the artifact against this machine.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The SoC this device is (model number): an artifact built for another is refused. `None`
    /// takes the artifact's SoC (the x86_64 emulator emulates it; a device's library checks the
    /// binary's SoC itself).
    pub soc_model: Option<u32>,
}

/// A graph of the artifact, loaded.
pub struct LoadedGraph {
    pub entry: GraphEntry,
    pub compiled: Compiled,
}

/// An opened artifact: the manifest, the loaded graphs, the tokenizer and chat template.
pub struct Artifact {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// The decode graph (1 token).
    pub decode: LoadedGraph,
    /// Prefill graphs, shortest bucket first.
    pub prefill: Vec<LoadedGraph>,
    pub tokenizer: tokenizers::Tokenizer,
    pub chat: Option<ChatTemplate>,
    /// Milliseconds [`Artifact::open`] took (checks, hashing, loading the graphs).
    pub open_ms: f64,
}

fn bad(dir: &Path, what: impl std::fmt::Display) -> Error {
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

/// A QNN build id's numbers (`v2.51.0.260929181845` -> `[2, 51, 0, 260929181845]`), for
/// saying whether an artifact's build is newer or older than the library's.
fn release(build_id: &str) -> Vec<u64> {
    build_id
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

fn soc_label(n: u32) -> String {
    match qnnx_types::soc::by_model(n) {
        Some(s) => format!("{} ({n})", s.name),
        None => n.to_string(),
    }
}

impl Artifact {
    /// Opens the artifact at `dir`: [`read_manifest`] (every file's sha256), the SoC against
    /// `opts`, the QNN build against the library, the tokenizer, and then the graphs.
    pub fn open(dir: &Path, opts: &OpenOptions) -> Result<Artifact> {
        let start = Instant::now();
        let m = read_manifest(dir)?;
        let t = &m.target;
        if let Some(have) = opts.soc_model {
            if have != t.soc_model {
                return Err(bad(
                    dir,
                    format!(
                        "built for SoC {} but this device is SoC {}: build the artifact again \
                         with --soc {have}",
                        soc_label(t.soc_model),
                        soc_label(have)
                    ),
                ));
            }
        }
        let tokenizer = tokenizers::Tokenizer::from_file(dir.join(&m.tokenizer))
            .map_err(|e| bad(dir, format!("{} does not load: {e}", m.tokenizer)))?;
        let vocab = tokenizer.get_vocab_size(true);
        if vocab > m.model.vocab_size {
            return Err(bad(
                dir,
                format!(
                    "the tokenizer has {vocab} tokens but the model {}: the tokenizer is not \
                     this model's",
                    m.model.vocab_size
                ),
            ));
        }
        let chat = match &m.chat_template {
            Some(f) => {
                let text = std::fs::read_to_string(dir.join(f))
                    .map_err(|e| bad(dir, format!("{f}: {e}")))?;
                let token = |id: Option<u32>| id.and_then(|i| tokenizer.id_to_token(i));
                Some(
                    ChatTemplate::new(&text, token(m.tokens.bos), token(Some(m.tokens.eos)))
                        .map_err(|e| bad(dir, format!("{f}: {e}")))?,
                )
            }
            None => None,
        };
        let backend: BackendKind = t
            .backend
            .parse()
            .map_err(|e| bad(dir, format!("backend {:?}: {e}", t.backend)))?;
        let emulated = qnn::HtpDeviceConfig::host_default().soc_model.is_some();
        let target = Target::resolve(
            &TargetSpec {
                backend,
                soc_model: Some(t.soc_model).filter(|_| emulated),
                ..TargetSpec::default()
            },
            None,
        )?;
        let runtime = registry::for_target(&target, None, false)?;
        let library = runtime.backend.build_id()?;
        if library != t.qnn_build_id {
            let which = if release(&library) < release(&t.qnn_build_id) {
                "newer"
            } else {
                "older"
            };
            return Err(bad(
                dir,
                format!(
                    "built with QNN {} ({which} than this QNN library, {library}): context \
                     binaries do not move between QNN releases; build the artifact again with \
                     this library, or run it with the QNN release it was built with",
                    t.qnn_build_id
                ),
            ));
        }
        let mut decode = None;
        let mut prefill = Vec::new();
        for g in &m.graphs {
            let compiled = load_graph(dir, &m, g)?;
            let loaded = LoadedGraph {
                entry: g.clone(),
                compiled,
            };
            if g.kind == "decode" {
                decode = Some(loaded);
            } else {
                prefill.push(loaded);
            }
        }
        prefill.sort_by_key(|g| g.entry.tokens);
        let decode = decode.ok_or_else(|| bad(dir, "no decode graph"))?;
        Ok(Artifact {
            dir: dir.to_path_buf(),
            manifest: m,
            decode,
            prefill,
            tokenizer,
            chat,
            open_ms: start.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// The token ids of `text`; `special` adds what the tokenizer adds around a sequence (a BOS
    /// token, for instance), as Hugging Face's `encode` does by default. A chat prompt comes
    /// from the template with its special tokens in place: encode it with `special` false.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        self.tokenizer
            .encode(text, special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Input(format!("the tokenizer cannot encode the prompt: {e}")))
    }

    /// The text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| Error::Input(format!("the tokenizer cannot decode {ids:?}: {e}")))
    }

    /// The cache length: prompt plus new tokens must fit in it.
    pub fn cache_len(&self) -> usize {
        self.manifest.cache.length
    }
}

/// Loads `g`'s saved model and checks the graph's I/O against the manifest.
fn load_graph(dir: &Path, m: &Manifest, g: &GraphEntry) -> Result<Compiled> {
    let loaded = crate::saved::load(&dir.join(&g.file))?;
    let mut graphs = loaded.graphs;
    if graphs.len() != 1 {
        return Err(bad(
            dir,
            format!("{}: {} graphs, expected 1", g.file, graphs.len()),
        ));
    }
    let compiled = graphs.remove(0);
    let e = &compiled.emitted;
    let (s, c, t) = (&m.model, m.cache.length, g.tokens);
    let cache_in = [1, s.kv_heads, c, s.head_dim];
    let cache_out = [1, s.kv_heads, t, s.head_dim];
    let mut want_in: Vec<(&str, Vec<usize>)> = vec![
        ("input_ids", vec![1, t]),
        ("position_ids", vec![1, t]),
        ("attention_mask", vec![1, 1, t, c + t]),
    ];
    let names_in = input_names(s.layers);
    for n in &names_in[3..] {
        want_in.push((n, cache_in.to_vec()));
    }
    let names_out = output_names(s.layers);
    let mut want_out: Vec<(&str, Vec<usize>)> = vec![("logits", vec![1, t, s.vocab_size])];
    for n in &names_out[1..] {
        want_out.push((n, cache_out.to_vec()));
    }
    let fits = |ios: &[lowering::plan::PlanIo], want: &[(&str, Vec<usize>)]| {
        ios.len() == want.len()
            && ios
                .iter()
                .zip(want)
                .all(|(io, (n, shape))| io.onnx_name == *n && io.shape == *shape)
    };
    if !e.assumed.is_empty() || !fits(&e.inputs, &want_in) || !fits(&e.outputs, &want_out) {
        return Err(bad(
            dir,
            format!(
                "{}: the graph's I/O is not the manifest's (model {s:?}, cache {c}, {t} tokens)",
                g.file
            ),
        ));
    }
    let dtype = |i: usize| e.inputs[i].host_dtype;
    if dtype(0) != DType::I32 || dtype(1) != DType::I32 || dtype(2) != DType::F32 {
        return Err(bad(
            dir,
            format!(
                "{}: input_ids, position_ids and attention_mask are {}, {}, {}; this qnnx feeds \
                 i32, i32, f32",
                g.file,
                dtype(0).name(),
                dtype(1).name(),
                dtype(2).name()
            ),
        ));
    }
    for (i, o) in (3..e.inputs.len()).zip(1..) {
        if e.inputs[i].host_dtype != e.outputs[o].host_dtype {
            return Err(bad(
                dir,
                format!(
                    "{}: {} is {} but {} is {}: the new rows must have the cache's dtype",
                    g.file,
                    e.inputs[i].onnx_name,
                    e.inputs[i].host_dtype.name(),
                    e.outputs[o].onnx_name,
                    e.outputs[o].host_dtype.name()
                ),
            ));
        }
    }
    if e.outputs[0].host_dtype != DType::F32 {
        return Err(bad(
            dir,
            format!(
                "{}: logits are {}; this qnnx reads f32",
                g.file,
                e.outputs[0].host_dtype.name()
            ),
        ));
    }
    Ok(compiled)
}
