//! Times `Graph::execute` alone (QNN `graphExecute` plus the safe layer's buffer checks) on a
//! context binary, for the benchmark's "raw graphExecute" column (`bench/run`). Prints one JSON
//! line: median, p95, mean and min in ms over `--runs` calls after `--warmup` calls.
//!
//! ```sh
//! cargo run --release -p qnn-rs --example exec_timer -- model.bin [--graph NAME] [--runs 100]
//!     [--warmup 5] [--soc 60] [--arch 73] [--no-prime]
//! ```
//!
//! Inputs are deterministic small values (floats) or zeros (integers). By default a throw-away
//! one-node graph is finalized first: on the x86_64 emulator, a process that only loaded a binary
//! executes slower than one that has finalized a graph (docs/qnn-notes.md gotcha 14), and the benchmark
//! compares against processes that compiled their graph.

use std::time::Instant;

use qnn::{
    Backend, BackendOptions, Context, DType, Device, HtpArch, HtpConfig, HtpDeviceConfig, Input,
    Node, Output,
};

struct Args {
    binary: std::path::PathBuf,
    graph: Option<String>,
    runs: usize,
    warmup: usize,
    soc: u32,
    arch: HtpArch,
    prime: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut binary = None;
    let mut a = Args {
        binary: Default::default(),
        graph: None,
        runs: 100,
        warmup: 5,
        soc: 60,
        arch: HtpArch::V73,
        prime: true,
    };
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--graph" => a.graph = Some(value("--graph")?),
            "--runs" => {
                a.runs = value("--runs")?
                    .parse()
                    .map_err(|e| format!("--runs: {e}"))?
            }
            "--warmup" => {
                a.warmup = value("--warmup")?
                    .parse()
                    .map_err(|e| format!("--warmup: {e}"))?
            }
            "--soc" => a.soc = value("--soc")?.parse().map_err(|e| format!("--soc: {e}"))?,
            "--arch" => {
                a.arch = value("--arch")?
                    .parse()
                    .map_err(|e| format!("--arch: {e}"))?
            }
            "--no-prime" => a.prime = false,
            s if s.starts_with("--") => return Err(format!("unknown option {s}")),
            s => binary = Some(std::path::PathBuf::from(s)),
        }
    }
    a.binary = binary.ok_or("usage: exec_timer BINARY [--graph NAME] [--runs N] [--warmup N]")?;
    Ok(a)
}

/// Bytes of deterministic input data for one tensor.
fn input_bytes(dtype: DType, n: usize) -> Vec<u8> {
    match dtype {
        DType::F32 => (0..n)
            .flat_map(|i| (((i % 17) as f32 - 8.0) / 16.0).to_le_bytes())
            .collect(),
        DType::F16 => (0..n)
            .flat_map(|i| qnn::f16::from_f32(((i % 17) as f32 - 8.0) / 16.0).to_le_bytes())
            .collect(),
        other => vec![0u8; n * other.size()],
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let config = HtpConfig {
        device: HtpDeviceConfig {
            soc_model: Some(args.soc),
            arch: Some(args.arch),
        },
        ..HtpConfig::default()
    };
    let backend = Backend::open(config, &BackendOptions::default())?;
    let device = Device::new(&backend)?;
    if args.prime {
        let ctx = Context::new(&backend, Some(&device))?;
        let mut g = ctx.build_graph("prime")?;
        let x = g.input("x", DType::F32, &[1, 4])?;
        let y = g.output("y", DType::F32, &[1, 4])?;
        g.add_node(&Node::new("relu", "Relu").inputs(&[x]).outputs(&[y]))?;
        let graph = g.finalize()?;
        let mut out = [0f32; 4];
        graph.execute(
            &[Input::new(&[1f32, -1., 2., -2.])],
            &mut [Output::new(&mut out)],
        )?;
    }
    let t = Instant::now();
    let ctx = Context::from_file(&backend, Some(&device), &args.binary)?;
    let name = match &args.graph {
        Some(n) => n.clone(),
        None => ctx
            .graph_names()
            .into_iter()
            .next()
            .ok_or("the binary has no graph")?,
    };
    let graph = ctx.graph(&name)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;

    let in_data: Vec<(DType, Vec<u8>)> = graph
        .inputs()
        .iter()
        .map(|i| (i.dtype, input_bytes(i.dtype, i.num_elements())))
        .collect();
    let mut out_data: Vec<(DType, Vec<u8>)> = graph
        .outputs()
        .iter()
        .map(|o| (o.dtype, vec![0u8; o.num_elements() * o.dtype.size()]))
        .collect();
    let mut samples = Vec::with_capacity(args.runs);
    for i in 0..args.warmup + args.runs {
        let ins: Vec<Input<'_>> = in_data
            .iter()
            .map(|(d, b)| Input::from_bytes(*d, b))
            .collect();
        let mut outs: Vec<Output<'_>> = out_data
            .iter_mut()
            .map(|(d, b)| Output::from_bytes(*d, b))
            .collect();
        let t = Instant::now();
        graph.execute(&ins, &mut outs)?;
        let dt = t.elapsed().as_secs_f64() * 1e3;
        if i >= args.warmup {
            samples.push(dt);
        }
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let median = if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    };
    let p95 = samples
        .get(((0.95 * (n.max(1) - 1) as f64).round()) as usize)
        .copied()
        .unwrap_or(f64::NAN);
    let mean = samples.iter().sum::<f64>() / n.max(1) as f64;
    let min = samples.first().copied().unwrap_or(f64::NAN);
    println!(
        "{}",
        serde_json::json!({
            "graph": name,
            "load_ms": load_ms,
            "primed": args.prime,
            "n": n,
            "median_ms": median,
            "p95_ms": p95,
            "mean_ms": mean,
            "min_ms": min,
        })
    );
    Ok(())
}
