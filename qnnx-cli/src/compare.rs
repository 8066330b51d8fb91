//! `qnnx compare`: where a model loses accuracy on the HTP, layer by layer. The model (fp16 on
//! an FP16 SoC, or a QDQ model on any SoC) and its reference (the same float model, or the
//! float model given with --reference, in exact fp32 on the SoC-less emulator) are both built
//! with their intermediates as outputs and run on the same inputs
//! ([`qnnx_engine::compare::compare`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use qnnx_engine::compare::{compare_samples, is_qdq, Build, CompareOptions, Layer, Report};
use qnnx_engine::{HostTensor, Target};
use qnnx_types::BackendKind;
use serde_json::json;

use crate::build::{compile_failure, load_onnx, parse_shapes, Precision};
use crate::inputs::{input_arrays, npz_samples, Io};
use crate::target::TargetArgs;
use crate::{emit, Cli, Failure};

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The model to measure: a float model (run at --precision) or a quantized (QDQ) one.
    pub model: PathBuf,
    /// The float model a QDQ model was quantized from [default: MODEL itself, which must then
    /// be a float model].
    #[arg(long, value_name = "FLOAT.onnx")]
    pub reference: Option<PathBuf>,
    /// The SoC the model is measured on (the reference always runs in exact fp32 on the
    /// SoC-less emulator).
    #[command(flatten)]
    pub target: TargetArgs,
    /// Precision of a float model's graph on the target.
    #[arg(long, value_enum, default_value_t = Precision::Fp16)]
    pub precision: Precision,
    /// An input as NAME=FILE.npy (repeatable); inputs not given are random (deterministic per
    /// input name, as for `qnnx run`).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Samples instead: a .npz with one array per model input (one sample, or several stacked
    /// on a new first axis) or a folder of .npz files, one sample each (as `qnnx quantize
    /// --calib` takes). Every sample runs through both builds; each value's numbers are over all
    /// of them, and the outputs' rows make one batch (cosine, top-1 agreement, pairwise
    /// similarity).
    #[arg(long = "inputs", value_name = "DIR_OR_NPZ", conflicts_with = "inputs")]
    pub samples: Option<PathBuf>,
    /// Static shape for an input with symbolic dims, as NAME=D,D,... (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// A value is the first jump when its SQNR is this many dB below its inputs'.
    #[arg(long, default_value_t = 10.0, value_name = "DB")]
    pub jump_db: f64,
    /// How many of the worst layers the text table shows (JSON and CSV have all).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Also write every layer as CSV to this file.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv(rep: &Report) -> String {
    let mut out =
        "value,node,op_type,order,sqnr_db,cosine,max_abs_err,nonfinite,input_sqnr_db,is_output,first_jump\n"
            .to_string();
    for l in &rep.layers {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&l.value),
            csv_field(&l.node),
            l.op_type,
            l.order,
            l.sqnr_db,
            l.cosine,
            l.max_abs_err,
            l.nonfinite,
            l.input_sqnr_db.map(|x| x.to_string()).unwrap_or_default(),
            l.is_output,
            rep.first_jump.as_deref() == Some(l.value.as_str()),
        );
    }
    out
}

fn text(rep: &Report, top: usize, test: &str, samples: usize) -> String {
    let over = if samples > 1 {
        format!(" over {samples} samples")
    } else {
        String::new()
    };
    let mut t = format!(
        "{} values compared{over} (reference: exact fp32 on the emulator; test: {test}), worst \
         first:\n",
        rep.layers.len()
    );
    let width = |f: fn(&Layer) -> usize, min: usize| {
        rep.layers
            .iter()
            .take(top)
            .map(f)
            .max()
            .unwrap_or(min)
            .max(min)
    };
    let w = width(|l| l.value.len(), 5);
    let o = width(|l| l.op_type.len(), 2);
    let _ = writeln!(
        t,
        "  {:<w$}  {:<o$} {:>9} {:>10} {:>11}",
        "value", "op", "SQNR dB", "cosine", "max |err|"
    );
    for l in rep.layers.iter().take(top) {
        let mark = if rep.first_jump.as_deref() == Some(l.value.as_str()) {
            "  <- first jump"
        } else if l.is_output {
            "  (output)"
        } else {
            ""
        };
        let _ = writeln!(
            t,
            "  {:<w$}  {:<o$} {:>9.2} {:>10.6} {:>11.4e}{mark}",
            l.value, l.op_type, l.sqnr_db, l.cosine, l.max_abs_err
        );
    }
    if rep.layers.len() > top {
        let _ = writeln!(
            t,
            "  ... {} more (--top, --json, --csv)",
            rep.layers.len() - top
        );
    }
    for b in &rep.batch {
        let _ = write!(
            t,
            "output {} over {} inputs: cosine min {:.5} / mean {:.5}, top-1 agreement {:.3}",
            b.value, b.n, b.cosine_min, b.cosine_mean, b.top1_agreement
        );
        if let (Some(c), Some(mr), Some(mt), Some(nn)) = (
            b.offdiag_correlation,
            b.offdiag_mean_reference,
            b.offdiag_mean_test,
            b.nn_agreement,
        ) {
            let _ = write!(
                t,
                "; pairwise similarity: correlation {c:.4}, mean {mr:.3} -> {mt:.3}, \
                 nearest-neighbour agreement {nn:.3}"
            );
        }
        t.push('\n');
    }
    match rep.first_jump.as_deref().and_then(|v| rep.layer(v)) {
        Some(l) => {
            let from = l
                .input_sqnr_db
                .map(|b| format!("{b:.2} dB at its inputs"))
                .unwrap_or_else(|| "the model's median".into());
            let _ = write!(
                t,
                "first jump: {} ({} node {:?}): {:.2} dB, from {from}",
                l.value, l.op_type, l.node, l.sqnr_db
            );
        }
        None => {
            let _ = write!(
                t,
                "first jump: none (no value falls more than {} dB below its inputs)",
                rep.jump_db
            );
        }
    }
    t
}

pub fn compare_cmd(cli: &Cli, args: &CompareArgs) -> Result<ExitCode, Failure> {
    if args.target.backend != BackendKind::Htp {
        return Err(Failure::usage(
            "compare runs on the HTP backend (the emulator on x86_64)",
        ));
    }
    if !(args.jump_db.is_finite() && args.jump_db > 0.0) {
        return Err(Failure::usage("--jump-db must be a positive number of dB"));
    }
    let input_shapes: BTreeMap<String, Vec<usize>> = parse_shapes(&args.input_shapes)?;
    let model = load_onnx(&args.model)?;
    let quantized = is_qdq;
    let reference = match &args.reference {
        Some(p) => {
            let r = load_onnx(p)?;
            if quantized(&r.model) {
                return Err(Failure::usage(format!(
                    "--reference {}: the reference must be the float model (it has \
                     QuantizeLinear/DequantizeLinear nodes)",
                    p.display()
                )));
            }
            Some((p.clone(), r))
        }
        None if quantized(&model.model) => {
            return Err(Failure::usage(format!(
                "{} is a quantized (QDQ) model: give the float model it came from with \
                 --reference FLOAT.onnx",
                args.model.display()
            )))
        }
        None => None,
    };
    let (ref_path, ref_file) = match &reference {
        Some((p, f)) => (p, f),
        None => (&args.model, &model),
    };
    let inputs = crate::quantize::static_inputs(ref_file, &input_shapes)?;
    let samples: Vec<Vec<HostTensor>> = match &args.samples {
        Some(path) => npz_samples(path, &inputs)?,
        None => {
            let ios: Vec<Io> = inputs
                .into_iter()
                .map(|(name, dtype, shape)| Io { name, dtype, shape })
                .collect();
            let arrays = input_arrays(&args.inputs, &ios, "the model")?;
            vec![arrays
                .into_iter()
                .map(|a| HostTensor {
                    dtype: a.dtype,
                    shape: a.shape,
                    data: a.data,
                })
                .collect()]
        }
    };
    let sample_refs: Vec<&[HostTensor]> = samples.iter().map(Vec::as_slice).collect();
    let exact = Target {
        backend: BackendKind::Htp,
        soc_model: None,
        htp_arch: None,
        library: cli.qnn_lib.clone(),
    };
    let target = crate::target::resolve(cli, &args.target, None)?;
    let test_qdq = quantized(&model.model);
    let fp16 = args.precision == Precision::Fp16 && !test_qdq && !target.lacks_float();
    let rb = Build {
        target: &exact,
        onnx: &ref_file.bytes,
        base_dir: Some(ref_file.dir.clone()),
        fp16: false,
    };
    let tb = Build {
        target: &target,
        onnx: &model.bytes,
        base_dir: Some(model.dir.clone()),
        fp16,
    };
    let opts = CompareOptions {
        input_shapes,
        jump_db: args.jump_db,
    };
    let start = std::time::Instant::now();
    let rep = compare_samples(&rb, &tb, &sample_refs, &opts).map_err(|e| match e {
        qnnx_engine::Error::Input(m) => Failure::usage(m),
        qnnx_engine::Error::NoFloatPath { .. } => Failure::unsupported(
            format!(
                "{} has no float path: compare a quantized model on it (qnnx quantize, then \
                 qnnx compare MODEL.qdq.onnx --reference {})",
                target.describe(),
                args.model.display()
            ),
            None,
        ),
        other => compile_failure(other, &args.model, BackendKind::Htp),
    })?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if let Some(p) = &args.csv {
        std::fs::write(p, csv(&rep)).map_err(|e| Failure::new(format!("{}: {e}", p.display())))?;
    }
    let test = format!(
        "{} on {}",
        if test_qdq {
            "the quantized model"
        } else if fp16 {
            "fp16"
        } else {
            "fp32"
        },
        target.describe()
    );
    let mut value = rep.json();
    value["model"] = json!(args.model);
    value["reference"] = json!(ref_path);
    value["target"] = json!(target.describe());
    value["test"] = json!(test);
    value["elapsed_ms"] = json!(ms);
    value["samples"] = json!(samples.len());
    emit(cli, &value, || {
        text(&rep, args.top, &test, samples.len()) + "\n"
    });
    Ok(ExitCode::SUCCESS)
}
