//! `qnnx compile a.onnx b.onnx ... --each`: one context binary per model, each built in a
//! process of its own, `--jobs` at a time.
//!
//! Why processes: in one process the HTP library finalizes one graph at a time, however many
//! backends or threads build them (threads gained 1.00x and 0.97x on 4 graphs), while 4
//! processes finalizing resnet18 at once took 1.66-1.98x less time than one after another on 2
//! cores, with byte-identical binaries (docs/profiling.md, "Parallel finalize"). Each child is
//! this program run again with the same arguments and the index of its model in the
//! environment, so it parses, checks and builds exactly as a single-model `qnnx compile` does
//! and writes its binary as that does (a temporary file renamed into place: a failed child
//! leaves no partial binary); the parent only schedules them and gathers their reports.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};

use crate::compile::{compile_one, CompileArgs};
use crate::{emit, Cli, Failure};

/// What a child process gave: its output, and how long it ran (ms).
type Child = (std::io::Result<Output>, f64);

/// Set in a child's environment: the index of the model it builds.
const CHILD: &str = "QNNX_COMPILE_EACH_INDEX";

/// Where each model's binary goes: `--out-dir/STEM.bin`, else next to the model.
fn outputs(args: &CompileArgs) -> Result<Vec<PathBuf>, Failure> {
    let outs: Vec<PathBuf> = args
        .models
        .iter()
        .map(|m| match &args.out_dir {
            Some(d) => d
                .join(m.file_stem().unwrap_or_default())
                .with_extension("bin"),
            None => m.with_extension("bin"),
        })
        .collect();
    for (i, o) in outs.iter().enumerate() {
        if let Some(j) = outs[..i].iter().position(|p| p == o) {
            return Err(Failure::usage(format!(
                "{} and {} would both write {}; pass --out-dir only for models with different \
                 file names",
                args.models[j].display(),
                args.models[i].display(),
                o.display()
            )));
        }
    }
    Ok(outs)
}

pub fn compile_each(cli: &Cli, args: &CompileArgs) -> Result<ExitCode, Failure> {
    let outs = outputs(args)?;
    if let Some(i) = std::env::var_os(CHILD) {
        let i: usize = i
            .to_str()
            .and_then(|s| s.parse().ok())
            .filter(|&i| i < args.models.len())
            .ok_or_else(|| Failure::usage(format!("{CHILD}={i:?} is not a model index")))?;
        return compile_one(cli, args, &args.models[i], &outs[i]);
    }
    if let Some(d) = &args.out_dir {
        std::fs::create_dir_all(d).map_err(|e| Failure::new(format!("{}: {e}", d.display())))?;
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(format!("cannot find the qnnx executable to run: {e}")))?;
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    let n = args.models.len();
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()))
        .clamp(1, n.max(1));
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Child>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let t = Instant::now();
                let out = Command::new(&exe)
                    .args(&argv)
                    .env(CHILD, i.to_string())
                    .stdin(Stdio::null())
                    .output();
                let ms = t.elapsed().as_secs_f64() * 1e3;
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some((out, ms));
            });
        }
    });
    let wall_ms = start.elapsed().as_secs_f64() * 1e3;
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut reports = Vec::new();
    let mut text = String::new();
    let mut failed = Vec::new();
    let mut busy_ms = 0.0;
    for (i, r) in results.into_iter().enumerate() {
        let model = &args.models[i];
        let Some((out, ms)) = r else {
            failed.push(format!("{}: not built", model.display()));
            continue;
        };
        busy_ms += ms;
        let out = out.map_err(|e| Failure::new(format!("cannot run {}: {e}", exe.display())))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            // With --json the child reports its error as JSON on stdout, else on stderr.
            let why = serde_json::from_str::<Value>(stdout.trim())
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_else(|| {
                    stderr
                        .trim()
                        .trim_start_matches("qnnx: error: ")
                        .to_string()
                });
            failed.push(format!("{}: {why}", model.display()));
            reports.push(json!({"model": model, "error": why}));
            continue;
        }
        if cli.json {
            let v: Value = serde_json::from_str(stdout.trim())
                .unwrap_or_else(|_| json!({"model": model, "output": outs[i]}));
            reports.push(v);
        } else {
            text += &stdout;
        }
    }
    let speedup = if wall_ms > 0.0 {
        busy_ms / wall_ms
    } else {
        1.0
    };
    let value = json!({
        "binaries": reports,
        "jobs": jobs,
        "wall_ms": wall_ms,
        "sum_of_builds_ms": busy_ms,
        "failed": failed.len(),
    });
    let summary = format!(
        "{} of {n} models built in {:.1} s with {jobs} at a time (their builds add up to {:.1} \
         s: {speedup:.2}x)\n",
        n - failed.len(),
        wall_ms / 1e3,
        busy_ms / 1e3
    );
    if failed.is_empty() {
        emit(cli, &value, || format!("{text}{summary}"));
        return Ok(ExitCode::SUCCESS);
    }
    // One JSON document: the error with every model's report in it.
    if !cli.json {
        emit(cli, &value, || format!("{text}{summary}"));
    }
    let mut f = Failure::new(format!(
        "{} of {n} models failed:\n  {}",
        failed.len(),
        failed.join("\n  ")
    ));
    f.details = Some(value);
    Err(f)
}
