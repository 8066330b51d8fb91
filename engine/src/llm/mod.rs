//! LLMs without Python: an artifact made by `python -m qnnx_backend.llm build` (docs/llm.md)
//! opened and checked ([`Artifact::open`]), and the generation loop over it ([`Generator`]:
//! the KV cache on the host, prefill in chunks of the artifact's buckets, decode steps,
//! sampling, stop tokens and strings, timings). `qnnx generate` is a front end of this module;
//! `engine/examples/chat.rs` is a runnable example.
//!
//! ```no_run
//! use std::sync::Arc;
//! use qnnx_engine::llm::{Artifact, GenerateOptions, Generator, Message, OpenOptions};
//!
//! let art = Arc::new(Artifact::open("smollm2".as_ref(), &OpenOptions::default())?);
//! let prompt = art.chat_prompt(&[Message::new("user", "What is the capital of France?")])?;
//! let ids = art.encode(&prompt, false)?;
//! let mut g = Generator::new(art.clone());
//! let opts = GenerateOptions { max_new_tokens: 32, ..Default::default() };
//! let out = g.generate(&ids, &opts, &mut |piece| {
//!     print!("{piece}");
//!     true
//! })?;
//! eprintln!("{:.0} ms to the first token", out.timings.first_token_ms);
//! # Ok::<(), qnnx_engine::Error>(())
//! ```

pub mod artifact;
mod chat;
pub mod generate;
pub mod manifest;
pub mod sample;
mod stream;

pub use artifact::{Artifact, LoadedGraph, OpenOptions, Stage};
pub use chat::{ChatTemplate, Message};
pub use generate::{Cancel, GenerateOptions, Generation, Generator, StopReason, Timings};
pub use manifest::{read_manifest, Manifest, FORMAT};
pub use sample::{Sampler, Sampling};

impl Artifact {
    /// The prompt text of a chat through the artifact's template, with the assistant's turn
    /// opened; encode it with `special` false (the template placed the special tokens).
    pub fn chat_prompt(&self, messages: &[Message]) -> crate::Result<String> {
        let t = self.chat.as_ref().ok_or_else(|| {
            crate::Error::Input(
                "this artifact has no chat template (its model had none): pass a raw prompt".into(),
            )
        })?;
        t.render(messages, true).map_err(crate::Error::Input)
    }
}

#[cfg(test)]
mod tests {
    /// The server of `qnnx serve` shares one artifact between request threads and moves a
    /// generator into each.
    #[test]
    fn artifacts_are_shared_and_generators_sent_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<super::Artifact>();
        send::<super::Generator>();
    }
}
