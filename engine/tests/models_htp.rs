//! End-to-end model tests on the emulated HTP (SoC 60, fp16): each model is exported from
//! PyTorch by its generator script (`tests/models/<name>/gen.py`, TorchScript exporter, and the
//! dynamo exporter as a second case), lowered with `fp16 = true` (the whole graph, nothing left
//! unsupported), built and run on the real HTP library, and compared with the eager PyTorch
//! output the script saved.
//!
//! Generated files are cached in `target/test-models/<name>-<exporter>-<hash>/`, keyed by the
//! content of the script and of `tests/models/common/export.py`, so only the first run pays for
//! the export.
//!
//! Without the HTP library or without python3 + torch (+ transformers for GPT-2) a test prints
//! why and returns; with `QNNX_REQUIRE_HTP=1` (set by CI) either is a failure instead.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use lowering::{LowerOptions, Model};
use qnnx_engine::emit::emit;

mod common;
use common::{compare, fnv1a, htp, read_all, repo, run_dir, skip};

fn python() -> String {
    std::env::var("QNNX_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Whether `python3` can import `modules`; prints the reason (or fails) when it cannot.
fn python_has(modules: &str) -> bool {
    let out = Command::new(python())
        .args(["-c", &format!("import {modules}")])
        .output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            skip(&format!(
                "{} cannot import {modules} (pip install -r requirements-test.txt): {}",
                python(),
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ));
            false
        }
        Err(e) => {
            skip(&format!("{} is not runnable: {e}", python()));
            false
        }
    }
}

/// Runs `tests/models/<name>/gen.py OUT_DIR [--dynamo]` once per content hash and returns
/// OUT_DIR (model.onnx, input_*.npy and output_*.npy, or one such folder per case).
fn generate(name: &str, dynamo: bool) -> PathBuf {
    let script = repo().join("tests/models").join(name).join("gen.py");
    let common = repo().join("tests/models/common/export.py");
    let s = std::fs::read(&script).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    let c = std::fs::read(&common).unwrap_or_else(|e| panic!("{}: {e}", common.display()));
    let exporter = if dynamo { "dynamo" } else { "torchscript" };
    let key = fnv1a(&[&s, &c, exporter.as_bytes()]);
    let root = repo().join("target/test-models");
    let dir = root.join(format!("{name}-{exporter}-{key:016x}"));
    if dir.is_dir() {
        return dir;
    }
    let tmp = root.join(format!(".{name}-{exporter}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("create the model cache folder");
    let mut cmd = Command::new(python());
    cmd.arg(&script).arg(&tmp).env("HF_HUB_OFFLINE", "1");
    if dynamo {
        cmd.arg("--dynamo");
    }
    let out = cmd.output().expect("run the generator");
    assert!(
        out.status.success(),
        "{} failed:\n{}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stdout));
    // Another test process may have generated the same key meanwhile; either copy is good.
    if std::fs::rename(&tmp, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    assert!(dir.is_dir(), "{} was not generated", dir.display());
    dir
}

struct Case {
    name: &'static str,
    dynamo: bool,
    /// Python modules the generator imports.
    needs: &'static str,
    /// Allowed max |got - want| as a fraction of max |want| (the output scale).
    rel_tol: f32,
}

/// Runs `case` and returns the plan it ran (None when the HTP or Python is missing).
fn run_case(case: Case) -> Option<lowering::Plan> {
    let (backend, device) = htp()?;
    if !python_has(case.needs) {
        return None;
    }
    let label = format!(
        "{} ({})",
        case.name,
        if case.dynamo { "dynamo" } else { "torchscript" }
    );
    let dir = generate(case.name, case.dynamo);
    let model = Model::load(dir.join("model.onnx")).expect("load the exported model");
    let inputs = read_all(&dir, "input");
    let want = read_all(&dir, "output");
    assert_eq!(
        inputs.len(),
        model.graph.inputs.len(),
        "{label}: input count"
    );
    let mut opts = LowerOptions {
        fp16: true,
        ..Default::default()
    };
    for (&v, t) in model.graph.inputs.iter().zip(&inputs) {
        opts.input_shapes
            .insert(model.graph.value(v).name.clone(), t.shape.clone());
    }
    let unsupported = lowering::check_with(&model, &opts).expect("model-level lowering");
    assert!(
        unsupported.is_empty(),
        "{label}: not every node lowers:\n{}",
        unsupported
            .iter()
            .map(|u| format!("  {u}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let t0 = Instant::now();
    let plan = lowering::lower(model, &opts).unwrap_or_else(|e| panic!("{label}: {e}"));
    let ctx = qnn::Context::new(backend, Some(device)).expect("contextCreate");
    let compiled = emit(&ctx, "model", &plan).unwrap_or_else(|e| panic!("{label}: emit: {e}"));
    let build = t0.elapsed();
    // The first execute of a graph carries one-time costs (docs/qnn-notes.md §8.16); time the second.
    let first = compiled
        .run(&inputs)
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let t1 = Instant::now();
    let got = compiled
        .run(&inputs)
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let per_run = t1.elapsed();
    assert_eq!(first, got, "{label}: two runs on the same input differ");
    assert_eq!(got.len(), want.len(), "{label}: output count");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.shape, w.shape, "{label}: output {i} shape");
        let g = g.to_f32().expect("float output");
        let w = w.to_f32().expect("float reference");
        let scale = w.iter().fold(0f32, |m, x| m.max(x.abs()));
        let err = g
            .iter()
            .zip(&w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, |m, d| if d.is_nan() { f32::NAN } else { m.max(d) });
        eprintln!(
            "{label}: output {i}: max |err| {err:.3e}, max |ref| {scale:.3e} (relative {:.2e}, \
             tolerance {:.0e}); build {:.2} s, {:.1} ms per inference",
            err / scale,
            case.rel_tol,
            build.as_secs_f64(),
            per_run.as_secs_f64() * 1e3
        );
        assert!(
            scale > 0.0,
            "{label}: output {i}: the reference is all zeros"
        );
        assert!(
            err <= case.rel_tol * scale,
            "{label}: output {i}: max |err| {err} exceeds {} x max |ref| {scale}",
            case.rel_tol
        );
        // Exactly 0 would mean the emulator computed in fp32, not the NPU's fp16.
        assert!(err > 0.0, "{label}: output {i} is bit-exact");
    }
    Some(plan)
}

/// Single-op models (`tests/models/ops/gen.py`) for the supported ops that no ONNX node test
/// exercises with constant parameters; every case must lower whole and match onnx's
/// reference evaluator.
#[test]
fn op_cases() {
    let Some((backend, device)) = htp() else {
        return;
    };
    if !python_has("onnx, numpy") {
        return;
    }
    let root = generate("ops", false);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("generated cases")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    cases.sort();
    assert!(cases.len() >= 12, "only {} op cases", cases.len());
    let mut failures = Vec::new();
    for dir in &cases {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let want = read_all(dir, "output");
        let verdict = run_dir(backend, device, dir).and_then(|got| {
            if got.len() != want.len() {
                return Err(format!("{} outputs, want {}", got.len(), want.len()));
            }
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                compare(g, w).map_err(|e| format!("output {i}: {e}"))?;
            }
            Ok(())
        });
        eprintln!(
            "op case {name}: {}",
            verdict.as_ref().map_or_else(|e| e.as_str(), |_| "pass")
        );
        if let Err(e) = verdict {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "op cases failed:\n{}",
        failures.join("\n")
    );
}

const TORCH: &str = "torch, onnx";
const TORCHVISION: &str = "torch, torchvision, onnx";
const TRANSFORMERS: &str = "torch, transformers, onnx";
const DYNAMO: &str = "torch, onnx, onnxscript";

#[test]
fn mlp_torchscript() {
    run_case(Case {
        name: "mlp",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    });
}

#[test]
fn mlp_dynamo() {
    run_case(Case {
        name: "mlp",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    });
}

#[test]
fn small_cnn_torchscript() {
    run_case(Case {
        name: "small_cnn",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    });
}

#[test]
fn small_cnn_dynamo() {
    run_case(Case {
        name: "small_cnn",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    });
}

/// The transposes of a plan: `se_cnn` has the graph input's to NHWC and no other, so none
/// around its squeeze-and-excitation means, channel max, concat or head mean.
fn transposes(plan: &lowering::Plan) -> Vec<&str> {
    plan.ops
        .iter()
        .filter(|o| o.type_name == "Transpose")
        .map(|o| o.onnx_node.as_str())
        .collect()
}

#[test]
fn se_cnn_torchscript() {
    if let Some(plan) = run_case(Case {
        name: "se_cnn",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    }) {
        assert_eq!(transposes(&plan), ["x_nhwc"], "{}", plan.dump());
    }
}

#[test]
fn se_cnn_dynamo() {
    // Opset 18: the reductions' axes are an input.
    if let Some(plan) = run_case(Case {
        name: "se_cnn",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    }) {
        assert_eq!(transposes(&plan), ["x_nhwc"], "{}", plan.dump());
    }
}

#[test]
fn normalize_torchscript() {
    run_case(Case {
        name: "normalize",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    });
}

#[test]
fn normalize_dynamo() {
    run_case(Case {
        name: "normalize",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    });
}

#[test]
fn group_norm_torchscript() {
    run_case(Case {
        name: "group_norm",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    });
}

#[test]
fn group_norm_dynamo() {
    run_case(Case {
        name: "group_norm",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    });
}

#[test]
fn scatter_torchscript() {
    run_case(Case {
        name: "scatter",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    });
}

#[test]
fn scatter_dynamo() {
    run_case(Case {
        name: "scatter",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    });
}

#[test]
fn rnn_torchscript() {
    run_case(Case {
        name: "rnn",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    });
}

#[test]
fn rnn_dynamo() {
    run_case(Case {
        name: "rnn",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    });
}

#[test]
fn rotary_torchscript() {
    run_case(Case {
        name: "rotary",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    });
}

#[test]
fn rotary_dynamo() {
    run_case(Case {
        name: "rotary",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    });
}

#[test]
fn rank6_torchscript() {
    run_case(Case {
        name: "rank6",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    });
}

#[test]
fn rank6_dynamo() {
    run_case(Case {
        name: "rank6",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    });
}

#[test]
fn resnet18_torchscript() {
    run_case(Case {
        name: "resnet18",
        dynamo: false,
        needs: TORCHVISION,
        rel_tol: 2e-2,
    });
}

#[test]
fn resnet18_dynamo() {
    run_case(Case {
        name: "resnet18",
        dynamo: true,
        needs: "torch, torchvision, onnx, onnxscript",
        rel_tol: 2e-2,
    });
}

#[test]
fn mobilenet_v3_small_torchscript() {
    run_case(Case {
        name: "mobilenet_v3_small",
        dynamo: false,
        needs: TORCHVISION,
        // The logits are ~200x smaller than the last features (a 1024-wide classifier with
        // N(0, 0.01) weights cancels), so fp16 error relative to them is large: measured 2.0e-2
        // (torch's own fp16 run on CPU: 5.8e-3). Relative to their own scale the HTP error
        // grows from 7e-4 after the stem to 1.5e-2 at the last feature map.
        rel_tol: 3e-2,
    });
}

#[test]
fn mobilenet_v3_small_dynamo() {
    run_case(Case {
        name: "mobilenet_v3_small",
        dynamo: true,
        needs: "torch, torchvision, onnx, onnxscript",
        // The logits are ~200x smaller than the last features (a 1024-wide classifier with
        // N(0, 0.01) weights cancels), so fp16 error relative to them is large: measured 2.0e-2
        // (torch's own fp16 run on CPU: 5.8e-3). Relative to their own scale the HTP error
        // grows from 7e-4 after the stem to 1.5e-2 at the last feature map.
        rel_tol: 3e-2,
    });
}

/// The plan's QNN ops of type `op`.
fn count(plan: &lowering::Plan, op: &str) -> usize {
    plan.ops.iter().filter(|o| o.type_name == op).count()
}

#[test]
fn convnext_block_torchscript() {
    // Every GELU (4 between 1x1 Convs, 1 between Linears on channel-last data) is one QNN
    // Gelu, none left as Erf or folded apart.
    if let Some(plan) = run_case(Case {
        name: "convnext_block",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    }) {
        assert_eq!(count(&plan, "Gelu"), 5, "{}", plan.dump());
    }
}

#[test]
fn convnext_block_dynamo() {
    if let Some(plan) = run_case(Case {
        name: "convnext_block",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    }) {
        assert_eq!(count(&plan, "Gelu"), 5, "{}", plan.dump());
    }
}

#[test]
fn transformer_encoder_torchscript() {
    run_case(Case {
        name: "transformer_encoder",
        dynamo: false,
        needs: TORCH,
        rel_tol: 1e-2,
    });
}

#[test]
fn transformer_encoder_dynamo() {
    run_case(Case {
        name: "transformer_encoder",
        dynamo: true,
        needs: DYNAMO,
        rel_tol: 1e-2,
    });
}

#[test]
fn gpt2_tiny_torchscript() {
    run_case(Case {
        name: "gpt2_tiny",
        dynamo: false,
        needs: TRANSFORMERS,
        rel_tol: 1e-2,
    });
}

#[test]
fn gpt2_tiny_dynamo() {
    run_case(Case {
        name: "gpt2_tiny",
        dynamo: true,
        needs: "torch, transformers, onnx, onnxscript",
        rel_tol: 1e-2,
    });
}
