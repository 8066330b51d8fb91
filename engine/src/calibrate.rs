//! Calibration for quantization: the ranges a float model's activations take on sample inputs,
//! measured by running the model on a backend with every intermediate that holds a model value
//! as an output ([`lowering::LowerOptions::observe`]). On x86_64 with no SoC set the HTP
//! emulator computes floats exactly in fp32, which makes it a faithful calibrator; a v68 target
//! has no float path and is refused, as for any float model.
//!
//! The observed values are spread over as many graphs as the HTP's memory planner needs
//! ([`each_observed_graph`], shared with the per-layer report): every graph output lives for
//! the whole execute, so a graph with every value of a large model as an output does not fit.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::Path;
use std::time::Instant;

use lowering::plan::{Plan, TensorKind};
use lowering::quantize::Range;

use crate::compile::CompileOptions;
use crate::emit::{emit, Emitted};
use crate::error::{Error, Result};
use crate::io::HostTensor;
use crate::registry;
use crate::target::Target;

/// Bytes of observed values one graph holds at most, unless `QNNX_OBSERVED_BYTES` says
/// otherwise. Measured with the x86_64 2.51 library (f32 chains of 12.8 MB values, every one an
/// output): 2.05 GB finalizes, 2.57 GB fails with QNN_COMMON_ERROR_MEM_ALLOC; the model's own
/// tensors need room too. A graph that still fails so is split in two
/// ([`each_observed_graph`]).
pub(crate) fn observed_bytes() -> usize {
    std::env::var("QNNX_OBSERVED_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&b| b > 0)
        .unwrap_or(1 << 30)
}

/// One of the graphs [`each_observed_graph`] builds.
pub(crate) struct ObservedGraph<'a> {
    pub emitted: &'a Emitted,
    /// The plan it was built from: the model's outputs, then the values it observes.
    pub plan: &'a Plan,
    /// Which graph this is (from 0), and how many are planned so far (more when one of them
    /// had to be split).
    pub index: usize,
    pub planned: usize,
}

/// What building the observed graphs cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedCost {
    /// How many graphs were finalized and run.
    pub graphs: usize,
    /// Finalizes that failed for memory and were split (each cost a finalize).
    pub splits: usize,
    /// Milliseconds spent building and finalizing graphs (failed ones included).
    pub build_ms: f64,
}

/// Builds `plan`, lowered with `observe` from a model with `model_outputs` outputs, as graphs
/// that each return the model's outputs and a share of the observed values of at most
/// `budget` bytes (in plan order), one graph at a time, and calls `visit` on each. A graph the
/// HTP's memory planner refuses (graphFinalize, QNN_COMMON_ERROR_MEM_ALLOC) is split in two
/// halves; a single observed value that still does not fit is the error.
pub(crate) fn each_observed_graph(
    target: &Target,
    name: &str,
    plan: &Plan,
    model_outputs: usize,
    budget: usize,
    visit: &mut dyn FnMut(ObservedGraph) -> Result<()>,
) -> Result<ObservedCost> {
    target.check_plan(plan)?;
    let model_outputs = model_outputs.min(plan.outputs.len());
    let model_tensors: HashSet<usize> = plan.outputs[..model_outputs]
        .iter()
        .map(|io| io.tensor)
        .collect();
    let observed: Vec<usize> = (model_outputs..plan.outputs.len())
        .filter(|&i| !model_tensors.contains(&plan.outputs[i].tensor))
        .collect();
    let mut chunks: VecDeque<Vec<usize>> = VecDeque::new();
    let mut bytes = 0;
    for &i in &observed {
        let b = plan.tensors[plan.outputs[i].tensor].nbytes();
        match chunks.back_mut() {
            Some(c) if bytes + b <= budget => c.push(i),
            _ => {
                chunks.push_back(vec![i]);
                bytes = 0;
            }
        }
        bytes += b;
    }
    if chunks.is_empty() {
        chunks.push_back(Vec::new());
    }
    let runtime = registry::for_target(target, None, false)?;
    let mut cost = ObservedCost::default();
    while let Some(chunk) = chunks.pop_front() {
        let keep: HashSet<usize> = chunk.iter().copied().collect();
        let mut p = plan.clone();
        p.outputs.clear();
        for (i, io) in plan.outputs.iter().enumerate() {
            if i < model_outputs || keep.contains(&i) {
                p.outputs.push(io.clone());
            } else if !model_tensors.contains(&io.tensor) {
                p.tensors[io.tensor].kind = TensorKind::Native;
            }
        }
        let start = Instant::now();
        let built = {
            let active = registry::hold(&runtime)?;
            let context = qnn::Context::new(&runtime.backend, Some(&runtime.device))?;
            let e = emit(&context, name, &p);
            drop(active);
            e.map(|e| (e, context))
        };
        cost.build_ms += start.elapsed().as_secs_f64() * 1e3;
        let (emitted, _context) = match built {
            Ok(b) => b,
            Err(e) if e.is_finalize_mem_alloc() && chunk.len() > 1 => {
                tracing::info!(
                    target: "qnnx::observe",
                    "{} observed values do not fit one graph (QNN_COMMON_ERROR_MEM_ALLOC): \
                     splitting them in two",
                    chunk.len()
                );
                cost.splits += 1;
                let (a, b) = chunk.split_at(chunk.len() / 2);
                chunks.push_front(b.to_vec());
                chunks.push_front(a.to_vec());
                continue;
            }
            Err(e) => return Err(e),
        };
        tracing::info!(
            target: "qnnx::observe",
            "observed graph {}: {} values, built in {:.0} ms",
            cost.graphs + 1,
            chunk.len(),
            start.elapsed().as_secs_f64() * 1e3
        );
        visit(ObservedGraph {
            emitted: &emitted,
            plan: &p,
            index: cost.graphs,
            planned: cost.graphs + 1 + chunks.len(),
        })?;
        cost.graphs += 1;
    }
    Ok(cost)
}

/// How a tensor's range is taken from its calibration values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Observer {
    /// The smallest and largest value seen.
    MinMax,
    /// The `p`th and `100 - p`th percentiles (of a bounded sample of the values), which ignores
    /// rare outliers that would stretch an 8-bit range: `p` is in (90, 100).
    Percentile(f64),
}

impl Observer {
    /// `minmax`, or `percentile` (99.99) / `percentile:P`.
    pub fn parse(s: &str) -> Option<Observer> {
        match s {
            "minmax" => Some(Observer::MinMax),
            "percentile" => Some(Observer::Percentile(99.99)),
            _ => {
                let p: f64 = s.strip_prefix("percentile:")?.parse().ok()?;
                (p > 90.0 && p < 100.0).then_some(Observer::Percentile(p))
            }
        }
    }
}

/// Values kept per tensor for a percentile: a uniform sample of at most this many.
const SAMPLE: usize = 1 << 16;

#[derive(Default)]
struct Stats {
    lo: f32,
    hi: f32,
    seen: u64,
    sample: Vec<f32>,
    rng: u64,
}

impl Stats {
    fn add(&mut self, v: &[f32], keep_sample: bool) {
        for &x in v.iter().filter(|x| x.is_finite()) {
            if self.seen == 0 {
                (self.lo, self.hi) = (x, x);
                self.rng = 0x9e37_79b9_7f4a_7c15;
            }
            self.lo = self.lo.min(x);
            self.hi = self.hi.max(x);
            self.seen += 1;
            if !keep_sample {
                continue;
            }
            // Reservoir sampling with a fixed-seed xorshift: the same data gives the same range.
            if self.sample.len() < SAMPLE {
                self.sample.push(x);
            } else {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let j = (self.rng % self.seen) as usize;
                if j < SAMPLE {
                    self.sample[j] = x;
                }
            }
        }
    }

    fn range(&mut self, observer: Observer) -> Option<Range> {
        if self.seen == 0 {
            return None;
        }
        match observer {
            Observer::MinMax => Some(Range {
                lo: self.lo,
                hi: self.hi,
            }),
            Observer::Percentile(p) => {
                let s = &mut self.sample;
                s.sort_by(f32::total_cmp);
                let at = |q: f64| s[((q / 100.0) * (s.len() - 1) as f64).round() as usize];
                Some(Range {
                    lo: at(100.0 - p),
                    hi: at(p),
                })
            }
        }
    }
}

/// What [`calibrate`] measured.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The range of each model value computed on the device, by name (graph inputs included).
    pub ranges: HashMap<String, Range>,
    pub samples: usize,
    /// The graphs the observed values took.
    pub cost: ObservedCost,
}

/// Runs `onnx` (float) on `target` over `samples` (each the model's inputs, in order) and returns
/// the range of every observed value. `progress(done, total)` is called after each sample.
pub fn calibrate(
    target: &Target,
    onnx: &[u8],
    base_dir: Option<&Path>,
    input_shapes: &BTreeMap<String, Vec<usize>>,
    samples: &[Vec<HostTensor>],
    observer: Observer,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Calibration> {
    if samples.is_empty() {
        return Err(Error::Input(
            "the calibration set is empty: give at least one sample of the model's inputs (a few \
             dozen of the kind the model sees make good ranges)"
                .into(),
        ));
    }
    let opts = CompileOptions {
        input_shapes: input_shapes.clone(),
        observe: true,
        ..Default::default()
    };
    // Calibration lowers without fp16: observed tensors are f32.
    let model = lowering::Model::from_bytes(onnx, base_dir)?;
    let model_outputs = model.graph.outputs.len();
    let plan = lowering::lower(model, &opts.model_io().lower_options(target.backend, false))?;
    let keep = matches!(observer, Observer::Percentile(_));
    let mut stats: HashMap<String, Stats> = HashMap::new();
    let n = samples.len();
    let cost = each_observed_graph(
        target,
        "calibration",
        &plan,
        model_outputs,
        observed_bytes(),
        &mut |g| {
            let e = g.emitted;
            for (k, sample) in samples.iter().enumerate() {
                let outs = e.run(sample).map_err(|err| match err {
                    Error::Input(m) => Error::Input(format!("calibration sample {k}: {m}")),
                    other => other,
                })?;
                if g.index == 0 {
                    for (io, t) in e.inputs.iter().zip(sample) {
                        if let Some(v) = t.to_f32() {
                            stats.entry(io.onnx_name.clone()).or_default().add(&v, keep);
                        }
                    }
                }
                for (io, t) in e.outputs.iter().zip(&outs) {
                    if let Some(v) = t.to_f32() {
                        stats.entry(io.onnx_name.clone()).or_default().add(&v, keep);
                    }
                }
                progress(g.index * n + k + 1, g.planned * n);
            }
            Ok(())
        },
    )?;
    let ranges = stats
        .into_iter()
        .filter_map(|(name, mut s)| s.range(observer).map(|r| (name, r)))
        .collect();
    Ok(Calibration {
        ranges,
        samples: samples.len(),
        cost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observers_parse() {
        assert_eq!(Observer::parse("minmax"), Some(Observer::MinMax));
        assert_eq!(
            Observer::parse("percentile"),
            Some(Observer::Percentile(99.99))
        );
        assert_eq!(
            Observer::parse("percentile:99.9"),
            Some(Observer::Percentile(99.9))
        );
        assert_eq!(Observer::parse("percentile:50"), None);
        assert_eq!(Observer::parse("mse"), None);
    }

    #[test]
    fn percentile_ignores_a_rare_outlier() {
        let mut s = Stats::default();
        let mut v: Vec<f32> = (0..10_000).map(|i| (i % 100) as f32 / 100.0).collect();
        v[17] = 1000.0;
        s.add(&v, true);
        let mm = s.range(Observer::MinMax).unwrap();
        assert_eq!(mm.hi, 1000.0);
        let p = s.range(Observer::Percentile(99.9)).unwrap();
        assert!(p.hi < 1.0 && p.lo >= 0.0, "{p:?}");
    }
}
