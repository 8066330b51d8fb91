//! Host I/O of compiled graphs on the emulated HTP: tensors keep the model's shapes and dtypes at
//! the boundary, rank 0 included (QNN graph tensors have rank >= 1), and inputs that do not fit
//! are clear errors.

use lowering::testing::{ModelBuilder, A};
use lowering::DType;
use qnnx_engine::{compile, CompileOptions, Error, HostTensor, Target};

mod common;
use common::htp;

fn compiled(b: &ModelBuilder) -> qnnx_engine::Compiled {
    let opts = CompileOptions {
        name: "io".into(),
        ..Default::default()
    };
    compile(
        &Target::host_default(qnn::BackendKind::Htp),
        &b.bytes(),
        &opts,
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn rank0_inputs_and_outputs_keep_their_shape() {
    if htp().is_none() {
        return;
    }
    let mean = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 3])
        .node("Mul", &["x", "x"], &["sq"], &[])
        .node("ReduceMean", &["sq"], &["y"], &[("keepdims", A::I(0))])
        .output("y");
    let c = compiled(&mean);
    let x: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let y = c.emitted.run(&[HostTensor::from_f32(&[2, 3], &x)]).unwrap();
    assert_eq!(y[0].shape, Vec::<usize>::new());
    let want = x.iter().map(|v| v * v).sum::<f32>() / 6.0;
    assert!((y[0].to_f32().unwrap()[0] - want).abs() < 2e-2 * want);

    let scalar = ModelBuilder::new(17)
        .input("s", DType::F32, &[])
        .node("Add", &["s", "s"], &["t"], &[])
        .output("t");
    let c = compiled(&scalar);
    let t = c.emitted.run(&[HostTensor::from_f32(&[], &[1.5])]).unwrap();
    assert_eq!(t[0].shape, Vec::<usize>::new());
    assert!((t[0].to_f32().unwrap()[0] - 3.0).abs() < 1e-2);
    // The model's shape is the contract: [1] is not a scalar.
    let Err(Error::Input(e)) = c.emitted.run(&[HostTensor::from_f32(&[1], &[1.5])]) else {
        panic!("a [1] input accepted for a scalar")
    };
    assert!(e.contains("has shape [1]") && e.contains("takes []"), "{e}");
}

/// An input fixed at compile time leaves the graph; the model's inputs are taken with or
/// without it, its value is checked on the host, and a cache hit (no lowering) checks the same.
#[test]
fn fixed_inputs_are_checked_not_passed() {
    if htp().is_none() {
        return;
    }
    let b = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 6])
        .input("shape", DType::I64, &[2])
        .input("scale", DType::F32, &[])
        .node("Reshape", &["x", "shape"], &["r"], &[])
        .node("Mul", &["r", "scale"], &["y"], &[])
        .output("y");
    let opts = CompileOptions {
        name: "fixed".into(),
        fix_inputs: [("shape", "3,4"), ("scale", "2")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let dir = std::env::temp_dir().join(format!("qnnx-io-fixed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = qnnx_engine::cache::Cache::open(&dir, None).unwrap();
    let target = Target::host_default(qnn::BackendKind::Htp);
    let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.25).collect();
    let want: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
    let shape = |v: &[i64]| HostTensor {
        dtype: DType::I64,
        shape: vec![v.len()],
        data: v.iter().flat_map(|d| d.to_le_bytes()).collect(),
    };
    for from_cache in [false, true] {
        let c = compile(&target, &b.bytes(), &opts, Some(&cache)).unwrap();
        assert_eq!(c.from_cache, from_cache);
        let e = &c.emitted;
        assert_eq!(e.inputs.len(), 1);
        assert_eq!(e.assumed.len(), 2);
        let xs = HostTensor::from_f32(&[2, 6], &x);
        // Without the fixed inputs, and with them at their values.
        for ins in [
            vec![xs.clone()],
            vec![
                xs.clone(),
                shape(&[3, 4]),
                HostTensor::from_f32(&[], &[2.0]),
            ],
        ] {
            let y = e.run(&ins).unwrap();
            assert_eq!(y[0].shape, vec![3, 4]);
            let got = y[0].to_f32().unwrap();
            assert!(
                got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-2),
                "{got:?}"
            );
        }
        let Err(Error::Input(m)) = e.run(&[
            xs.clone(),
            shape(&[3, 4]),
            HostTensor::from_f32(&[], &[3.0]),
        ]) else {
            panic!("a changed fixed input was accepted")
        };
        assert!(
            m.contains("input \"scale\" is 3 but the compiled graph assumes 2"),
            "{m}"
        );
        // A fixed value is the value, whatever it is used for: not another spelling of it.
        let Err(Error::Input(m)) = e.run(&[
            xs.clone(),
            shape(&[3, -1]),
            HostTensor::from_f32(&[], &[2.0]),
        ]) else {
            panic!("a changed shape was accepted")
        };
        assert!(
            m.contains("input \"shape\" is [3, -1] but the compiled graph assumes [3, 4]"),
            "{m}"
        );
        let Err(Error::Input(m)) = e.run(&[xs.clone(), shape(&[3, 4])]) else {
            panic!("two of three inputs accepted")
        };
        assert!(m.contains("the model takes 3 inputs"), "{m}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
