//! `qnnx compile a.onnx b.onnx ... -o out.bin`: several models as graphs of one context binary
//! ([`qnnx_engine::compile::multi`]), with equal weights stored once unless
//! `--no-weight-sharing`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use qnnx_engine::compile::multi::{GraphSpec, MultiOptions};
use serde_json::{json, Value};

use crate::build::{
    compile_failure, context_binary, io_json, load_onnx, open_cache, parse_fixed, parse_shapes,
    stage_text, OnnxFile, Precision, Written,
};
use crate::compile::CompileArgs;
use crate::progress::Progress;
use crate::{emit, Cli, Failure};

/// Graph names: `--names`, else the file stems.
fn graph_names(models: &[PathBuf], names: &[String]) -> Result<Vec<String>, Failure> {
    let names: Vec<String> = if names.is_empty() {
        models
            .iter()
            .map(|m| {
                m.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect()
    } else if names.len() == models.len() {
        names.to_vec()
    } else {
        return Err(Failure::usage(format!(
            "--names gives {} names for {} models",
            names.len(),
            models.len()
        )));
    };
    let mut seen = std::collections::HashSet::new();
    for n in &names {
        if n.is_empty() {
            return Err(Failure::usage("a graph name is empty; pass --names"));
        }
        if !seen.insert(n.as_str()) {
            return Err(Failure::usage(format!(
                "two graphs would be named {n:?}; pass --names A,B,..."
            )));
        }
    }
    Ok(names)
}

/// Splits `--input-shape` entries by graph: `GRAPH:NAME=DIMS` applies to graph GRAPH only,
/// `NAME=DIMS` to every graph.
fn shapes_per_graph(
    specs: &[String],
    graphs: &[String],
) -> Result<Vec<BTreeMap<String, Vec<usize>>>, Failure> {
    let mut out = vec![BTreeMap::new(); graphs.len()];
    for spec in specs {
        let target = spec
            .split_once(':')
            .and_then(|(g, rest)| graphs.iter().position(|n| n == g).map(|i| (i, rest)));
        match target {
            Some((i, rest)) => out[i].extend(parse_shapes(&[rest.to_string()])?),
            None => {
                let shapes = parse_shapes(std::slice::from_ref(spec))?;
                for m in &mut out {
                    m.extend(shapes.clone());
                }
            }
        }
    }
    Ok(out)
}

/// `--fix-input` per graph: `GRAPH:NAME=VALUE` for one graph, `NAME=VALUE` for every graph.
fn fixed_per_graph(
    specs: &[String],
    graphs: &[String],
) -> Result<Vec<BTreeMap<String, String>>, Failure> {
    let mut out = vec![BTreeMap::new(); graphs.len()];
    for spec in specs {
        let target = spec
            .split_once(':')
            .filter(|(_, rest)| rest.contains('='))
            .and_then(|(g, rest)| graphs.iter().position(|n| n == g).map(|i| (i, rest)));
        match target {
            Some((i, rest)) => out[i].extend(parse_fixed(&[rest.to_string()])?),
            None => {
                let fixed = parse_fixed(std::slice::from_ref(spec))?;
                for m in &mut out {
                    m.extend(fixed.clone());
                }
            }
        }
    }
    Ok(out)
}

/// A size in bytes for people.
fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.0} KB", b as f64 / 1024.0),
        b => format!("{b} bytes"),
    }
}

pub fn compile_many(cli: &Cli, args: &CompileArgs) -> Result<ExitCode, Failure> {
    if args.graph_name.is_some() {
        return Err(Failure::usage(
            "--graph-name names the graph of one model; with several models use --names A,B,...",
        ));
    }
    let output = args.output.clone().ok_or_else(|| {
        Failure::usage("with several models, pass -o FILE for the one context binary")
    })?;
    if args.models.contains(&output) {
        return Err(Failure::usage(format!(
            "the output {} would replace a model",
            output.display()
        )));
    }
    let names = graph_names(&args.models, &args.names)?;
    let build = &args.build;
    let target = crate::target::resolve(cli, &build.target, None)?;
    let shapes = shapes_per_graph(&build.input_shapes, &names)?;
    let fixed = fixed_per_graph(&build.fix_inputs, &names)?;
    let fp16 = build.precision == Precision::Fp16;
    let progress = Progress::new(cli.json);
    let mut files: Vec<OnnxFile> = Vec::new();
    for model in &args.models {
        progress.stage(&format!("reading {}", model.display()));
        files.push(load_onnx(model)?);
    }
    let cache = if build.cache { open_cache(cli)? } else { None };
    let specs: Vec<GraphSpec> = files
        .iter()
        .zip(&names)
        .zip(shapes.into_iter().zip(fixed))
        .map(|((f, name), (input_shapes, fix_inputs))| GraphSpec {
            name: name.clone(),
            onnx: &f.bytes,
            input_shapes,
            fix_inputs,
            base_dir: Some(f.dir.clone()),
        })
        .collect();
    let opts = MultiOptions {
        fp16,
        opt_level: build.opt_level,
        weight_sharing: !args.no_weight_sharing,
    };
    let start = std::time::Instant::now();
    progress.stage("opening the QNN backend");
    let compiled = qnnx_engine::compile::multi::compile_multi_with_progress(
        &target,
        &specs,
        &opts,
        cache.as_ref(),
        &mut |stage, graph| progress.stage(&stage_text(stage, graph)),
    )
    .map_err(|e| {
        let model = e
            .graph
            .as_ref()
            .and_then(|g| names.iter().position(|n| n == g))
            .map(|i| args.models[i].as_path())
            .unwrap_or(Path::new(""));
        compile_failure(e.error, model, target.backend)
    })?;
    progress.finish();
    let total_ms = start.elapsed().as_secs_f64() * 1e3;
    for w in &compiled.warnings {
        eprintln!("qnnx: warning: {w}");
    }
    let binary = context_binary(
        &compiled.context,
        compiled.from_cache,
        cache.as_ref(),
        compiled.cache_key.as_ref(),
    )?;
    let origins: Vec<(&str, &qnnx_engine::profile::NodeOrigins)> = compiled
        .graphs
        .iter()
        .map(|g| (g.name.as_str(), &g.origins))
        .collect();
    let written = Written::write(
        &output,
        &binary,
        &origins,
        &compiled.runtime.backend,
        &target,
    )?;
    let (info, soc_model, soc) = (&written.info, written.soc_model, written.soc);
    let shared_bytes = info
        .as_ref()
        .and_then(|i| i.graphs.iter().filter_map(|g| g.htp).next())
        .map(|h| h.shared_weights_size)
        .unwrap_or(0);
    let weight_sharing = info
        .as_ref()
        .map(qnn::BinaryInfo::uses_shared_weights)
        .unwrap_or(compiled.weight_sharing);
    let graphs: Vec<Value> = compiled
        .graphs
        .iter()
        .zip(&args.models)
        .map(|(g, model)| {
            let (inputs, outputs) = io_json(&g.emitted);
            let htp = info
                .as_ref()
                .and_then(|i| i.graphs.iter().find(|x| x.name == g.name))
                .and_then(|x| x.htp);
            json!({
                "name": g.name,
                "model": model,
                "inputs": inputs,
                "outputs": outputs,
                "lower_ms": g.lower_ms,
                "finalize_ms": g.finalize_ms,
                "timings": crate::build::timings_json(&stages(g)),
                "own_weights_bytes": htp.map(|h| h.const_size),
            })
        })
        .collect();
    let report = json!({
        "models": args.models,
        "output": output,
        "size": binary.len(),
        "backend": target.backend.name(),
        "soc_model": soc_model,
        "soc": soc.map(|s| s.name),
        "htp_arch": soc.map(|s| s.arch).or(target.arch()).map(|a| a.number()),
        "build_id": info.as_ref().map(|i| i.build_id.clone()),
        "graphs": graphs,
        "weight_sharing": weight_sharing,
        "shared_weights_bytes": shared_bytes,
        "precision": if fp16 { "fp16" } else { "fp32" },
        "opt_level": build.opt_level,
        "total_ms": total_ms,
        "from_cache": compiled.from_cache,
        "cache_key": compiled.cache_key.as_ref().map(|k| k.to_string()),
    });
    emit(cli, &report, || {
        let target = written.describe(&target);
        let sharing = if weight_sharing {
            format!(
                ", weights shared between graphs ({} stored once)",
                human(shared_bytes)
            )
        } else {
            String::new()
        };
        let how = if compiled.from_cache {
            format!(" (loaded from the cache in {:.0} ms)", compiled.load_ms)
        } else {
            String::new()
        };
        let mut s = format!(
            "wrote {}: {} bytes, {} graphs for {target}{sharing}{how}\n",
            output.display(),
            binary.len(),
            graphs.len()
        );
        for g in &graphs {
            s += &format!(
                "graph {} from {}",
                g["name"],
                Path::new(g["model"].as_str().unwrap_or("")).display()
            );
            if !compiled.from_cache {
                s += &format!(
                    " (lowering {:.0} ms, finalize {:.0} ms)",
                    g["lower_ms"].as_f64().unwrap_or(0.0),
                    g["finalize_ms"].as_f64().unwrap_or(0.0)
                );
            }
            s += "\n";
            if args.timings && !compiled.from_cache {
                if let Some(mg) = compiled.graph(g["name"].as_str().unwrap_or("")) {
                    s += &crate::build::timings_text(&stages(mg));
                }
            }
            for (what, list) in [("input ", &g["inputs"]), ("output", &g["outputs"])] {
                for t in list.as_array().into_iter().flatten() {
                    s += &format!(
                        "  {what} {:<24} {:<5} {}\n",
                        t["name"].as_str().unwrap_or(""),
                        t["dtype"].as_str().unwrap_or(""),
                        t["shape"]
                    );
                }
            }
        }
        if weight_sharing && cfg!(target_arch = "x86_64") {
            s +=
                "note: this machine's HTP library cannot load weight-shared binaries: run it on a \
                  device, or compile with --no-weight-sharing to run it here\n";
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}

/// One graph's timed stages by name (the shared serialization and cache store are logged).
fn stages(g: &qnnx_engine::compile::multi::MultiGraph) -> Vec<(&'static str, f64)> {
    g.timings
        .stages
        .iter()
        .map(|&(t, ms)| (t.name(), ms))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_names_come_from_file_stems_or_names() {
        let models = [
            PathBuf::from("m/prefill.onnx"),
            PathBuf::from("decode.onnx"),
        ];
        assert_eq!(graph_names(&models, &[]).unwrap(), ["prefill", "decode"]);
        let names = ["a".to_string(), "b".to_string()];
        assert_eq!(graph_names(&models, &names).unwrap(), ["a", "b"]);
        let e = graph_names(&models, &names[..1]).unwrap_err();
        assert_eq!(e.code, crate::EXIT_USAGE);
        let same = [PathBuf::from("a/m.onnx"), PathBuf::from("b/m.onnx")];
        let e = graph_names(&same, &[]).unwrap_err();
        assert!(e.msg.contains("--names"), "{}", e.msg);
    }

    #[test]
    fn input_shapes_apply_to_one_graph_or_all() {
        let graphs = ["prefill".to_string(), "decode".to_string()];
        let specs = [
            "prefill:x=1,32,64".to_string(),
            "decode:x=1,1,64".to_string(),
            "mask=1,8".to_string(),
            "input:0=2".to_string(),
        ];
        let m = shapes_per_graph(&specs, &graphs).unwrap();
        assert_eq!(m[0]["x"], [1, 32, 64]);
        assert_eq!(m[1]["x"], [1, 1, 64]);
        assert_eq!(m[0]["mask"], [1, 8]);
        assert_eq!(m[1]["mask"], [1, 8]);
        // Not a graph name: the colon belongs to the input name.
        assert_eq!(m[1]["input:0"], [2]);
    }
}
