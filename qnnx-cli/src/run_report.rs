//! What `qnnx run` measures: timed executes (latency min / median / p95), QNN profiles mapped to
//! ONNX nodes and their table, and the outputs written as `.npy`; `run.rs` reports them.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use qnnx_types::DType;

use qnnx_engine::profile::{ExecutionProfile, NodeOrigins};

use crate::npy;
use crate::Failure;

pub(crate) struct Timing {
    pub(crate) first_ms: f64,
    /// Sorted.
    pub(crate) times: Vec<f64>,
}

/// Zeroed output buffers of `graph`, in graph order, and its inputs viewed as QNN inputs.
fn buffers<'a>(
    graph: &qnn::Graph,
    ins: &'a [(DType, Cow<[u8]>)],
) -> (Vec<Vec<u8>>, Vec<qnn::Input<'a>>) {
    let outs = graph
        .outputs()
        .iter()
        .map(|t| vec![0u8; t.num_bytes()])
        .collect();
    let inputs = ins
        .iter()
        .map(|(d, b)| qnn::Input::from_bytes(*d, b))
        .collect();
    (outs, inputs)
}

/// `outs` viewed as QNN outputs of `graph`.
fn output_views<'a>(graph: &qnn::Graph, outs: &'a mut [Vec<u8>]) -> Vec<qnn::Output<'a>> {
    graph
        .outputs()
        .iter()
        .zip(outs.iter_mut())
        .map(|(t, b)| qnn::Output::from_bytes(t.dtype, b))
        .collect()
}

/// Executes `graph` once untimed and `runs` times timed on inputs in graph order; returns the
/// output buffers in graph order.
pub(crate) fn execute(
    graph: &qnn::Graph,
    ins: &[(DType, Cow<[u8]>)],
    runs: usize,
) -> Result<(Timing, Vec<Vec<u8>>), Failure> {
    let (mut outs, inputs) = buffers(graph, ins);
    let once = |outs: &mut Vec<Vec<u8>>| -> Result<f64, Failure> {
        let mut o = output_views(graph, outs);
        let t = Instant::now();
        graph.execute(&inputs, &mut o)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let first_ms = once(&mut outs)?;
    let mut times = (0..runs)
        .map(|_| once(&mut outs))
        .collect::<Result<Vec<_>, _>>()?;
    times.sort_by(f64::total_cmp);
    Ok((Timing { first_ms, times }, outs))
}

/// One profiled execute of `graph` at `level` (its own profile handle, freed after).
pub(crate) fn profiled(
    backend: &qnn::Backend,
    graph: &qnn::Graph,
    ins: &[(DType, Cow<[u8]>)],
    level: qnn::ProfileLevel,
    origins: &NodeOrigins,
) -> Result<ExecutionProfile, Failure> {
    let profile = qnn::Profile::new(backend, level)?;
    let (mut outs, inputs) = buffers(graph, ins);
    let mut o = output_views(graph, &mut outs);
    graph.execute_profiled(&inputs, &mut o, &profile)?;
    Ok(ExecutionProfile::from_events(
        level,
        profile.events()?,
        origins,
    ))
}

/// The profile's table: the whole-graph times, then the ops, most expensive first.
pub(crate) fn profile_text(p: &ExecutionProfile) -> String {
    let us = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} us"));
    let mut s = format!(
        "profile ({}): execute {}, accelerator {}",
        p.level.name(),
        us(p.execute_us),
        us(p.accel_us)
    );
    if let Some(c) = p.accel_cycles {
        s += &format!(" / {c} cycles");
    }
    s += "\n";
    if p.ops.is_empty() {
        if p.level == qnn::ProfileLevel::Basic {
            s += "(per-op times need --profile detailed)\n";
        }
        return s;
    }
    let unit = p.ops[0].unit.suffix();
    let mut ops: Vec<_> = p.ops.iter().collect();
    ops.sort_by_key(|o| std::cmp::Reverse(o.value));
    let rows: Vec<(String, String, &qnnx_engine::profile::OpTime)> = ops
        .into_iter()
        .map(|o| match &o.origin {
            Some(x) => (x.qnn_op.clone(), x.onnx_node.clone(), o),
            // The HTP's I/O pseudo-nodes.
            None if o.qnn_node == "Input" || o.qnn_node == "Output" => {
                (format!("[{}]", o.qnn_node), "-".to_string(), o)
            }
            // A node of a binary, whose plan is unknown: QNN's node name is all there is.
            None => ("?".to_string(), format!("{} (QNN node)", o.qnn_node), o),
        })
        .collect();
    let unnamed = rows.iter().any(|r| r.0 == "?");
    let op_w = rows
        .iter()
        .map(|r| r.0.len())
        .max()
        .unwrap_or(6)
        .clamp(6, 32);
    let node_w = rows
        .iter()
        .map(|r| r.1.len())
        .max()
        .unwrap_or(9)
        .clamp(9, 64);
    s += &format!(
        "  {:<op_w$} {:<node_w$} {:>10} {:>6} {:>8}\n",
        "QNN op", "ONNX node", unit, "share", "~us"
    );
    for (op, node, o) in rows {
        let est = o.est_us.map_or("-".to_string(), |v| format!("{v:.1}"));
        s += &format!(
            "  {op:<op_w$} {node:<node_w$} {:>10} {:>5.1}% {est:>8}\n",
            o.value,
            o.share * 100.0
        );
    }
    s += "(~us: each op's share of the accelerator time; the HTP reports node cycles)\n";
    if unnamed {
        s += "(?: a QNN node of a binary without the .nodes.json file that `qnnx compile` \
              writes beside it, which names each node's QNN op and ONNX node)\n";
    }
    s
}

/// The ONNX node and QNN op of each node of graph `graph` of the context binary at `path`
/// (whose bytes are `binary`), from the sidecar `qnnx compile` wrote beside it; none without
/// one, or with one written for another binary (said once on stderr).
pub(crate) fn binary_origins(path: &Path, binary: &[u8], graph: &str) -> NodeOrigins {
    use qnnx_engine::profile::sidecar::{self, Found};
    match sidecar::read(path, binary) {
        Found::Graphs(mut g) => g.remove(graph).unwrap_or_default(),
        Found::Missing => NodeOrigins::default(),
        Found::Stale(why) => {
            eprintln!(
                "qnnx: warning: {} is not used: {why}; ops are named by QNN node only",
                sidecar::path(path).display()
            );
            NodeOrigins::default()
        }
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
}

pub(crate) fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One output: its summary, and the file it was written to (with `-o`).
pub(crate) struct Written {
    pub(crate) name: String,
    pub(crate) summary: npy::Summary,
    pub(crate) file: Option<PathBuf>,
}

pub(crate) fn write_outputs(
    dir: Option<&Path>,
    outs: Vec<npy::Array>,
    names: &[String],
) -> Result<Vec<Written>, Failure> {
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut written = Vec::new();
    for (a, name) in outs.into_iter().zip(names) {
        let file = match dir {
            Some(dir) => {
                let path = dir.join(format!("{}.npy", file_name(name)));
                npy::write(&path, &a)?;
                Some(path)
            }
            None => None,
        };
        written.push(Written {
            name: name.clone(),
            summary: a.summary(),
            file,
        });
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_sorted_times() {
        let t: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&t, 0.5), Some(11.0));
        assert_eq!(percentile(&t, 0.95), Some(19.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
