//! ONNX model loading: protobuf decoding, external data, validation, and conversion to the IR.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use prost::Message;

use crate::dtype::{DType, OnnxCode};
use crate::error::{invalid, Result};
use crate::frontend::onnx::{self, attribute_type as at, data_location, TensorProto};
use crate::ir::tensor::{checked_numel, Tensor};
use crate::ir::{Attr, Graph, Node, Value, ValueId};

/// IR versions we read. 3 is the first with opset imports (ONNX 1.0); 14 is ahead of what
/// onnx 1.22 writes (13) to tolerate the next release.
pub const IR_VERSIONS: std::ops::RangeInclusive<i64> = 3..=14;

/// A validated model: the IR graph before any pass, plus the declared input dims.
#[derive(Clone, Debug)]
pub struct Model {
    pub graph: Graph,
    pub ir_version: i64,
    pub producer: String,
    /// Declared dims of each graph input (parallel to `graph.inputs`); `None` is a symbolic or
    /// missing dim that `LowerOptions::input_shapes` must fill: a `dim_param`, no value, or
    /// `-1` (as Paddle and older exporters write a dynamic dim).
    pub input_dims: Vec<Option<Vec<Option<usize>>>>,
    /// The `dim_param` name of each symbolic input dim (parallel to `input_dims`; `None` for a
    /// static dim and for a dynamic one without a name), for messages.
    pub input_dim_params: Vec<Vec<Option<String>>>,
    /// The shapes the model declares for graph outputs and `value_info` entries, by value name
    /// (a dim is `None` when symbolic). Lowering infers every shape itself; these only resolve
    /// shape-defining inputs given at run time (`passes::declared_shapes`).
    pub declared_shapes: HashMap<String, Vec<Option<usize>>>,
}

impl Model {
    /// The declared dims of graph input `k` for people: `[batch, 3, ?, 224]`, or `None` when
    /// the input declares no shape.
    pub fn describe_input_dims(&self, k: usize) -> Option<String> {
        let dims = self.input_dims.get(k)?.as_ref()?;
        let params = self.input_dim_params.get(k);
        let d: Vec<String> = dims
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Some(v) => v.to_string(),
                None => params
                    .and_then(|p| p.get(i).cloned().flatten())
                    .unwrap_or_else(|| "?".into()),
            })
            .collect();
        Some(format!("[{}]", d.join(", ")))
    }

    /// The graph inputs with a symbolic or missing dim (or no shape at all), by name, with
    /// their declared dims as [`Model::describe_input_dims`] writes them.
    pub fn symbolic_inputs(&self) -> Vec<(String, String)> {
        self.graph
            .inputs
            .iter()
            .enumerate()
            .filter(|(k, _)| match self.input_dims.get(*k) {
                Some(Some(d)) => d.iter().any(Option::is_none),
                _ => true,
            })
            .map(|(k, &v)| {
                let dims = self
                    .describe_input_dims(k)
                    .unwrap_or_else(|| "no shape".into());
                (self.graph.value(v).name.clone(), dims)
            })
            .collect()
    }
}

/// Where a model comes from. External data is resolved relative to the model's directory.
#[derive(Clone, Debug)]
pub enum ModelSource {
    Path(PathBuf),
    Bytes {
        bytes: Vec<u8>,
        base_dir: Option<PathBuf>,
    },
}

impl From<&Path> for ModelSource {
    fn from(p: &Path) -> Self {
        ModelSource::Path(p.to_path_buf())
    }
}
impl From<PathBuf> for ModelSource {
    fn from(p: PathBuf) -> Self {
        ModelSource::Path(p)
    }
}
impl From<&str> for ModelSource {
    fn from(p: &str) -> Self {
        ModelSource::Path(p.into())
    }
}
impl From<Vec<u8>> for ModelSource {
    fn from(bytes: Vec<u8>) -> Self {
        ModelSource::Bytes {
            bytes,
            base_dir: None,
        }
    }
}
impl From<&[u8]> for ModelSource {
    fn from(bytes: &[u8]) -> Self {
        bytes.to_vec().into()
    }
}

impl Model {
    pub fn load(src: impl Into<ModelSource>) -> Result<Model> {
        match src.into() {
            ModelSource::Path(p) => {
                let bytes = std::fs::read(&p)
                    .map_err(|e| invalid(format!("cannot read {}: {e}", p.display())))?;
                let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
                Model::from_bytes(&bytes, Some(&dir))
            }
            ModelSource::Bytes { bytes, base_dir } => {
                Model::from_bytes(&bytes, base_dir.as_deref())
            }
        }
    }

    /// Decodes and validates a model. `base_dir` is where external data files are looked up;
    /// without it, a model with external data is rejected.
    pub fn from_bytes(bytes: &[u8], base_dir: Option<&Path>) -> Result<Model> {
        let proto = onnx::ModelProto::decode(bytes)
            .map_err(|e| invalid(format!("not an ONNX model (protobuf decode failed: {e})")))?;
        Model::from_proto(&proto, base_dir)
    }

    pub fn from_proto(proto: &onnx::ModelProto, base_dir: Option<&Path>) -> Result<Model> {
        let ir_version = proto
            .ir_version
            .ok_or_else(|| invalid("model has no ir_version"))?;
        if !IR_VERSIONS.contains(&ir_version) {
            return Err(invalid(format!(
                "IR version {ir_version} is not supported (supported: {}..={})",
                IR_VERSIONS.start(),
                IR_VERSIONS.end()
            )));
        }
        let gp = proto
            .graph
            .as_ref()
            .ok_or_else(|| invalid("model has no graph"))?;
        let mut opsets = BTreeMap::new();
        for o in &proto.opset_import {
            let d = normalize_domain(o.domain.as_deref().unwrap_or(""));
            let v = o.version.unwrap_or(0);
            if v <= 0 {
                return Err(invalid(format!(
                    "opset_import for domain '{d}' has version {v}"
                )));
            }
            opsets.insert(d, v);
        }
        if !opsets.contains_key("") {
            return Err(invalid(
                "model imports no version of the default ONNX opset",
            ));
        }
        let mut ext = ExternalData::new(base_dir);
        let (mut graph, input_dims, input_dim_params) = convert_graph(gp, &mut ext)?;
        graph.opsets = opsets;
        Ok(Model {
            graph,
            ir_version,
            producer: proto.producer_name.clone().unwrap_or_default(),
            input_dims,
            input_dim_params,
            declared_shapes: declared_shapes(gp),
        })
    }
}

fn normalize_domain(d: &str) -> String {
    if d == "ai.onnx" {
        String::new()
    } else {
        d.to_string()
    }
}

/// Reads external data files for one model. A location is a file under the model's folder
/// (`base`) after every symlink is resolved, a regular file, and the range is inside it; all
/// three are checked before the file is opened, and the opened file is checked to be the one
/// that was examined, so a FIFO, a device or a link planted in place of a weights file is
/// refused instead of blocking the loader or being read as weights (which a MatMul with chosen
/// inputs would then copy to its output).
struct ExternalData {
    base: Option<PathBuf>,
    /// `base` canonicalised, on first use.
    root: Option<PathBuf>,
    /// Open files by canonical path, with their size when checked.
    files: HashMap<PathBuf, (File, u64)>,
}

impl ExternalData {
    fn new(base: Option<&Path>) -> Self {
        ExternalData {
            // `Path::parent` of a bare file name is "", which names no folder to canonicalise.
            base: base.map(|b| {
                if b.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    b.to_path_buf()
                }
            }),
            root: None,
            files: HashMap::new(),
        }
    }

    fn read(&mut self, t: &TensorProto, want: usize) -> std::result::Result<Vec<u8>, String> {
        let mut location = None;
        let mut offset = 0u64;
        let mut length = None;
        for kv in &t.external_data {
            let v = kv.value.as_deref().unwrap_or("");
            match kv.key.as_deref().unwrap_or("") {
                "location" => location = Some(v.to_string()),
                "offset" => {
                    offset = v
                        .parse()
                        .map_err(|_| format!("bad external offset '{v}'"))?
                }
                "length" => {
                    length = Some(
                        v.parse::<u64>()
                            .map_err(|_| format!("bad external length '{v}'"))?,
                    )
                }
                _ => {}
            }
        }
        let location = location.ok_or("external data has no 'location'")?;
        let rel = Path::new(&location);
        // Same rule as onnx.checker: data must live under the model's directory.
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(format!(
                "external data location '{location}' must be a relative path inside the model directory"
            ));
        }
        let base = self.base.as_ref().ok_or(
            "tensor uses external data but the model was loaded from bytes without a base directory",
        )?;
        let path = base.join(rel);
        let length = length.unwrap_or(want as u64);
        if length != want as u64 {
            return Err(format!(
                "external data length {length} does not match the {want} bytes the shape needs"
            ));
        }
        let root = match &self.root {
            Some(r) => r.clone(),
            None => {
                let r = std::fs::canonicalize(base).map_err(|e| {
                    format!("cannot resolve the model's folder {}: {e}", base.display())
                })?;
                self.root.insert(r).clone()
            }
        };
        // Resolves every symlink, of the file and of the folders on the way, without opening
        // anything.
        let real = std::fs::canonicalize(&path).map_err(|e| {
            format!(
                "external data '{location}': cannot resolve {}: {e}",
                path.display()
            )
        })?;
        if !real.starts_with(&root) {
            return Err(format!(
                "external data '{location}' ({}) resolves to {}, outside the model's folder {}",
                path.display(),
                real.display(),
                root.display()
            ));
        }
        let in_range = |size: u64| {
            if offset.checked_add(length).map_or(true, |end| end > size) {
                return Err(format!(
                    "external data '{location}' bytes {offset}..+{length} are outside the file {} ({size} bytes)",
                    real.display()
                ));
            }
            Ok(())
        };
        match self.files.get(&real) {
            Some(&(_, size)) => in_range(size)?,
            None => {
                let md = std::fs::metadata(&real)
                    .map_err(|e| format!("cannot stat {}: {e}", real.display()))?;
                if !md.is_file() {
                    return Err(format!(
                        "external data '{location}' ({}) is {}, not a regular file",
                        real.display(),
                        file_kind(&md)
                    ));
                }
                in_range(md.len())?;
                let f = open_examined(&real, &md)
                    .map_err(|e| format!("external data '{location}' ({}): {e}", real.display()))?;
                self.files.insert(real.clone(), (f, md.len()));
            }
        }
        let (f, _) = self.files.get_mut(&real).expect("inserted above");
        let mut buf = vec![0u8; want];
        f.seek(SeekFrom::Start(offset))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| format!("cannot read {}: {e}", real.display()))?;
        Ok(buf)
    }
}

/// What a file that is not a regular file is, for error messages.
fn file_kind(md: &std::fs::Metadata) -> &'static str {
    let t = md.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// Opens the regular file `path` that `examined` describes and checks that what was opened is
/// that file. Non-blocking, so that a FIFO swapped in after the check cannot stall the open;
/// then the device and inode must match, so a file swapped in (a link to another file, a FIFO, a
/// device) is refused rather than read.
#[cfg(unix)]
fn open_examined(path: &Path, examined: &std::fs::Metadata) -> std::result::Result<File, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    let opened = f.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !opened.is_file() || opened.dev() != examined.dev() || opened.ino() != examined.ino() {
        return Err("the file changed between its check and its opening; not reading it".into());
    }
    Ok(f)
}

/// Windows has no FIFOs or device nodes in folders; the file opened must still be a regular
/// file (its identity is not compared: that needs unstable APIs or unsafe code).
#[cfg(not(unix))]
fn open_examined(path: &Path, _examined: &std::fs::Metadata) -> std::result::Result<File, String> {
    let f = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let opened = f.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !opened.is_file() {
        return Err(format!("is {}, not a regular file", file_kind(&opened)));
    }
    Ok(f)
}

fn dims_of(dims: &[i64]) -> std::result::Result<Vec<usize>, String> {
    dims.iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("has negative dim {d} in {dims:?}")))
        .collect()
}

/// Decodes a serialized `TensorProto` (as the ONNX backend tests store inputs and outputs) into
/// its name and tensor. External data is not allowed here.
pub fn tensor_from_bytes(bytes: &[u8]) -> Result<(String, Tensor)> {
    use prost::Message;
    let t = TensorProto::decode(bytes).map_err(|e| invalid(format!("not a TensorProto: {e}")))?;
    let name = t.name.clone().unwrap_or_default();
    let tensor = tensor_from_proto(&t, &mut ExternalData::new(None))
        .map_err(|e| invalid(format!("tensor {name:?} {e}")))?;
    Ok((name, tensor))
}

fn tensor_from_proto(
    t: &TensorProto,
    ext: &mut ExternalData,
) -> std::result::Result<Tensor, String> {
    let code = t.data_type.unwrap_or(0);
    let dtype =
        DType::from_onnx(code).ok_or_else(|| format!("has unsupported element type {code}"))?;
    let shape = dims_of(&t.dims)?;
    let n = checked_numel(&shape, dtype)
        .ok_or_else(|| format!("shape {shape:?} of {dtype} exceeds the 4 GiB tensor limit"))?;
    if dtype.is_sub_byte() {
        return int4_from_proto(t, ext, dtype, shape, n);
    }
    let want = n * dtype.size();
    if t.data_location == Some(data_location::EXTERNAL) {
        let bytes = ext.read(t, want)?;
        return Tensor::from_bytes(dtype, shape, bytes);
    }
    if let Some(raw) = &t.raw_data {
        return Tensor::from_bytes(dtype, shape, raw.clone());
    }
    let count_err = |got: usize, field: &str| {
        format!("has {got} values in {field} but shape {shape:?} needs {n}")
    };
    let mut out = Vec::with_capacity(want);
    match dtype {
        DType::F32 => {
            if t.float_data.len() != n {
                return Err(count_err(t.float_data.len(), "float_data"));
            }
            for v in &t.float_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::F64 => {
            if t.double_data.len() != n {
                return Err(count_err(t.double_data.len(), "double_data"));
            }
            for v in &t.double_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::I64 => {
            if t.int64_data.len() != n {
                return Err(count_err(t.int64_data.len(), "int64_data"));
            }
            for v in &t.int64_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::U32 | DType::U64 => {
            if t.uint64_data.len() != n {
                return Err(count_err(t.uint64_data.len(), "uint64_data"));
            }
            for &v in &t.uint64_data {
                if dtype == DType::U32 {
                    out.extend_from_slice(&(v as u32).to_le_bytes());
                } else {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        // int32_data carries every type of 32 bits or less; 16-bit floats as their bit pattern.
        _ => {
            if t.int32_data.len() != n {
                return Err(count_err(t.int32_data.len(), "int32_data"));
            }
            for &v in &t.int32_data {
                match dtype.size() {
                    1 => out.push(v as u8),
                    2 => out.extend_from_slice(&(v as u16).to_le_bytes()),
                    _ => out.extend_from_slice(&v.to_le_bytes()),
                }
            }
        }
    }
    Tensor::from_bytes(dtype, shape, out)
}

/// A 4-bit tensor: ONNX packs two values to a byte, the first in the low nibble (in raw data,
/// external data and, one byte per entry, `int32_data`); held one value per byte, an i4
/// sign-extended.
fn int4_from_proto(
    t: &TensorProto,
    ext: &mut ExternalData,
    dtype: DType,
    shape: Vec<usize>,
    n: usize,
) -> std::result::Result<Tensor, String> {
    let packed_len = n.div_ceil(2);
    let packed: Vec<u8> = if t.data_location == Some(data_location::EXTERNAL) {
        ext.read(t, packed_len)?
    } else if let Some(raw) = &t.raw_data {
        raw.clone()
    } else {
        t.int32_data.iter().map(|&v| v as u8).collect()
    };
    if packed.len() != packed_len {
        return Err(format!(
            "has {} bytes of packed {dtype} data but shape {shape:?} needs {packed_len}",
            packed.len()
        ));
    }
    let out = (0..n)
        .map(|i| {
            let nibble = (packed[i / 2] >> (4 * (i % 2))) & 0x0F;
            if dtype == DType::I4 {
                (((nibble << 4) as i8) >> 4) as u8
            } else {
                nibble
            }
        })
        .collect();
    Tensor::from_bytes(dtype, shape, out)
}

fn sparse_to_dense(
    s: &onnx::SparseTensorProto,
    ext: &mut ExternalData,
) -> std::result::Result<(String, Tensor), String> {
    let values = s.values.as_ref().ok_or("sparse tensor has no values")?;
    let indices = s.indices.as_ref().ok_or("sparse tensor has no indices")?;
    let name = values.name.clone().unwrap_or_default();
    let vals = tensor_from_proto(values, ext)?;
    let idx = tensor_from_proto(indices, ext)?;
    let shape = dims_of(&s.dims)?;
    let n = checked_numel(&shape, vals.dtype).ok_or("sparse tensor is too large")?;
    let nnz = vals.numel();
    let idx_v = idx.to_i64();
    let rank = shape.len();
    let linear: Vec<i64> = if idx.shape.len() == 1 && idx_v.len() == nnz {
        idx_v
    } else if idx.shape == [nnz, rank] {
        idx_v
            .chunks(rank.max(1))
            .map(|c| {
                c.iter().zip(&shape).fold(0i64, |acc, (&i, &d)| {
                    acc.saturating_mul(d as i64).saturating_add(i)
                })
            })
            .collect()
    } else {
        return Err(format!(
            "sparse indices have shape {:?} for {nnz} values",
            idx.shape
        ));
    };
    let es = vals.dtype.size();
    let mut out = vec![0u8; n * es];
    for (k, &li) in linear.iter().enumerate() {
        let li = usize::try_from(li)
            .ok()
            .filter(|&i| i < n)
            .ok_or_else(|| format!("sparse index {li} is out of range"))?;
        out[li * es..(li + 1) * es].copy_from_slice(&vals.bytes()[k * es..(k + 1) * es]);
    }
    Ok((name, Tensor::from_bytes(vals.dtype, shape, out)?))
}

fn convert_attr(
    a: &onnx::AttributeProto,
    ext: &mut ExternalData,
) -> std::result::Result<Attr, String> {
    let ty = match a.r#type {
        Some(t) if t != at::UNDEFINED => t,
        // IR 1/2 writers omitted the type; infer it from the populated field.
        _ => {
            if a.f.is_some() {
                at::FLOAT
            } else if a.i.is_some() {
                at::INT
            } else if a.s.is_some() {
                at::STRING
            } else if a.t.is_some() {
                at::TENSOR
            } else if a.g.is_some() {
                at::GRAPH
            } else if !a.floats.is_empty() {
                at::FLOATS
            } else if !a.ints.is_empty() {
                at::INTS
            } else if !a.strings.is_empty() {
                at::STRINGS
            } else {
                return Err("attribute has no type and no value".into());
            }
        }
    };
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok(match ty {
        at::FLOAT => Attr::Float(a.f.unwrap_or(0.0)),
        at::INT => Attr::Int(a.i.unwrap_or(0)),
        at::STRING => Attr::String(s(a.s.as_deref().unwrap_or(&[]))),
        at::TENSOR => Attr::Tensor(tensor_from_proto(
            a.t.as_ref().ok_or("tensor attribute has no tensor")?,
            ext,
        )?),
        at::FLOATS => Attr::Floats(a.floats.clone()),
        at::INTS => Attr::Ints(a.ints.clone()),
        at::STRINGS => Attr::Strings(a.strings.iter().map(|b| s(b)).collect()),
        at::SPARSE_TENSOR => Attr::Tensor(
            sparse_to_dense(
                a.sparse_tensor
                    .as_ref()
                    .ok_or("sparse attribute has no tensor")?,
                ext,
            )?
            .1,
        ),
        at::GRAPH | at::GRAPHS => Attr::Other("graph"),
        at::TENSORS | at::SPARSE_TENSORS => Attr::Other("tensors"),
        at::TYPE_PROTO | at::TYPE_PROTOS => Attr::Other("type"),
        other => return Err(format!("unknown attribute type {other}")),
    })
}

/// Name, element type, declared dims (`None` when the shape or a dim is symbolic) and the
/// `dim_param` name of each dim that has one.
type ValueType = (
    String,
    DType,
    Option<Vec<Option<usize>>>,
    Vec<Option<String>>,
);

fn value_type(vi: &onnx::ValueInfoProto, what: &str) -> Result<ValueType> {
    let name = vi.name.clone().unwrap_or_default();
    let tt = vi
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .ok_or_else(|| invalid(format!("{what} '{name}' is not a tensor")))?;
    let code = tt.elem_type.unwrap_or(0);
    let dtype = DType::from_onnx(code).ok_or_else(|| {
        invalid(format!(
            "{what} '{name}' has unsupported element type {code}"
        ))
    })?;
    let dims = match &tt.shape {
        None => None,
        Some(s) => Some(
            s.dim
                .iter()
                .map(|d| match &d.value {
                    // Paddle and older exporters write a dynamic dim as -1: symbolic, like a
                    // dim_param.
                    Some(onnx::DimensionValue::DimValue(-1)) => Ok(None),
                    Some(onnx::DimensionValue::DimValue(v)) => usize::try_from(*v)
                        .map(Some)
                        .map_err(|_| invalid(format!("{what} '{name}' has negative dim {v}"))),
                    _ => Ok(None),
                })
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    let params = tt
        .shape
        .iter()
        .flat_map(|s| &s.dim)
        .map(|d| match &d.value {
            Some(onnx::DimensionValue::DimParam(p)) if !p.is_empty() => Some(p.clone()),
            _ => None,
        })
        .collect();
    Ok((name, dtype, dims, params))
}

/// The declared shapes of `gp`'s outputs and `value_info` (see [`Model::declared_shapes`]).
/// Entries that are not tensors, have no shape, or have a negative dim other than `-1` are
/// left out: a declaration only helps, so a bad one is no reason to refuse the model.
fn declared_shapes(gp: &onnx::GraphProto) -> HashMap<String, Vec<Option<usize>>> {
    let mut out = HashMap::new();
    for vi in gp.output.iter().chain(&gp.value_info) {
        let Some(name) = vi.name.clone().filter(|n| !n.is_empty()) else {
            continue;
        };
        let Some(shape) = vi
            .r#type
            .as_ref()
            .and_then(|t| t.tensor_type.as_ref())
            .and_then(|t| t.shape.as_ref())
        else {
            continue;
        };
        let dims: Option<Vec<Option<usize>>> = shape
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(onnx::DimensionValue::DimValue(-1)) => Some(None),
                Some(onnx::DimensionValue::DimValue(v)) => usize::try_from(*v).ok().map(Some),
                _ => Some(None),
            })
            .collect();
        if let Some(dims) = dims {
            out.insert(name, dims);
        }
    }
    out
}

type InputDims = Vec<Option<Vec<Option<usize>>>>;
type InputDimParams = Vec<Vec<Option<String>>>;

fn convert_graph(
    gp: &onnx::GraphProto,
    ext: &mut ExternalData,
) -> Result<(Graph, InputDims, InputDimParams)> {
    let c = convert_scope(gp, ext, false)?;
    Ok((c.graph, c.input_dims, c.input_dim_params))
}

/// A graph as converted: the IR graph, its declared input dims, and (for a subgraph) the names
/// of the enclosing graphs' values it reads, whose placeholders follow its formal inputs in
/// `graph.inputs`.
struct Converted {
    graph: Graph,
    input_dims: InputDims,
    input_dim_params: InputDimParams,
    captures: Vec<String>,
}

/// A subgraph attribute (If branch, Loop or Scan body) as an [`Attr::Graph`], and the names of
/// the outer values it reads, which become inputs of its node.
fn convert_subgraph(
    gp: &onnx::GraphProto,
    ext: &mut ExternalData,
) -> Result<(crate::ir::SubGraph, Vec<String>)> {
    let c = convert_scope(gp, ext, true)?;
    let formal = c.graph.inputs.len() - c.captures.len();
    Ok((
        crate::ir::SubGraph {
            graph: c.graph,
            formal,
            captures: vec![],
        },
        c.captures,
    ))
}

/// Converts a graph; with `sub`, names it reads but does not define are values of an
/// enclosing graph (captures) rather than errors.
fn convert_scope(gp: &onnx::GraphProto, ext: &mut ExternalData, sub: bool) -> Result<Converted> {
    let mut g = Graph::default();
    let mut ids: HashMap<String, ValueId> = HashMap::new();
    let define = |g: &mut Graph, ids: &mut HashMap<String, ValueId>, v: Value| -> Result<ValueId> {
        if v.name.is_empty() {
            return Err(invalid("a graph value has an empty name"));
        }
        if ids.contains_key(&v.name) {
            return Err(invalid(format!(
                "value '{}' is defined more than once",
                v.name
            )));
        }
        let name = v.name.clone();
        let mut v = v;
        v.origin = Some(crate::ir::Origin::of(&name));
        let id = g.push_value_raw(v);
        ids.insert(name, id);
        Ok(id)
    };
    let konst = |name: &str, t: Tensor| Value {
        name: name.to_string(),
        dtype: t.dtype,
        shape: t.shape.clone(),
        known: true,
        konst: Some(t),
        quant: None,
        origin: None,
    };

    let mut inits: Vec<(String, Tensor)> = Vec::new();
    for t in &gp.initializer {
        let name = t.name.clone().unwrap_or_default();
        let tensor =
            tensor_from_proto(t, ext).map_err(|e| invalid(format!("initializer '{name}' {e}")))?;
        inits.push((name, tensor));
    }
    for s in &gp.sparse_initializer {
        let values_name = s.values.as_ref().and_then(|v| v.name.as_deref());
        let (name, t) = sparse_to_dense(s, ext).map_err(|e| {
            invalid(format!(
                "sparse initializer '{}': {e}",
                values_name.unwrap_or_default()
            ))
        })?;
        inits.push((name, t));
    }
    let init_names: std::collections::HashSet<&str> =
        inits.iter().map(|(n, _)| n.as_str()).collect();

    let mut input_dims = Vec::new();
    let mut input_dim_params = Vec::new();
    for vi in &gp.input {
        let (name, dtype, dims, params) = value_type(vi, "graph input")?;
        // Before IR 4 initializers were also listed as inputs; they are constants here.
        if init_names.contains(name.as_str()) {
            continue;
        }
        if dtype.is_sub_byte() {
            return Err(invalid(format!(
                "graph input '{name}' is {dtype}: QNN holds 4-bit values only as constant \
                 weights behind a DequantizeLinear; pass the input as int8 or uint8"
            )));
        }
        let known = dims.as_ref().is_some_and(|d| d.iter().all(Option::is_some));
        let shape = dims
            .as_ref()
            .map(|d| d.iter().map(|x| x.unwrap_or(0)).collect())
            .unwrap_or_default();
        let id = define(
            &mut g,
            &mut ids,
            Value {
                name,
                dtype,
                shape,
                known,
                konst: None,
                quant: None,
                origin: None,
            },
        )?;
        g.inputs.push(id);
        input_dims.push(dims);
        input_dim_params.push(params);
    }
    for (name, t) in inits {
        define(&mut g, &mut ids, konst(&name, t))?;
    }

    // Outputs first (nodes may be unsorted), then inputs, so that dangling reads are caught.
    let mut pending = Vec::new();
    for (idx, np) in gp.node.iter().enumerate() {
        let op_type = np.op_type.clone().unwrap_or_default();
        if op_type.is_empty() {
            return Err(invalid(format!("node #{idx} has no op_type")));
        }
        let name = match np.name.as_deref() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => format!("{op_type}_{idx}"),
        };
        let mut attrs = BTreeMap::new();
        let mut reads: Vec<String> = np.input.clone();
        for a in &np.attribute {
            let an = a.name.clone().unwrap_or_default();
            let is_graph = match a.r#type {
                Some(t) if t != at::UNDEFINED => t == at::GRAPH,
                _ => a.g.is_some(),
            };
            if let (true, Some(sg)) = (is_graph, a.g.as_deref()) {
                // A subgraph that does not load (a Loop body over sequences, say) is kept as an
                // attribute that is only reported: its node cannot be lowered either way.
                let v = match convert_subgraph(sg, ext) {
                    Ok((mut sub, captures)) => {
                        for c in captures {
                            let slot = match reads.iter().skip(np.input.len()).position(|r| *r == c)
                            {
                                Some(p) => np.input.len() + p,
                                None => {
                                    reads.push(c);
                                    reads.len() - 1
                                }
                            };
                            sub.captures.push(slot);
                        }
                        Attr::Graph(std::sync::Arc::new(sub))
                    }
                    Err(_) => Attr::Other("graph"),
                };
                attrs.insert(an, v);
                continue;
            }
            let v = convert_attr(a, ext).map_err(|e| {
                invalid(format!(
                    "Node \"{name}\" ({op_type}), attribute '{an}': {e}"
                ))
            })?;
            attrs.insert(an, v);
        }
        let mut domain = normalize_domain(np.domain.as_deref().unwrap_or(""));
        // ONNX Runtime's contrib QuantizeLinear/DequantizeLinear carry 16-bit types before
        // opset 21 with the standard ops' semantics.
        if domain == "com.microsoft"
            && matches!(op_type.as_str(), "QuantizeLinear" | "DequantizeLinear")
        {
            domain = String::new();
        }
        if crate::ops::quant::is_internal(&op_type) {
            return Err(invalid(format!(
                "Node \"{name}\" has op type {op_type}, which is reserved for qnnx's own conversions"
            )));
        }
        if op_type == "Constant" && domain.is_empty() {
            let t = constant_value(&name, &attrs)?;
            let out = np
                .output
                .first()
                .filter(|o| !o.is_empty())
                .ok_or_else(|| invalid(format!("Node \"{name}\" (Constant) has no output")))?;
            define(&mut g, &mut ids, konst(out, t))?;
            continue;
        }
        let mut outputs = Vec::new();
        for o in &np.output {
            if o.is_empty() {
                outputs.push(None);
            } else {
                let id = define(
                    &mut g,
                    &mut ids,
                    Value {
                        name: o.clone(),
                        dtype: DType::F32,
                        shape: vec![],
                        known: false,
                        konst: None,
                        quant: None,
                        origin: None,
                    },
                )?;
                outputs.push(Some(id));
            }
        }
        let mut node = Node::new(name, op_type);
        node.domain = domain;
        node.attrs = attrs;
        node.outputs = outputs;
        pending.push((node, reads));
    }
    // A name a subgraph reads without defining it is an enclosing graph's value: a placeholder.
    let mut captures: Vec<(String, ValueId)> = Vec::new();
    let mut capture = |g: &mut Graph, ids: &mut HashMap<String, ValueId>, name: &str| {
        let id = g.push_value_raw(Value {
            name: name.to_string(),
            dtype: DType::F32,
            shape: vec![],
            known: false,
            konst: None,
            quant: None,
            origin: None,
        });
        ids.insert(name.to_string(), id);
        captures.push((name.to_string(), id));
        id
    };
    for (mut node, inputs) in pending {
        for i in &inputs {
            if i.is_empty() {
                node.inputs.push(None);
                continue;
            }
            let id = match ids.get(i).copied() {
                Some(id) => id,
                None if sub => capture(&mut g, &mut ids, i),
                None => {
                    return Err(invalid(format!(
                    "Node \"{}\" ({}) reads '{i}', which no node, input or initializer produces",
                    node.name, node.op_type
                )))
                }
            };
            node.inputs.push(Some(id));
        }
        g.nodes.push(node);
    }
    for vi in &gp.output {
        let name = vi.name.clone().unwrap_or_default();
        let id = match ids.get(&name).copied() {
            Some(id) => id,
            None if sub && !name.is_empty() => capture(&mut g, &mut ids, &name),
            None => {
                return Err(invalid(format!(
                    "graph output '{name}' is not produced by the graph"
                )))
            }
        };
        if g.outputs.contains(&id) {
            return Err(invalid(format!(
                "graph output '{name}' is listed more than once"
            )));
        }
        g.outputs.push(id);
    }
    if g.outputs.is_empty() {
        return Err(invalid("graph has no outputs"));
    }
    {
        let mut seen = std::collections::HashSet::new();
        for n in &mut g.nodes {
            if !seen.insert(n.name.clone()) {
                let mut i = 1;
                while !seen.insert(format!("{}_{i}", n.name)) {
                    i += 1;
                }
                n.name = format!("{}_{i}", n.name);
            }
        }
    }
    g.inputs.extend(captures.iter().map(|(_, id)| *id));
    g.reserve_names();
    g.toposort()?;
    Ok(Converted {
        graph: g,
        input_dims,
        input_dim_params,
        captures: captures.into_iter().map(|(n, _)| n).collect(),
    })
}

fn constant_value(name: &str, attrs: &BTreeMap<String, Attr>) -> Result<Tensor> {
    let err = |m: &str| invalid(format!("Node \"{name}\" (Constant): {m}"));
    if attrs.len() != 1 {
        return Err(err("needs exactly one value attribute"));
    }
    let (k, a) = attrs.iter().next().expect("len checked");
    Ok(match (k.as_str(), a) {
        ("value" | "sparse_value", Attr::Tensor(t)) => t.clone(),
        ("value_float", Attr::Float(f)) => Tensor::scalar_f32(*f),
        ("value_floats", Attr::Floats(v)) => Tensor::from_f32(vec![v.len()], v),
        ("value_int", Attr::Int(i)) => Tensor::from_i64(vec![], &[*i]),
        ("value_ints", Attr::Ints(v)) => Tensor::from_i64(vec![v.len()], v),
        ("value_string" | "value_strings", _) => {
            return Err(err("string constants are not supported"))
        }
        _ => {
            return Err(err(&format!(
                "unexpected attribute '{k}' of kind {}",
                a.kind()
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{tensor_proto, ModelBuilder, A};

    fn relu_model() -> ModelBuilder {
        ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4])
            .node("Relu", &["x"], &["y"], &[])
            .output("y")
    }

    fn err(m: &onnx::ModelProto) -> String {
        Model::from_proto(m, None).unwrap_err().to_string()
    }

    #[test]
    fn loads_relu() {
        let m = Model::from_bytes(&relu_model().bytes(), None).unwrap();
        assert_eq!(m.graph.nodes.len(), 1);
        assert_eq!(m.graph.value(m.graph.inputs[0]).shape, vec![1, 4]);
        assert_eq!(m.input_dims, vec![Some(vec![Some(1), Some(4)])]);
    }

    #[test]
    fn ir_versions_3_to_14_load() {
        for v in 3..=14 {
            let mut b = relu_model();
            b.model.ir_version = Some(v);
            assert!(Model::from_proto(&b.model, None).is_ok(), "IR {v}");
        }
    }

    #[test]
    fn ir_version_missing_or_out_of_range_rejected() {
        let mut b = relu_model();
        b.model.ir_version = None;
        assert_eq!(err(&b.model), "invalid model: model has no ir_version");
        b.model.ir_version = Some(2);
        assert!(err(&b.model).contains("IR version 2 is not supported"));
    }

    #[test]
    fn no_graph_rejected() {
        let mut b = relu_model();
        b.model.graph = None;
        assert_eq!(err(&b.model), "invalid model: model has no graph");
    }

    #[test]
    fn missing_default_opset_rejected() {
        let mut b = relu_model();
        b.model.opset_import.clear();
        assert!(err(&b.model).contains("default ONNX opset"));
    }

    #[test]
    fn raw_data_size_mismatch_rejected() {
        let mut b = relu_model();
        let mut t = tensor_proto("w", &Tensor::from_f32(vec![2], &[1.0, 2.0]));
        t.dims = vec![3];
        b.model.graph.as_mut().unwrap().initializer.push(t);
        assert!(err(&b.model)
            .contains("initializer 'w' has 8 bytes of data but shape [3] of f32 needs 12"));
    }

    #[test]
    fn typed_data_count_mismatch_rejected() {
        let mut b = relu_model();
        let t = onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![2, 2],
            data_type: Some(1),
            float_data: vec![1.0, 2.0, 3.0],
            ..Default::default()
        };
        b.model.graph.as_mut().unwrap().initializer.push(t);
        assert!(err(&b.model).contains("has 3 values in float_data but shape [2, 2] needs 4"));
    }

    #[test]
    fn negative_and_absurd_dims_rejected() {
        let mut b = relu_model();
        let t = onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![-1],
            data_type: Some(1),
            ..Default::default()
        };
        b.model.graph.as_mut().unwrap().initializer.push(t);
        assert!(err(&b.model).contains("negative dim -1"));

        let mut b = relu_model();
        let t = onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![1 << 40, 1 << 40],
            data_type: Some(1),
            ..Default::default()
        };
        b.model.graph.as_mut().unwrap().initializer.push(t);
        assert!(err(&b.model).contains("exceeds the 4 GiB tensor limit"));

        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4])
            .node("Relu", &["x"], &["y"], &[])
            .output("y");
        let mut m = b.model.clone();
        if let Some(onnx::DimensionValue::DimValue(d)) = m.graph.as_mut().unwrap().input[0]
            .r#type
            .as_mut()
            .unwrap()
            .tensor_type
            .as_mut()
            .unwrap()
            .shape
            .as_mut()
            .unwrap()
            .dim[0]
            .value
            .as_mut()
        {
            *d = -3;
        }
        assert!(err(&m).contains("graph input 'x' has negative dim -3"));
    }

    #[test]
    fn cycle_rejected() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Add", &["x", "b"], &["a"], &[])
            .node("Relu", &["a"], &["b"], &[])
            .output("a");
        assert!(err(&b.model).contains("graph has a cycle"));
    }

    #[test]
    fn dangling_input_rejected() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Add", &["x", "nope"], &["y"], &[])
            .output("y");
        assert_eq!(
            err(&b.model),
            "invalid model: Node \"Add_0\" (Add) reads 'nope', which no node, input or initializer produces"
        );
    }

    #[test]
    fn duplicate_outputs_rejected() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Relu", &["x"], &["y"], &[])
            .node("Neg", &["x"], &["y"], &[])
            .output("y");
        assert_eq!(
            err(&b.model),
            "invalid model: value 'y' is defined more than once"
        );
        let b = relu_model().output("y");
        assert!(err(&b.model).contains("graph output 'y' is listed more than once"));
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Relu", &["x"], &["x"], &[])
            .output("x");
        assert!(err(&b.model).contains("'x' is defined more than once"));
    }

    #[test]
    fn unsorted_nodes_are_sorted() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1])
            .node("Neg", &["a"], &["y"], &[])
            .node("Relu", &["x"], &["a"], &[])
            .output("y");
        let m = b.load();
        assert_eq!(m.graph.nodes[0].op_type, "Relu");
    }

    #[test]
    fn constant_nodes_become_constants() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .node("Constant", &[], &["c1"], &[("value_float", A::F(2.5))])
            .node(
                "Constant",
                &[],
                &["c2"],
                &[("value_ints", A::Is(vec![1, 2]))],
            )
            .node(
                "Constant",
                &[],
                &["c3"],
                &[("value_floats", A::Fs(vec![1.0, 2.0]))],
            )
            .node("Constant", &[], &["c4"], &[("value_int", A::I(7))])
            .node(
                "Constant",
                &[],
                &["c5"],
                &[("value", A::T(Tensor::from_f32(vec![2], &[3.0, 4.0])))],
            )
            .node("Add", &["x", "c3"], &["y"], &[])
            .output("y");
        let m = b.load();
        let g = &m.graph;
        assert_eq!(g.nodes.len(), 1);
        let by = g.name_map();
        assert_eq!(g.konst(by["c1"]).unwrap().to_f64(), vec![2.5]);
        assert_eq!(g.konst(by["c2"]).unwrap().to_i64(), vec![1, 2]);
        assert_eq!(g.konst(by["c3"]).unwrap().shape, vec![2]);
        assert_eq!(g.konst(by["c4"]).unwrap().shape, Vec::<usize>::new());
        assert_eq!(g.konst(by["c5"]).unwrap().to_f64(), vec![3.0, 4.0]);
    }

    #[test]
    fn typed_fields_of_every_dtype() {
        let cases: Vec<(DType, onnx::TensorProto, Vec<f64>)> = vec![
            (
                DType::F16,
                onnx::TensorProto {
                    int32_data: vec![0x3C00, 0xC000],
                    ..Default::default()
                },
                vec![1.0, -2.0],
            ),
            (
                DType::BF16,
                onnx::TensorProto {
                    int32_data: vec![0x3F80, 0x4000],
                    ..Default::default()
                },
                vec![1.0, 2.0],
            ),
            (
                DType::Bool,
                onnx::TensorProto {
                    int32_data: vec![1, 0],
                    ..Default::default()
                },
                vec![1.0, 0.0],
            ),
            (
                DType::I8,
                onnx::TensorProto {
                    int32_data: vec![-3, 4],
                    ..Default::default()
                },
                vec![-3.0, 4.0],
            ),
            (
                DType::U16,
                onnx::TensorProto {
                    int32_data: vec![65535, 4],
                    ..Default::default()
                },
                vec![65535.0, 4.0],
            ),
            (
                DType::I64,
                onnx::TensorProto {
                    int64_data: vec![-1, 1 << 40],
                    ..Default::default()
                },
                vec![-1.0, (1u64 << 40) as f64],
            ),
            (
                DType::U64,
                onnx::TensorProto {
                    uint64_data: vec![5, 6],
                    ..Default::default()
                },
                vec![5.0, 6.0],
            ),
            (
                DType::U32,
                onnx::TensorProto {
                    uint64_data: vec![5, 4_000_000_000],
                    ..Default::default()
                },
                vec![5.0, 4e9],
            ),
            (
                DType::F64,
                onnx::TensorProto {
                    double_data: vec![0.25, -8.0],
                    ..Default::default()
                },
                vec![0.25, -8.0],
            ),
            (
                DType::I32,
                onnx::TensorProto {
                    raw_data: Some([(-7i32).to_le_bytes(), 9i32.to_le_bytes()].concat()),
                    ..Default::default()
                },
                vec![-7.0, 9.0],
            ),
        ];
        for (dt, mut t, want) in cases {
            t.dims = vec![2];
            t.data_type = Some(dt.to_onnx());
            let mut ext = ExternalData::new(None);
            let got = tensor_from_proto(&t, &mut ext).unwrap();
            assert_eq!(got.dtype, dt);
            assert_eq!(got.to_f64(), want, "{dt}");
        }
    }

    #[test]
    fn initializer_listed_as_input_is_constant() {
        let b = ModelBuilder::new(9)
            .input("x", DType::F32, &[2])
            .input("w", DType::F32, &[2])
            .init("w", Tensor::from_f32(vec![2], &[1.0, 2.0]))
            .node("Add", &["x", "w"], &["y"], &[])
            .output("y");
        let m = b.load();
        assert_eq!(m.graph.inputs.len(), 1);
    }

    /// A model whose input `x` declares dims `dims` as `dim_value`s (negative ones included).
    fn dim_value_model(dims: &[i64]) -> onnx::ModelProto {
        let mut m = relu_model().model;
        let shape = m.graph.as_mut().unwrap().input[0]
            .r#type
            .as_mut()
            .unwrap()
            .tensor_type
            .as_mut()
            .unwrap()
            .shape
            .as_mut()
            .unwrap();
        shape.dim = dims
            .iter()
            .map(|&d| onnx::Dimension {
                value: Some(onnx::DimensionValue::DimValue(d)),
                denotation: None,
            })
            .collect();
        m
    }

    #[test]
    fn minus_one_dims_are_symbolic() {
        let m = Model::from_proto(&dim_value_model(&[-1, 4]), None).unwrap();
        assert_eq!(m.input_dims, vec![Some(vec![None, Some(4)])]);
        assert_eq!(m.describe_input_dims(0).unwrap(), "[?, 4]");
        assert_eq!(
            m.symbolic_inputs(),
            vec![("x".to_string(), "[?, 4]".to_string())]
        );
        assert!(!m.graph.value(m.graph.inputs[0]).known);
        // Only -1 means "dynamic"; other negative dims stay invalid.
        let e = Model::from_proto(&dim_value_model(&[-2, 4]), None).unwrap_err();
        assert!(e.to_string().contains("negative dim -2"), "{e}");
    }

    #[test]
    fn dim_params_are_named() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, &[-1, 4])
            .node("Relu", &["x"], &["y"], &[])
            .output("y")
            .load();
        assert_eq!(m.input_dim_params, vec![vec![Some("N".to_string()), None]]);
        assert_eq!(m.describe_input_dims(0).unwrap(), "[N, 4]");
    }

    #[test]
    fn subgraphs_load_with_their_outer_reads_as_node_inputs() {
        let then = ModelBuilder::new(17)
            .node("Mul", &["x", "w"], &["t"], &[])
            .output("t")
            .model
            .graph
            .unwrap();
        let els = ModelBuilder::new(17).output("x").model.graph.unwrap();
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .input("c", DType::Bool, &[])
            .init("w", Tensor::from_f32(vec![2], &[1.0, 2.0]))
            .node(
                "If",
                &["c"],
                &["y"],
                &[("then_branch", A::G(then)), ("else_branch", A::G(els))],
            )
            .output("y");
        let m = b.load();
        let g = &m.graph;
        let n = &g.nodes[0];
        let names: Vec<&str> = n
            .inputs
            .iter()
            .map(|i| g.value(i.unwrap()).name.as_str())
            .collect();
        assert_eq!(names, ["c", "x", "w"]);
        let Some(Attr::Graph(t)) = n.attrs.get("then_branch") else {
            panic!("{:?}", n.attrs)
        };
        assert_eq!((t.formal, t.captures.clone()), (0, vec![1, 2]));
        assert_eq!(t.graph.inputs.len(), 2);
        let Some(Attr::Graph(e)) = n.attrs.get("else_branch") else {
            panic!()
        };
        // The else branch returns the outer x itself.
        assert_eq!(e.captures, vec![1]);
        assert_eq!(e.graph.outputs, vec![e.graph.inputs[0]]);
        // A subgraph that cannot load (a non-tensor formal input) is only reported.
        let mut body = ModelBuilder::new(17).output("x").model.graph.unwrap();
        body.input.push(onnx::ValueInfoProto {
            name: Some("seq".into()),
            r#type: Some(onnx::TypeProto::default()),
            ..Default::default()
        });
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .node("Loop", &["", ""], &["y"], &[("body", A::G(body))])
            .output("y");
        let m = b.load();
        assert_eq!(m.graph.nodes[0].attrs["body"], Attr::Other("graph"));
    }

    #[test]
    fn symbolic_dims_are_recorded() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[-1, 4])
            .node("Relu", &["x"], &["y"], &[])
            .output("y");
        let m = b.load();
        assert_eq!(m.input_dims, vec![Some(vec![None, Some(4)])]);
        assert!(!m.graph.value(m.graph.inputs[0]).known);
    }

    fn external_model(location: &str, offset: u64, len: u64) -> onnx::ModelProto {
        let mut b = relu_model();
        let t = onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![2],
            data_type: Some(1),
            data_location: Some(data_location::EXTERNAL),
            external_data: [
                ("location", location.to_string()),
                ("offset", offset.to_string()),
                ("length", len.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| onnx::StringStringEntryProto {
                key: Some(k.into()),
                value: Some(v),
            })
            .collect(),
            ..Default::default()
        };
        b.model.graph.as_mut().unwrap().initializer.push(t);
        b.model
    }

    #[test]
    fn external_data_with_offset() {
        let dir = std::env::temp_dir().join(format!("qnnx-ext-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut data = vec![0xAAu8; 16];
        data.extend_from_slice(&1.5f32.to_le_bytes());
        data.extend_from_slice(&(-2.0f32).to_le_bytes());
        std::fs::write(dir.join("w.bin"), &data).unwrap();
        let m = external_model("w.bin", 16, 8);
        std::fs::write(dir.join("m.onnx"), prost::Message::encode_to_vec(&m)).unwrap();
        let model = Model::load(dir.join("m.onnx")).unwrap();
        let w = model.graph.name_map()["w"];
        assert_eq!(model.graph.konst(w).unwrap().to_f64(), vec![1.5, -2.0]);

        let e = Model::from_proto(&external_model("w.bin", 20, 8), Some(&dir)).unwrap_err();
        assert!(e.to_string().contains("outside the file"), "{e}");
        let e = Model::from_proto(&external_model("w.bin", 0, 4), Some(&dir)).unwrap_err();
        assert!(e.to_string().contains("does not match"), "{e}");
        let e = Model::from_proto(&external_model("../w.bin", 0, 8), Some(&dir)).unwrap_err();
        assert!(e.to_string().contains("must be a relative path"), "{e}");
        let e = Model::from_proto(&external_model("w.bin", 0, 8), None).unwrap_err();
        assert!(e.to_string().contains("without a base directory"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh folder holding `m.onnx`, whose initializer "w" (2 f32) reads `location` from
    /// byte `offset` on; returns the folder and the model's path.
    fn external_dir(case: &str, location: &str, offset: u64) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("qnnx-ext-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let model = dir.join("m.onnx");
        let m = external_model(location, offset, 8);
        std::fs::write(&model, prost::Message::encode_to_vec(&m)).unwrap();
        (dir, model)
    }

    /// Loads `model` on another thread: a load that blocks (on a FIFO, say) fails the test
    /// after 20 s instead of hanging it.
    fn load_err(model: &Path) -> String {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = model.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(Model::load(path).map(|_| ()).map_err(|e| e.to_string()));
        });
        match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(Ok(())) => panic!("{} loaded", model.display()),
            Ok(Err(e)) => e,
            Err(_) => panic!("loading {} blocked for 20 s", model.display()),
        }
    }

    #[cfg(unix)]
    fn outside_secret(case: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qnnx-secret-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret"), b"password").unwrap();
        dir
    }

    #[cfg(unix)]
    #[test]
    fn external_data_symlink_to_a_file_outside_is_refused() {
        let secret = outside_secret("link");
        let (dir, model) = external_dir("link", "w.bin", 0);
        std::os::unix::fs::symlink(secret.join("secret"), dir.join("w.bin")).unwrap();
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(e.contains("outside the model's folder"), "{e}");
        assert!(
            e.contains("w.bin") && e.contains(&secret.display().to_string()),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&secret).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn external_data_through_a_symlinked_folder_outside_is_refused() {
        let secret = outside_secret("dirlink");
        let (dir, model) = external_dir("dirlink", "sub/secret", 0);
        std::os::unix::fs::symlink(&secret, dir.join("sub")).unwrap();
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(e.contains("outside the model's folder"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&secret).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn external_data_symlink_inside_the_model_folder_is_read() {
        let (dir, model) = external_dir("inside", "w.bin", 0);
        std::fs::create_dir(dir.join("weights")).unwrap();
        let data = [1.5f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat();
        std::fs::write(dir.join("weights/real.bin"), data).unwrap();
        std::os::unix::fs::symlink("weights/real.bin", dir.join("w.bin")).unwrap();
        let m = Model::load(&*model).unwrap();
        let w = m.graph.name_map()["w"];
        assert_eq!(m.graph.konst(w).unwrap().to_f64(), vec![1.5, -2.0]);
        // The model folder itself reached through a symlink: still inside.
        let link = dir.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(Model::load(link.join("m.onnx")).is_ok());
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn external_data_fifo_is_refused_without_blocking() {
        let (dir, model) = external_dir("fifo", "w.bin", 0);
        let fifo = dir.join("w.bin");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("skipped: mkfifo failed ({made:?})");
            return;
        }
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(e.contains("is a FIFO, not a regular file"), "{e}");
        assert!(e.contains(&fifo.display().to_string()), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn external_data_device_file_is_refused() {
        let (dir, model) = external_dir("dev", "w.bin", 0);
        // A /dev/zero (character device 1:5) inside the model folder; needs root or CAP_MKNOD.
        let made = std::process::Command::new("mknod")
            .arg(dir.join("w.bin"))
            .args(["c", "1", "5"])
            .output();
        if !made.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("skipped: mknod failed (not root?): {made:?}");
            std::fs::remove_dir_all(&dir).unwrap();
            return;
        }
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(
            e.contains("is a character device, not a regular file"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn external_data_directory_is_refused() {
        let (dir, model) = external_dir("dir", "w.bin", 0);
        std::fs::create_dir(dir.join("w.bin")).unwrap();
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(e.contains("is a directory, not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn external_data_range_outside_the_file_is_refused() {
        for (offset, case) in [(20, "end"), (64, "offset"), (u64::MAX - 2, "wrap")] {
            let (dir, model) = external_dir(&format!("range-{case}"), "w.bin", offset);
            std::fs::write(dir.join("w.bin"), [0u8; 24]).unwrap();
            let e = load_err(&model);
            assert!(e.contains("initializer 'w'"), "{e}");
            assert!(
                e.contains(&format!("external data 'w.bin' bytes {offset}..+8"))
                    && e.contains("outside the file")
                    && e.contains("(24 bytes)"),
                "{e}"
            );
            assert!(e.contains(&dir.join("w.bin").display().to_string()), "{e}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn external_data_file_swapped_after_its_check_is_not_read() {
        let (dir, _) = external_dir("swap", "w.bin", 0);
        let (a, b) = (dir.join("a.bin"), dir.join("b.bin"));
        std::fs::write(&a, [0u8; 8]).unwrap();
        std::fs::write(&b, [0u8; 8]).unwrap();
        // What `read` examined was b; what is at the path when it opens is a.
        let examined = std::fs::metadata(&b).unwrap();
        let r = open_examined(&a, &examined);
        if cfg!(unix) {
            let e = r.unwrap_err();
            assert!(
                e.contains("changed between its check and its opening"),
                "{e}"
            );
        }
        assert!(open_examined(&a, &std::fs::metadata(&a).unwrap()).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn int4_initializers_are_unpacked_one_value_per_byte() {
        // Five values (an odd count: the last byte's high nibble is padding), from raw data and
        // from int32_data (one packed byte per entry); i4 sign-extended, u4 not.
        let v = [-8i64, 7, -1, 0, 3];
        let i4 = Tensor::from_i64_as(DType::I4, vec![5], &v);
        let mut p = tensor_proto("w", &i4);
        assert_eq!(p.raw_data.as_deref(), Some(&[0x78u8, 0x0F, 0x03][..]));
        let (_, t) = tensor_from_bytes(&p.encode_to_vec()).unwrap();
        assert_eq!((t.dtype, t.to_i64()), (DType::I4, v.to_vec()));
        p.int32_data = p
            .raw_data
            .take()
            .unwrap()
            .iter()
            .map(|&b| b as i32)
            .collect();
        let (_, t) = tensor_from_bytes(&p.encode_to_vec()).unwrap();
        assert_eq!(t.to_i64(), v.to_vec());
        let u4 = Tensor::from_i64_as(DType::U4, vec![3], &[15, 0, 9]);
        let (_, t) = tensor_from_bytes(&tensor_proto("u", &u4).encode_to_vec()).unwrap();
        assert_eq!(t.to_i64(), vec![15, 0, 9]);
        // Too few packed bytes is a clear error, not a panic.
        p.int32_data.pop();
        let e = tensor_from_bytes(&p.encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains("packed i4"), "{e}");
    }

    #[test]
    fn sparse_initializer_densified() {
        let mut b = relu_model();
        let s = onnx::SparseTensorProto {
            values: Some(tensor_proto("s", &Tensor::from_f32(vec![2], &[5.0, 6.0]))),
            indices: Some(tensor_proto("", &Tensor::from_i64(vec![2], &[1, 3]))),
            dims: vec![2, 2],
        };
        b.model.graph.as_mut().unwrap().sparse_initializer.push(s);
        let m = Model::from_proto(&b.model, None).unwrap();
        let id = m.graph.name_map()["s"];
        assert_eq!(
            m.graph.konst(id).unwrap().to_f64(),
            vec![0.0, 5.0, 0.0, 6.0]
        );
    }
}
