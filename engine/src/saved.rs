//! Saved models: one file holding a compiled context binary, a manifest that describes it (QNN
//! build, SoC and HTP arch, graphs with their I/O, dtypes, shapes and encodings, the options it
//! was compiled with) and each graph's model I/O binding, so that loading it needs no ONNX, no
//! lowering and no finalize. The binary is memory-mapped and handed to QNN where it lies.
//!
//! # Layout
//!
//! ```text
//! 0   8 bytes  magic "QNNXSAVE"
//! 8   u32      format version (FORMAT)
//! 12  u32      0 (reserved)
//! 16  u64      manifest offset (HEADER_LEN)
//! 24  u64      manifest length
//! 32  u64      binary offset (a multiple of BINARY_ALIGN)
//! 40  u64      binary length
//! 48           the manifest: UTF-8 JSON (Manifest)
//!              zeros up to the binary offset
//!              the context binary, as QNN serialised it
//! ```
//!
//! Integers are little-endian. The binary starts on a 4 KiB boundary so that its mapped pages
//! hold nothing else (a device driver may map them). The graphs' I/O binding is the cache's
//! (`Emitted::io_binding_json`): a saved model is a cache entry (binary + metadata) in one file.
//!
//! # Checks on load
//!
//! Nothing in the file is trusted: the header's ranges must lie inside the file (else it is
//! truncated), the manifest must parse and be this format, the binary must have the manifest's
//! size and sha256 (the HTP emulator accepted binaries with flipped weight bytes and computed
//! wrong outputs, see `cache/store.rs`), the manifest's QNN build must be the loading library's
//! and its SoC the backend's, and then QNN's own binary info (read through QnnSystem before
//! `contextCreateFromBinary`, [`qnn::Context::from_mapped_expecting`]) must say what the manifest
//! says. Every failure is [`Error::SavedModel`] naming the file and what differs.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use qnnx_types::{tensor_type_name, BackendKind};

use crate::compile::{Compiled, StageTimes, Timed};
use crate::emit::Emitted;
use crate::error::{Error, Result};
use crate::profile::NodeOrigins;
use crate::registry::{self, Runtime};
use crate::target::{Target, TargetSpec};

/// The file's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"QNNXSAVE";
/// Version of the layout and manifest; a file with another is refused.
pub const FORMAT: u32 = 1;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 48;
/// The binary's offset is a multiple of this.
pub const BINARY_ALIGN: usize = 4096;

/// One graph tensor as the manifest describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedTensor {
    /// The tensor's name in the graph.
    pub name: String,
    /// Element type as qnnx spells it (`f32`, `i32`, `qu8` for quantized u8).
    pub dtype: String,
    /// The shape.
    pub dims: Vec<u32>,
    /// The fixed-point encoding (`{"scale", "offset"}`, or `{"axis", "scales", "offsets"}`),
    /// null for float and plain integer tensors.
    pub encoding: serde_json::Value,
}

impl From<&qnn::TensorInfo> for SavedTensor {
    fn from(t: &qnn::TensorInfo) -> SavedTensor {
        SavedTensor {
            name: t.name.clone(),
            dtype: tensor_type_name(t.dtype, t.quantization.is_quantized()),
            dims: t.dims.clone(),
            encoding: encoding_json(&t.quantization),
        }
    }
}

/// A fixed-point tensor's encoding as JSON (what `qnnx inspect --json` prints), null for float
/// and plain integer tensors.
pub fn encoding_json(q: &qnn::Quantization) -> serde_json::Value {
    use serde_json::json;
    match q {
        qnn::Quantization::None => serde_json::Value::Null,
        qnn::Quantization::ScaleOffset { scale, offset } => {
            json!({ "scale": scale, "offset": offset })
        }
        qnn::Quantization::PerAxis {
            axis,
            scale_offsets,
        } => json!({
            "axis": axis,
            "scales": scale_offsets.iter().map(|p| p.0).collect::<Vec<_>>(),
            "offsets": scale_offsets.iter().map(|p| p.1).collect::<Vec<_>>(),
        }),
        qnn::Quantization::BlockwiseExpansion {
            axis,
            scale_offsets,
            blocks,
            block_scale_bits,
            block_scales,
        } => json!({
            "axis": axis,
            "scales": scale_offsets.iter().map(|p| p.0).collect::<Vec<_>>(),
            "offsets": scale_offsets.iter().map(|p| p.1).collect::<Vec<_>>(),
            "blocks": blocks,
            "block_scale_bits": block_scale_bits,
            "block_scales": block_scales,
        }),
        qnn::Quantization::Unparsed { encoding } => json!({ "encoding": encoding }),
    }
}

/// One graph of a saved model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedGraph {
    /// The graph's name in the context.
    pub name: String,
    /// Graph inputs in the graph's order, as the binary describes them.
    pub inputs: Vec<SavedTensor>,
    /// Graph outputs likewise.
    pub outputs: Vec<SavedTensor>,
    /// The model I/O binding (ONNX names and dtypes, graph slots, model shapes, inputs fixed
    /// at compile time), in the cache's format ([`Emitted::io_binding_json`]).
    pub io: String,
    /// Which ONNX node each QNN op came from, for profiles ([`NodeOrigins::to_json`]); absent
    /// when the compile recorded none.
    #[serde(default)]
    pub origins: Option<String>,
}

/// The manifest of a saved model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`] of the writer.
    pub format: u32,
    /// The qnnx version that wrote it.
    pub qnnx_version: String,
    /// Backend name (`htp`, `gpu`).
    pub backend: String,
    /// QNN build id of the library that compiled the binary.
    pub qnn_build_id: String,
    /// The SoC the binary was prepared for.
    pub soc_model: Option<u32>,
    /// The HTP architecture (73 for v73), when known.
    pub htp_arch: Option<u32>,
    /// Size of the context binary in bytes.
    pub binary_size: u64,
    /// sha256 of the context binary, hex.
    pub binary_sha256: String,
    /// The graphs of the binary.
    pub graphs: Vec<SavedGraph>,
    /// The compile options, by name (as the front end spells them).
    pub options: BTreeMap<String, String>,
    /// Free-form data of the front end that wrote the file (the Python package stores how the
    /// outputs are returned).
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn bad(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::SavedModel(format!("{}: {what}", path.display()))
}

/// The file's bytes for a saved model of `compiled` (one graph): header, manifest, binary.
pub fn to_bytes(
    compiled: &Compiled,
    options: BTreeMap<String, String>,
    extra: BTreeMap<String, String>,
) -> Result<(Vec<u8>, Manifest)> {
    to_bytes_many(&[compiled], options, extra)
}

/// The file's bytes for a saved model of several graphs of one context (as
/// [`crate::compile::multi::MultiCompiled::into_compiled`] makes them: the prefill and decode
/// graphs of an LLM, say), in the order given: every graph of the context, each once.
pub fn to_bytes_many(
    graphs: &[&Compiled],
    options: BTreeMap<String, String>,
    extra: BTreeMap<String, String>,
) -> Result<(Vec<u8>, Manifest)> {
    let first = graphs
        .first()
        .ok_or_else(|| Error::SavedModel("a saved model needs a graph".into()))?;
    let backend = &first.runtime.backend;
    let binary = first.context.to_binary()?;
    let system = backend.system()?;
    let info = qnn::binary_info(&system, &binary)?;
    let mut saved = Vec::with_capacity(graphs.len());
    for compiled in graphs {
        let name = compiled.emitted.graph.name();
        let g = info.graphs.iter().find(|g| g.name == name).ok_or_else(|| {
            Error::SavedModel(format!(
                "the context binary has no graph {name:?}: the graphs of a saved model share \
                 one context"
            ))
        })?;
        saved.push(SavedGraph {
            name: g.name.clone(),
            inputs: g.inputs.iter().map(SavedTensor::from).collect(),
            outputs: g.outputs.iter().map(SavedTensor::from).collect(),
            io: compiled.emitted.io_binding_json(),
            origins: (!compiled.origins.is_empty()).then(|| compiled.origins.to_json()),
        });
    }
    let mut names: Vec<&str> = saved.iter().map(|g| g.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    if names.len() != saved.len() || info.graphs.len() != saved.len() {
        return Err(Error::SavedModel(format!(
            "the context holds {} graphs and {} distinct ones were given: a saved model holds \
             every graph of its context, each once",
            info.graphs.len(),
            names.len()
        )));
    }
    let target = Target::of_config(backend.config());
    let manifest = Manifest {
        format: FORMAT,
        qnnx_version: env!("CARGO_PKG_VERSION").to_owned(),
        backend: backend.kind().name().to_owned(),
        qnn_build_id: info.build_id.clone(),
        soc_model: info.soc_model.or(target.soc_model),
        htp_arch: target.arch().map(|a| a.number()),
        binary_size: binary.len() as u64,
        binary_sha256: sha256_hex(&binary),
        graphs: saved,
        options,
        extra,
    };
    let json = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| Error::SavedModel(format!("manifest does not serialise: {e}")))?;
    let bin_off = (HEADER_LEN + json.len()).div_ceil(BINARY_ALIGN) * BINARY_ALIGN;
    let mut out = Vec::with_capacity(bin_off + binary.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for v in [HEADER_LEN, json.len(), bin_off, binary.len()] {
        out.extend_from_slice(&(v as u64).to_le_bytes());
    }
    out.extend_from_slice(&json);
    out.resize(bin_off, 0);
    out.extend_from_slice(&binary);
    Ok((out, manifest))
}

/// Writes a saved model of several graphs of one context to `path` atomically
/// ([`to_bytes_many`]).
pub fn save_many(
    graphs: &[&Compiled],
    path: &Path,
    options: BTreeMap<String, String>,
    extra: BTreeMap<String, String>,
) -> Result<Manifest> {
    let (bytes, manifest) = to_bytes_many(graphs, options, extra)?;
    qnn::write_atomic(path, &bytes)?;
    Ok(manifest)
}

/// Writes a saved model of `compiled` to `path` atomically (temporary file, then rename).
pub fn save(
    compiled: &Compiled,
    path: &Path,
    options: BTreeMap<String, String>,
    extra: BTreeMap<String, String>,
) -> Result<Manifest> {
    let (bytes, manifest) = to_bytes(compiled, options, extra)?;
    qnn::write_atomic(path, &bytes)?;
    Ok(manifest)
}

/// Where the parts of a saved model lie in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub manifest: std::ops::Range<usize>,
    pub binary: std::ops::Range<usize>,
}

/// Reads the header of a saved model's bytes and checks its ranges against the file's size.
/// `Err` says what is wrong, without the path. A pure function of the bytes: nothing in them is
/// trusted.
pub fn parse_header(bytes: &[u8]) -> std::result::Result<Layout, String> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        let what = if bytes.is_empty() {
            "the file is empty".to_string()
        } else {
            "it does not start with \"QNNXSAVE\"".to_string()
        };
        return Err(format!(
            "not a qnnx saved model ({what}); make one with qnnx_backend.export"
        ));
    }
    if bytes.len() < HEADER_LEN {
        return Err(format!(
            "truncated: {} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        ));
    }
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
    let format = u32_at(8);
    if format != FORMAT {
        return Err(format!(
            "saved-model format {format}; this qnnx ({}) reads format {FORMAT}: export it again",
            env!("CARGO_PKG_VERSION")
        ));
    }
    let range = |off: u64, len: u64, what: &str| -> std::result::Result<_, String> {
        let end = off
            .checked_add(len)
            .filter(|&e| e <= bytes.len() as u64)
            .ok_or_else(|| {
                format!(
                    "truncated: the header puts the {what} at bytes {off}..{} but the file has \
                     {} bytes",
                    off.saturating_add(len),
                    bytes.len()
                )
            })?;
        Ok(off as usize..end as usize)
    };
    let manifest = range(u64_at(16), u64_at(24), "manifest")?;
    let binary = range(u64_at(32), u64_at(40), "context binary")?;
    if manifest.start < HEADER_LEN || binary.start < manifest.end || binary.is_empty() {
        return Err(format!(
            "bad header: manifest at {manifest:?}, context binary at {binary:?}"
        ));
    }
    Ok(Layout { manifest, binary })
}

/// Parses a saved model's bytes up to the binary: header, manifest, and the binary's size and
/// sha256 against the manifest. `Err` says what is wrong, without the path.
pub fn parse(bytes: &[u8]) -> std::result::Result<(Layout, Manifest), String> {
    let layout = parse_header(bytes)?;
    let manifest: Manifest = serde_json::from_slice(&bytes[layout.manifest.clone()])
        .map_err(|e| format!("the manifest does not parse: {e}"))?;
    if manifest.format != FORMAT {
        return Err(format!(
            "manifest format {} (this qnnx reads {FORMAT})",
            manifest.format
        ));
    }
    let binary = &bytes[layout.binary.clone()];
    if binary.len() as u64 != manifest.binary_size {
        return Err(format!(
            "the manifest says the context binary has {} bytes, the file holds {}",
            manifest.binary_size,
            binary.len()
        ));
    }
    let sha = sha256_hex(binary);
    if sha != manifest.binary_sha256 {
        return Err(format!(
            "the context binary's sha256 is {sha}, the manifest says {}: the file is corrupt",
            manifest.binary_sha256
        ));
    }
    if manifest.graphs.is_empty() {
        return Err("the manifest lists no graphs".into());
    }
    Ok((layout, manifest))
}

/// The manifest of the saved model at `path`, checked as [`parse`] does (binary hash included),
/// without opening QNN.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let file = qnn::MappedFile::open(path)?;
    parse(file.bytes())
        .map(|(_, m)| m)
        .map_err(|why| bad(path, why))
}

/// A loaded saved model: its manifest and its graphs, ready to run.
pub struct Loaded {
    pub manifest: Manifest,
    /// One per manifest graph, in its order.
    pub graphs: Vec<Compiled>,
}

/// The target a saved model runs on here: its backend, and on the x86_64 emulator the SoC it
/// was compiled for (a device runs its own SoC, which must be the file's).
fn target_of(path: &Path, m: &Manifest, library: Option<std::path::PathBuf>) -> Result<Target> {
    let backend: BackendKind = m
        .backend
        .parse()
        .map_err(|e| bad(path, format!("backend {:?}: {e}", m.backend)))?;
    let emulated = qnn::HtpDeviceConfig::host_default().soc_model.is_some();
    let spec = TargetSpec {
        backend,
        soc: None,
        soc_model: m.soc_model.filter(|&s| s != 0 && emulated),
        htp_arch: None,
        library,
    };
    Target::resolve(&spec, None)
}

/// Memory-maps the saved model at `path` and loads its graphs on the process-wide runtime for
/// its target ([`registry`]); no ONNX, lowering or finalize. Every check in the module docs
/// runs first.
pub fn load(path: &Path) -> Result<Loaded> {
    load_with_library(path, None)
}

/// [`load`] with the backend library at `library` (else the documented search order).
pub fn load_with_library(path: &Path, library: Option<std::path::PathBuf>) -> Result<Loaded> {
    let start = Instant::now();
    let file = qnn::MappedFile::open(path)?;
    let (layout, manifest) = parse(file.bytes()).map_err(|why| bad(path, why))?;
    let target = target_of(path, &manifest, library)?;
    let runtime = registry::for_target(&target, None, false)?;
    load_on(&runtime, Source::Mapped(&file), &layout, manifest, start)
}

/// [`load`] from bytes in memory (a saved model carried inside another artifact, such as
/// torch's AOT-compiled functions); `what` names them in errors. QNN gets a slice of `bytes`
/// for the duration of `contextCreateFromBinary`.
pub fn load_bytes(what: &str, bytes: &[u8]) -> Result<Loaded> {
    let start = Instant::now();
    let path = Path::new(what);
    let (layout, manifest) = parse(bytes).map_err(|why| bad(path, why))?;
    let target = target_of(path, &manifest, None)?;
    let runtime = registry::for_target(&target, None, false)?;
    load_on(
        &runtime,
        Source::Bytes(path, bytes),
        &layout,
        manifest,
        start,
    )
}

/// Where a saved model's bytes are.
enum Source<'a> {
    Mapped(&'a qnn::MappedFile),
    Bytes(&'a Path, &'a [u8]),
}

fn load_on(
    runtime: &Arc<Runtime>,
    source: Source<'_>,
    layout: &Layout,
    manifest: Manifest,
    start: Instant,
) -> Result<Loaded> {
    let path = match &source {
        Source::Mapped(f) => f.path(),
        Source::Bytes(p, _) => p,
    };
    let backend = &runtime.backend;
    let library_build = backend.build_id()?;
    if manifest.qnn_build_id != library_build {
        return Err(bad(
            path,
            format!(
                "compiled by QNN {} but this QNN library is {library_build}: export the model \
                 again with this release (context binaries do not move between QNN releases)",
                manifest.qnn_build_id
            ),
        ));
    }
    let backend_soc = match backend.config() {
        qnn::BackendConfig::Htp(c) => c.device.soc_model,
        qnn::BackendConfig::Gpu(_) | qnn::BackendConfig::Cpu => None,
    };
    if let (Some(want), Some(have)) = (manifest.soc_model.filter(|&s| s != 0), backend_soc) {
        if want != have {
            return Err(bad(
                path,
                format!(
                    "compiled for SoC {} but this device is SoC {}: export it for this SoC",
                    soc_label(want),
                    soc_label(have)
                ),
            ));
        }
    }
    let expected = qnn::ExpectedBinary {
        soc_model: manifest.soc_model.filter(|&s| s != 0),
        build_id: Some(manifest.qnn_build_id.clone()),
    };
    let context = match source {
        Source::Mapped(file) => qnn::Context::from_mapped_expecting(
            backend,
            Some(&runtime.device),
            file,
            layout.binary.clone(),
            &expected,
        ),
        Source::Bytes(_, bytes) => qnn::Context::from_binary_expecting(
            backend,
            Some(&runtime.device),
            &bytes[layout.binary.clone()],
            &expected,
        ),
    }
    .map_err(|e| match e {
        qnn::Error::InvalidArgument(m) => Error::SavedModel(m),
        other => Error::qnn(other),
    })?;
    let info = context
        .binary_info()
        .ok_or_else(|| bad(path, "QnnSystem could not describe the context binary"))?;
    check_against_info(&manifest, info).map_err(|why| {
        bad(
            path,
            format!("the manifest does not match its context binary: {why}"),
        )
    })?;
    let mut graphs = Vec::with_capacity(manifest.graphs.len());
    for g in &manifest.graphs {
        let graph = context.graph(&g.name)?;
        let emitted = Emitted::from_io_binding(graph, &g.io).ok_or_else(|| {
            bad(
                path,
                format!(
                    "the I/O binding of graph {:?} does not fit the binary's graph",
                    g.name
                ),
            )
        })?;
        let origins = g
            .origins
            .as_deref()
            .and_then(NodeOrigins::from_json)
            .unwrap_or_default();
        graphs.push(loaded_compiled(
            emitted,
            context.clone(),
            runtime.clone(),
            origins,
            start,
        ));
    }
    Ok(Loaded { manifest, graphs })
}

/// A plain context binary (from `qnnx compile` or QNN's tools: no manifest, no model I/O
/// binding), memory-mapped and loaded on the runtime for the SoC it records (emulated on
/// x86_64), with its graph `graph` (default: the first) bound as it is: the graph's own tensor
/// names, dtypes and shapes are the model's (no int64 conversion). main's pre-checks run before
/// `contextCreateFromBinary`; the binary's SoC must be the device's.
pub fn load_context_binary(path: &Path, graph: Option<&str>) -> Result<Compiled> {
    let start = Instant::now();
    let file = qnn::MappedFile::open(path)?;
    let host = Target::host_default(BackendKind::Htp);
    let probe = registry::for_target(&host, None, false)?;
    let system = probe.backend.system()?;
    let info = qnn::binary_info(&system, file.bytes()).map_err(|e| match e {
        qnn::Error::Api(mut api) => {
            api.context = Some(format!(
                "{} (not a saved model, an ONNX model or a QNN context binary?)",
                path.display()
            ));
            Error::qnn(qnn::Error::Api(api))
        }
        other => Error::qnn(other),
    })?;
    let emulated = qnn::HtpDeviceConfig::host_default().soc_model.is_some();
    let soc = info.soc_model.filter(|&s| s != 0);
    let target = Target::resolve(
        &TargetSpec {
            backend: BackendKind::Htp,
            soc: None,
            soc_model: soc.filter(|_| emulated),
            htp_arch: None,
            library: None,
        },
        None,
    )?;
    let runtime = registry::for_target(&target, None, false)?;
    let expected = qnn::ExpectedBinary {
        soc_model: soc,
        build_id: None,
    };
    let context = qnn::Context::from_mapped_expecting(
        &runtime.backend,
        Some(&runtime.device),
        &file,
        0..file.len(),
        &expected,
    )
    .map_err(|e| match e {
        qnn::Error::InvalidArgument(m) => Error::SavedModel(m),
        other => Error::qnn(other),
    })?;
    let names = context.graph_names();
    let name = match graph {
        Some(g) => g.to_string(),
        None => names
            .first()
            .cloned()
            .ok_or_else(|| bad(path, "the context binary has no graphs"))?,
    };
    let g = context.graph(&name)?;
    let io = |ts: &[qnn::TensorInfo]| -> Vec<lowering::plan::PlanIo> {
        ts.iter()
            .map(|t| lowering::plan::PlanIo {
                tensor: 0,
                onnx_name: t.name.clone(),
                host_dtype: t.dtype,
                shape: t.dims.iter().map(|&d| d as usize).collect(),
            })
            .collect()
    };
    let emitted = Emitted {
        inputs: io(g.inputs()),
        outputs: io(g.outputs()),
        input_slots: (0..g.inputs().len()).collect(),
        output_slots: (0..g.outputs().len()).collect(),
        assumed: Vec::new(),
        graph: g,
    };
    Ok(loaded_compiled(
        emitted,
        context,
        runtime,
        NodeOrigins::default(),
        start,
    ))
}

/// A graph loaded from a file (no lowering, no finalize), timed from `start`.
fn loaded_compiled(
    emitted: Emitted,
    context: qnn::Context,
    runtime: Arc<Runtime>,
    origins: NodeOrigins,
    start: Instant,
) -> Compiled {
    let load_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut timings = StageTimes::default();
    timings.record(Timed::CacheLoad, load_ms);
    Compiled {
        emitted,
        context,
        runtime,
        lower_ms: 0.0,
        finalize_ms: 0.0,
        load_ms,
        from_cache: false,
        timings,
        finalize_phases: Vec::new(),
        origins,
        cache_key: None,
        warnings: Vec::new(),
    }
}

/// Whether the manifest says what QNN's description of the binary says: build, SoC, graphs and
/// their I/O tensors. `Err` names the first difference.
pub fn check_against_info(m: &Manifest, info: &qnn::BinaryInfo) -> std::result::Result<(), String> {
    if m.qnn_build_id != info.build_id {
        return Err(format!(
            "QNN build {} in the manifest, {} in the binary",
            m.qnn_build_id, info.build_id
        ));
    }
    if let (Some(a), Some(b)) = (m.soc_model, info.soc_model) {
        if a != b && b != 0 {
            return Err(format!(
                "SoC {} in the manifest, {} in the binary",
                soc_label(a),
                soc_label(b)
            ));
        }
    }
    let names = |it: &mut dyn Iterator<Item = String>| it.collect::<Vec<_>>();
    let ours = names(&mut m.graphs.iter().map(|g| g.name.clone()));
    let theirs = names(&mut info.graphs.iter().map(|g| g.name.clone()));
    if ours != theirs {
        return Err(format!(
            "graphs {ours:?} in the manifest, {theirs:?} in the binary"
        ));
    }
    for (g, gi) in m.graphs.iter().zip(&info.graphs) {
        for (side, ours, theirs) in [
            ("input", &g.inputs, &gi.inputs),
            ("output", &g.outputs, &gi.outputs),
        ] {
            let theirs: Vec<SavedTensor> = theirs.iter().map(SavedTensor::from).collect();
            if ours.len() != theirs.len() {
                return Err(format!(
                    "graph {:?} has {} {side}s in the manifest, {} in the binary",
                    g.name,
                    ours.len(),
                    theirs.len()
                ));
            }
            for (a, b) in ours.iter().zip(&theirs) {
                if (&a.name, &a.dtype, &a.dims) != (&b.name, &b.dtype, &b.dims) {
                    return Err(format!(
                        "graph {:?} {side} {:?} is {} {:?} in the manifest, {:?} {} {:?} in the \
                         binary",
                        g.name, a.name, a.dtype, a.dims, b.name, b.dtype, b.dims
                    ));
                }
            }
        }
    }
    Ok(())
}

fn soc_label(model: u32) -> String {
    match qnnx_types::soc::by_model(model) {
        Some(s) => format!("{model} ({})", s.name),
        None => model.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(manifest: &[u8], binary: &[u8]) -> Vec<u8> {
        let off = (HEADER_LEN + manifest.len()).div_ceil(BINARY_ALIGN) * BINARY_ALIGN;
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for v in [HEADER_LEN, manifest.len(), off, binary.len()] {
            out.extend_from_slice(&(v as u64).to_le_bytes());
        }
        out.extend_from_slice(manifest);
        out.resize(off, 0);
        out.extend_from_slice(binary);
        out
    }

    #[test]
    fn header_refuses_other_files_and_truncation() {
        let good = file(b"{}", b"binary");
        assert!(parse_header(&good).is_ok());
        assert!(parse_header(b"").unwrap_err().contains("empty"));
        assert!(parse_header(b"\x7fELF....")
            .unwrap_err()
            .contains("not a qnnx saved model"));
        assert!(parse_header(&good[..20]).unwrap_err().contains("truncated"));
        let cut = &good[..good.len() - 1];
        let e = parse_header(cut).unwrap_err();
        assert!(
            e.contains("truncated") && e.contains("context binary"),
            "{e}"
        );
        let mut other = good.clone();
        other[8] = 9;
        assert!(parse_header(&other).unwrap_err().contains("format 9"));
        let mut huge = good.clone();
        huge[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse_header(&huge).unwrap_err().contains("truncated"));
    }

    #[test]
    fn parse_checks_the_binary_against_the_manifest() {
        let binary = b"not really a context binary";
        let m = Manifest {
            format: FORMAT,
            qnnx_version: "0".into(),
            backend: "htp".into(),
            qnn_build_id: "v0".into(),
            soc_model: Some(60),
            htp_arch: Some(73),
            binary_size: binary.len() as u64,
            binary_sha256: sha256_hex(binary),
            graphs: vec![SavedGraph {
                name: "g".into(),
                inputs: vec![],
                outputs: vec![],
                io: "{}".into(),
                origins: None,
            }],
            options: BTreeMap::new(),
            extra: BTreeMap::new(),
        };
        let json = serde_json::to_vec(&m).unwrap();
        let (_, back) = parse(&file(&json, binary)).unwrap();
        assert_eq!(back, m);
        let e = parse(&file(&json, b"not really a context binarY")).unwrap_err();
        assert!(e.contains("corrupt"), "{e}");
        let e = parse(&file(&json, b"short")).unwrap_err();
        assert!(e.contains("has 27 bytes"), "{e}");
        let e = parse(&file(b"{ not json", binary)).unwrap_err();
        assert!(e.contains("does not parse"), "{e}");
    }
}
