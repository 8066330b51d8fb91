//! Observed graphs (every model value an output, for calibration and the per-layer report) that
//! do not fit the HTP's memory planner in one graph: a model whose values together hold more
//! than the planner places (about 2 GB of f32 outputs on the x86_64 2.51 library) failed to
//! finalize with QNN_COMMON_ERROR_MEM_ALLOC (1002) although it compiles on its own; its values
//! are now observed in several graphs, and a report built from many small graphs is the one
//! built from a single graph.

use std::collections::BTreeMap;

use lowering::tensor::Tensor;
use lowering::testing::{rand_f32, ModelBuilder};
use lowering::DType;
use qnnx_engine::calibrate::{calibrate, Observer};
use qnnx_engine::compare::{compare, Build, CompareOptions};
use qnnx_engine::{HostTensor, Target, TargetSpec};
use qnnx_types::BackendKind;

mod common;
use common::htp;

/// The tests share the process's `QNNX_OBSERVED_BYTES`: one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn exact() -> Target {
    Target {
        backend: BackendKind::Htp,
        soc_model: None,
        htp_arch: None,
        library: None,
    }
}

/// `layers` alternating Neg and Relu on a `[1, c, h, w]` f32 input.
fn chain(layers: usize, shape: &[i64]) -> ModelBuilder {
    let mut b = ModelBuilder::new(17).input("x", DType::F32, shape);
    let mut x = "x".to_string();
    for i in 0..layers {
        let y = format!("v{i}");
        let op = if i % 2 == 0 { "Neg" } else { "Relu" };
        b = b.node(op, &[&x], &[&y], &[]);
        x = y;
    }
    b.output(&x)
}

/// 20 values of 134 MB (2.7 GB, the input besides): the calibration graph failed with 1002.
#[test]
fn a_model_whose_values_exceed_the_memory_planner_calibrates() {
    let _s = serial();
    if htp().is_none() {
        return;
    }
    std::env::remove_var("QNNX_OBSERVED_BYTES");
    let shape = [1usize, 32, 1024, 1024];
    let n: usize = shape.iter().product();
    let x: Vec<f32> = rand_f32(7, n).iter().map(|v| v * 2.0 - 1.0).collect();
    let (lo, hi) = x
        .iter()
        .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    let onnx = chain(20, &[1, 32, 1024, 1024]).bytes();
    let start = std::time::Instant::now();
    let cal = calibrate(
        &exact(),
        &onnx,
        None,
        &BTreeMap::new(),
        &[vec![HostTensor::from_f32(&shape, &x)]],
        Observer::MinMax,
        &mut |_, _| {},
    )
    .unwrap();
    eprintln!(
        "calibrated in {:.1} s: {:?}",
        start.elapsed().as_secs_f64(),
        cal.cost
    );
    assert!(cal.cost.graphs >= 2, "{:?}", cal.cost);
    // Neg, Relu, Neg, Relu...: v0 = -x, v1 = relu(-x), v2 = -relu(-x), v3 = 0 from then on.
    // The emulator's Neg is within an ulp of the host's, not bit-exact (measured: -5.0000005
    // for -4.9999995).
    let near = |v: &str, want: (f32, f32)| {
        let r = cal.ranges.get(v).unwrap_or_else(|| panic!("{v}"));
        let ok = |a: f32, b: f32| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
        assert!(
            ok(r.lo, want.0) && ok(r.hi, want.1),
            "{v}: {r:?}, want {want:?}"
        );
    };
    near("v0", (-hi, -lo));
    near("v1", (0.0, -lo));
    near("v2", (lo, 0.0));
    for i in 3..20 {
        near(&format!("v{i}"), (0.0, 0.0));
    }
}

/// A per-layer report whose values are observed one graph each equals the one observed in a
/// single graph.
#[test]
fn a_report_observed_in_many_graphs_is_the_report_of_one() {
    let _s = serial();
    if htp().is_none() {
        return;
    }
    let w: Vec<f32> = rand_f32(3, 8 * 4 * 9).iter().map(|v| v - 0.5).collect();
    let onnx = ModelBuilder::new(17)
        .input("x", DType::F32, &[1, 4, 10, 10])
        .init("w", Tensor::from_f32(vec![8, 4, 3, 3], &w))
        .node(
            "Conv",
            &["x", "w"],
            &["c"],
            &[("pads", lowering::testing::A::Is(vec![1, 1, 1, 1]))],
        )
        .node("Relu", &["c"], &["r"], &[])
        .node("Mul", &["r", "r"], &["m"], &[])
        .node("Sigmoid", &["m"], &["y"], &[])
        .output("y")
        .bytes();
    let (r, t) = (
        exact(),
        Target::resolve(
            &TargetSpec {
                soc: Some("60".into()),
                ..Default::default()
            },
            None,
        )
        .unwrap(),
    );
    let reference = Build {
        target: &r,
        onnx: &onnx,
        base_dir: None,
        fp16: false,
    };
    let test = Build {
        target: &t,
        fp16: true,
        ..reference.clone()
    };
    let x = HostTensor::from_f32(&[1, 4, 10, 10], &rand_f32(5, 400));
    let opts = CompareOptions::default();
    std::env::remove_var("QNNX_OBSERVED_BYTES");
    let one = compare(&reference, &test, std::slice::from_ref(&x), &opts).unwrap();
    std::env::set_var("QNNX_OBSERVED_BYTES", "1");
    let many = compare(&reference, &test, std::slice::from_ref(&x), &opts);
    std::env::remove_var("QNNX_OBSERVED_BYTES");
    let many = many.unwrap();
    let names = |r: &qnnx_engine::compare::Report| {
        let mut v: Vec<String> = r.layers.iter().map(|l| l.value.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(names(&one), names(&many));
    assert!(one.layers.len() >= 4, "{one:#?}");
    assert_eq!(one.layers, many.layers);
    assert_eq!(one.first_jump, many.first_jump);
}
