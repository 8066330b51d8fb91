//! A chat turn with an LLM artifact through `qnnx_engine::llm`, the API `qnnx generate` is
//! built on: open (every check runs first), render the chat template, generate greedily with
//! the text streamed, then the timings.
//!
//! ```sh
//! python -m qnnx_backend.llm build SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2 --soc 60
//! cargo run --release -p qnnx-engine --example chat -- smollm2 "What is the capital of France?"
//! ```

use std::io::Write;
use std::sync::Arc;

use qnnx_engine::llm::{Artifact, GenerateOptions, Generator, Message, OpenOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(question)) = (args.next(), args.next()) else {
        return Err("usage: chat ARTIFACT QUESTION".into());
    };
    let art = Arc::new(Artifact::open(dir.as_ref(), &OpenOptions::default())?);
    let prompt = art.chat_prompt(&[Message::new("user", &question)])?;
    let ids = art.encode(&prompt, false)?;
    let mut generator = Generator::new(art.clone());
    let opts = GenerateOptions {
        max_new_tokens: 64.min(art.cache_len().saturating_sub(ids.len())),
        ..Default::default()
    };
    let out = generator.generate(&ids, &opts, &mut |piece| {
        print!("{piece}");
        std::io::stdout().flush().is_ok()
    })?;
    println!();
    let t = &out.timings;
    eprintln!(
        "{} prompt tokens, {} new ({}): first token after {:.0} ms, {:.2} tokens/s after it",
        ids.len(),
        out.tokens.len(),
        out.stop.name(),
        t.first_token_ms,
        t.decode_tokens_per_s()
    );
    Ok(())
}
