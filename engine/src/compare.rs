//! Per-layer accuracy: the same inputs through a reference build and a test build of a model,
//! both compiled with every intermediate that holds a model value as an extra output
//! ([`lowering::LowerOptions::observe`]), so the test side's numbers are what the backend itself
//! computes, not a host simulation. On x86_64 a build with no SoC set computes floats exactly
//! in fp32 (docs: QNN-NOTES), which makes it the reference; the test build is the fp16 graph of
//! an FP16 SoC, or a quantized (QDQ) model on any SoC, v68 included.
//!
//! Each model value both builds observe is reported with its SQNR, cosine and largest absolute
//! error, and the first value in graph order whose SQNR falls by more than a threshold below
//! its inputs' is named: the layer where the error starts, not where it is largest.
//!
//! Several samples ([`compare_samples`]: a user's folder of inputs) run through the same
//! observed graphs, built once; each value's numbers are then over every sample, and the
//! model outputs' rows of all samples make one batch ([`BatchOutput`]). The observed values of
//! every sample are held at once (in f32), which bounds how many samples one call takes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use lowering::plan::Encoding;
use qnnx_types::DType;

use crate::calibrate::{each_observed_graph, observed_bytes};
use crate::compile::CompileOptions;
use crate::error::{Error, Result};
use crate::io::HostTensor;
use crate::target::Target;

/// One build of the comparison: which model, for which target, at which precision.
#[derive(Clone, Debug)]
pub struct Build<'a> {
    pub target: &'a Target,
    pub onnx: &'a [u8],
    /// Where the model's external data files are.
    pub base_dir: Option<PathBuf>,
    /// Float weights and activations stored as f16 ([`CompileOptions::fp16`]); ignored for a
    /// target without a float path and for a quantized (QDQ) model, whose float tensors are
    /// only its boundary conversions.
    pub fp16: bool,
}

/// How the two builds are compared.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Static shapes for inputs with symbolic dims.
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// A value is the "first jump" when its SQNR is this many dB below its inputs'.
    pub jump_db: f64,
}

impl Default for CompareOptions {
    fn default() -> CompareOptions {
        CompareOptions {
            input_shapes: BTreeMap::new(),
            jump_db: 10.0,
        }
    }
}

/// How one model value differs between the builds.
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    /// The model value's name (a QDQ model's `__float` / `__quantized` suffixes removed).
    pub value: String,
    /// The ONNX node that produces it, and its op type (empty for a graph input).
    pub node: String,
    pub op_type: String,
    /// Position of the producing node in the reference model's graph order.
    pub order: usize,
    /// Signal-to-quantization-noise ratio in dB: `10 log10(sum ref^2 / sum (test - ref)^2)`;
    /// `+inf` when the values are equal, `-inf` when the test side is not finite.
    pub sqnr_db: f64,
    pub cosine: f64,
    pub max_abs_err: f64,
    /// Test values that are NaN or infinite where the reference's are finite (fp16 overflow).
    pub nonfinite: usize,
    /// The lowest SQNR among the value's compared inputs (the baseline its drop is measured
    /// from); `None` when no input is compared (see [`Report::first_jump`]).
    pub input_sqnr_db: Option<f64>,
    /// Whether it is a model output.
    pub is_output: bool,
}

/// A model output over a batch of inputs (its rows along the first axis of the first input):
/// what users of a classifier or an embedding model rely on, which one cosine over the whole
/// tensor does not show.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchOutput {
    pub value: String,
    /// Rows (inputs) compared.
    pub n: usize,
    /// Each row's cosine to its reference row: the smallest and the mean.
    pub cosine_min: f64,
    pub cosine_mean: f64,
    /// The share of rows whose largest element is at the reference's index (top-1 agreement
    /// of a classifier's logits).
    pub top1_agreement: f64,
    /// The matrices of pairwise cosine similarities between different rows, reference and test
    /// (n >= 3): the Pearson correlation of their off-diagonal entries, their means (a test mean
    /// creeping towards 1 is an embedding space that collapsed) and the share of rows whose
    /// nearest other row is the same in both.
    pub offdiag_correlation: Option<f64>,
    pub offdiag_mean_reference: Option<f64>,
    pub offdiag_mean_test: Option<f64>,
    pub nn_agreement: Option<f64>,
}

impl BatchOutput {
    /// `reference` and `test` as `n` rows each; None when they do not split into `n >= 2` rows.
    pub fn of(value: &str, n: usize, reference: &[f32], test: &[f32]) -> Option<BatchOutput> {
        if n < 2
            || reference.len() != test.len()
            || reference.len() % n != 0
            || reference.is_empty()
        {
            return None;
        }
        let d = reference.len() / n;
        let rows = |v: &[f32]| -> Vec<Vec<f64>> {
            v.chunks(d)
                .map(|r| r.iter().map(|&x| x as f64).collect())
                .collect()
        };
        let (r, t) = (rows(reference), rows(test));
        let norm = |x: &[f64]| x.iter().map(|a| a * a).sum::<f64>().sqrt().max(1e-30);
        let cos = |a: &[f64], b: &[f64]| {
            a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>() / (norm(a) * norm(b))
        };
        let per_row: Vec<f64> = r.iter().zip(&t).map(|(a, b)| cos(&a[..], &b[..])).collect();
        let argmax = |x: &[f64]| {
            x.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i)
        };
        let top1 = r
            .iter()
            .zip(&t)
            .filter(|(a, b)| argmax(&a[..]) == argmax(&b[..]))
            .count();
        let mut out = BatchOutput {
            value: value.to_string(),
            n,
            cosine_min: per_row.iter().copied().fold(f64::INFINITY, f64::min),
            cosine_mean: per_row.iter().sum::<f64>() / n as f64,
            top1_agreement: top1 as f64 / n as f64,
            offdiag_correlation: None,
            offdiag_mean_reference: None,
            offdiag_mean_test: None,
            nn_agreement: None,
        };
        if n >= 3 {
            let sim = |m: &[Vec<f64>]| -> Vec<Vec<f64>> {
                m.iter()
                    .map(|a| m.iter().map(|b| cos(&a[..], &b[..])).collect())
                    .collect()
            };
            let (sr, st) = (sim(&r), sim(&t));
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let mut nn_same = 0;
            for i in 0..n {
                let nearest = |s: &[f64]| {
                    (0..n)
                        .filter(|&j| j != i)
                        .max_by(|&x, &y| s[x].total_cmp(&s[y]))
                };
                if nearest(&sr[i][..]) == nearest(&st[i][..]) {
                    nn_same += 1;
                }
                for j in (0..n).filter(|&j| j != i) {
                    a.push(sr[i][j]);
                    b.push(st[i][j]);
                }
            }
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            let (ma, mb) = (mean(&a[..]), mean(&b[..]));
            let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
            for (x, y) in a.iter().zip(&b) {
                sab += (x - ma) * (y - mb);
                saa += (x - ma) * (x - ma);
                sbb += (y - mb) * (y - mb);
            }
            out.offdiag_correlation = (saa > 0.0 && sbb > 0.0).then(|| sab / (saa * sbb).sqrt());
            out.offdiag_mean_reference = Some(ma);
            out.offdiag_mean_test = Some(mb);
            out.nn_agreement = Some(nn_same as f64 / n as f64);
        }
        Some(out)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "value": self.value,
            "n": self.n,
            "cosine_min": self.cosine_min,
            "cosine_mean": self.cosine_mean,
            "top1_agreement": self.top1_agreement,
            "offdiag_correlation": self.offdiag_correlation,
            "offdiag_mean_reference": self.offdiag_mean_reference,
            "offdiag_mean_test": self.offdiag_mean_test,
            "nn_agreement": self.nn_agreement,
        })
    }
}

/// What [`compare`] found.
#[derive(Clone, Debug)]
pub struct Report {
    /// Every compared value, worst SQNR first.
    pub layers: Vec<Layer>,
    /// The first value in graph order whose SQNR is more than `jump_db` below its baseline: the
    /// lowest of its inputs', or, for a value computed from graph inputs and constants only, the
    /// median SQNR of all values (so a first layer counts only when it is far worse than the
    /// typical one).
    pub first_jump: Option<String>,
    pub jump_db: f64,
    /// Model values only one build observed (folded away or fused on one side), by name.
    pub unmatched: Vec<String>,
    /// With a batch of inputs (the first input's first axis N >= 2), each model output over
    /// its N rows.
    pub batch: Vec<BatchOutput>,
}

impl Report {
    pub fn layer(&self, value: &str) -> Option<&Layer> {
        self.layers.iter().find(|l| l.value == value)
    }

    /// The report as `qnnx compare --json` and Python's `accuracy_report` read it. JSON has no
    /// infinities (an exact value, an fp16 overflow), so they are the strings `"inf"`/`"-inf"`.
    pub fn json(&self) -> serde_json::Value {
        let num = |x: f64| {
            if x.is_finite() {
                serde_json::json!(x)
            } else {
                serde_json::json!(format!("{x}"))
            }
        };
        let layers: Vec<serde_json::Value> = self
            .layers
            .iter()
            .map(|l| {
                serde_json::json!({
                    "value": l.value,
                    "node": l.node,
                    "op_type": l.op_type,
                    "order": l.order,
                    "sqnr_db": num(l.sqnr_db),
                    "cosine": num(l.cosine),
                    "max_abs_err": num(l.max_abs_err),
                    "nonfinite": l.nonfinite,
                    "input_sqnr_db": l.input_sqnr_db.map(num),
                    "is_output": l.is_output,
                })
            })
            .collect();
        serde_json::json!({
            "jump_db": self.jump_db,
            "first_jump": self.first_jump,
            "layers": layers,
            "unmatched": self.unmatched,
            "batch": self.batch.iter().map(BatchOutput::json).collect::<Vec<_>>(),
        })
    }
}

/// The model value a QDQ model's tensor stands for: `qnnx quantize` (and the usual QDQ
/// exporters) renames an op's float output `t` to `t__float` and quantizes it to
/// `t__quantized`, then dequantizes back into `t`.
pub fn model_value_name(name: &str) -> &str {
    name.strip_suffix("__float")
        .or_else(|| name.strip_suffix("__quantized"))
        .unwrap_or(name)
}

/// Whether `model` is a quantized (QDQ) model.
pub fn is_qdq(model: &lowering::Model) -> bool {
    model
        .graph
        .nodes
        .iter()
        .any(|n| n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear")
}

/// A build's observed values, in the ONNX value's own dim order, by model value name: every
/// sample's values of a value concatenated, in sample order.
fn observe(
    b: &Build,
    opts: &CompareOptions,
    samples: &[&[HostTensor]],
) -> Result<HashMap<String, Vec<f32>>> {
    if samples.is_empty() {
        return Err(Error::Input("compare: no inputs to run".into()));
    }
    let model = lowering::Model::from_bytes(b.onnx, b.base_dir.as_deref())?;
    let fp16 = b.fp16 && !b.target.lacks_float() && !is_qdq(&model);
    let copts = CompileOptions {
        input_shapes: opts.input_shapes.clone(),
        observe: true,
        fp16,
        ..Default::default()
    };
    let model_outputs = model.graph.outputs.len();
    let plan = lowering::lower(
        model,
        &copts.model_io().lower_options(b.target.backend, fp16),
    )?;
    // Per sample: value -> (held in the model's own order, its values).
    let mut per_sample: Vec<HashMap<String, (bool, Vec<f32>)>> =
        vec![HashMap::new(); samples.len()];
    each_observed_graph(
        b.target,
        "compare",
        &plan,
        model_outputs,
        observed_bytes(),
        &mut |g| {
            let (e, plan) = (g.emitted, g.plan);
            if e.outputs.len() != plan.outputs.len()
                || e.outputs
                    .iter()
                    .zip(&plan.outputs)
                    .any(|(a, p)| a.onnx_name != p.onnx_name)
            {
                return Err(Error::Input(
                    "internal: the observed graph's outputs differ from its plan's".into(),
                ));
            }
            for (inputs, values) in samples.iter().zip(per_sample.iter_mut()) {
                let outs = e.run(inputs)?;
                for (io, t) in e.inputs.iter().zip(inputs.iter()) {
                    if let Some(v) = host_values(t, None) {
                        values.insert(io.onnx_name.clone(), (true, v));
                    }
                }
                for (io, t) in plan.outputs.iter().zip(&outs) {
                    let pt = &plan.tensors[io.tensor];
                    let Some(v) = host_values(t, pt.quant.as_ref()) else {
                        continue;
                    };
                    let perm = pt.origin.as_ref().and_then(|o| o.perm.clone());
                    let identity = perm.is_none();
                    let v = match perm {
                        Some(p) => unpermute(&v, &t.shape, &p),
                        None => v,
                    };
                    let name = model_value_name(&io.onnx_name).to_string();
                    // A value held in two orders is the same numbers; the model's own order is
                    // kept.
                    match values.get(&name) {
                        Some((true, _)) => {}
                        Some((false, _)) if !identity => {}
                        _ => {
                            values.insert(name, (identity, v));
                        }
                    }
                }
            }
            Ok(())
        },
    )?;
    let mut all: HashMap<String, Vec<f32>> = HashMap::new();
    for values in per_sample {
        for (k, (_, v)) in values {
            all.entry(k).or_default().extend(v);
        }
    }
    Ok(all)
}

/// A host tensor's values as f32: float tensors, and a quantized tensor's integers dequantized
/// with `quant`. `None` for plain integer tensors.
fn host_values(t: &HostTensor, quant: Option<&Encoding>) -> Option<Vec<f32>> {
    let d = &t.data;
    let raw: Vec<f64> = match t.dtype {
        DType::F32 => d
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::F16 => d
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        _ => {
            let q = quant?;
            let ints: Vec<i64> = match t.dtype {
                DType::U8 => d.iter().map(|&x| x as i64).collect(),
                DType::I8 => d.iter().map(|&x| x as i8 as i64).collect(),
                DType::U16 => d
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]) as i64)
                    .collect(),
                DType::I16 => d
                    .chunks_exact(2)
                    .map(|c| i16::from_le_bytes([c[0], c[1]]) as i64)
                    .collect(),
                DType::I32 => d
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                    .collect(),
                _ => return None,
            };
            // Per-axis activations are rare; their channel is found from the axis' stride.
            let (dim, inner) = match q.axis {
                Some(a) if a < t.shape.len() => (t.shape[a], t.shape[a + 1..].iter().product()),
                _ => (1, 1),
            };
            ints.iter()
                .enumerate()
                .map(|(i, &x)| q.dequantize(x, (i / inner.max(1)) % dim.max(1)))
                .collect()
        }
    };
    Some(raw.into_iter().map(|x| x as f32).collect())
}

/// `v`, a tensor of `shape` that is the ONNX value permuted by `perm` (dim `i` is the value's
/// dim `perm[i]`), in the value's own order.
fn unpermute(v: &[f32], shape: &[usize], perm: &[usize]) -> Vec<f32> {
    let n = shape.len();
    if perm.len() != n {
        return v.to_vec();
    }
    let mut onnx_shape = vec![0; n];
    for i in 0..n {
        onnx_shape[perm[i]] = shape[i];
    }
    let mut onnx_strides = vec![1; n];
    for i in (0..n.saturating_sub(1)).rev() {
        onnx_strides[i] = onnx_strides[i + 1] * onnx_shape[i + 1];
    }
    let mut out = vec![0f32; v.len()];
    let mut idx = vec![0usize; n];
    for &x in v {
        let dst: usize = (0..n).map(|i| idx[i] * onnx_strides[perm[i]]).sum();
        out[dst] = x;
        for i in (0..n).rev() {
            idx[i] += 1;
            if idx[i] < shape[i] {
                break;
            }
            idx[i] = 0;
        }
    }
    out
}

/// SQNR (dB), cosine, largest absolute error and the count of non-finite test values where
/// the reference's are finite.
pub fn metrics(reference: &[f32], test: &[f32]) -> (f64, f64, f64, usize) {
    let (mut sig, mut noise, mut dot, mut tt, mut max) = (0f64, 0f64, 0f64, 0f64, 0f64);
    let mut nonfinite = 0;
    for (&r, &t) in reference.iter().zip(test) {
        let (r, t) = (r as f64, t as f64);
        if r.is_finite() && !t.is_finite() {
            nonfinite += 1;
        }
        let e = t - r;
        sig += r * r;
        noise += e * e;
        dot += r * t;
        tt += t * t;
        max = f64::max(max, e.abs());
        if e.is_nan() {
            max = f64::INFINITY;
        }
    }
    let sqnr = if nonfinite > 0 || noise.is_nan() {
        f64::NEG_INFINITY
    } else if noise == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (sig / noise).log10()
    };
    let cosine = if sig == 0.0 && tt == 0.0 {
        1.0
    } else {
        dot / (sig.sqrt() * tt.sqrt())
    };
    (sqnr, cosine, max, nonfinite)
}

/// Runs `inputs` (the model's inputs in order) through `reference` and `test`, both observed,
/// and compares every model value both hold. The graph order and the producing nodes are the
/// reference model's (the float model, when the test build is its QDQ version).
pub fn compare(
    reference: &Build,
    test: &Build,
    inputs: &[HostTensor],
    opts: &CompareOptions,
) -> Result<Report> {
    compare_samples(reference, test, &[inputs], opts)
}

/// [`compare`] over several samples (each the model's inputs in order), the observed graphs
/// built once per side: every value's numbers are over all samples, and the model outputs'
/// rows of all samples (each sample's first axis, 1 for an unbatched sample) are one batch.
pub fn compare_samples(
    reference: &Build,
    test: &Build,
    samples: &[&[HostTensor]],
    opts: &CompareOptions,
) -> Result<Report> {
    let r = Observed::reference_samples(reference, opts, samples)?;
    let t = observe(test, opts, samples)?;
    Ok(r.compare(&t, opts))
}

/// Rows along the first axis of a sample's first input (1 when it has rank below 2).
fn rows(sample: &[HostTensor]) -> usize {
    sample
        .first()
        .filter(|t| t.shape.len() >= 2)
        .map_or(1, |t| t.shape[0])
}

/// A reference build's observed values, for comparing several test builds with one reference
/// run (and before any v68 backend opens: see [`mixed`](crate::mixed)).
pub struct Observed {
    model: lowering::Model,
    values: HashMap<String, Vec<f32>>,
    /// The rows of every sample (each one's first input's first dimension, when it is a batch
    /// of rank >= 2; else 1).
    batch: usize,
}

impl Observed {
    /// Runs the reference build (a float model) observed.
    pub fn reference(b: &Build, opts: &CompareOptions, inputs: &[HostTensor]) -> Result<Observed> {
        Observed::reference_samples(b, opts, &[inputs])
    }

    /// [`Observed::reference`] over several samples ([`compare_samples`]).
    pub fn reference_samples(
        b: &Build,
        opts: &CompareOptions,
        samples: &[&[HostTensor]],
    ) -> Result<Observed> {
        let model = lowering::Model::from_bytes(b.onnx, b.base_dir.as_deref())?;
        if is_qdq(&model) {
            return Err(Error::Input(
                "the reference is a quantized (QDQ) model: compare a QDQ model against the \
                 float model it was quantized from"
                    .into(),
            ));
        }
        let values = observe(b, opts, samples)?;
        let batch = samples.iter().map(|s| rows(s)).sum();
        Ok(Observed {
            model,
            values,
            batch,
        })
    }

    /// Runs `test` observed on `inputs` (those the reference ran on) and compares it.
    pub fn compare_build(
        &self,
        test: &Build,
        inputs: &[HostTensor],
        opts: &CompareOptions,
    ) -> Result<Report> {
        let t = observe(test, opts, &[inputs])?;
        Ok(self.compare(&t, opts))
    }

    fn compare(&self, t: &HashMap<String, Vec<f32>>, opts: &CompareOptions) -> Report {
        let (model, r) = (&self.model, &self.values);
        let g = &model.graph;
        let outputs: HashSet<&str> = g
            .outputs
            .iter()
            .map(|&v| g.value(v).name.as_str())
            .collect();
        let mut layers: Vec<Layer> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for (order, n) in g.nodes.iter().enumerate() {
            for v in n.outputs.iter().flatten() {
                let name = &g.value(*v).name;
                let (Some(rv), Some(tv)) = (r.get(name), t.get(name)) else {
                    continue;
                };
                if rv.len() != tv.len() || by_name.contains_key(name) {
                    continue;
                }
                let (sqnr_db, cosine, max_abs_err, nonfinite) = metrics(rv, tv);
                let input_sqnr_db = n
                    .inputs
                    .iter()
                    .flatten()
                    .filter_map(|u| by_name.get(&g.value(*u).name))
                    .map(|&k| layers[k].sqnr_db)
                    .min_by(f64::total_cmp);
                by_name.insert(name.clone(), layers.len());
                layers.push(Layer {
                    value: name.clone(),
                    node: n.name.clone(),
                    op_type: n.op_type.clone(),
                    order,
                    sqnr_db,
                    cosine,
                    max_abs_err,
                    nonfinite,
                    input_sqnr_db,
                    is_output: outputs.contains(name.as_str()),
                });
            }
        }
        let mut finite: Vec<f64> = layers
            .iter()
            .map(|l| l.sqnr_db)
            .filter(|s| s.is_finite())
            .collect();
        finite.sort_by(f64::total_cmp);
        let median = finite.get(finite.len() / 2).copied();
        let first_jump = layers
            .iter()
            .find(|l| {
                let base = l.input_sqnr_db.or(median);
                match base {
                    // An exact input (+inf) is measured from the median too: "infinitely worse
                    // than exact" would make every first rounding a jump.
                    Some(b) if b.is_infinite() && b > 0.0 => {
                        median.is_some_and(|m| l.sqnr_db < m - opts.jump_db)
                    }
                    Some(b) => l.sqnr_db < b - opts.jump_db,
                    None => l.sqnr_db == f64::NEG_INFINITY,
                }
            })
            .map(|l| l.value.clone());
        let mut unmatched: Vec<String> = r
            .keys()
            .chain(t.keys())
            .filter(|k| r.contains_key(*k) != t.contains_key(*k))
            .cloned()
            .collect();
        unmatched.sort();
        unmatched.dedup();
        let batch = g
            .outputs
            .iter()
            .filter_map(|&v| {
                let name = &g.value(v).name;
                BatchOutput::of(name, self.batch, r.get(name)?, t.get(name)?)
            })
            .collect();
        layers.sort_by(|a, b| a.sqnr_db.total_cmp(&b.sqnr_db).then(a.order.cmp(&b.order)));
        Report {
            layers,
            first_jump,
            jump_db: opts.jump_db,
            unmatched,
            batch,
        }
    }
}

/// Where a build's external data is read from: the model file's folder.
pub fn base_dir_of(model: &Path) -> Option<PathBuf> {
    model.parent().map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_undoes_nhwc() {
        // ONNX value [1, 2, 3] (N=1, C=2, W=3) held as [1, 3, 2] with perm [0, 2, 1].
        let onnx: Vec<f32> = (0..6).map(|x| x as f32).collect();
        let held = [0., 3., 1., 4., 2., 5.];
        assert_eq!(unpermute(&held, &[1, 3, 2], &[0, 2, 1]), onnx);
    }

    #[test]
    fn batch_output_of_a_collapsed_embedding() {
        // Three orthogonal rows; the test pulls every row towards a common direction.
        let r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let t = [1.0, 0.5, 0.5, 0.5, 1.0, 0.5, 0.5, 0.5, 1.0];
        let b = BatchOutput::of("y", 3, &r, &t).unwrap();
        assert_eq!(b.top1_agreement, 1.0);
        assert!((b.cosine_min - 1.0 / 1.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(b.offdiag_mean_reference, Some(0.0));
        // cos([1,.5,.5],[.5,1,.5]) = 1.25 / 1.5.
        assert!((b.offdiag_mean_test.unwrap() - 1.25 / 1.5).abs() < 1e-12);
        // All reference pairs are equal: no correlation to speak of.
        assert_eq!(b.offdiag_correlation, None);
        assert!(BatchOutput::of("y", 1, &r, &t).is_none());
        assert!(
            BatchOutput::of("y", 2, &r, &t).is_none(),
            "9 values are not 2 rows"
        );
        let u = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 2.0];
        let same = BatchOutput::of("y", 3, &u, &u).unwrap();
        assert!((same.offdiag_correlation.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(same.nn_agreement, Some(1.0));
    }

    #[test]
    fn metrics_of_a_known_error() {
        let r = [1.0f32, -1.0, 1.0, -1.0];
        let t = [1.1f32, -1.1, 1.1, -1.1];
        let (s, c, m, n) = metrics(&r, &t);
        assert!((s - 20.0).abs() < 1e-4, "{s}");
        assert!((c - 1.0).abs() < 1e-9);
        assert!((m - 0.1).abs() < 1e-6);
        assert_eq!(n, 0);
        let (s, _, m, n) = metrics(&r, &[f32::INFINITY, -1.0, 1.0, -1.0]);
        assert_eq!((s, m, n), (f64::NEG_INFINITY, f64::INFINITY, 1));
    }

    #[test]
    fn qdq_names_map_back() {
        assert_eq!(model_value_name("conv1__float"), "conv1");
        assert_eq!(model_value_name("conv1__quantized"), "conv1");
        assert_eq!(model_value_name("conv1"), "conv1");
    }
}
