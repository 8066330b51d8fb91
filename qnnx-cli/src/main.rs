//! `qnnx`: compile ONNX models to QNN context binaries ahead of time, check which nodes a
//! backend supports, inspect and run context binaries, manage the context-binary cache, and
//! diagnose the QNN installation, and generate text with LLM artifacts.
//!
//! Exit codes: 0 success; 1 failure (the message says what to do); 2 bad command line (unknown
//! flag, SoC or architecture); 3 the model cannot run on the backend or target (`check` found
//! unsupported nodes, or `compile`/`run` refused the model for the same reason).

mod build;
mod cache;
mod check;
mod compare;
mod compile;
mod compile_each;
mod compile_many;
mod doctor;
mod generate;
mod inputs;
mod inspect;
mod npy;
mod progress;
mod quantize;
mod run;
mod run_report;
mod serve;
mod target;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use qnn::{Backend, BackendConfig, BackendOptions};
use qnnx_types::BackendKind;
use serde_json::{json, Value};

/// Exit code of a failure (the message says what to do).
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a bad command line.
pub const EXIT_USAGE: u8 = 2;
/// Exit code when the model cannot run on the chosen backend or target.
pub const EXIT_UNSUPPORTED: u8 = 3;

#[derive(Parser)]
#[command(
    name = "qnnx",
    version,
    about = "Run and compile models for Qualcomm NPUs through QNN",
    after_help = "Exit codes: 0 success, 1 failure, 2 bad command line, 3 the model cannot run on \
                  the backend or target (unsupported nodes, float model on a v68-class SoC)."
)]
pub struct Cli {
    /// Print machine-readable JSON on stdout instead of text (errors too: {"error": ...}).
    #[arg(long, global = true)]
    pub json: bool,
    /// Path of the QNN backend library to use (otherwise the documented search order applies).
    #[arg(long, global = true, value_name = "PATH")]
    pub qnn_lib: Option<PathBuf>,
    /// Context-binary cache folder [default: $QNNX_CACHE_DIR, else ~/.cache/qnnx or the
    /// platform's cache folder]; the Python package uses the same one.
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show which QNN libraries are found where, their build ids, which backends start, and the
    /// cache folder.
    Doctor,
    /// Compile an ONNX model to a QNN context binary for a target SoC.
    Compile(compile::CompileArgs),
    /// List which nodes of an ONNX model lower to a backend and why the others do not, and
    /// whether the target SoC can run it (a v68 HTP runs quantized models only); exit code 3
    /// when it cannot.
    Check(check::CheckArgs),
    /// Describe a context binary: graphs, inputs and outputs, build id, SoC.
    Inspect {
        /// The context binary, or a saved model (`qnnx_backend.export`).
        model: PathBuf,
    },
    /// Run a context binary, or an ONNX model compiled in memory, with given or random inputs;
    /// write the outputs as .npy and report latency.
    Run(run::RunArgs),
    /// Quantize a float ONNX model on calibration data into a standard QDQ ONNX model
    /// (QuantizeLinear/DequantizeLinear pairs, integer weights) that compiles for every HTP,
    /// v68 included.
    Quantize(quantize::QuantizeArgs),
    /// Per-layer accuracy on the HTP: run the model (fp16, or a QDQ model with --reference
    /// FLOAT.onnx) and its float reference in exact fp32 with every intermediate as an output,
    /// and report each value's SQNR, cosine and max error, worst first, and the first layer
    /// where the error jumps.
    Compare(compare::CompareArgs),
    /// Generate text with an LLM artifact (`python -m qnnx_backend.llm build`): streamed to
    /// stdout, time to first token and tokens per second on stderr.
    Generate(generate::GenerateArgs),
    /// Serve an LLM artifact over the OpenAI HTTP API (/v1/chat/completions, /v1/completions,
    /// /v1/models, /health), one request at a time on the NPU with a bounded queue.
    Serve(serve::ServeArgs),
    /// List, clear or prune the context-binary cache.
    Cache {
        #[command(subcommand)]
        action: cache::CacheAction,
    },
}

/// An error for the user: what went wrong and what to do, and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub msg: String,
    /// Extra fields for the JSON error object (such as the unsupported nodes).
    pub details: Option<Value>,
}

impl Failure {
    pub fn new(msg: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_FAILURE,
            msg: msg.into(),
            details: None,
        }
    }

    pub fn usage(msg: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_USAGE,
            msg: msg.into(),
            details: None,
        }
    }

    pub fn unsupported(msg: impl Into<String>, details: Option<Value>) -> Failure {
        Failure {
            code: EXIT_UNSUPPORTED,
            msg: msg.into(),
            details,
        }
    }
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure::new(e.to_string())
    }
}

/// Logs to stderr; `timed` prefixes each line with the time (a server's log outlives the
/// moment it is read).
fn init_logging(default: &str, timed: bool) {
    // QNN's own log (target `qnn`) has harmless ERROR lines on every graph; errors that matter
    // reach us as return codes and are in our messages. QNNX_LOG takes the same syntax
    // (`warn,qnn=info`) to see more.
    let filter: tracing_subscriber::filter::Targets = std::env::var("QNNX_LOG")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| default.parse().expect("valid default filter"));
    use tracing_subscriber::layer::SubscriberExt;
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false);
    let registry = tracing_subscriber::registry().with(filter);
    let _ = if timed {
        tracing::subscriber::set_global_default(registry.with(layer))
    } else {
        tracing::subscriber::set_global_default(registry.with(layer.without_time()))
    };
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        // A server logs each request (its timings) and what happens to it, with the time.
        Command::Serve(_) => init_logging("warn,qnnx::serve=info,qnn=off,qnn::cache=warn", true),
        _ => init_logging("warn,qnn=off,qnn::cache=warn", false),
    }
    let result = match &cli.command {
        Command::Doctor => doctor::doctor(&cli),
        Command::Compile(args) if args.each => compile_each::compile_each(&cli, args),
        Command::Compile(args) if args.models.len() > 1 => compile_many::compile_many(&cli, args),
        Command::Compile(args) => compile::compile(&cli, args),
        Command::Check(args) => check::check(&cli, args),
        Command::Inspect { model } => inspect::inspect(&cli, model),
        Command::Run(args) => run::run(&cli, args),
        Command::Compare(args) => compare::compare_cmd(&cli, args),
        Command::Generate(args) => generate::generate(&cli, args),
        Command::Serve(args) => serve::serve(&cli, args),
        Command::Quantize(args) => quantize::quantize(&cli, args),
        Command::Cache { action } => cache::cache(&cli, action),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            if cli.json {
                let mut v = json!({ "error": f.msg, "exit_code": f.code });
                if let (Some(Value::Object(extra)), Value::Object(obj)) = (f.details, &mut v) {
                    obj.extend(extra);
                }
                emit(&cli, &v, String::new);
            } else {
                eprintln!("qnnx: error: {}", f.msg);
            }
            ExitCode::from(f.code)
        }
    }
}

/// Prints the command's result: `value` as JSON with `--json`, else `text`. A closed stdout
/// (`qnnx ... | head`) is not an error.
pub fn emit(cli: &Cli, value: &Value, text: impl FnOnce() -> String) {
    let out = if cli.json {
        serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
    } else {
        text()
    };
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush());
}

/// The QnnSystem library (binary inspection): beside `--qnn-lib` when it is given, else by the
/// library search.
pub fn system_library(cli: &Cli) -> Result<std::sync::Arc<qnn::qnn_sys::SystemLibrary>, Failure> {
    match &cli.qnn_lib {
        Some(lib) => Backend::open(
            BackendConfig::default_for(BackendKind::Htp),
            &BackendOptions {
                library: Some(lib.clone()),
                log_level: None,
            },
        )
        .and_then(|b| b.system())
        .map_err(|e| Failure::new(format!("{e} (with --qnn-lib {})", lib.display()))),
        None => Ok(std::sync::Arc::new(qnn::qnn_sys::SystemLibrary::find(
            None,
        )?)),
    }
}

/// Reads a whole file; the error names it.
pub fn read_file(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound => "\nhint: check the path",
            _ => "",
        };
        Failure::new(format!("cannot read {}: {e}{hint}", path.display()))
    })
}
