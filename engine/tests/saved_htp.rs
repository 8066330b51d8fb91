//! Saved models and `Session` on the emulated HTP: a compiled ONNX model saved and opened again
//! computes the same outputs bit for bit, with no lowering or finalize; a damaged file is a
//! clear error.

use std::collections::BTreeMap;

use lowering::tensor::Tensor;
use lowering::testing::{rand_f32, ModelBuilder};
use lowering::DType;
use qnnx_engine::{saved, Error, HostTensor, Session, SessionOptions};

mod common;
use common::htp;

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("qnnx-saved-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn onnx_session_saved_and_opened_again() {
    if htp().is_none() {
        return;
    }
    let d = dir("round-trip");
    let model = ModelBuilder::new(17)
        .input("x", DType::F32, &[2, 8])
        .init("w", Tensor::from_f32(vec![8, 3], &rand_f32(3, 24)))
        .node("MatMul", &["x", "w"], &["y"], &[])
        .output("y");
    let onnx = d.join("m.onnx");
    std::fs::write(&onnx, model.bytes()).unwrap();
    let s = Session::open(&onnx, &SessionOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.inputs()[0].onnx_name, "x");
    assert!(s.manifest().is_none() && s.compiled().finalize_ms > 0.0);
    let x = HostTensor::from_f32(&[2, 8], &rand_f32(4, 16));
    let want = s.run(std::slice::from_ref(&x)).unwrap();

    let file = d.join("m.qnnx");
    let m = saved::save(s.compiled(), &file, BTreeMap::new(), BTreeMap::new()).unwrap();
    assert_eq!((m.soc_model, m.htp_arch), (Some(60), Some(73)));
    let again = Session::open(&file, &SessionOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.manifest(), Some(&m));
    assert_eq!(again.compiled().finalize_ms, 0.0);
    assert_eq!(again.run(&[x]).unwrap(), want);

    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 10]).unwrap();
    match Session::open(&file, &SessionOptions::default()) {
        Err(Error::SavedModel(m)) => assert!(m.contains("truncated"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a truncated file loaded"),
    }
    let _ = std::fs::remove_dir_all(&d);
}
