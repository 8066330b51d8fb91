//! `qnnx generate ARTIFACT`: text from an LLM artifact (`python -m qnnx_backend.llm build`),
//! streamed to stdout as it comes, with time to first token and tokens per second on stderr;
//! `--json` prints the tokens, text and timings instead. The work is
//! [`qnnx_engine::llm`]'s.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use qnnx_engine::llm::{Artifact, GenerateOptions, Generator, Message, OpenOptions, Sampling};
use qnnx_engine::{Target, TargetSpec};
use qnnx_types::BackendKind;
use serde_json::json;

use crate::{emit, Cli, Failure};

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// The artifact folder (`python -m qnnx_backend.llm build MODEL -o DIR`).
    pub artifact: PathBuf,
    /// A raw prompt, tokenized as is (with the tokenizer's own special tokens, such as BOS).
    #[arg(
        long,
        value_name = "TEXT",
        required_unless_present = "chat",
        conflicts_with = "chat"
    )]
    pub prompt: Option<String>,
    /// A user message, put through the artifact's chat template with the assistant's turn
    /// opened.
    #[arg(long, value_name = "MESSAGE")]
    pub chat: Option<String>,
    /// A system message before --chat's.
    #[arg(long, value_name = "MESSAGE", requires = "chat")]
    pub system: Option<String>,
    /// The most tokens to generate.
    #[arg(long, default_value_t = 128, value_name = "N")]
    pub max_new_tokens: usize,
    /// 0 (the default) is greedy; above 0 samples.
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    pub temperature: f32,
    /// Sample among the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub top_k: usize,
    /// Sample among the most likely tokens whose probability reaches P.
    #[arg(long, default_value_t = 1.0, value_name = "P")]
    pub top_p: f32,
    /// The sampling seed: the same seed gives the same text.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
    /// Stop before this text (repeat for several).
    #[arg(long, value_name = "TEXT")]
    pub stop: Vec<String>,
    /// The SoC this device is, by name (SM8650) or model number (57): an artifact built for
    /// another is refused. Default: the artifact's (emulated on x86_64).
    #[arg(long, value_name = "SOC")]
    pub soc: Option<String>,
}

fn soc_model(soc: &str) -> Result<u32, Failure> {
    let spec = match soc.parse::<u32>() {
        Ok(n) => TargetSpec {
            backend: BackendKind::Htp,
            soc_model: Some(n),
            ..TargetSpec::default()
        },
        Err(_) => TargetSpec {
            backend: BackendKind::Htp,
            soc: Some(soc.to_string()),
            ..TargetSpec::default()
        },
    };
    Target::resolve(&spec, None)
        .map_err(|e| Failure::usage(e.to_string()))?
        .soc_model
        .ok_or_else(|| Failure::usage(format!("--soc {soc}: not a SoC")))
}

pub fn generate(cli: &Cli, args: &GenerateArgs) -> Result<ExitCode, Failure> {
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    sampling.check().map_err(Failure::usage)?;
    if args.max_new_tokens == 0 {
        return Err(Failure::usage("--max-new-tokens must be at least 1"));
    }
    let opts = OpenOptions {
        soc_model: args.soc.as_deref().map(soc_model).transpose()?,
        library: cli.qnn_lib.clone(),
    };
    let art = Arc::new(Artifact::open(&args.artifact, &opts)?);
    let (text, special) = match (&args.prompt, &args.chat) {
        (Some(p), _) => (p.clone(), true),
        (None, Some(c)) => {
            let mut messages = Vec::new();
            if let Some(s) = &args.system {
                messages.push(Message::new("system", s));
            }
            messages.push(Message::new("user", c));
            (art.chat_prompt(&messages)?, false)
        }
        (None, None) => return Err(Failure::usage("pass --prompt TEXT or --chat MESSAGE")),
    };
    if text.is_empty() {
        return Err(Failure::usage("the prompt is empty"));
    }
    let ids = art.encode(&text, special)?;
    let gen_opts = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        sampling,
        stop_strings: args.stop.clone(),
        ..Default::default()
    };
    let mut g = Generator::new(art.clone());
    let stream = !cli.json;
    let mut stdout = std::io::stdout();
    let out = g.generate(&ids, &gen_opts, &mut |piece| {
        if stream {
            // A closed stdout (`| head`) ends generation instead of failing it.
            stdout
                .write_all(piece.as_bytes())
                .and_then(|()| stdout.flush())
                .is_ok()
        } else {
            true
        }
    })?;
    let t = &out.timings;
    let report = json!({
        "artifact": args.artifact,
        "prompt_tokens": out.prompt_tokens,
        "tokens": out.tokens,
        "text": out.text,
        "stop": out.stop.name(),
        "open_ms": art.open_ms,
        "first_token_ms": t.first_token_ms,
        "prefill_ms": t.prefill_ms,
        "prefill_chunks": t.prefill_chunks,
        "prefill_tokens_per_s": t.prefill_tokens_per_s(),
        "decode_ms": t.decode_ms,
        "decode_steps": t.decode_steps,
        "decode_tokens_per_s": (t.decode_steps > 0).then(|| t.decode_tokens_per_s()),
        "execute_ms": t.execute_ms,
        "host_share": t.host_share(),
    });
    if cli.json {
        emit(cli, &report, String::new);
    } else {
        println!();
        let decode = if t.decode_steps > 0 {
            format!(
                ", decode {:.2} tokens/s ({} steps)",
                t.decode_tokens_per_s(),
                t.decode_steps
            )
        } else {
            String::new()
        };
        eprintln!(
            "qnnx: {} prompt tokens, {} new ({}); artifact opened in {:.0} ms; time to first \
             token {:.0} ms (prefill {:.1} tokens/s){decode}; host share {:.1}%",
            out.prompt_tokens.len(),
            out.tokens.len(),
            out.stop.name(),
            art.open_ms,
            t.first_token_ms,
            t.prefill_tokens_per_s(),
            t.host_share() * 100.0
        );
    }
    Ok(ExitCode::SUCCESS)
}
