//! The op tables against the op registry, the HTP op list, and the generated doc.

use std::collections::BTreeSet;

use lowering::ops::{def, defs, registry, rule};
use lowering::table::{OpTable, Status, GPU_TOML, HTP_TOML};
use lowering::Backend;

fn tables() -> [(Backend, OpTable); 2] {
    [
        (Backend::Htp, OpTable::parse(HTP_TOML).expect("htp.toml")),
        (Backend::Gpu, OpTable::parse(GPU_TOML).expect("gpu.toml")),
    ]
}

/// An op a table lets run has a registry entry, so it is inferred (`infer` is not optional), and
/// the entry lowers it: by a rule, by an expansion, or (family `folded`) by folding it to a
/// constant. A new op cannot pass these tests and fail at run time with "no shape inference"
/// or "no lowering rule".
#[test]
fn every_runnable_entry_has_a_registry_entry() {
    for (b, t) in tables() {
        for (op, e) in &t.ops {
            if !matches!(e.status, Status::Supported | Status::Decomposed) {
                continue;
            }
            let d = def(op).unwrap_or_else(|| {
                panic!(
                    "{b:?}: ops.{op} is {:?} but has no registry entry (no shape inference)",
                    e.status
                )
            });
            let folded = lowering::ops::family(op) == Some("folded") && d.fold.is_some();
            assert!(
                rule(d, b).is_some() || d.expand.is_some() || folded,
                "{b:?}: ops.{op} is {:?} but its entry has no lowering rule or expansion",
                e.status
            );
        }
    }
}

/// Every entry with a rule or an expansion is named by each table, and so is every backend
/// variant.
#[test]
fn every_rule_has_an_entry() {
    for (b, t) in tables() {
        // The `qdq` pass's internal conversions are not model ops: no table lists them.
        let model_ops = defs().filter(|d| !lowering::ops::quant::is_internal(d.op_type));
        for d in model_ops.filter(|d| d.lower.is_some() || d.expand.is_some()) {
            assert!(
                t.ops.contains_key(d.op_type),
                "{b:?}: rule for {} has no table entry",
                d.op_type
            );
        }
        for (op, _) in registry::variants(b) {
            assert!(
                def(op).is_some(),
                "{b:?}: variant rule for {op} has no registry entry"
            );
            assert!(
                t.ops.contains_key(*op),
                "{b:?}: variant rule for {op} has no table entry"
            );
        }
    }
}

#[test]
fn unknown_fields_are_rejected() {
    let bad = "[meta]\nbackend = \"htp\"\n\n[ops.Relu]\nopset = [1, 25]\nqnn = [\"Relu\"]\n\
               dtypes = [\"f32\"]\nstatus = \"supported\"\ncolour = \"red\"\n";
    // What is true of the op on every backend is its registry entry's, not a table's.
    for moved in ["family = \"activation\"\n", "layout = \"agnostic\"\n"] {
        let e = OpTable::parse(&bad.replace("colour = \"red\"\n", moved)).unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
    }
    let e = OpTable::parse(bad).unwrap_err();
    assert!(e.contains("colour"), "{e}");
    let bad_meta = "[meta]\nbackend = \"htp\"\nchecked = \"x\"\n[ops]\n";
    assert!(OpTable::parse(bad_meta).is_err());
    let bad_status = bad
        .replace("\ncolour = \"red\"", "")
        .replace("\"supported\"", "\"maybe\"");
    assert!(OpTable::parse(&bad_status).is_err());
    let bad_dtype = bad
        .replace("\ncolour = \"red\"", "")
        .replace("[\"f32\"]", "[\"f31\"]");
    assert!(OpTable::parse(&bad_dtype)
        .unwrap_err()
        .contains("unknown dtype"));
}

/// Ops whose table ranges start at opset 1, before ONNX defines them, kept as the HTP table had
/// them: check_node compares the graph's opset, and lowering's own expansions and fusions write
/// several of these (Gelu, HardSwish, RMSNormalization, Where, ConstantOfShape, ...) into graphs
/// of older opsets. Narrowing a range would refuse graphs that lower today.
const BEFORE_ONNX: &[&str] = &[
    "Asin",
    "Atan",
    "ConstantOfShape",
    "Cos",
    "DequantizeLinear",
    "Erf",
    "Gelu",
    "GreaterOrEqual",
    "HardSwish",
    "LessOrEqual",
    "QuantizeLinear",
    "RMSNormalization",
    "Range",
    "Round",
    "Sign",
    "Sin",
    "Where",
];

/// A table's opset range does not start before the op's first ONNX opset (the registry's
/// `since`): the GPU table had `Mod` from opset 1, ONNX added it at 10.
#[test]
fn opset_ranges_start_at_the_ops_first_opset() {
    for (b, t) in tables() {
        for (op, e) in &t.ops {
            let Some(d) = def(op) else { continue };
            if BEFORE_ONNX.contains(&op.as_str()) {
                assert_eq!(e.opset[0], 1, "{b:?}: ops.{op}: only opset 1 is excepted");
                continue;
            }
            assert!(
                e.opset[0] >= d.since,
                "{b:?}: ops.{op} starts at opset {}, ONNX defines it from {}",
                e.opset[0],
                d.since
            );
        }
    }
}

#[test]
fn htp_meta_records_sdk() {
    let t = OpTable::parse(HTP_TOML).unwrap();
    assert_eq!(t.meta.checked_against_sdk.as_deref(), Some("2.51.0"));
}

#[test]
fn htp_qnn_ops_are_in_the_backend_list() {
    let list: BTreeSet<&str> = include_str!("../op-tables/htp-supported-ops-2.51.txt")
        .lines()
        .map(str::trim)
        .collect();
    let t = OpTable::parse(HTP_TOML).unwrap();
    for (op, e) in &t.ops {
        if matches!(e.status, Status::Supported | Status::Decomposed) {
            for q in &e.qnn {
                assert!(
                    list.contains(q.as_str()),
                    "ops.{op}: QNN op {q} is not supported by HTP 2.51"
                );
            }
        }
    }
}

#[test]
fn generated_doc_is_current() {
    let [(_, htp), (_, gpu)] = tables();
    let want = OpTable::markdown(&htp, &gpu);
    let have = include_str!("../../docs/operators.md");
    assert!(
        have == want,
        "docs/operators.md is stale; run `cargo run -p lowering --example gen-op-docs`"
    );
    assert!(have
        .lines()
        .next()
        .unwrap()
        .contains("cargo run -p lowering --example gen-op-docs"));
}
