//! FullyConnected + Relu built by hand, run on the HTP (the emulator on x86_64, SoC 60 / v73),
//! checked against a Rust reference, saved as a context binary, reloaded from a memory map and
//! run again.
//!
//! `cargo run -p qnn-rs --example fc_relu [-- OUT.bin]`

use std::time::Instant;

use qnn::{
    Backend, BackendOptions, Context, DType, Device, HtpConfig, HtpGraphConfig, Input, Node,
    Output, Precision,
};

const K: usize = 32;
const N: usize = 64;

/// A small deterministic generator so the example needs no crates.
fn values(seed: u32, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn reference(x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
    (0..N)
        .map(|n| (b[n] + (0..K).map(|k| x[k] * w[n * K + k]).sum::<f32>()).max(0.0))
        .collect()
}

fn max_err(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_path = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("qnnx-fc_relu.bin"));
    let x = values(1, K, 1.0);
    let w = values(2, N * K, 0.5);
    let b = values(3, N, 0.1);
    let want = reference(&x, &w, &b);

    // SoC 60 on x86_64 (the emulator computes in fp16 like the NPU); graphs in fp16.
    let config = HtpConfig {
        graph: HtpGraphConfig {
            precision: Some(Precision::Fp16),
            ..Default::default()
        },
        ..HtpConfig::host_default()
    };
    let backend = Backend::open(config, &BackendOptions::default())?;
    println!(
        "QNN {} ({}) from {}, SoC {:?}",
        backend.build_id()?,
        backend.provider_name(),
        backend.library_path().display(),
        config.device.soc_model
    );
    let device = Device::new(&backend)?;
    let ctx = Context::new(&backend, Some(&device))?;
    let mut g = ctx.build_graph("fc_relu")?;
    let xi = g.input("x", DType::F32, &[1, K as u32])?;
    // FullyConnected weights are [N, K] (out x in), like ONNX Gemm with transB=1.
    let wi = g.constant("w", &[N as u32, K as u32], &w)?;
    let bi = g.constant("b", &[N as u32], &b)?;
    let h = g.native("h", DType::F32, &[1, N as u32])?;
    let y = g.output("y", DType::F32, &[1, N as u32])?;
    g.add_node(
        &Node::new("fc", "FullyConnected")
            .inputs(&[xi, wi, bi])
            .outputs(&[h]),
    )?;
    g.add_node(&Node::new("relu", "Relu").inputs(&[h]).outputs(&[y]))?;
    let t = Instant::now();
    let graph = g.finalize()?;
    println!("finalize: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);

    let mut got = vec![0f32; N];
    graph.execute(&[Input::new(&x)], &mut [Output::new(&mut got)])?;
    println!(
        "built graph:    max |error| vs Rust reference = {:.3e}",
        max_err(&got, &want)
    );

    ctx.save(&out_path)?;
    println!(
        "saved context binary: {} ({} bytes)",
        out_path.display(),
        std::fs::metadata(&out_path)?.len()
    );
    drop(graph);
    drop(ctx);

    let t = Instant::now();
    let ctx = Context::from_file(&backend, Some(&device), &out_path)?;
    let graph = ctx.graph("fc_relu")?;
    println!("reload (mmap): {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let mut again = vec![0f32; N];
    graph.execute(&[Input::new(&x)], &mut [Output::new(&mut again)])?;
    println!(
        "reloaded graph: max |error| vs Rust reference = {:.3e}",
        max_err(&again, &want)
    );
    let runs = 100;
    let t = Instant::now();
    for _ in 0..runs {
        graph.execute(&[Input::new(&x)], &mut [Output::new(&mut again)])?;
    }
    println!(
        "execute: {:.3} ms per call (mean of {runs})",
        t.elapsed().as_secs_f64() * 1e3 / runs as f64
    );
    if max_err(&got, &want) > 1e-2 || max_err(&again, &want) > 1e-2 {
        return Err("error above the fp16 tolerance of 1e-2".into());
    }
    Ok(())
}
