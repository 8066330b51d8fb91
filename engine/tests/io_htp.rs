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
