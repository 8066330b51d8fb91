//! The generation loop: [`Generator`] owns the KV cache on the host (one buffer per layer and
//! per K/V, allocated once at the graphs' own dtype), runs prefill chunks and decode steps, and
//! writes only each step's new rows into the cache; [`Generator::generate`] adds sampling, stop
//! tokens and strings, streaming and timings.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use qnnx_types::DType;

use super::artifact::{Artifact, LoadedGraph, Stage};
use super::sample::{Sampler, Sampling};
use super::stream::TextStream;
use crate::error::{Error, Result};
use crate::io::HostTensor;

/// Why generation stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// A stop token (not part of the text).
    StopToken(u32),
    /// A stop string; the text ends before it.
    StopString(String),
    /// `max_new_tokens` tokens were made.
    MaxTokens,
    /// The callback asked to stop, or [`GenerateOptions::cancel`] was cancelled.
    Cancelled,
    /// [`GenerateOptions::deadline`] passed.
    Deadline,
}

impl StopReason {
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::StopToken(_) => "stop_token",
            StopReason::StopString(_) => "stop_string",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Cancelled => "cancelled",
            StopReason::Deadline => "deadline",
        }
    }
}

/// Stops a generation from another thread: a server cancels the request whose client went
/// away. [`Generator::generate`] looks at it before every graph execute (each prefill chunk and
/// decode step), so it stops within one execute.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What [`Generator::generate`] does besides the prompt.
#[derive(Debug, Clone, Default)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Generation stops before any of these strings; they are not part of the text.
    pub stop_strings: Vec<String>,
    /// Generation stops ([`StopReason::Deadline`]) at the first graph execute after this.
    pub deadline: Option<Instant>,
    /// Generation stops ([`StopReason::Cancelled`]) at the first graph execute after this is
    /// cancelled.
    pub cancel: Option<Cancel>,
}

impl GenerateOptions {
    /// Why generation must stop now, if it must.
    fn interrupted(&self) -> Option<StopReason> {
        if self.cancel.as_ref().is_some_and(Cancel::is_cancelled) {
            return Some(StopReason::Cancelled);
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(StopReason::Deadline);
        }
        None
    }
}

/// Where the time of one generation went.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timings {
    /// From the call to the first new token (prefill, its sampling).
    pub first_token_ms: f64,
    /// Prefill: all chunks of the prompt.
    pub prefill_ms: f64,
    /// Decode steps after the first token.
    pub decode_ms: f64,
    /// Decode steps run.
    pub decode_steps: usize,
    /// Inside `graphExecute`, over prefill and decode.
    pub execute_ms: f64,
    /// Prefill graph executes: chunks, and the tokens they held.
    pub prefill_chunks: usize,
    pub prompt_tokens: usize,
}

impl Timings {
    pub fn prefill_tokens_per_s(&self) -> f64 {
        self.prompt_tokens as f64 / (self.prefill_ms / 1e3)
    }
    pub fn decode_tokens_per_s(&self) -> f64 {
        self.decode_steps as f64 / (self.decode_ms / 1e3)
    }
    /// The share of prefill and decode time spent outside `graphExecute` (the host's: inputs,
    /// cache writes, sampling, detokenizing).
    pub fn host_share(&self) -> f64 {
        let all = self.prefill_ms + self.decode_ms;
        if all > 0.0 {
            (all - self.execute_ms).max(0.0) / all
        } else {
            0.0
        }
    }
}

/// A finished generation.
#[derive(Debug, Clone)]
pub struct Generation {
    pub prompt_tokens: Vec<u32>,
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    pub timings: Timings,
}

/// The KV cache and position of one sequence over an [`Artifact`]. Generators over one
/// artifact share its graphs: run one at a time (QNN asks callers to serialize executes of a
/// graph; the x86_64 library was seen to tolerate concurrent ones, docs/qnn-notes.md).
pub struct Generator {
    artifact: Arc<Artifact>,
    /// Per shard, its graphs' inputs in order: `input_ids` (`hidden_in` after the first
    /// shard), `position_ids`, `attention_mask`, then its layers' cache (`past_key_<l>`,
    /// `past_value_<l>`), which stays here between steps.
    state: Vec<Vec<HostTensor>>,
    /// The first layer of each shard.
    first_layer: Vec<usize>,
    pos: usize,
    /// Time inside `graphExecute` and prefill chunks run since the last `generate` began.
    execute_ms: f64,
    chunks: usize,
}

fn i32_tensor(shape: &[usize], v: &[i32]) -> HostTensor {
    HostTensor {
        dtype: DType::I32,
        shape: shape.to_vec(),
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

impl Generator {
    /// A generator with an empty cache.
    pub fn new(artifact: Arc<Artifact>) -> Generator {
        let m = &artifact.manifest.model;
        let c = artifact.cache_len();
        let mut states = Vec::new();
        let mut first_layer = Vec::new();
        for shard in &artifact.decode.shards {
            let mut state = vec![
                i32_tensor(&[1, 1], &[0]),
                i32_tensor(&[1, 1], &[0]),
                HostTensor::from_f32(&[1, 1, 1, c + 1], &vec![0.0; c + 1]),
            ];
            for io in &shard.compiled.emitted.inputs[3..] {
                let shape = vec![1, m.kv_heads, c, m.head_dim];
                let bytes = shape.iter().product::<usize>() * io.host_dtype.size();
                state.push(HostTensor {
                    dtype: io.host_dtype,
                    shape,
                    data: vec![0; bytes],
                });
            }
            states.push(state);
            first_layer.push(shard.entry.span(m.layers).0);
        }
        Generator {
            artifact,
            state: states,
            first_layer,
            pos: 0,
            execute_ms: 0.0,
            chunks: 0,
        }
    }

    pub fn artifact(&self) -> &Arc<Artifact> {
        &self.artifact
    }

    /// Positions used: the next token goes to this slot.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Forgets the sequence (the cache's rows are masked until written again).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Forgets the sequence and zeroes the cache: what follows runs exactly as on a new
    /// generator, with nothing of the earlier sequence in the cache, not even masked rows (a
    /// server's requests share one generator).
    pub fn clear(&mut self) {
        self.pos = 0;
        for t in self.state.iter_mut().flat_map(|shard| &mut shard[3..]) {
            t.data.fill(0);
        }
    }

    /// The cache of layer `layer`: its key and value tensors `[1, kv_heads, cache_len,
    /// head_dim]`, rows `0..position()` valid. For callers that manage the cache themselves.
    pub fn cache(&self, layer: usize) -> (&HostTensor, &HostTensor) {
        let (s, l) = self.shard_of(layer);
        (&self.state[s][3 + 2 * l], &self.state[s][4 + 2 * l])
    }

    /// The shard holding `layer`, and the layer's index within it.
    fn shard_of(&self, layer: usize) -> (usize, usize) {
        let s = self.first_layer.partition_point(|&f| f <= layer) - 1;
        (s, layer - self.first_layer[s])
    }

    /// Mutable [`Generator::cache`]; with [`Generator::set_position`] a caller can restore a
    /// saved cache.
    pub fn cache_mut(&mut self, layer: usize) -> (&mut HostTensor, &mut HostTensor) {
        let (s, l) = self.shard_of(layer);
        let (k, v) = self.state[s][3 + 2 * l..5 + 2 * l].split_at_mut(1);
        (&mut k[0], &mut v[0])
    }

    /// Sets the position (rows `0..pos` of the cache are taken as valid).
    pub fn set_position(&mut self, pos: usize) -> Result<()> {
        if pos > self.artifact.cache_len() {
            return Err(Error::Input(format!(
                "position {pos} is beyond the cache's {} positions",
                self.artifact.cache_len()
            )));
        }
        self.pos = pos;
        Ok(())
    }

    fn room(&self, n: usize) -> Result<()> {
        let c = self.artifact.cache_len();
        if self.pos + n > c {
            return Err(Error::Input(format!(
                "{} positions are used and {n} more do not fit the cache of {c}: use a shorter \
                 prompt or fewer new tokens, or build the artifact with a larger --cache-len",
                self.pos
            )));
        }
        Ok(())
    }

    /// Runs the prompt `tokens` from the current position, in chunks of the prefill buckets
    /// (the smallest that holds the rest, else the largest; a single token runs the decode
    /// graph), and returns the logits of its last token.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.prefill_until(tokens, &GenerateOptions::default())
            .map(|r| r.expect("nothing interrupts without a deadline or cancel"))
    }

    /// [`Generator::prefill`] that stops before a chunk when `opts` says to (`Err` of the
    /// reason, the position left after the chunks run).
    fn prefill_until(
        &mut self,
        tokens: &[u32],
        opts: &GenerateOptions,
    ) -> Result<std::result::Result<Vec<f32>, StopReason>> {
        if tokens.is_empty() {
            return Err(Error::Input("the prompt has no tokens".into()));
        }
        self.room(tokens.len())?;
        let art = self.artifact.clone();
        let mut rest = tokens;
        let mut logits = Vec::new();
        while !rest.is_empty() {
            if let Some(why) = opts.interrupted() {
                return Ok(Err(why));
            }
            let graph = art
                .prefill
                .iter()
                .find(|g| g.tokens >= rest.len())
                .or(art.prefill.last())
                .filter(|_| rest.len() > 1)
                .unwrap_or(&art.decode);
            let n = rest.len().min(graph.tokens);
            logits = self.run(graph, &rest[..n])?;
            self.chunks += 1;
            rest = &rest[n..];
        }
        Ok(Ok(logits))
    }

    /// Runs one token at the current position (the decode graph); returns its logits.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.room(1)?;
        let art = self.artifact.clone();
        self.run(&art.decode, &[token])
    }

    /// Runs `tokens` (at most the stage's length; the rest is padding) at the current position
    /// through the stage's shards in order (each shard's output is the next one's `hidden_in`),
    /// writes their K/V rows into each shard's cache, advances, and returns the last real
    /// token's logits.
    fn run(&mut self, stage: &Stage, tokens: &[u32]) -> Result<Vec<f32>> {
        let art = self.artifact.clone();
        let m = &art.manifest;
        let (t, n, c, p0) = (stage.tokens, tokens.len(), m.cache.length, self.pos);
        let vocab = m.model.vocab_size;
        if let Some(&bad) = tokens.iter().find(|&&x| x as usize >= vocab) {
            return Err(Error::Input(format!(
                "token {bad} is outside the model's vocabulary of {vocab}"
            )));
        }
        let mut ids = vec![m.tokens.pad.or(m.tokens.bos).unwrap_or(0) as i32; t];
        for (d, &s) in ids.iter_mut().zip(tokens) {
            *d = s as i32;
        }
        // Padding rows take positions past the prompt, clamped into the rotary table.
        let pos: Vec<i32> = (0..t).map(|i| (p0 + i).min(c - 1) as i32).collect();
        let masked = m.attention_mask.masked;
        let mut mask = vec![masked; t * (c + t)];
        for (i, row) in mask.chunks_exact_mut(c + t).enumerate() {
            row[..p0].fill(0.0);
            row[c..=c + i].fill(0.0);
        }
        let mut x = i32_tensor(&[1, t], &ids);
        let pos = i32_tensor(&[1, t], &pos);
        let mask = HostTensor::from_f32(&[1, 1, t, c + t], &mask);
        for (s, shard) in stage.shards.iter().enumerate() {
            self.state[s][0] = x;
            self.state[s][1] = pos.clone();
            self.state[s][2] = mask.clone();
            let mut outs = self.run_shard(s, shard, n)?;
            x = outs.swap_remove(0);
        }
        self.pos += n;
        let logits = x
            .to_f32()
            .ok_or_else(|| Error::Input("the logits are not f32".into()))?;
        Ok(logits[(n - 1) * vocab..n * vocab].to_vec())
    }

    /// Runs shard `s` on its inputs in `state[s]`, writes the first `n` new K/V rows into its
    /// cache at the current position, and returns its outputs (its first, the logits or hidden
    /// states, among them).
    fn run_shard(&mut self, s: usize, graph: &LoadedGraph, n: usize) -> Result<Vec<HostTensor>> {
        let art = self.artifact.clone();
        let m = &art.manifest;
        let (t, c, p0) = (graph.entry.tokens, m.cache.length, self.pos);
        let e = &graph.compiled.emitted;
        let outs = {
            let converted = e.graph_inputs(&self.state[s])?;
            let ins: Vec<qnn::Input> = converted
                .iter()
                .map(|(d, b)| qnn::Input::from_bytes(*d, b))
                .collect();
            let mut bufs: Vec<Vec<u8>> = e
                .graph
                .outputs()
                .iter()
                .map(|o| vec![0u8; o.num_bytes()])
                .collect();
            let mut o: Vec<qnn::Output> = e
                .graph
                .outputs()
                .iter()
                .zip(bufs.iter_mut())
                .map(|(info, b)| qnn::Output::from_bytes(info.dtype, b))
                .collect();
            let start = Instant::now();
            e.graph.execute(&ins, &mut o)?;
            self.execute_ms += start.elapsed().as_secs_f64() * 1e3;
            drop(o);
            e.host_outputs(bufs)
        };
        let (kv, hd) = (m.model.kv_heads, m.model.head_dim);
        for (slot, new) in self.state[s][3..].iter_mut().zip(&outs[1..]) {
            let row = hd * slot.dtype.size();
            for h in 0..kv {
                let src = &new.data[h * t * row..][..n * row];
                slot.data[(h * c + p0) * row..][..n * row].copy_from_slice(src);
            }
        }
        Ok(outs)
    }

    /// Prefills `prompt` (from position 0: the generator is reset) and generates up to
    /// `opts.max_new_tokens` tokens, calling `on_text` with each piece of new text as soon as it
    /// is complete (held back while it could be the start of a stop string); `on_text` returns
    /// false to stop. Prompt plus new tokens beyond the cache is an error before any work. The
    /// cache is cleared first ([`Generator::clear`]): one generation never sees another's.
    /// `opts.cancel` and `opts.deadline` stop it before the next graph execute.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        opts.sampling.check().map_err(Error::Input)?;
        if prompt.is_empty() {
            return Err(Error::Input("the prompt is empty".into()));
        }
        self.artifact
            .check_fits(prompt.len(), opts.max_new_tokens)?;
        self.clear();
        let art = self.artifact.clone();
        let stops = &art.manifest.tokens.stop;
        let mut sampler = Sampler::new(opts.sampling);
        let mut timings = Timings {
            prompt_tokens: prompt.len(),
            ..Timings::default()
        };
        self.execute_ms = 0.0;
        self.chunks = 0;
        let start = Instant::now();
        let prefilled = self.prefill_until(prompt, opts)?;
        timings.prefill_ms = start.elapsed().as_secs_f64() * 1e3;
        timings.prefill_chunks = self.chunks;
        let mut tokens: Vec<u32> = Vec::new();
        let mut text = TextStream::new(&opts.stop_strings);
        let mut stop = StopReason::MaxTokens;
        let mut decode_start = None;
        let mut logits = match prefilled {
            Ok(logits) => logits,
            Err(why) => {
                timings.execute_ms = self.execute_ms;
                return Ok(Generation {
                    prompt_tokens: prompt.to_vec(),
                    tokens,
                    text: String::new(),
                    stop: why,
                    timings,
                });
            }
        };
        while tokens.len() < opts.max_new_tokens {
            if !tokens.is_empty() {
                if let Some(why) = opts.interrupted() {
                    stop = why;
                    break;
                }
                logits = self.step(*tokens.last().expect("a token"))?;
                timings.decode_steps += 1;
            }
            let next = sampler.sample(&logits);
            if tokens.is_empty() {
                timings.first_token_ms = start.elapsed().as_secs_f64() * 1e3;
                decode_start = Some(Instant::now());
            }
            if stops.contains(&next) {
                stop = StopReason::StopToken(next);
                break;
            }
            tokens.push(next);
            if let Some(s) = text.update(art.decode(&tokens)?) {
                stop = StopReason::StopString(s);
                break;
            }
            if let Some(piece) = text.next_piece() {
                if !on_text(piece) {
                    stop = StopReason::Cancelled;
                    break;
                }
            }
        }
        if !matches!(stop, StopReason::Cancelled | StopReason::Deadline) {
            if let Some(piece) = text.rest() {
                on_text(piece);
            }
        }
        timings.decode_ms = decode_start.map_or(0.0, |d| d.elapsed().as_secs_f64() * 1e3);
        timings.execute_ms = self.execute_ms;
        Ok(Generation {
            prompt_tokens: prompt.to_vec(),
            tokens,
            text: text.into_text(),
            stop,
            timings,
        })
    }
}
