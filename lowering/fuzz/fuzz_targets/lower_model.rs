//! Models that load are checked and lowered for both backends, with and without fp16: an error
//! or a plan, never a panic. The first byte picks the options; the rest is the model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lowering::{Backend, LowerOptions, Model};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, bytes)) = data.split_first() else { return };
    let Ok(model) = Model::from_bytes(bytes, None) else { return };
    let backend = if flags & 1 == 0 { Backend::Htp } else { Backend::Gpu };
    let _ = lowering::check(&model, backend);
    let opts = LowerOptions { backend, fp16: flags & 2 != 0, ..Default::default() };
    if let Ok(plan) = lowering::lower(model, &opts) {
        plan.validate().expect("lowering returned a plan that breaks its own invariants");
    }
});
