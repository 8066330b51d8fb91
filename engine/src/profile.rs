//! Execution profiles: QNN's profiling events of one execute, each node event mapped back to the
//! plan op it came from (QNN op type and ONNX node) through the node names the emitter gave QNN,
//! as a per-op table, a per-ONNX-node aggregate and a Chrome trace (Perfetto, chrome://tracing).
//!
//! What the HTP records at each level is in docs/profiling.md. On the x86_64 emulator node times
//! are cycles only, and events carry no timestamps, so the trace lays ops end to end in
//! execution order, each as long as its share of the accelerator time.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use lowering::plan::Plan;
use qnn::{Event, EventUnit, ProfileLevel};
use serde_json::{json, Value};

/// The plan op behind a QNN node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeOrigin {
    /// The QNN op type (`Conv2d`).
    pub qnn_op: String,
    /// The ONNX node it was lowered from.
    pub onnx_node: String,
}

/// QNN node name to its plan op, for one graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeOrigins(HashMap<String, NodeOrigin>);

impl NodeOrigins {
    /// Every op of `plan` by its QNN node name.
    pub fn of_plan(plan: &Plan) -> NodeOrigins {
        NodeOrigins(
            plan.ops
                .iter()
                .map(|op| {
                    let origin = NodeOrigin {
                        qnn_op: op.type_name.to_string(),
                        onnx_node: op.onnx_node.clone(),
                    };
                    (op.name.clone(), origin)
                })
                .collect(),
        )
    }

    /// As stored beside a cached binary: `{"<QNN node>": ["<QNN op>", "<ONNX node>"], ...}`.
    pub fn to_json(&self) -> String {
        let map: serde_json::Map<String, Value> = self
            .0
            .iter()
            .map(|(k, o)| (k.clone(), json!([o.qnn_op, o.onnx_node])))
            .collect();
        Value::Object(map).to_string()
    }

    /// What [`NodeOrigins::to_json`] wrote; `None` if `text` is not that.
    pub fn from_json(text: &str) -> Option<NodeOrigins> {
        let v: Value = serde_json::from_str(text).ok()?;
        let mut out = HashMap::new();
        for (k, pair) in v.as_object()? {
            let [op, node] = pair.as_array()?.as_slice() else {
                return None;
            };
            let origin = NodeOrigin {
                qnn_op: op.as_str()?.to_string(),
                onnx_node: node.as_str()?.to_string(),
            };
            out.insert(k.clone(), origin);
        }
        Some(NodeOrigins(out))
    }

    pub fn get(&self, qnn_node: &str) -> Option<&NodeOrigin> {
        self.0.get(qnn_node)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Which ONNX node and QNN op each QNN node of a plain context binary came from, kept beside it
/// in `<binary>.nodes.json` by `qnnx compile` (a binary carries QNN node names only, so its
/// profile could not name op types otherwise). It is a file of its own rather than bytes added
/// to the binary because the binary is QNN's format, read by QNN's loaders on devices and by
/// other tools, and has no section for our data; a saved model keeps the same map in its
/// manifest. The sha256 of the binary it describes is recorded, so a sidecar left beside a
/// binary compiled again (or replaced) is never applied to it.
pub mod sidecar {
    use super::*;
    use sha2::{Digest, Sha256};

    const FORMAT: &str = "qnnx-node-origins";

    /// What [`read`] found beside a binary.
    #[derive(Debug, PartialEq)]
    pub enum Found {
        /// No sidecar (a binary from QNN's tools, or copied without it).
        Missing,
        /// A sidecar of another binary (the binary was compiled again or replaced since), or
        /// one that does not parse: not used.
        Stale(String),
        /// The origins of each graph, by graph name.
        Graphs(BTreeMap<String, NodeOrigins>),
    }

    /// `<binary>.nodes.json`, beside the binary.
    pub fn path(binary: &Path) -> PathBuf {
        let mut name = binary.as_os_str().to_owned();
        name.push(".nodes.json");
        PathBuf::from(name)
    }

    fn sha256_hex(bytes: &[u8]) -> String {
        Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The sidecar's text for `binary` with its `graphs`.
    pub fn to_json(binary: &[u8], graphs: &[(&str, &NodeOrigins)]) -> String {
        let graphs: serde_json::Map<String, Value> = graphs
            .iter()
            .map(|(name, o)| {
                let map: serde_json::Map<String, Value> =
                    o.0.iter()
                        .map(|(k, o)| (k.clone(), json!([o.qnn_op, o.onnx_node])))
                        .collect();
                (name.to_string(), Value::Object(map))
            })
            .collect();
        let v = json!({
            "format": FORMAT,
            "version": 1,
            "binary_sha256": sha256_hex(binary),
            "graphs": graphs,
        });
        serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
    }

    /// Writes the sidecar of the binary at `binary_path` (atomically). Graphs without origins
    /// are left out; with none at all, a stale sidecar there is removed and none is written.
    pub fn write(
        binary_path: &Path,
        binary: &[u8],
        graphs: &[(&str, &NodeOrigins)],
    ) -> std::io::Result<()> {
        let graphs: Vec<(&str, &NodeOrigins)> = graphs
            .iter()
            .filter(|(_, o)| !o.is_empty())
            .copied()
            .collect();
        let path = path(binary_path);
        if graphs.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        qnn::write_atomic(&path, to_json(binary, &graphs).as_bytes()).map_err(|e| match e {
            qnn::Error::Io { source, .. } => source,
            other => std::io::Error::other(other.to_string()),
        })
    }

    /// The origins of `text` if it is the sidecar of `binary`.
    pub fn parse(text: &str, binary: &[u8]) -> Found {
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            return Found::Stale("not JSON".into());
        };
        if v["format"] != FORMAT || v["version"] != 1 {
            return Found::Stale("not a qnnx node-origins file of version 1".into());
        }
        if v["binary_sha256"].as_str() != Some(sha256_hex(binary).as_str()) {
            return Found::Stale("written for another binary (compiled again since?)".into());
        }
        let Some(graphs) = v["graphs"].as_object() else {
            return Found::Stale("no graphs".into());
        };
        let mut out = BTreeMap::new();
        for (name, map) in graphs {
            match NodeOrigins::from_json(&map.to_string()) {
                Some(o) => out.insert(name.clone(), o),
                None => return Found::Stale(format!("graph {name:?} does not parse")),
            };
        }
        Found::Graphs(out)
    }

    /// The sidecar beside the binary at `binary_path`, whose bytes are `binary`.
    pub fn read(binary_path: &Path, binary: &[u8]) -> Found {
        match std::fs::read_to_string(path(binary_path)) {
            Ok(text) => parse(&text, binary),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Found::Missing,
            Err(e) => Found::Stale(e.to_string()),
        }
    }
}

/// One node event of an execute.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    /// The QNN node name, or `Input` / `Output` for the HTP's I/O pseudo-nodes.
    pub qnn_node: String,
    /// The op's QNN type and ONNX node, when the node is one of the plan's.
    pub origin: Option<NodeOrigin>,
    pub value: u64,
    pub unit: EventUnit,
    /// Of all node events of the execute, 0 to 1.
    pub share: f64,
    /// `share` of the accelerator's microseconds, when the execute reported them: an estimate
    /// (the HTP gives node cycles, not node times).
    pub est_us: Option<f64>,
}

/// The events of one profiled execute, read into what a user asks about.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionProfile {
    pub level: ProfileLevel,
    /// `QNN_PROFILE_EVENTTYPE_EXECUTE`: the whole call, microseconds.
    pub execute_us: Option<u64>,
    /// The accelerator's part, microseconds.
    pub accel_us: Option<u64>,
    /// The accelerator's part, cycles (detailed level).
    pub accel_cycles: Option<u64>,
    /// Node events in execution order (detailed level; empty at basic).
    pub ops: Vec<OpTime>,
    /// Every event as QNN gave it.
    pub events: Vec<Event>,
}

const EXECUTE: u32 = qnn::qnn_sys::profile::event_type::EXECUTE;
const ACCEL_US: u32 = qnn::qnn_sys::profile::htp_event_type::GRAPH_EXECUTE_ACCEL_TIME_MICROSEC;
const ACCEL_CYCLES: u32 = qnn::qnn_sys::profile::htp_event_type::GRAPH_EXECUTE_ACCEL_TIME_CYCLE;

/// The node name in a node event's identifier: the HTP writes `"<node>:OpId_<n> (cycles)"` for
/// graph nodes and `"Input OpId_<n> (cycles)"` for its I/O pseudo-nodes.
fn node_name(identifier: &str) -> &str {
    if let Some((name, _)) = identifier.rsplit_once(":OpId_") {
        return name;
    }
    match identifier.split_once(" OpId_") {
        Some((name, _)) => name,
        None => identifier,
    }
}

impl ExecutionProfile {
    /// Reads the events of one execute profiled at `level`, mapping node events to `origins`.
    pub fn from_events(
        level: ProfileLevel,
        events: Vec<Event>,
        origins: &NodeOrigins,
    ) -> ExecutionProfile {
        let all: Vec<&Event> = events
            .iter()
            .flat_map(|e| e.walk())
            .map(|(_, e)| e)
            .collect();
        let value = |t: u32| all.iter().find(|e| e.event_type == t).map(|e| e.value);
        let (execute_us, accel_us, accel_cycles) =
            (value(EXECUTE), value(ACCEL_US), value(ACCEL_CYCLES));
        // Node events sit under the accelerator-cycles event on the HTP; any others (a backend
        // that reports nodes elsewhere) are taken where they are.
        let nodes: Vec<&Event> = all.iter().copied().filter(|e| e.is_node()).collect();
        let total: u64 = nodes.iter().map(|e| e.value).sum();
        let ops = nodes
            .iter()
            .map(|e| {
                let name = node_name(&e.identifier).to_string();
                let share = if total > 0 {
                    e.value as f64 / total as f64
                } else {
                    0.0
                };
                OpTime {
                    origin: origins.get(&name).cloned(),
                    qnn_node: name,
                    value: e.value,
                    unit: e.unit,
                    share,
                    est_us: accel_us.map(|us| share * us as f64),
                }
            })
            .collect();
        ExecutionProfile {
            level,
            execute_us,
            accel_us,
            accel_cycles,
            ops,
            events,
        }
    }

    /// Node values summed per ONNX node (the I/O pseudo-nodes and nodes without an origin under
    /// their QNN name), most expensive first: (ONNX node, value, share).
    pub fn by_onnx_node(&self) -> Vec<(String, u64, f64)> {
        let mut sums: Vec<(String, u64, f64)> = Vec::new();
        for op in &self.ops {
            let key = op
                .origin
                .as_ref()
                .map_or(op.qnn_node.as_str(), |o| o.onnx_node.as_str());
            match sums.iter_mut().find(|(k, _, _)| k == key) {
                Some(s) => {
                    s.1 += op.value;
                    s.2 += op.share;
                }
                None => sums.push((key.to_string(), op.value, op.share)),
            }
        }
        sums.sort_by_key(|s| std::cmp::Reverse(s.1));
        sums
    }

    /// The profile as JSON: whole-graph times, ops in execution order, and the raw events.
    pub fn to_json(&self) -> Value {
        fn event(e: &Event) -> Value {
            json!({
                "type": e.event_type,
                "type_name": e.type_name(),
                "unit": e.unit.suffix(),
                "value": e.value,
                "identifier": e.identifier,
                "sub_events": e.sub_events.iter().map(event).collect::<Vec<_>>(),
            })
        }
        json!({
            "level": self.level.name(),
            "execute_us": self.execute_us,
            "accel_us": self.accel_us,
            "accel_cycles": self.accel_cycles,
            "ops": self.ops.iter().map(|o| json!({
                "qnn_node": o.qnn_node,
                "qnn_op": o.origin.as_ref().map(|x| &x.qnn_op),
                "onnx_node": o.origin.as_ref().map(|x| &x.onnx_node),
                "value": o.value,
                "unit": o.unit.suffix(),
                "share": o.share,
                "est_us": o.est_us,
            })).collect::<Vec<_>>(),
            "events": self.events.iter().map(event).collect::<Vec<_>>(),
        })
    }

    /// A Chrome trace (the JSON object format): the execute and the accelerator on one track,
    /// the ops end to end below them, and `stages` (name, milliseconds; a compile's, say) laid
    /// out before them on a track of their own.
    pub fn chrome_trace(&self, graph: &str, stages: &[(&str, f64)]) -> Value {
        let mut events = vec![
            json!({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "qnnx"}}),
            json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "compile"}}),
            json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "execute"}}),
            json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": 3, "args": {"name": "ops"}}),
        ];
        let mut ts = 0.0;
        for (name, ms) in stages {
            let dur = ms * 1e3;
            events.push(json!({
                "name": name, "cat": "compile", "ph": "X", "pid": 1, "tid": 1,
                "ts": ts, "dur": dur,
            }));
            ts += dur;
        }
        let start = ts;
        if let Some(us) = self.execute_us {
            events.push(json!({
                "name": format!("execute {graph}"), "cat": "execute", "ph": "X", "pid": 1,
                "tid": 2, "ts": start, "dur": us as f64,
                "args": {"accel_us": self.accel_us, "accel_cycles": self.accel_cycles},
            }));
        }
        let mut ts = start;
        for op in &self.ops {
            // Without accelerator microseconds, one cycle is drawn as one microsecond.
            let dur = op.est_us.unwrap_or(op.value as f64);
            let name = match &op.origin {
                Some(o) => format!("{} ({})", o.qnn_op, o.onnx_node),
                None => op.qnn_node.clone(),
            };
            events.push(json!({
                "name": name, "cat": "op", "ph": "X", "pid": 1, "tid": 3, "ts": ts, "dur": dur,
                "args": {
                    "qnn_node": op.qnn_node,
                    "qnn_op": op.origin.as_ref().map(|o| &o.qnn_op),
                    "onnx_node": op.origin.as_ref().map(|o| &o.onnx_node),
                    op.unit.suffix(): op.value,
                    "share": op.share,
                },
            }));
            ts += dur;
        }
        json!({ "traceEvents": events, "displayTimeUnit": "ms" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: u32, unit: EventUnit, value: u64, id: &str, sub: Vec<Event>) -> Event {
        Event {
            event_type: t,
            unit,
            value,
            identifier: id.into(),
            timestamp_us: None,
            sub_events: sub,
        }
    }

    /// The shape of a detailed execute on the 2.51 emulator (docs/profiling.md).
    fn detailed() -> Vec<Event> {
        let node = |v, id| ev(404, EventUnit::Cycles, v, id, vec![]);
        vec![
            ev(
                8001,
                EventUnit::Count,
                0,
                "Number of HVX threads used",
                vec![],
            ),
            ev(
                ACCEL_CYCLES,
                EventUnit::Cycles,
                1000,
                "Accelerator (execute) time (cycles)",
                vec![
                    node(100, "Input OpId_2 (cycles)"),
                    node(500, "conv_0:OpId_27 (cycles)"),
                    node(300, "relu_1:OpId_30 (cycles)"),
                    node(100, "Output OpId_3 (cycles)"),
                ],
            ),
            ev(
                ACCEL_US,
                EventUnit::Microseconds,
                200,
                "Accelerator (execute) time",
                vec![],
            ),
            ev(
                EXECUTE,
                EventUnit::Microseconds,
                250,
                "QNN (execute) time",
                vec![],
            ),
        ]
    }

    fn origins() -> NodeOrigins {
        let o = |op: &str, n: &str| NodeOrigin {
            qnn_op: op.into(),
            onnx_node: n.into(),
        };
        NodeOrigins(HashMap::from([
            ("conv_0".to_string(), o("Conv2d", "/features/0/Conv")),
            ("relu_1".to_string(), o("Relu", "/features/0/Conv")),
        ]))
    }

    #[test]
    fn node_events_map_to_their_plan_ops() {
        let p = ExecutionProfile::from_events(ProfileLevel::Detailed, detailed(), &origins());
        assert_eq!(
            (p.execute_us, p.accel_us, p.accel_cycles),
            (Some(250), Some(200), Some(1000))
        );
        let names: Vec<&str> = p.ops.iter().map(|o| o.qnn_node.as_str()).collect();
        assert_eq!(names, ["Input", "conv_0", "relu_1", "Output"]);
        let conv = &p.ops[1];
        assert_eq!(conv.origin.as_ref().unwrap().qnn_op, "Conv2d");
        assert_eq!(
            (conv.value, conv.share, conv.est_us),
            (500, 0.5, Some(100.0))
        );
        assert!(p.ops[0].origin.is_none());
        // Two QNN ops of one ONNX node add up.
        let by = p.by_onnx_node();
        assert_eq!(by[0], ("/features/0/Conv".to_string(), 800, 0.8));
        assert_eq!(by.len(), 3);
    }

    #[test]
    fn origins_round_trip_through_json() {
        let o = origins();
        assert_eq!(NodeOrigins::from_json(&o.to_json()), Some(o));
        for bad in ["", "[]", r#"{"a": ["x"]}"#, r#"{"a": [1, "y"]}"#, "{"] {
            assert_eq!(NodeOrigins::from_json(bad), None, "{bad}");
        }
        assert_eq!(NodeOrigins::from_json("{}"), Some(NodeOrigins::default()));
    }

    #[test]
    fn node_names_are_cut_from_identifiers() {
        assert_eq!(node_name("a:b:OpId_7 (cycles)"), "a:b");
        assert_eq!(node_name("Input OpId_2 (cycles)"), "Input");
        assert_eq!(node_name("odd"), "odd");
    }

    #[test]
    fn the_trace_lays_ops_end_to_end_after_the_stages() {
        let p = ExecutionProfile::from_events(ProfileLevel::Detailed, detailed(), &origins());
        let t = p.chrome_trace("g", &[("lowering", 2.0), ("finalize", 3.0)]);
        let ev = t["traceEvents"].as_array().unwrap();
        let spans: Vec<(&str, f64, f64)> = ev
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| {
                (
                    e["name"].as_str().unwrap(),
                    e["ts"].as_f64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(spans[0], ("lowering", 0.0, 2000.0));
        assert_eq!(spans[1], ("finalize", 2000.0, 3000.0));
        assert_eq!(spans[2], ("execute g", 5000.0, 250.0));
        assert_eq!(spans[3], ("Input", 5000.0, 20.0));
        assert_eq!(spans[4], ("Conv2d (/features/0/Conv)", 5020.0, 100.0));
        assert_eq!(spans.len(), 7);
    }

    #[test]
    fn a_basic_profile_has_no_ops() {
        let events = vec![
            ev(ACCEL_US, EventUnit::Microseconds, 200, "", vec![]),
            ev(EXECUTE, EventUnit::Microseconds, 250, "", vec![]),
        ];
        let p = ExecutionProfile::from_events(ProfileLevel::Basic, events, &origins());
        assert!(p.ops.is_empty() && p.by_onnx_node().is_empty());
        assert_eq!(p.execute_us, Some(250));
    }

    #[test]
    fn a_sidecar_is_read_back_only_for_its_binary() {
        let o = origins();
        let (bin, other) = (b"binary bytes".as_slice(), b"another binary".as_slice());
        let text = sidecar::to_json(bin, &[("g", &o)]);
        let sidecar::Found::Graphs(g) = sidecar::parse(&text, bin) else {
            panic!("{text}");
        };
        assert_eq!(g.get("g"), Some(&o));
        assert!(matches!(
            sidecar::parse(&text, other),
            sidecar::Found::Stale(_)
        ));
        assert!(matches!(
            sidecar::parse("{}", bin),
            sidecar::Found::Stale(_)
        ));
        assert_eq!(
            sidecar::path(Path::new("dir/m.bin")),
            Path::new("dir/m.bin.nodes.json")
        );

        let dir = std::env::temp_dir().join(format!("qnnx-sidecar-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.bin");
        assert_eq!(sidecar::read(&path, bin), sidecar::Found::Missing);
        sidecar::write(&path, bin, &[("g", &o)]).unwrap();
        assert!(matches!(
            sidecar::read(&path, bin),
            sidecar::Found::Graphs(_)
        ));
        // Nothing to record removes what an earlier compile left.
        sidecar::write(&path, bin, &[("g", &NodeOrigins::default())]).unwrap();
        assert_eq!(sidecar::read(&path, bin), sidecar::Found::Missing);
        std::fs::remove_dir_all(&dir).ok();
    }
}
