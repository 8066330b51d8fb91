//! `LlmArtifact`: an LLM artifact ([`qnnx_engine::llm`]) for Python, with the Rust generation
//! loop behind `qnnx_backend.llm.session` (no torch, no numpy): the same checks, tokenizer,
//! template, sampling and timings as `qnnx generate`.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use qnnx_engine::llm::{
    Artifact, GenerateOptions, Generator, Message, OpenOptions, Sampling, StopReason,
};

use crate::errors::engine_error;

/// An opened LLM artifact.
#[pyclass(frozen, module = "qnnx_backend._native")]
pub struct LlmArtifact {
    inner: Arc<Artifact>,
}

#[pymethods]
impl LlmArtifact {
    /// Opens the artifact folder at `path` after checking it (`SavedModelError` says what is
    /// wrong); `soc_model`, when given, is this device's SoC: an artifact for another is refused.
    #[new]
    #[pyo3(signature = (path, soc_model = None))]
    fn new(py: Python<'_>, path: PathBuf, soc_model: Option<u32>) -> PyResult<LlmArtifact> {
        let opts = OpenOptions {
            soc_model,
            library: None,
        };
        let inner = py
            .detach(|| Artifact::open(&path, &opts))
            .map_err(|e| engine_error(py, e))?;
        Ok(LlmArtifact {
            inner: Arc::new(inner),
        })
    }

    /// The manifest as JSON.
    #[getter]
    fn manifest(&self) -> String {
        serde_json::to_string(&self.inner.manifest).unwrap_or_default()
    }

    /// Milliseconds opening took.
    #[getter]
    fn open_ms(&self) -> f64 {
        self.inner.open_ms
    }

    /// The token ids of `text`; `special` adds the tokenizer's own special tokens.
    fn encode(&self, py: Python<'_>, text: &str, special: bool) -> PyResult<Vec<u32>> {
        self.inner
            .encode(text, special)
            .map_err(|e| engine_error(py, e))
    }

    /// The text of `ids`, special tokens left out.
    fn decode(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<String> {
        self.inner.decode(&ids).map_err(|e| engine_error(py, e))
    }

    /// The prompt text of `messages` (role, content) through the chat template, the
    /// assistant's turn opened.
    fn chat_prompt(&self, py: Python<'_>, messages: Vec<(String, String)>) -> PyResult<String> {
        let messages: Vec<Message> = messages.iter().map(|(r, c)| Message::new(r, c)).collect();
        self.inner
            .chat_prompt(&messages)
            .map_err(|e| engine_error(py, e))
    }

    /// Generates from the token ids `prompt` (the GIL released while the graphs run), calling
    /// `on_text(piece)` with each piece of text as it becomes final when given (a false return
    /// or an exception stops generation; the exception is raised). Returns the generation as
    /// JSON: tokens, text, stop reason, timings.
    #[pyo3(signature = (prompt, max_new_tokens, temperature = 0.0, top_k = 0, top_p = 1.0, seed = 0, stop = Vec::new(), on_text = None))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: Vec<u32>,
        max_new_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
        stop: Vec<String>,
        on_text: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        let opts = GenerateOptions {
            max_new_tokens,
            sampling: Sampling {
                temperature,
                top_k,
                top_p,
                seed,
            },
            stop_strings: stop,
            ..Default::default()
        };
        let art = self.inner.clone();
        let mut raised: Option<PyErr> = None;
        let out = py.detach(|| {
            let mut g = Generator::new(art);
            g.generate(&prompt, &opts, &mut |piece| match &on_text {
                None => true,
                Some(cb) => Python::attach(|py| match cb.call1(py, (piece,)) {
                    Ok(r) => r.extract::<Option<bool>>(py).ok().flatten() != Some(false),
                    Err(e) => {
                        raised = Some(e);
                        false
                    }
                }),
            })
        });
        if let Some(e) = raised {
            return Err(e);
        }
        let out = out.map_err(|e| engine_error(py, e))?;
        let t = &out.timings;
        let stop_token = match out.stop {
            StopReason::StopToken(t) => Some(t),
            _ => None,
        };
        Ok(serde_json::json!({
            "prompt_tokens": out.prompt_tokens,
            "tokens": out.tokens,
            "text": out.text,
            "stop": out.stop.name(),
            "stop_token": stop_token,
            "first_token_ms": t.first_token_ms,
            "prefill_ms": t.prefill_ms,
            "prefill_chunks": t.prefill_chunks,
            "decode_ms": t.decode_ms,
            "decode_steps": t.decode_steps,
            "execute_ms": t.execute_ms,
            "host_share": t.host_share(),
        })
        .to_string())
    }
}
