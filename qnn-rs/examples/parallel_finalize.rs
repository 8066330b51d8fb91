//! Measures finalizing several graphs serially against in parallel threads, each thread with
//! its own backend (a backend serialises graph construction: see `BackendInner::build_lock`),
//! and checks that the parallel builds give the same context binaries and outputs bit for bit.
//!
//! `cargo run --release -p qnn-rs --example parallel_finalize [-- GRAPHS LAYERS WIDTH]`
//! (default 4 graphs of 12 FullyConnected+Relu layers of width 768).

use std::time::Instant;

use qnn::{Backend, BackendOptions, Context, DType, Device, HtpConfig, Input, Node, Output};

fn values(seed: u32, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

struct Built {
    binary: Vec<u8>,
    output: Vec<f32>,
    finalize_ms: f64,
}

/// Builds, finalizes, serialises and runs graph `g` in a new context of `backend`.
fn build(
    backend: &Backend,
    device: &Device,
    g: u32,
    layers: u32,
    width: u32,
) -> qnn::Result<Built> {
    let ctx = Context::new(backend, Some(device))?;
    let mut b = ctx.build_graph(&format!("g{g}"))?;
    let mut x = b.input("x", DType::F32, &[1, width])?;
    let scale = 1.0 / (width as f32).sqrt();
    for l in 0..layers {
        let w = values(g * 1000 + l, (width * width) as usize, scale);
        let wt = b.constant(&format!("w{l}"), &[width, width], &w)?;
        let h = b.native(&format!("h{l}"), DType::F32, &[1, width])?;
        let y = if l + 1 == layers {
            b.output("y", DType::F32, &[1, width])?
        } else {
            b.native(&format!("r{l}"), DType::F32, &[1, width])?
        };
        b.add_node(
            &Node::new(format!("fc{l}"), "FullyConnected")
                .inputs(&[x, wt])
                .outputs(&[h]),
        )?;
        b.add_node(
            &Node::new(format!("relu{l}"), "Relu")
                .inputs(&[h])
                .outputs(&[y]),
        )?;
        x = y;
    }
    let t = Instant::now();
    let graph = b.finalize()?;
    let finalize_ms = t.elapsed().as_secs_f64() * 1e3;
    let binary = ctx.to_binary()?;
    let input = values(7, width as usize, 1.0);
    let mut output = vec![0f32; width as usize];
    graph.execute(&[Input::new(&input)], &mut [Output::new(&mut output)])?;
    Ok(Built {
        binary,
        output,
        finalize_ms,
    })
}

fn open() -> qnn::Result<(Backend, Device)> {
    let b = Backend::open(HtpConfig::host_default(), &BackendOptions::default())?;
    let d = Device::new(&b)?;
    Ok((b, d))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, d: u32| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (graphs, layers, width) = (arg(1, 4), arg(2, 12), arg(3, 768));
    println!("{graphs} graphs of {layers} FullyConnected+Relu layers of width {width}");

    // The first graphCreate in a process initialises the preparer (docs/qnn-notes.md gotcha
    // 16); a throw-away graph keeps that out of both measurements.
    let (b, d) = open()?;
    build(&b, &d, 999, 1, 64)?;

    let t = Instant::now();
    let serial: Vec<Built> = (0..graphs)
        .map(|g| build(&b, &d, g, layers, width))
        .collect::<qnn::Result<_>>()?;
    let serial_ms = t.elapsed().as_secs_f64() * 1e3;

    // Backends opened beforehand, so the threads time building only.
    let runtimes: Vec<(Backend, Device)> =
        (0..graphs).map(|_| open()).collect::<qnn::Result<_>>()?;
    let t = Instant::now();
    let parallel: Vec<Built> = std::thread::scope(|s| {
        let handles: Vec<_> = runtimes
            .iter()
            .zip(0..graphs)
            .map(|((b, d), g)| s.spawn(move || build(b, d, g, layers, width)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("builder thread panicked"))
            .collect::<qnn::Result<Vec<_>>>()
    })?;
    let parallel_ms = t.elapsed().as_secs_f64() * 1e3;

    let ms = |v: &[Built]| {
        v.iter()
            .map(|b| format!("{:.0}", b.finalize_ms))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same_binaries = serial
        .iter()
        .zip(&parallel)
        .all(|(a, b)| a.binary == b.binary);
    let same_outputs = serial.iter().zip(&parallel).all(|(a, b)| {
        a.output
            .iter()
            .zip(&b.output)
            .all(|(x, y)| x.to_bits() == y.to_bits())
    });
    println!("serial:   {serial_ms:.0} ms (finalize {} ms)", ms(&serial));
    println!(
        "parallel: {parallel_ms:.0} ms (finalize {} ms)",
        ms(&parallel)
    );
    println!("speed-up: {:.2}x", serial_ms / parallel_ms);
    println!("binaries bit-identical: {same_binaries}; outputs bit-identical: {same_outputs}");
    // A second serial build says whether binaries are deterministic at all.
    let again = build(&b, &d, 0, layers, width)?;
    let (a, b) = (&again.binary, &serial[0].binary);
    let differing = a.iter().zip(b.iter()).filter(|(x, y)| x != y).count();
    println!(
        "a serial rebuild of graph 0 is bit-identical: {} ({} of {} bytes differ, sizes {} and {})",
        a == b,
        differing,
        a.len().min(b.len()),
        a.len(),
        b.len()
    );
    Ok(())
}
