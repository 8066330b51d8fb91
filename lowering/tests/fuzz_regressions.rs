//! Inputs the fuzzers (scripts/fuzz) once crashed on, replayed through the same code paths:
//! loading, checking and lowering must return, not panic.

use lowering::{Backend, LowerOptions, Model};

#[test]
fn fuzz_regressions_do_not_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        n += 1;
        let _ = Model::from_bytes(&data, None);
        let Some((&flags, bytes)) = data.split_first() else {
            continue;
        };
        if let Ok(model) = Model::from_bytes(bytes, None) {
            let backend = if flags & 1 == 0 {
                Backend::Htp
            } else {
                Backend::Gpu
            };
            let _ = lowering::check(&model, backend);
            let opts = LowerOptions {
                backend,
                fp16: flags & 2 != 0,
                ..Default::default()
            };
            if let Ok(plan) = lowering::lower(model, &opts) {
                plan.validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
    }
    println!("replayed {n} fuzz regression inputs");
}
