//! Inputs the engine's fuzz targets (scripts/fuzz, `engine/fuzz`) once failed on, replayed
//! through the same code (`engine/fuzz/harness.rs`): each file in `engine/fuzz/regressions/` is
//! named `<target>-<what it exposed>`. Also runs each target on its seeds, so the harness
//! itself is built and checked on every test run.

#[path = "../fuzz/harness.rs"]
mod harness;

use std::path::Path;

/// A fuzz target's body.
type Target = fn(&[u8]);

fn replay(dir: &Path) -> usize {
    let targets: [(&str, Target); 5] = [
        ("cache_meta", harness::cache_meta),
        ("cache_get", harness::cache_get),
        ("cache_alias", harness::cache_alias),
        ("io_binding", harness::io_binding),
        ("saved_model", harness::saved_model),
    ];
    let mut n = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") || path.is_dir() {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (_, run) = targets
            .iter()
            .find(|(t, _)| name.starts_with(&format!("{t}-")))
            .unwrap_or_else(|| panic!("{name}: not named after a target"));
        run(&std::fs::read(&path).unwrap());
        n += 1;
    }
    n
}

#[test]
fn engine_fuzz_regressions_and_seeds_pass() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let n = replay(&fuzz.join("regressions"));
    let seeds = replay(&fuzz.join("seeds"));
    harness::remove_cache_dirs();
    assert!(seeds > 0, "no seeds in {}", fuzz.join("seeds").display());
    println!("replayed {n} fuzz regression inputs and {seeds} seeds");
}
