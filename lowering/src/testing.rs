//! Builders for small ONNX models in tests (here, in the integration tests and in the emitter's
//! tests). Not part of the stable API.
#![doc(hidden)]

use prost::Message;

use crate::dtype::{DType, OnnxCode};
use crate::frontend::onnx::{self, attribute_type as at};
use crate::ir::tensor::Tensor;

pub fn tensor_proto(name: &str, t: &Tensor) -> onnx::TensorProto {
    onnx::TensorProto {
        name: Some(name.to_string()),
        dims: t.shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype.to_onnx()),
        raw_data: Some(t.onnx_raw_data()),
        ..Default::default()
    }
}

pub fn value_info(name: &str, dtype: DType, shape: &[i64]) -> onnx::ValueInfoProto {
    onnx::ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(onnx::TypeProto {
            tensor_type: Some(onnx::TypeProtoTensor {
                elem_type: Some(dtype.to_onnx()),
                shape: Some(onnx::TensorShapeProto {
                    dim: shape
                        .iter()
                        .map(|&d| onnx::Dimension {
                            value: Some(if d < 0 {
                                onnx::DimensionValue::DimParam("N".into())
                            } else {
                                onnx::DimensionValue::DimValue(d)
                            }),
                            denotation: None,
                        })
                        .collect(),
                }),
            }),
            denotation: None,
        }),
        ..Default::default()
    }
}

/// Attribute values for [`ModelBuilder::node`].
#[derive(Clone, Debug)]
pub enum A {
    I(i64),
    F(f32),
    S(&'static str),
    Is(Vec<i64>),
    Fs(Vec<f32>),
    Ss(Vec<String>),
    T(Tensor),
    /// A subgraph (If branches, Loop bodies).
    G(onnx::GraphProto),
}

pub fn attr(name: &str, a: &A) -> onnx::AttributeProto {
    let mut p = onnx::AttributeProto {
        name: Some(name.to_string()),
        ..Default::default()
    };
    match a {
        A::I(i) => {
            p.r#type = Some(at::INT);
            p.i = Some(*i);
        }
        A::F(f) => {
            p.r#type = Some(at::FLOAT);
            p.f = Some(*f);
        }
        A::S(s) => {
            p.r#type = Some(at::STRING);
            p.s = Some(s.as_bytes().to_vec());
        }
        A::Is(v) => {
            p.r#type = Some(at::INTS);
            p.ints = v.clone();
        }
        A::Fs(v) => {
            p.r#type = Some(at::FLOATS);
            p.floats = v.clone();
        }
        A::Ss(v) => {
            p.r#type = Some(at::STRINGS);
            p.strings = v.iter().map(|s| s.as_bytes().to_vec()).collect();
        }
        A::T(t) => {
            p.r#type = Some(at::TENSOR);
            p.t = Some(tensor_proto("", t));
        }
        A::G(g) => {
            p.r#type = Some(at::GRAPH);
            p.g = Some(Box::new(g.clone()));
        }
    }
    p
}

/// Builds a `ModelProto` node by node.
#[derive(Clone, Debug)]
pub struct ModelBuilder {
    pub model: onnx::ModelProto,
}

impl ModelBuilder {
    pub fn new(opset: i64) -> Self {
        ModelBuilder {
            model: onnx::ModelProto {
                ir_version: Some(10),
                opset_import: vec![onnx::OperatorSetIdProto {
                    domain: Some(String::new()),
                    version: Some(opset),
                }],
                producer_name: Some("qnnx-test".into()),
                graph: Some(onnx::GraphProto {
                    name: Some("g".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        }
    }

    fn g(&mut self) -> &mut onnx::GraphProto {
        self.model
            .graph
            .as_mut()
            .expect("builder always has a graph")
    }

    pub fn input(mut self, name: &str, dtype: DType, shape: &[i64]) -> Self {
        self.g().input.push(value_info(name, dtype, shape));
        self
    }

    pub fn output(mut self, name: &str) -> Self {
        self.g().output.push(value_info(name, DType::F32, &[]));
        self
    }

    pub fn init(mut self, name: &str, t: Tensor) -> Self {
        let p = tensor_proto(name, &t);
        self.g().initializer.push(p);
        self
    }

    pub fn node(
        mut self,
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: &[(&str, A)],
    ) -> Self {
        let idx = self.g().node.len();
        let n = onnx::NodeProto {
            name: Some(format!("{op}_{idx}")),
            op_type: Some(op.to_string()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs.iter().map(|(k, v)| attr(k, v)).collect(),
            ..Default::default()
        };
        self.g().node.push(n);
        self
    }

    pub fn named_node(
        mut self,
        name: &str,
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: &[(&str, A)],
    ) -> Self {
        self = self.node(op, inputs, outputs, attrs);
        self.g().node.last_mut().expect("just pushed").name = Some(name.to_string());
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.model.encode_to_vec()
    }

    pub fn load(&self) -> crate::Model {
        crate::Model::from_proto(&self.model, None).expect("test model loads")
    }
}

/// Deterministic pseudo-random floats in [-1, 1) for test weights.
pub fn rand_f32(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 23) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// x [1, 4] -> Relu -> y: the smallest valid model, where the frontend's tests start.
pub fn relu_model() -> ModelBuilder {
    ModelBuilder::new(17)
        .input("x", DType::F32, &[1, 4])
        .node("Relu", &["x"], &["y"], &[])
        .output("y")
}

/// What loading `m` is refused with, as text (the frontend's rejection tests).
pub fn load_error(m: &onnx::ModelProto) -> String {
    crate::frontend::load::Model::from_proto(m, None)
        .unwrap_err()
        .to_string()
}

/// The declared dims of graph input `k` of `m`, for tests that write dims a builder does not
/// (a `dim_value` of -1 as Paddle writes a dynamic dim, a negative one to reject).
pub fn input_dims(m: &mut onnx::ModelProto, k: usize) -> &mut Vec<onnx::Dimension> {
    &mut m.graph.as_mut().unwrap().input[k]
        .r#type
        .as_mut()
        .unwrap()
        .tensor_type
        .as_mut()
        .unwrap()
        .shape
        .as_mut()
        .unwrap()
        .dim
}
