//! `qnnx quantize`: a float ONNX model and calibration data in, a standard QDQ ONNX model out.
//! The float model runs on the HTP over the calibration samples with its intermediates as
//! outputs ([`qnnx_engine::calibrate`]); the ranges and the scheme make the QDQ model
//! ([`lowering::quantize::write_qdq`]).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use lowering::quantize::{Keep, QuantizeOptions, Scheme};
use qnnx_engine::calibrate::{calibrate, Observer};
use qnnx_engine::mixed::keep_args;
use qnnx_engine::{HostTensor, Target};
use qnnx_types::{BackendKind, DType};
use serde_json::json;

use crate::build::{compile_failure, load_onnx, parse_shapes, OnnxFile};
use crate::inputs::npz_samples;
use crate::target::TargetArgs;
use crate::{emit, Cli, Failure};

#[derive(clap::Args, Debug)]
pub struct QuantizeArgs {
    /// The float ONNX model.
    pub model: PathBuf,
    /// Calibration data: a .npz with one array per model input, holding one sample or several
    /// stacked on a new first axis; or a folder of .npz files, one sample each. Inputs of the
    /// kind the model sees (real images, text) make better ranges than noise.
    #[arg(long, value_name = "DIR_OR_NPZ")]
    pub calib: PathBuf,
    /// Activation and weight types: 8a8w (runs on every HTP, v68 included), 16a8w, 16a16w or
    /// 16a4w (int4 weights, written as ONNX INT4 initializers: half the weight bytes of 16a8w).
    #[arg(long, default_value = "8a8w", value_parser = parse_scheme)]
    pub scheme: Scheme,
    /// Quantize weights per output channel (the default).
    #[arg(long, conflicts_with = "per_tensor")]
    pub per_channel: bool,
    /// Quantize weights per tensor instead.
    #[arg(long)]
    pub per_tensor: bool,
    /// Keep a node (by name) or every node of an op type (Softmax) out of the scheme: NAME keeps
    /// it in float, NAME=16 at 16-bit activations (repeatable). Float is impossible on v68.
    #[arg(long = "keep", value_name = "NODE_OR_OP[=16]")]
    pub keep: Vec<String>,
    /// How a range is taken from the calibration values: minmax, or percentile[:P] (P in
    /// (90, 100), default 99.99) to ignore rare outliers.
    #[arg(long, default_value = "minmax", value_parser = parse_observer)]
    pub observer: Observer,
    /// Where to write the QDQ model.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// The backend the float model is calibrated on. Without a SoC the x86_64 HTP emulator
    /// computes floats exactly in fp32; a v68 SoC has no float path to calibrate on.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Static shape for an input with symbolic dims, as NAME=D,D,... (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// Automatic mixed precision: promote the fewest nodes to 16-bit activations until every
    /// model output is within this SQNR (dB) of the float model, measured on --for-soc's HTP
    /// (emulated on x86_64) with the last calibration sample. Prints the --keep NODE=16
    /// arguments that pin the result.
    #[arg(long, value_name = "DB", requires = "for_soc")]
    pub target_sqnr_db: Option<f64>,
    /// The SoC the mixed-precision search measures on (QCS6490, SM8650, ...).
    #[arg(long, value_name = "NAME", requires = "target_sqnr_db")]
    pub for_soc: Option<String>,
    /// How many quantized models the search may build and compare.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 8,
        requires = "target_sqnr_db"
    )]
    pub max_attempts: usize,
}

fn parse_scheme(s: &str) -> Result<Scheme, String> {
    Scheme::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Scheme::ALL.iter().map(|s| s.name()).collect();
        format!("unknown scheme {s:?}; use one of {}", names.join(", "))
    })
}

fn parse_observer(s: &str) -> Result<Observer, String> {
    Observer::parse(s).ok_or_else(|| {
        format!("unknown observer {s:?}; use minmax or percentile[:P] with P in (90, 100)")
    })
}

fn parse_keep(specs: &[String]) -> Result<Vec<(String, Keep)>, Failure> {
    specs
        .iter()
        .map(|s| match s.rsplit_once('=') {
            None => Ok((s.clone(), Keep::Float)),
            Some((n, "16")) => Ok((n.to_string(), Keep::Bits16)),
            Some((n, "float")) => Ok((n.to_string(), Keep::Float)),
            Some((_, v)) => Err(Failure::usage(format!(
                "--keep {s}: {v:?} is not a precision; use NAME (float) or NAME=16"
            ))),
        })
        .collect()
}

/// The model's inputs: name, dtype and static shape (symbolic dims from `input_shapes`).
pub(crate) fn static_inputs(
    file: &OnnxFile,
    input_shapes: &BTreeMap<String, Vec<usize>>,
) -> Result<Vec<(String, DType, Vec<usize>)>, Failure> {
    let g = &file.model.graph;
    let mut inputs = Vec::new();
    for (k, &v) in g.inputs.iter().enumerate() {
        let val = g.value(v);
        let shape = match (input_shapes.get(&val.name), file.model.input_dims.get(k)) {
            (Some(s), _) => s.clone(),
            (None, Some(Some(d))) if d.iter().all(Option::is_some) => {
                d.iter().flatten().copied().collect()
            }
            _ => {
                return Err(Failure::usage(format!(
                    "input {:?} has symbolic dims; give --input-shape {}=D,D,...",
                    val.name, val.name
                )))
            }
        };
        inputs.push((val.name.clone(), val.dtype, shape));
    }
    Ok(inputs)
}

pub fn quantize(cli: &Cli, args: &QuantizeArgs) -> Result<ExitCode, Failure> {
    let input_shapes = parse_shapes(&args.input_shapes)?;
    let keep = parse_keep(&args.keep)?;
    if args.target.backend != BackendKind::Htp {
        return Err(Failure::usage(
            "calibration runs on the HTP backend (the emulator on x86_64)",
        ));
    }
    let file = load_onnx(&args.model)?;
    let inputs = static_inputs(&file, &input_shapes)?;
    let samples = npz_samples(&args.calib, &inputs)?;
    let target = if args.target.soc.is_none()
        && args.target.soc_model.is_none()
        && args.target.htp_arch.is_none()
    {
        Target {
            backend: BackendKind::Htp,
            soc_model: None,
            htp_arch: None,
            library: cli.qnn_lib.clone(),
        }
    } else {
        crate::target::resolve(cli, &args.target, None)?
    };
    let bar = (!cli.json && std::io::stderr().is_terminal()).then(|| {
        let b = ProgressBar::new(samples.len() as u64);
        if let Ok(s) =
            ProgressStyle::with_template("calibrating {bar:30} {pos}/{len} runs [{elapsed}]")
        {
            b.set_style(s);
        }
        b
    });
    let start = std::time::Instant::now();
    let cal = calibrate(
        &target,
        &file.bytes,
        Some(&file.dir),
        &input_shapes,
        &samples,
        args.observer,
        &mut |done, total| {
            if let Some(b) = &bar {
                b.set_length(total as u64);
                b.set_position(done as u64);
            }
        },
    )
    .map_err(|e| match e {
        qnnx_engine::Error::Input(m) => Failure::usage(m),
        qnnx_engine::Error::NoFloatPath { .. } => Failure::usage(format!(
            "calibration runs the float model, which {} cannot: drop --soc (the emulator then \
             computes in fp32) or name an FP16-capable SoC",
            target.describe()
        )),
        other => compile_failure(other, &args.model, BackendKind::Htp),
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let calib_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut opts = QuantizeOptions {
        scheme: args.scheme,
        per_channel: !args.per_tensor,
        keep,
    };
    let mixed = match args.target_sqnr_db {
        Some(db) => Some(search(
            cli,
            args,
            &file,
            &target,
            &input_shapes,
            &samples,
            &cal,
            &opts,
            db,
        )?),
        None => None,
    };
    if let Some(m) = &mixed {
        opts.keep.extend(m.keep.iter().cloned());
    }
    let (bytes, report) =
        lowering::quantize::write_qdq(&file.bytes, &file.model, &input_shapes, &cal.ranges, &opts)
            .map_err(|e| Failure::new(format!("{}: {e}", args.model.display())))?;
    if !report.unmatched_keep.is_empty() {
        return Err(Failure::usage(format!(
            "--keep {}: no node has that name or op type",
            report.unmatched_keep.join(", ")
        )));
    }
    // Written next to the target first, then moved: a failed write leaves no half file.
    let tmp = args.output.with_extension("onnx.partial");
    std::fs::write(&tmp, &bytes)
        .and_then(|_| std::fs::rename(&tmp, &args.output))
        .map_err(|e| Failure::new(format!("{}: {e}", args.output.display())))?;
    let text = {
        let mut t = format!(
            "wrote {} ({}, {} bytes): {} activation tensors and {} weights quantized, calibrated \
             on {} samples in {calib_ms:.0} ms",
            args.output.display(),
            args.scheme.name(),
            bytes.len(),
            report.activations,
            report.weights,
            cal.samples
        );
        if cal.cost.graphs > 1 {
            t.push_str(&format!(
                " (the observed values in {} graphs: one would not fit the HTP's memory)",
                cal.cost.graphs
            ));
        }
        if !report.float_nodes.is_empty() {
            t.push_str(&format!(
                "\n{} node(s) stay float:",
                report.float_nodes.len()
            ));
            for (n, why) in report.float_nodes.iter().take(20) {
                t.push_str(&format!("\n  {n}: {why}"));
            }
            if report.float_nodes.len() > 20 {
                t.push_str("\n  ...");
            }
        }
        if let (Some(m), Some(db)) = (&mixed, args.target_sqnr_db) {
            t.push_str(&format!(
                "\nmixed precision for {}: {} of {} nodes promoted, output SQNR {} dB (target \
                 {db} dB; per attempt: {})",
                args.for_soc.as_deref().unwrap_or_default(),
                m.keep.len(),
                file.model.graph.nodes.len(),
                m.history.last().map_or("?".into(), |v| format!("{v:.1}")),
                m.history
                    .iter()
                    .map(|v| format!("{v:.1}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if !m.keep.is_empty() {
                t.push_str(&format!("\n  pin it with: {}", keep_args(&m.keep)));
            }
        }
        t.push_str(&format!(
            "\nnext: qnnx compile {} --soc {} (or any SoC)",
            args.output.display(),
            args.for_soc.as_deref().unwrap_or("QCS6490")
        ));
        t
    };
    let value = json!({
        "output": args.output,
        "scheme": args.scheme.name(),
        "bytes": bytes.len(),
        "samples": cal.samples,
        "calibration_ms": calib_ms,
        "calibration_graphs": cal.cost.graphs,
        "activations": report.activations,
        "weights": report.weights,
        "mixed": mixed.as_ref().map(|m| json!({
            "target_sqnr_db": args.target_sqnr_db,
            "soc": args.for_soc,
            "promoted": m.keep.iter().map(|(n, k)| json!({
                "node": n,
                "to": match k { Keep::Bits16 => "16", Keep::Float => "float" },
            })).collect::<Vec<_>>(),
            "keep": keep_args(&m.keep),
            "output_sqnr_db_per_attempt": m.history,
            "refused": m.refused.iter().map(|(n, why)| json!({"node": n, "reason": why})).collect::<Vec<_>>(),
        })),
        "float_nodes": report
            .float_nodes
            .iter()
            .map(|(n, w)| json!({"node": n, "reason": w}))
            .collect::<Vec<_>>(),
    });
    emit(cli, &value, || text);
    Ok(ExitCode::SUCCESS)
}

/// `--target-sqnr-db`: [`qnnx_engine::mixed::promote`] on `--for-soc` against the float model
/// run exactly (the SoC-less emulator), on the last calibration sample.
#[allow(clippy::too_many_arguments)]
fn search(
    cli: &Cli,
    args: &QuantizeArgs,
    file: &OnnxFile,
    calibrated_on: &Target,
    input_shapes: &BTreeMap<String, Vec<usize>>,
    samples: &[Vec<HostTensor>],
    cal: &qnnx_engine::calibrate::Calibration,
    base: &QuantizeOptions,
    db: f64,
) -> Result<qnnx_engine::mixed::Mixed, Failure> {
    use qnnx_engine::compare::{Build, CompareOptions};
    use qnnx_engine::mixed::{promote, MixedOptions};
    if !db.is_finite() {
        return Err(Failure::usage(format!(
            "--target-sqnr-db {db}: give a number of dB, such as 30"
        )));
    }
    if calibrated_on.soc_model.is_some() {
        return Err(Failure::usage(
            "--target-sqnr-db compares with the float model computed exactly, on the emulator \
             with no SoC: drop --soc/--soc-model (calibration then runs there too) and name the \
             SoC to search for with --for-soc",
        ));
    }
    let test = crate::target::resolve(
        cli,
        &TargetArgs {
            soc: args.for_soc.clone(),
            ..TargetArgs::default()
        },
        None,
    )?;
    let inputs = samples.last().cloned().unwrap_or_default();
    let reference = Build {
        target: calibrated_on,
        onnx: &file.bytes,
        base_dir: Some(file.dir.clone()),
        fp16: false,
    };
    let copts = CompareOptions {
        input_shapes: input_shapes.clone(),
        ..CompareOptions::default()
    };
    promote(
        &reference,
        &test,
        input_shapes,
        &cal.ranges,
        base,
        &inputs,
        &copts,
        &MixedOptions {
            target_sqnr_db: db,
            max_attempts: args.max_attempts.max(1),
        },
    )
    .map_err(|e| match e {
        qnnx_engine::Error::Input(m) => Failure::new(format!("{}: {m}", args.model.display())),
        other => compile_failure(other, &args.model, BackendKind::Htp),
    })
}
