//! Mixed precision from the per-layer report: starting from a scheme (8a8w), promote the value
//! where the error first jumps (its producer and readers) to 16-bit activations, one at a time,
//! until the model output reaches a target SQNR against the float reference, within a bounded
//! number of compile attempts; a node 16 bits did not save goes float next where the HTP has
//! fp16 (never on v68). One calibration (the caller's ranges) serves every attempt;
//! the float reference runs once, before any test build (a v68 backend opened in the process
//! makes the emulator refuse SoC-less float graphs afterwards).

use std::collections::{BTreeMap, HashMap};

use lowering::quantize::{write_qdq, Keep, QuantizeOptions, Range};

use crate::compare::{Build, CompareOptions, Observed, Report};
use crate::error::{Error, Result};
use crate::io::HostTensor;
use crate::target::Target;

/// What [`promote`] searches for.
#[derive(Clone, Debug)]
pub struct MixedOptions {
    /// The lowest SQNR (dB) accepted for every model output.
    pub target_sqnr_db: f64,
    /// How many QDQ models may be built and compared, the first (no promotion) included.
    pub max_attempts: usize,
}

/// What [`promote`] found.
#[derive(Clone, Debug)]
pub struct Mixed {
    /// The nodes promoted, in the order first chosen: to 16-bit activations, or to float where
    /// the HTP has fp16 (a node 16 bits did not save); [`keep_args`] spells the `--keep`
    /// overrides that pin the result.
    pub keep: Vec<(String, Keep)>,
    /// Nodes whose promotion the target refused (QNN validation), with its message.
    pub refused: Vec<(String, String)>,
    /// The QDQ model with the promotions, and its report.
    pub qdq: Vec<u8>,
    pub report: Report,
    /// The lowest model-output SQNR after each attempt.
    pub history: Vec<f64>,
}

/// The lowest SQNR among the model outputs of a report.
pub fn output_sqnr(rep: &Report) -> Option<f64> {
    rep.layers
        .iter()
        .filter(|l| l.is_output)
        .map(|l| l.sqnr_db)
        .min_by(f64::total_cmp)
}

/// Searches promotions for `float_onnx` quantized with `base` and `ranges`, measured on
/// `target` with `inputs` against the exact fp32 reference `reference` (built from the same
/// float model). Fails, naming the best reached, when no assignment within `max_attempts`
/// meets the target.
#[allow(clippy::too_many_arguments)]
pub fn promote(
    reference: &Build,
    target: &Target,
    input_shapes: &BTreeMap<String, Vec<usize>>,
    ranges: &HashMap<String, Range>,
    base: &QuantizeOptions,
    inputs: &[HostTensor],
    copts: &CompareOptions,
    opts: &MixedOptions,
) -> Result<Mixed> {
    let model = lowering::Model::from_bytes(reference.onnx, reference.base_dir.as_deref())?;
    let reference_obs = Observed::reference(reference, copts, inputs)?;
    let (names, consumers) = (model.graph.name_map(), model.graph.consumers());
    // The names of the nodes reading the value named `value`.
    let readers = |value: &str| -> Vec<&str> {
        names.get(value).map_or_else(Vec::new, |&v| {
            consumers[v]
                .iter()
                .map(|&n| model.graph.nodes[n].name.as_str())
                .collect()
        })
    };
    // Where the HTP computes floats (in fp16; not v68), a node already at 16 bits that is
    // still where the error jumps is kept float next.
    let can_float = target.arch().map_or(true, |a| a.has_fp16());
    // Node -> its precision, in the order first chosen; each step's (node, previous level).
    let mut level: Vec<(String, Keep)> = Vec::new();
    let mut steps: Vec<Vec<(String, Option<Keep>)>> = Vec::new();
    let mut refused: Vec<(String, String)> = Vec::new();
    let mut history = Vec::new();
    let mut best: Option<(f64, Vec<(String, Keep)>)> = None;
    for _ in 0..opts.max_attempts.max(1) {
        let mut q = base.clone();
        q.keep.extend(level.iter().cloned());
        let (qdq, _) = write_qdq(reference.onnx, &model, input_shapes, ranges, &q)
            .map_err(|e| Error::Input(format!("quantizing: {e}")))?;
        let test = Build {
            target,
            onnx: &qdq,
            base_dir: reference.base_dir.clone(),
            fp16: false,
        };
        let rep = match reference_obs.compare_build(&test, inputs, copts) {
            Ok(r) => r,
            // The target refused the last step (v68 has no 16-bit MatMul of two activations,
            // say): undone, and the next candidate is tried.
            Err(e @ (Error::Qnn { .. } | Error::Lower(_) | Error::NoFloatPath { .. }))
                if !steps.is_empty() =>
            {
                for (n, before) in steps.pop().expect("non-empty") {
                    match before {
                        Some(k) => set(&mut level, &n, k),
                        None => level.retain(|(m, _)| *m != n),
                    }
                    refused.push((n, e.to_string()));
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        let out = output_sqnr(&rep).unwrap_or(f64::NEG_INFINITY);
        history.push(out);
        if !best.as_ref().is_some_and(|(b, _)| out <= *b) {
            best = Some((out, level.clone()));
        }
        if out >= opts.target_sqnr_db {
            return Ok(Mixed {
                keep: level,
                refused,
                qdq,
                report: rep,
                history,
            });
        }
        // The candidate: the first jump, else the value losing the most against its inputs,
        // else the worst, among nodes that can still go up.
        let exhausted = |n: &str| {
            refused.iter().any(|(r, _)| r == n)
                || match level_of(&level, n) {
                    Some(Keep::Float) => true,
                    Some(Keep::Bits16) => !can_float,
                    None => false,
                }
        };
        let open: Vec<&crate::compare::Layer> = rep
            .layers
            .iter()
            .filter(|l| !l.node.is_empty() && !exhausted(&l.node))
            .collect();
        let jump = rep
            .first_jump
            .as_deref()
            .and_then(|v| open.iter().find(|l| l.value == v));
        let drop = |l: &crate::compare::Layer| {
            l.input_sqnr_db
                .filter(|i| i.is_finite())
                .map(|i| i - l.sqnr_db.max(-300.0))
        };
        let next = jump
            .or_else(|| {
                open.iter()
                    .filter(|l| drop(l).is_some())
                    .max_by(|a, b| drop(a).unwrap_or(0.0).total_cmp(&drop(b).unwrap_or(0.0)))
            })
            .or(open.first());
        // The value's 8-bit encoding is what loses: its producer and every reader go up
        // together, so the value is stored and read at 16 bits (the readers' outputs are
        // requantized for their own 8-bit readers; see lowering::quantize).
        let Some(l) = next else { break };
        let nodes: Vec<String> = std::iter::once(l.node.as_str())
            .chain(readers(&l.value))
            .filter(|n| !exhausted(n))
            .map(str::to_string)
            .collect();
        let mut step = Vec::new();
        for n in nodes {
            if step.iter().any(|(m, _): &(String, Option<Keep>)| *m == n) {
                continue;
            }
            let before = level_of(&level, &n);
            let up = if before.is_some() {
                Keep::Float
            } else {
                Keep::Bits16
            };
            set(&mut level, &n, up);
            step.push((n, before));
        }
        if step.is_empty() {
            break;
        }
        steps.push(step);
    }
    let (b, p) = best.unwrap_or((f64::NEG_INFINITY, vec![]));
    Err(Error::Input(format!(
        "no assignment within {} attempts reaches {} dB at the output: the best was {b:.2} dB \
         with {}{}",
        opts.max_attempts,
        opts.target_sqnr_db,
        if p.is_empty() {
            "nothing promoted".to_string()
        } else {
            keep_args(&p)
        },
        if refused.is_empty() {
            String::new()
        } else {
            format!(
                "; the target refused {}",
                refused
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    )))
}

fn level_of(level: &[(String, Keep)], node: &str) -> Option<Keep> {
    level.iter().find(|(m, _)| m == node).map(|(_, k)| *k)
}

fn set(level: &mut Vec<(String, Keep)>, node: &str, k: Keep) {
    match level.iter_mut().find(|(m, _)| m == node) {
        Some(e) => e.1 = k,
        None => level.push((node.to_string(), k)),
    }
}

/// The `--keep` arguments that pin an assignment: `--keep NODE=16` (16-bit activations),
/// `--keep NODE` (float).
pub fn keep_args(keep: &[(String, Keep)]) -> String {
    keep.iter()
        .map(|(n, k)| match k {
            Keep::Bits16 => format!("--keep {n}=16"),
            Keep::Float => format!("--keep {n}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}
