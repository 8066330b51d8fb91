//! `qnnx serve ARTIFACT`: an OpenAI-compatible HTTP server for an LLM artifact (docs/serving.md).
//! The HTTP layer is here (axum on tokio: `routes.rs`, requests read in `request.rs`, errors as
//! OpenAI's in `error.rs`); one worker thread owns the NPU and runs the requests of the queue
//! (`queue.rs`) through [`qnnx_engine::llm::Generator`], which does the generation.

mod error;
mod queue;
mod request;
mod routes;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use qnnx_engine::llm::{Artifact, Generator, OpenOptions};

use crate::{Cli, Failure};
use queue::Queue;
use routes::App;

/// The environment variable that holds the API key (instead of `--api-key`, which other users
/// of the machine can read in the process list).
pub const API_KEY_ENV: &str = "QNNX_API_KEY";

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The artifact folder (`python -m qnnx_backend.llm build MODEL -o DIR`).
    pub artifact: PathBuf,
    /// The address to listen on; 127.0.0.1 keeps the server to this machine.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port (0: any free port; the one taken is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require this key on every route (`Authorization: Bearer KEY`); prefer the environment
    /// variable QNNX_API_KEY, which other users cannot read in the process list.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Requests that may wait for the NPU besides the running one; more are refused with 429.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub queue: usize,
    /// Seconds a request may take from its arrival, waiting included; then it fails with 504.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    pub deadline: f64,
    /// On SIGTERM or Ctrl-C, seconds the running request has to finish before it is stopped
    /// (waiting requests are refused at once with 503).
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub shutdown_grace: f64,
    /// The largest request body in bytes (larger: 413).
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    pub max_body: usize,
    /// The model's id in responses and /v1/models [default: the artifact folder's name].
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,
}

fn seconds(flag: &str, s: f64) -> Result<Duration, Failure> {
    if s.is_finite() && s > 0.0 && s < 1e9 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(Failure::usage(format!(
            "{flag} {s}: give a number of seconds above 0"
        )))
    }
}

/// Resolves on the first SIGTERM or Ctrl-C: closes the queue (503 to everything waiting) and
/// gives the running request `grace` before stopping it (a second signal stops it at once).
/// The process then exits normally: `exit()` from a signal task would run the QNN library's
/// destructors under the worker's running execute (seen: the request failed with 6001, invalid
/// graph handle).
async fn shutdown_signal(queue: Arc<Queue>, grace: Duration) {
    let name = signal().await;
    let refused = queue.close();
    tracing::warn!(
        "{name}: stopping; {refused} waiting requests refused (503), the running one has {:.0} \
         s to finish",
        grace.as_secs_f64()
    );
    let q = queue.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(grace) => {}
            name = signal() => tracing::warn!("{name} again: stopping the running request now"),
        }
        q.cancel_running();
    });
}

async fn signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

pub fn serve(cli: &Cli, args: &ServeArgs) -> Result<ExitCode, Failure> {
    if args.queue == 0 {
        return Err(Failure::usage(
            "--queue 0: at least 1 request must be able to wait",
        ));
    }
    let deadline = seconds("--deadline", args.deadline)?;
    let grace = seconds("--shutdown-grace", args.shutdown_grace)?;
    let api_key = args
        .api_key
        .clone()
        .or_else(|| std::env::var(API_KEY_ENV).ok())
        .filter(|k| !k.is_empty());
    let opts = OpenOptions {
        soc_model: None,
        library: cli.qnn_lib.clone(),
    };
    let art = Arc::new(Artifact::open(&args.artifact, &opts)?);
    let model = args.model_name.clone().unwrap_or_else(|| {
        let dir = std::fs::canonicalize(&args.artifact).unwrap_or(args.artifact.clone());
        dir.file_name()
            .map_or("model".into(), |n| n.to_string_lossy().into_owned())
    });
    let queue = Arc::new(Queue::new(args.queue));
    let worker = {
        let (art, queue) = (art.clone(), queue.clone());
        let deadline_s = args.deadline;
        std::thread::Builder::new()
            .name("qnnx-npu".into())
            .spawn(move || {
                let mut g = Generator::new(art.clone());
                queue::work(&queue, deadline_s, &mut |job, on_text| {
                    let r = g.generate(&job.prompt, &job.opts, on_text);
                    if r.is_err() {
                        // A failed execute may leave the generator half-way: the next request
                        // gets a new one.
                        g = Generator::new(art.clone());
                    }
                    r
                })
            })
            .map_err(|e| Failure::new(format!("cannot start the NPU worker thread: {e}")))?
    };
    let app = Arc::new(App {
        art: art.clone(),
        queue: queue.clone(),
        model: model.clone(),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        api_key: api_key.clone(),
        deadline,
        max_body: args.max_body,
        next_id: AtomicU64::new(1),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::new(format!("cannot start the async runtime: {e}")))?;
    let served = runtime.block_on(async {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|e| {
            Failure::new(format!(
                "cannot listen on {addr}: {e}\nhint: another server may hold the port; pick \
                 another with --port (0: any free port)"
            ))
        })?;
        let local = listener.local_addr()?;
        if api_key.is_none() && !local.ip().is_loopback() {
            tracing::warn!(
                "listening on {local} without an API key: anyone who reaches this address can \
                 use the NPU (set {API_KEY_ENV})"
            );
        }
        // On stderr whatever the log filter: scripts read the port from this line.
        eprintln!(
            "qnnx serve: {model} ({} tokens of cache) on http://{local}/v1 (artifact opened in \
             {:.0} ms, queue {}, deadline {} s{})",
            art.cache_len(),
            art.open_ms,
            args.queue,
            args.deadline,
            if api_key.is_some() {
                ", API key required"
            } else {
                ""
            }
        );
        axum::serve(listener, routes::router(app))
            .with_graceful_shutdown(shutdown_signal(queue.clone(), grace))
            .await
            .map_err(|e| Failure::new(format!("the server failed: {e}")))
    });
    // The worker returns once the queue is closed and empty (after a signal); if the server
    // failed instead, close the queue so it does.
    queue.close();
    let _ = worker.join();
    served?;
    let s = queue.snapshot().requests;
    eprintln!(
        "qnnx serve: stopped; {} requests completed, {} refused (429), {} cancelled, {} failed, \
         {} timed out, {} stopped by the shutdown",
        s.completed, s.refused, s.cancelled, s.failed, s.timed_out, s.shut_down
    );
    Ok(ExitCode::SUCCESS)
}
