//! ONNX model loading: [`Model`] from bytes, a file or a proto, its IR version and opsets
//! checked; external data is read by `external.rs`, tensors are decoded by `tensor.rs`, and the
//! graph is converted to the IR by `convert.rs`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use prost::Message;

use crate::error::{invalid, Result};
use crate::frontend::onnx;
use crate::ir::Graph;

use super::convert::{convert_graph, declared_shapes, normalize_domain};
use super::external::ExternalData;
pub use super::tensor::tensor_from_bytes;

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

#[cfg(test)]
mod tests {

    use super::*;
    use crate::testing::{load_error as err, relu_model};

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
}
