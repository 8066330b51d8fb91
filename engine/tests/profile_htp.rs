//! Execution profiles and compile timings on the emulated HTP: profiling is off unless asked for
//! (no QNN profile handle is made), a detailed profile names every op's ONNX node, and a compile
//! records its stages. One test: the handle counter is process-wide.

use lowering::tensor::Tensor;
use lowering::testing::{rand_f32, ModelBuilder};
use lowering::DType;
use qnnx_engine::profile::ExecutionProfile;
use qnnx_engine::{compile, CompileOptions, HostTensor, Target, Timed};

mod common;
use common::htp;

fn model() -> ModelBuilder {
    ModelBuilder::new(17)
        .input("x", DType::F32, &[4, 16])
        .init("w", Tensor::from_f32(vec![16, 32], &rand_f32(1, 16 * 32)))
        .node("MatMul", &["x", "w"], &["h"], &[])
        .node("Relu", &["h"], &["r"], &[])
        .node("Sigmoid", &["r"], &["y"], &[])
        .output("y")
}

#[test]
fn profiles_are_off_by_default_and_name_onnx_nodes() {
    if htp().is_none() {
        return;
    }
    let opts = CompileOptions {
        name: "p".into(),
        ..Default::default()
    };
    let bytes = model().bytes();
    let target = Target::host_default(qnn::BackendKind::Htp);
    let c = compile(&target, &bytes, &opts, None).unwrap_or_else(|e| panic!("{e}"));
    let x = HostTensor::from_f32(&[4, 16], &rand_f32(2, 64));
    let plain = c.emitted.run(std::slice::from_ref(&x)).unwrap();
    assert_eq!(qnn::profile::handles_created(), 0, "profiling must be off");

    // The stages of a compile without the cache, in the order they ran.
    let stages: Vec<Timed> = c.timings.stages.iter().map(|s| s.0).collect();
    use Timed::*;
    assert_eq!(
        stages,
        [BackendOpen, Load, Passes, Lowering, GraphBuild, Finalize]
    );
    assert!(c.timings.get(Finalize) > 0.0);
    assert!(
        (c.lower_ms - (c.timings.get(Load) + c.timings.get(Passes) + c.timings.get(Lowering)))
            .abs()
            < 1e-9
    );

    let p = qnn::Profile::new(&c.runtime.backend, qnn::ProfileLevel::Detailed).unwrap();
    let profiled = c
        .emitted
        .run_profiled(std::slice::from_ref(&x), &p)
        .unwrap();
    assert_eq!(qnn::profile::handles_created(), 1);
    assert_eq!(
        profiled[0].data, plain[0].data,
        "profiling changed the result"
    );
    let prof =
        ExecutionProfile::from_events(qnn::ProfileLevel::Detailed, p.events().unwrap(), &c.origins);
    let nodes: Vec<&str> = prof
        .ops
        .iter()
        .filter_map(|o| o.origin.as_ref().map(|x| x.onnx_node.as_str()))
        .collect();
    for n in ["MatMul_0", "Relu_1", "Sigmoid_2"] {
        assert!(nodes.contains(&n), "{n} missing from {nodes:?}");
    }
    let share: f64 = prof.ops.iter().map(|o| o.share).sum();
    assert!((share - 1.0).abs() < 1e-9, "{share}");
    assert!(prof.execute_us.is_some_and(|us| us > 0));

    // A graph without its plan (a binary) finds the same origins by lowering.
    let again = qnnx_engine::compile::node_origins(qnn::BackendKind::Htp, &bytes, &opts).unwrap();
    assert_eq!(again, c.origins);

    // A cache entry keeps them, and a cache hit's stages are the lookup and the load.
    let dir = std::env::temp_dir().join(format!("qnnx-profile-htp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = qnnx_engine::cache::Cache::open(&dir, None).unwrap();
    let stored = compile(&target, &bytes, &opts, Some(&cache)).unwrap();
    assert!(!stored.from_cache && stored.timings.get(CacheStore) > 0.0);
    assert!(stored.timings.get(Serialization) > 0.0);
    let hit = compile(&target, &bytes, &opts, Some(&cache)).unwrap();
    assert!(hit.from_cache);
    assert_eq!(hit.origins, c.origins);
    let stages: Vec<Timed> = hit.timings.stages.iter().map(|s| s.0).collect();
    assert_eq!(stages, [BackendOpen, CacheLookup, CacheLoad]);
    assert_eq!(qnn::profile::handles_created(), 1);
    assert!(c.finalize_phases.is_empty() && hit.finalize_phases.is_empty());
    std::fs::remove_dir_all(&dir).ok();

    // Asked for, the finalize is profiled: the preparer's phases, within the finalize stage,
    // and the same graph.
    let profiled_opts = CompileOptions {
        profile_finalize: true,
        ..opts.clone()
    };
    let f = compile(&target, &bytes, &profiled_opts, None).unwrap();
    assert_eq!(qnn::profile::handles_created(), 2);
    let phases: Vec<&str> = f.finalize_phases.iter().map(|p| p.0.as_str()).collect();
    assert!(phases.contains(&"Graph Optimizations"), "{phases:?}");
    let sum: f64 = f.finalize_phases.iter().map(|p| p.1).sum();
    assert!(
        sum > 0.0 && sum <= f.timings.get(Finalize),
        "{sum} {:?}",
        f.timings
    );
    let out = f.emitted.run(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].data, plain[0].data);
}
