//! Shared setup for the live tests: the real HTP library (the emulator on x86_64, SoC 60).
//! Without the library a test prints why and returns; with `QNNX_REQUIRE_HTP=1` (set by CI) a
//! missing library fails the test instead, so CI can never pass by skipping.

#![allow(dead_code)]

use qnn::{Backend, BackendOptions, Context, DType, Device, HtpConfig, Input, Node, Output};

/// The HTP backend opened with the host's default target (SoC 60 on x86_64) and its device.
pub fn htp() -> Option<(Backend, Device)> {
    htp_with(HtpConfig::host_default())
}

/// The HTP backend opened with `config`, and its device.
pub fn htp_with(config: HtpConfig) -> Option<(Backend, Device)> {
    match Backend::open(config, &BackendOptions::default()) {
        Ok(b) => {
            let d = Device::new(&b).expect("deviceCreate");
            Some((b, d))
        }
        Err(e) if std::env::var_os("QNNX_REQUIRE_HTP").is_some() => {
            panic!("QNNX_REQUIRE_HTP is set but the HTP library is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("skipped: HTP library unavailable ({e}); run scripts/setup-runtime");
            None
        }
    }
}

pub fn context() -> Option<(Backend, Device, Context)> {
    context_with(HtpConfig::host_default())
}

/// A context of a backend opened with `config`.
pub fn context_with(config: HtpConfig) -> Option<(Backend, Device, Context)> {
    let (b, d) = htp_with(config)?;
    let c = Context::new(&b, Some(&d)).expect("contextCreate");
    Some((b, d, c))
}

/// Deterministic values in [-scale, scale].
pub fn values(seed: u32, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

pub fn max_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// fp16 computation on SoC 60 gives errors around 1e-3 for unit-scale data (docs/qnn-notes.md §7); an
/// error of exactly 0 would mean the emulator ran in fp32, i.e. the SoC setting was lost.
pub fn assert_fp16_close(got: &[f32], want: &[f32], tol: f32) {
    let e = max_err(got, want);
    assert!(e <= tol, "max error {e} above {tol}");
    assert!(
        e > 0.0,
        "bit-exact result: the emulator computed in fp32, not the NPU's fp16"
    );
}

/// Builds, finalizes and runs `FullyConnected(x [1, k], w [n, k], b [n]) -> Relu` on `ctx` with
/// the deterministic `values` of seeds 1 to 3; the output and its Rust reference in f32.
pub fn run_fc_relu(ctx: &Context, k: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let x = values(1, k, 1.0);
    let w = values(2, n * k, 0.5);
    let bias = values(3, n, 0.1);
    let mut g = ctx.build_graph("mlp").unwrap();
    let xi = g.input("x", DType::F32, &[1, k as u32]).unwrap();
    let wi = g.constant("w", &[n as u32, k as u32], &w).unwrap();
    let bi = g.constant("b", &[n as u32], &bias).unwrap();
    let h = g.native("h", DType::F32, &[1, n as u32]).unwrap();
    let y = g.output("y", DType::F32, &[1, n as u32]).unwrap();
    g.add_node(
        &Node::new("fc", "FullyConnected")
            .inputs(&[xi, wi, bi])
            .outputs(&[h]),
    )
    .unwrap();
    g.add_node(&Node::new("relu", "Relu").inputs(&[h]).outputs(&[y]))
        .unwrap();
    let graph = g.finalize().unwrap();
    let mut got = vec![0f32; n];
    graph
        .execute(&[Input::new(&x)], &mut [Output::new(&mut got)])
        .unwrap();
    let want = (0..n)
        .map(|j| (bias[j] + (0..k).map(|i| x[i] * w[j * k + i]).sum::<f32>()).max(0.0))
        .collect();
    (got, want)
}
