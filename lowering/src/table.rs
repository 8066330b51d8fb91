//! Op tables (`lowering/op-tables/<backend>.toml`): which ONNX ops a backend supports and how.
//!
//! The table decides support; the rules in `ops/` decide how and enforce the constraints. A
//! table holds only what differs per backend (status, opset range, dtypes, QNN ops,
//! constraints); what is true of the ONNX op itself (its family, its layout behaviour, its first
//! opset, its shape input) is on its [`crate::ops::OpDef`].

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::error::Result;
use crate::ir::{Graph, Node};
use crate::Backend;

pub const HTP_TOML: &str = include_str!("../op-tables/htp.toml");
pub const GPU_TOML: &str = include_str!("../op-tables/gpu.toml");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Supported,
    Decomposed,
    Fallback,
    Planned,
}

impl Status {
    /// The spelling the tables use.
    pub fn name(self) -> &'static str {
        match self {
            Status::Supported => "supported",
            Status::Decomposed => "decomposed",
            Status::Fallback => "fallback",
            Status::Planned => "planned",
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub backend: String,
    #[serde(default)]
    pub checked_against_sdk: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpEntry {
    pub opset: [i64; 2],
    pub qnn: Vec<String>,
    pub dtypes: Vec<String>,
    pub status: Status,
    #[serde(default)]
    pub constraints: Vec<String>,
}

impl OpEntry {
    pub fn has_dtype(&self, d: &str) -> bool {
        self.dtypes.iter().any(|x| x == d)
    }

    pub fn runs(&self) -> bool {
        matches!(self.status, Status::Supported | Status::Decomposed)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpTable {
    pub meta: Meta,
    pub ops: BTreeMap<String, OpEntry>,
}

/// The family of `op_type`, the folder of its file in `ops/` (a fact of the op, not of a
/// backend: the registry's); `other` for an op lowering has no entry for.
pub fn family(op_type: &str) -> &'static str {
    crate::ops::family(op_type).unwrap_or("other")
}

/// How the layout pass treats `op_type` (the registry's [`crate::ops::Layout`]), by name;
/// `framework` for an op lowering has no entry for.
pub fn layout(op_type: &str) -> &'static str {
    crate::ops::layout(op_type).map_or("framework", crate::ops::Layout::name)
}

/// The ops of dynamic quantization, by domain: ONNX's, and the `com.microsoft` contrib ops that
/// ONNX Runtime's `quantize_dynamic` writes. Refused with [`DYNAMIC_QUANT`], which names what to
/// compile instead.
pub const DYNAMIC_QUANT_OPS: &[(&str, &str)] = &[
    ("", "DynamicQuantizeLinear"),
    ("", "MatMulInteger"),
    ("", "ConvInteger"),
    ("com.microsoft", "DynamicQuantizeMatMul"),
    ("com.microsoft", "MatMulIntegerToFloat"),
    ("com.microsoft", "DynamicQuantizeLSTM"),
];

/// Why a dynamically quantized model cannot run, and the alternatives.
pub const DYNAMIC_QUANT: &str = "the model is dynamically quantized (ONNX Runtime's \
    quantize_dynamic): its activation scales are computed at run time, which a QNN graph cannot \
    do. Compile the float model instead, or a statically quantized QDQ model (QuantizeLinear / \
    DequantizeLinear pairs with constant scales, as onnxruntime.quantization.quantize_static \
    writes with quant_format=QuantFormat.QDQ)";

impl OpTable {
    pub fn parse(text: &str) -> Result<OpTable, String> {
        let t: OpTable = toml::from_str(text).map_err(|e| e.to_string())?;
        for (name, e) in &t.ops {
            if e.opset[0] > e.opset[1] || e.opset[0] < 1 {
                return Err(format!("ops.{name}: bad opset range {:?}", e.opset));
            }
            for d in &e.dtypes {
                if crate::DType::from_name(d).is_none() {
                    return Err(format!("ops.{name}: unknown dtype '{d}'"));
                }
            }
        }
        Ok(t)
    }

    /// The table of `backend`; an error for a backend that has none.
    pub fn get(backend: Backend) -> Result<&'static OpTable> {
        static HTP: OnceLock<OpTable> = OnceLock::new();
        static GPU: OnceLock<OpTable> = OnceLock::new();
        let (cell, text) = match backend {
            Backend::Htp => (&HTP, HTP_TOML),
            Backend::Gpu => (&GPU, GPU_TOML),
            Backend::Cpu => {
                return Err(crate::error::invalid(
                    "models cannot be lowered for QNN's CPU backend yet (it has no op table); \
                     use htp or gpu",
                ))
            }
        };
        Ok(cell.get_or_init(|| OpTable::parse(text).expect("embedded op table is valid (tested)")))
    }

    pub fn entry(&self, op_type: &str) -> Option<&OpEntry> {
        self.ops.get(op_type)
    }

    /// Checks a node against the table: known op, runnable status, opset range, and the
    /// dtypes of its non-constant inputs.
    pub fn check_node(&self, node: &Node, g: &Graph, backend: Backend) -> Result<()> {
        let b = backend.label();
        if DYNAMIC_QUANT_OPS.contains(&(node.domain.as_str(), node.op_type.as_str())) {
            return Err(node.err_op(format!(
                "{} is not supported on {b}: {DYNAMIC_QUANT}",
                node.op_type
            )));
        }
        if !node.domain.is_empty() {
            return Err(node.err_op(format!(
                "custom domain '{}' is not supported on {b}",
                node.domain
            )));
        }
        let Some(e) = self.entry(&node.op_type) else {
            return Err(node.err_op(format!("{} is not supported on {b}", node.op_type)));
        };
        if !e.runs() {
            let why = if e.constraints.is_empty() {
                String::new()
            } else {
                format!(" ({})", e.constraints.join("; "))
            };
            return Err(node.err_op(format!("{} is not supported on {b}{why}", node.op_type)));
        }
        let v = g.opset();
        if v < e.opset[0] || v > e.opset[1] {
            return Err(node.err_op(format!(
                "opset {v} is outside the supported range {}..={} on {b}",
                e.opset[0], e.opset[1]
            )));
        }
        for i in node.inputs.iter().flatten() {
            let val = g.value(*i);
            if val.konst.is_some() || !val.known {
                continue;
            }
            if !e.has_dtype(val.dtype.name()) {
                return Err(node.err_dtype(format!(
                    "input '{}' has dtype {}; {b} supports {} for {}",
                    val.name,
                    val.dtype,
                    e.dtypes.join(", "),
                    node.op_type
                )));
            }
        }
        Ok(())
    }

    /// The generated Markdown support table (`docs/operators.md`).
    pub fn markdown(htp: &OpTable, gpu: &OpTable) -> String {
        let mut s = String::new();
        s.push_str("<!-- Generated by `cargo run -p lowering --example gen-op-docs` from lowering/op-tables/*.toml; do not edit. -->\n");
        s.push_str("# Supported ONNX operators\n\n");
        if let Some(v) = &htp.meta.checked_against_sdk {
            s.push_str(&format!("HTP table checked against QNN SDK {v}.\n\n"));
        }
        let mut ops: Vec<&String> = htp.ops.keys().chain(gpu.ops.keys()).collect();
        ops.sort();
        ops.dedup();
        s.push_str("| ONNX op | family | HTP | GPU | QNN ops (HTP) | dtypes (HTP) | layout | constraints (HTP) |\n");
        s.push_str("|---|---|---|---|---|---|---|---|\n");
        let st = |e: Option<&OpEntry>| match e.map(|e| e.status) {
            Some(Status::Supported) => "yes",
            Some(Status::Decomposed) => "decomposed",
            Some(Status::Fallback) => "fallback",
            Some(Status::Planned) => "planned",
            None => "-",
        };
        for op in ops {
            let h = htp.entry(op);
            let g = gpu.entry(op);
            s.push_str(&format!(
                "| {op} | {} | {} | {} | {} | {} | {} | {} |\n",
                family(op),
                st(h),
                st(g),
                h.map(|e| e.qnn.join(", ")).unwrap_or_default(),
                h.map(|e| e.dtypes.join(", ")).unwrap_or_default(),
                layout(op),
                h.map(|e| e.constraints.join("; ").replace('|', "\\|"))
                    .unwrap_or_default(),
            ));
        }
        s
    }
}
