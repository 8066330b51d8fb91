//! The LLM artifact: a folder made by `python -m qnnx_backend.llm build` (docs/llm.md) holding
//! `manifest.json`, one saved model ([`crate::saved`]) per graph (`decode.qnnx`,
//! `prefill-<N>.qnnx`), `tokenizer.json` and `chat_template.jinja`. [`Artifact::open`] checks
//! everything it can before QNN sees a byte: the manifest's format and structure, each file's
//! size and sha256 ([`super::manifest::read_manifest`]), the SoC asked for, and the QNN build
//! of the library; then it loads the graphs (memory-mapped saved models, checked again by
//! [`crate::saved::load`]) and checks their I/O against the manifest.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::compile::Compiled;
use crate::error::{Error, Result};
use crate::registry;
use crate::target::{Target, TargetSpec};
use qnnx_types::{BackendKind, DType};

use super::chat::ChatTemplate;
use super::manifest::{
    bad, read_manifest, shard_input_names, shard_output_names, GraphEntry, Manifest,
};

/// How [`Artifact::open`] checks the artifact against this machine.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The SoC this device is (model number): an artifact built for another is refused. `None`
    /// takes the artifact's SoC (the x86_64 emulator emulates it; a device's library checks the
    /// binary's SoC itself).
    pub soc_model: Option<u32>,
    /// The QNN backend library (else the documented search order, `qnn-sys/README.md`).
    pub library: Option<PathBuf>,
}

/// A graph of the artifact, loaded.
pub struct LoadedGraph {
    pub entry: GraphEntry,
    pub compiled: Compiled,
}

/// One step's graphs: the decode graph or a prefill bucket, as shards of consecutive layers
/// run one after another (one shard unless the artifact was built with `--shards`).
pub struct Stage {
    /// Tokens per run.
    pub tokens: usize,
    /// The shards in layer order.
    pub shards: Vec<LoadedGraph>,
}

/// An opened artifact: the manifest, the loaded graphs, the tokenizer and chat template.
pub struct Artifact {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// The decode graph (1 token).
    pub decode: Stage,
    /// Prefill graphs, shortest bucket first.
    pub prefill: Vec<Stage>,
    pub tokenizer: tokenizers::Tokenizer,
    pub chat: Option<ChatTemplate>,
    /// Milliseconds [`Artifact::open`] took (checks, hashing, loading the graphs).
    pub open_ms: f64,
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
                library: opts.library.clone(),
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
        let mut decode: Vec<LoadedGraph> = Vec::new();
        let mut prefill: std::collections::BTreeMap<usize, Vec<LoadedGraph>> = Default::default();
        // Saved models by file: one per graph, or one holding every graph of one context.
        let mut files: std::collections::BTreeMap<&str, Vec<Compiled>> = Default::default();
        for g in &m.graphs {
            if !files.contains_key(g.file.as_str()) {
                let file = dir.join(&g.file);
                let loaded =
                    crate::saved::load_with_library(&file, opts.library.clone()).map_err(|e| {
                        if m.contexts.as_deref() == Some("shared") {
                            bad(
                                dir,
                                format!(
                                    "{e}\nhint: the artifact was built with --contexts shared; \
                                 --contexts one or per-graph makes one that runs here"
                                ),
                            )
                        } else {
                            e
                        }
                    })?;
                files.insert(&g.file, loaded.graphs);
            }
            let in_file = files.get_mut(g.file.as_str()).expect("loaded above");
            let at = in_file
                .iter()
                .position(|c| c.emitted.graph.name() == g.name)
                .ok_or_else(|| bad(dir, format!("{} has no graph {:?}", g.file, g.name)))?;
            let compiled = in_file.swap_remove(at);
            check_graph(dir, &m, g, &compiled)?;
            let loaded = LoadedGraph {
                entry: g.clone(),
                compiled,
            };
            if g.kind == "decode" {
                decode.push(loaded);
            } else {
                prefill.entry(g.tokens).or_default().push(loaded);
            }
        }
        let layers = m.model.layers;
        let stage = |tokens: usize, mut shards: Vec<LoadedGraph>| {
            shards.sort_by_key(|g| g.entry.span(layers));
            Stage { tokens, shards }
        };
        if decode.is_empty() {
            return Err(bad(dir, "no decode graph"));
        }
        let decode = stage(1, decode);
        let prefill = prefill
            .into_iter()
            .map(|(t, shards)| stage(t, shards))
            .collect();
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

    /// Whether a prompt of `prompt` tokens and `new_tokens` more fit the cache; the error says
    /// by how much they do not and what to do. [`crate::llm::Generator::generate`] checks it
    /// before any work; a server checks it before queueing the request.
    pub fn check_fits(&self, prompt: usize, new_tokens: usize) -> Result<()> {
        let c = self.cache_len();
        if prompt + new_tokens > c {
            return Err(Error::Input(format!(
                "the prompt's {prompt} tokens plus {new_tokens} new tokens exceed the cache of \
                 {c} positions: use a shorter prompt or fewer new tokens, or build the artifact \
                 with a larger --cache-len"
            )));
        }
        Ok(())
    }
}

/// Checks the graph's I/O against the manifest.
fn check_graph(dir: &Path, m: &Manifest, g: &GraphEntry, compiled: &Compiled) -> Result<()> {
    let e = &compiled.emitted;
    let (s, c, t) = (&m.model, m.cache.length, g.tokens);
    let span = g.span(s.layers);
    let (first, last) = (span.0 == 0, span.1 == s.layers);
    let cache_in = [1, s.kv_heads, c, s.head_dim];
    let cache_out = [1, s.kv_heads, t, s.head_dim];
    let names_in = shard_input_names(s.layers, span);
    let names_out = shard_output_names(s.layers, span);
    let x_in = if first {
        vec![1, t]
    } else {
        vec![1, t, s.hidden_size]
    };
    let mut want_in: Vec<(&str, Vec<usize>)> = vec![
        (&names_in[0], x_in),
        ("position_ids", vec![1, t]),
        ("attention_mask", vec![1, 1, t, c + t]),
    ];
    for n in &names_in[3..] {
        want_in.push((n, cache_in.to_vec()));
    }
    let x_out = if last {
        vec![1, t, s.vocab_size]
    } else {
        vec![1, t, s.hidden_size]
    };
    let mut want_out: Vec<(&str, Vec<usize>)> = vec![(&names_out[0], x_out)];
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
    let x_dtype = if first { DType::I32 } else { DType::F32 };
    if dtype(0) != x_dtype || dtype(1) != DType::I32 || dtype(2) != DType::F32 {
        return Err(bad(
            dir,
            format!(
                "{}: {}, position_ids and attention_mask are {}, {}, {}; this qnnx feeds \
                 {}, i32, f32",
                g.file,
                names_in[0],
                dtype(0).name(),
                dtype(1).name(),
                dtype(2).name(),
                x_dtype.name()
            ),
        ));
    }
    for (i, o) in (3..e.inputs.len()).zip(1..) {
        // The host copies the new rows' bytes into the cache as they are: a quantized cache
        // (uint8 codes) is only right if both sides have one encoding.
        let q_in = &e.graph.inputs()[e.input_slots[i]].quantization;
        let q_out = &e.graph.outputs()[e.output_slots[o]].quantization;
        if q_in != q_out {
            return Err(bad(
                dir,
                format!(
                    "{}: {} is encoded {q_in:?} but {} {q_out:?}: the new rows must have the \
                     cache's encoding (rebuild the artifact)",
                    g.file, e.inputs[i].onnx_name, e.outputs[o].onnx_name
                ),
            ));
        }
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
                "{}: {} are {}; this qnnx reads f32",
                g.file,
                names_out[0],
                e.outputs[0].host_dtype.name()
            ),
        ));
    }
    Ok(())
}
