//! Regenerates `docs/operators.md` from `lowering/op-tables/*.toml`.
//! Usage: `cargo run -p lowering --example gen-op-docs` (add `-- --check` to only compare).

use std::path::Path;

use lowering::table::{OpTable, GPU_TOML, HTP_TOML};

fn main() {
    let htp = OpTable::parse(HTP_TOML).expect("htp.toml parses");
    let gpu = OpTable::parse(GPU_TOML).expect("gpu.toml parses");
    let text = OpTable::markdown(&htp, &gpu);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operators.md");
    if std::env::args().any(|a| a == "--check") {
        let cur = std::fs::read_to_string(&path).unwrap_or_default();
        if cur != text {
            eprintln!(
                "{} is stale; run `cargo run -p lowering --example gen-op-docs`",
                path.display()
            );
            std::process::exit(1);
        }
        return;
    }
    std::fs::write(&path, text).expect("write docs/operators.md");
    println!("wrote {}", path.display());
}
