//! Performance modes of sessions on the emulated HTP: each mode is voted when the session opens
//! (the 2.51 emulator accepts every one: qnn-rs/tests/power.rs) and the model runs as before.
//! Clocks and voltages, what a vote changes on a device, cannot be observed on the emulator.

use lowering::testing::{rand_f32, ModelBuilder};
use lowering::DType;
use qnn::HtpPerformanceMode;
use qnnx_engine::{HostTensor, Session, SessionOptions};

mod common;
use common::htp;

#[test]
fn every_mode_is_voted_while_a_session_runs() {
    if htp().is_none() {
        return;
    }
    let d = std::env::temp_dir().join(format!("qnnx-power-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let onnx = d.join("relu.onnx");
    let model = ModelBuilder::new(17)
        .input("x", DType::F32, &[1, 8])
        .node("Relu", &["x"], &["y"], &[])
        .output("y");
    std::fs::write(&onnx, model.bytes()).unwrap();
    let x = HostTensor::from_f32(&[1, 8], &rand_f32(1, 8));
    let plain = Session::open(&onnx, &SessionOptions::default()).unwrap();
    assert!(plain.performance().is_none());
    let want = plain.run(std::slice::from_ref(&x)).unwrap();
    for mode in HtpPerformanceMode::ALL {
        let opts = SessionOptions {
            performance_mode: Some(mode),
            ..SessionOptions::default()
        };
        let s = Session::open(&onnx, &opts).unwrap_or_else(|e| panic!("{mode}: {e}"));
        let vote = s.performance().expect("a vote");
        assert_eq!(vote.mode(), mode);
        assert!(vote.applied(), "{mode} was refused by the emulator");
        // `default` votes nothing, so it creates no power config client.
        assert_eq!(
            vote.client_id().is_some(),
            mode != HtpPerformanceMode::Default
        );
        assert_eq!(s.run(std::slice::from_ref(&x)).unwrap(), want, "{mode}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
