//! `qnnx inspect`: a context binary's or saved model's graphs, inputs and outputs, build id and
//! SoC; an LLM artifact's manifest.

use std::path::Path;
use std::process::ExitCode;

use qnnx_types::tensor_type_name;
use serde_json::{json, Value};

use crate::{emit, read_file, system_library, Cli, Failure};

/// A tensor's element type as `inspect` and `compile` print it (`f32`, `qu8`).
pub fn dtype_name(t: &qnn::TensorInfo) -> String {
    tensor_type_name(t.dtype, t.quantization.is_quantized())
}

/// A fixed-point tensor's encoding as `inspect` prints it (`scale=0.02 offset=-128`, or per
/// axis `axis=3 x64 scale=0.001..0.02`), empty for float and plain integer tensors.
pub fn encoding_text(q: &qnn::Quantization) -> String {
    match q {
        qnn::Quantization::None => String::new(),
        qnn::Quantization::ScaleOffset { scale, offset } => {
            format!("scale={scale} offset={offset}")
        }
        qnn::Quantization::PerAxis {
            axis,
            scale_offsets,
        } => {
            let (lo, hi) = scale_offsets
                .iter()
                .fold((f32::INFINITY, 0f32), |(l, h), &(s, _)| {
                    (l.min(s), h.max(s))
                });
            format!("axis={axis} x{} scale={lo}..{hi}", scale_offsets.len())
        }
        qnn::Quantization::BlockwiseExpansion {
            axis,
            scale_offsets,
            blocks,
            block_scale_bits,
            ..
        } => format!(
            "axis={axis} x{} blockwise x{blocks} blocks ({block_scale_bits}-bit block scales)",
            scale_offsets.len()
        ),
        qnn::Quantization::Unparsed { encoding } => format!("encoding {encoding} (not parsed)"),
    }
}

pub fn tensor_json(t: &qnn::TensorInfo) -> Value {
    json!({
        "name": t.name,
        "dtype": dtype_name(t),
        "shape": t.dims,
        "id": t.id,
        "encoding": qnnx_engine::saved::encoding_json(&t.quantization),
    })
}

/// `inspect` of a saved model: its manifest, checked against the file (binary hash included).
fn inspect_saved(cli: &Cli, model: &Path) -> Result<ExitCode, Failure> {
    let m = qnnx_engine::saved::read_manifest(model)
        .map_err(|e| Failure::new(format!("{e}\nhint: {}", crate::run::DAMAGED_SAVED)))?;
    let report = json!({ "file": model, "saved_model": m });
    emit(cli, &report, || {
        let soc = m
            .soc_model
            .map(|s| match qnn::soc::by_model(s) {
                Some(k) => format!("SoC {s} ({}, HTP {})", k.name, k.arch),
                None => format!("SoC {s}"),
            })
            .unwrap_or_else(|| "no SoC".into());
        let mut s = format!(
            "{}: saved model (qnnx {}), {} backend, QNN build {}, {soc}, binary {} bytes\n",
            model.display(),
            m.qnnx_version,
            m.backend,
            m.qnn_build_id,
            m.binary_size
        );
        if !m.options.is_empty() {
            let o: Vec<String> = m.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s += &format!("options: {}\n", o.join(", "));
        }
        for g in &m.graphs {
            s += &format!("graph {:?}\n", g.name);
            for (what, list) in [("input ", &g.inputs), ("output", &g.outputs)] {
                for t in list {
                    s += &format!("  {what} {:<24} {:<5} {:?}\n", t.name, t.dtype, t.dims);
                }
            }
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}

/// `inspect` of an LLM artifact folder: its manifest, every file's sha256 checked.
fn inspect_llm(cli: &Cli, dir: &Path) -> Result<ExitCode, Failure> {
    let m = qnnx_engine::llm::read_manifest(dir)?;
    let report = json!({ "artifact": dir, "llm": m });
    emit(cli, &report, || {
        let (s, t) = (&m.model, &m.target);
        let size: u64 = m.files.values().map(|f| f.size).sum();
        let mut out = format!(
            "{}: LLM artifact (qnnx {}), {} {}, {} layers, hidden {}, {} heads / {} KV heads \
             of {}, vocabulary {}\n{} for SoC {} (HTP v{}), QNN build {}; {} bytes in {} \
             files\ncache {} positions of {}{}; prefill buckets {:?}; stop tokens {:?}\n",
            dir.display(),
            m.qnnx_version,
            s.family,
            m.precision,
            s.layers,
            s.hidden_size,
            s.heads,
            s.kv_heads,
            s.head_dim,
            s.vocab_size,
            t.backend,
            t.soc_model,
            t.htp_arch.map_or("?".into(), |a| a.to_string()),
            t.qnn_build_id,
            size,
            m.files.len(),
            m.cache.length,
            m.cache.dtype,
            if m.cache.encoding.is_null() {
                String::new()
            } else {
                format!(" ({})", m.cache.encoding)
            },
            m.prefill_buckets,
            m.tokens.stop
        );
        if let Some(c) = &m.contexts {
            out += &format!("contexts: {c}\n");
        }
        if let Some(n) = m.shards.filter(|&n| n > 1) {
            out += &format!("shards: {n} per step, run one after another\n");
        }
        for g in &m.graphs {
            let layers = g
                .layers
                .map_or(String::new(), |[a, b]| format!(", layers {a} to {}", b - 1));
            out += &format!(
                "graph {} ({}, {} tokens{layers}) in {}\n",
                g.name, g.kind, g.tokens, g.file
            );
        }
        out
    });
    Ok(ExitCode::SUCCESS)
}

pub fn inspect(cli: &Cli, model: &Path) -> Result<ExitCode, Failure> {
    if model.is_dir() {
        return inspect_llm(cli, model);
    }
    if crate::run::is_saved(model) {
        return inspect_saved(cli, model);
    }
    let bytes = read_file(model)?;
    let system = system_library(cli)?;
    let info = qnn::binary_info(&system, &bytes).map_err(|e| {
        let hint = if lowering::Model::from_bytes(&bytes, None).is_ok() {
            format!(
                "this is an ONNX model: `qnnx compile {0}` makes a context binary, `qnnx run {0}` runs it",
                model.display()
            )
        } else {
            crate::run::DAMAGED_BINARY.into()
        };
        Failure::new(format!("{}: {e}\nhint: {hint}", model.display()))
    })?;
    let soc = info.soc_model.and_then(qnn::soc::by_model);
    let graphs: Vec<Value> = info
        .graphs
        .iter()
        .map(|g| {
            json!({
                "name": g.name,
                "inputs": g.inputs.iter().map(tensor_json).collect::<Vec<_>>(),
                "outputs": g.outputs.iter().map(tensor_json).collect::<Vec<_>>(),
                "htp_memory": g.htp.map(|h| json!({
                    "own_weights_bytes": h.const_size,
                    "shared_weights_bytes": h.shared_weights_size,
                    "io_bytes": h.io_tensor_size,
                    "op_data_bytes": h.op_data_size,
                    "spill_fill_bytes": h.spill_fill_buffer_size,
                })),
            })
        })
        .collect();
    // Every graph of a weight-sharing context reports the whole shared buffer.
    let shared_bytes = info
        .graphs
        .iter()
        .filter_map(|g| g.htp)
        .map(|h| h.shared_weights_size)
        .max()
        .unwrap_or(0);
    let report = json!({
        "file": model,
        "size": bytes.len(),
        "backend_id": info.backend_id,
        "build_id": info.build_id,
        "core_api": format!("{}.{}.{}", info.core_api_version.major, info.core_api_version.minor, info.core_api_version.patch),
        "backend_api": format!("{}.{}.{}", info.backend_api_version.major, info.backend_api_version.minor, info.backend_api_version.patch),
        "blob_version": format!("{}.{}.{}", info.blob_version.major, info.blob_version.minor, info.blob_version.patch),
        "soc_model": info.soc_model,
        "soc": soc.map(|s| s.name),
        "htp_arch": soc.map(|s| s.arch.number()),
        "graphs": graphs,
        "weight_sharing": info.uses_shared_weights(),
        "shared_weights_bytes": shared_bytes,
    });
    emit(cli, &report, || {
        let mut s = format!(
            "{}: {} bytes, QNN build {}, backend id {}, context blob {}\n",
            model.display(),
            bytes.len(),
            info.build_id,
            info.backend_id,
            report["blob_version"].as_str().unwrap_or("")
        );
        match (info.soc_model, soc) {
            (Some(m), Some(soc)) => {
                s += &format!("target: SoC {m} ({}, HTP {})\n", soc.name, soc.arch)
            }
            (Some(m), None) => s += &format!("target: SoC {m}\n"),
            _ => {}
        }
        if info.uses_shared_weights() {
            s += &format!(
                "{} graphs sharing {shared_bytes} bytes of weights (only a device can load this \
                 binary, not the x86_64 HTP library)\n",
                info.graphs.len()
            );
        }
        for g in &info.graphs {
            match g.htp {
                Some(h) => {
                    s += &format!(
                        "graph {:?}: {} bytes of its own weights\n",
                        g.name, h.const_size
                    )
                }
                None => s += &format!("graph {:?}\n", g.name),
            }
            for (what, list) in [("input ", &g.inputs), ("output", &g.outputs)] {
                for t in list {
                    s += &format!(
                        "  {what} {:<24} {:<5} {:?} {}\n",
                        t.name,
                        dtype_name(t),
                        t.dims,
                        encoding_text(&t.quantization)
                    );
                }
            }
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}
