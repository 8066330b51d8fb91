//! Calibration for quantization: the ranges a float model's activations take on sample inputs,
//! measured by running the model on a backend with every intermediate that holds a model value
//! as an output ([`lowering::LowerOptions::observe`]). On x86_64 with no SoC set the HTP
//! emulator computes floats exactly in fp32, which makes it a faithful calibrator; a v68 target
//! has no float path and is refused, as for any float model.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use lowering::quantize::Range;

use crate::compile::{compile, CompileOptions};
use crate::error::{Error, Result};
use crate::io::HostTensor;
use crate::target::Target;

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
        name: "calibration".into(),
        input_shapes: input_shapes.clone(),
        observe: true,
        base_dir: base_dir.map(Path::to_path_buf),
        ..Default::default()
    };
    let compiled = compile(target, onnx, &opts, None)?;
    let e = &compiled.emitted;
    let keep = matches!(observer, Observer::Percentile(_));
    let mut stats: HashMap<String, Stats> = HashMap::new();
    for (k, sample) in samples.iter().enumerate() {
        let outs = e.run(sample).map_err(|err| match err {
            Error::Input(m) => Error::Input(format!("calibration sample {k}: {m}")),
            other => other,
        })?;
        for (io, t) in e.inputs.iter().zip(sample) {
            if let Some(v) = t.to_f32() {
                stats.entry(io.onnx_name.clone()).or_default().add(&v, keep);
            }
        }
        for (io, t) in e.outputs.iter().zip(&outs) {
            // Calibration compiles without fp16: observed tensors are f32.
            let v = t.to_f32();
            if let Some(v) = v {
                stats.entry(io.onnx_name.clone()).or_default().add(&v, keep);
            }
        }
        progress(k + 1, samples.len());
    }
    let ranges = stats
        .into_iter()
        .filter_map(|(name, mut s)| s.range(observer).map(|r| (name, r)))
        .collect();
    Ok(Calibration {
        ranges,
        samples: samples.len(),
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
