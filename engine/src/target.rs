//! What a model is compiled for or run on: the backend (and which library of it), the SoC and
//! HTP architecture, resolved from names or numbers and validated once, for every front end.

use std::path::PathBuf;

use qnn::{BackendConfig, GpuConfig, HtpConfig, HtpContextConfig, HtpDeviceConfig, HtpGraphConfig};
use qnnx_types::soc::{self, Soc};
use qnnx_types::{BackendKind, HtpArch};

use crate::error::{Error, Result};

/// A target as the user gives it: SoC by name or number, arch by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    pub backend: BackendKind,
    /// A SoC name or alias (`SM8650`, `X1E80100`) or a `Qnn_SocModel_t` number as text.
    pub soc: Option<String>,
    /// A `Qnn_SocModel_t` number, for SoCs not in the table.
    pub soc_model: Option<u32>,
    pub htp_arch: Option<HtpArch>,
    /// An explicit backend library; otherwise the search order of `qnn_sys::loader` applies.
    pub library: Option<PathBuf>,
}

impl Default for TargetSpec {
    fn default() -> TargetSpec {
        TargetSpec {
            backend: BackendKind::Htp,
            soc: None,
            soc_model: None,
            htp_arch: None,
            library: None,
        }
    }
}

/// A resolved target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub backend: BackendKind,
    /// The HTP's SoC number, when one is set.
    pub soc_model: Option<u32>,
    /// The HTP architecture asked for explicitly.
    pub htp_arch: Option<HtpArch>,
    pub library: Option<PathBuf>,
}

impl Target {
    /// Resolves and checks `spec`. Without a SoC or arch the HTP targets `default_soc` if given,
    /// else [`HtpDeviceConfig::host_default`] (SoC 60 on x86_64, the device's own SoC
    /// elsewhere). Errors are [`Error::Target`] with the valid names.
    pub fn resolve(spec: &TargetSpec, default_soc: Option<u32>) -> Result<Target> {
        let htp_only = spec.soc.is_some() || spec.soc_model.is_some() || spec.htp_arch.is_some();
        match spec.backend {
            BackendKind::Htp => {}
            BackendKind::Gpu | BackendKind::Cpu if htp_only => {
                return Err(Error::Target(format!(
                    "a SoC or HTP architecture applies to the HTP backend, not the {}",
                    spec.backend
                )))
            }
            BackendKind::Gpu | BackendKind::Cpu => {
                return Ok(Target {
                    backend: spec.backend,
                    soc_model: None,
                    htp_arch: None,
                    library: spec.library.clone(),
                })
            }
        }
        if let (Some(_), Some(_)) = (&spec.soc, spec.soc_model) {
            return Err(Error::Target(
                "give the SoC by name or by number, not both".into(),
            ));
        }
        let soc_model = match (&spec.soc, spec.soc_model) {
            (Some(name), _) => Some(
                soc::find(name)
                    .ok_or_else(|| {
                        Error::Target(format!(
                            "unknown SoC {name:?}; known: {}\nhint: a QNN SoC number (such as \
                             --soc-model N) names any SoC",
                            soc::known_names()
                        ))
                    })?
                    .model,
            ),
            (None, n) => n,
        };
        if let (Some(s), Some(arch)) = (soc_model.and_then(soc::by_model), spec.htp_arch) {
            if s.arch != arch {
                return Err(Error::Target(format!(
                    "HTP architecture {arch} does not match {} (HTP {}); give one or the other",
                    s.name, s.arch
                )));
            }
        }
        let soc_model = match (soc_model, spec.htp_arch) {
            (None, None) => default_soc.or(HtpDeviceConfig::host_default().soc_model),
            (s, _) => s,
        };
        Ok(Target {
            backend: BackendKind::Htp,
            soc_model,
            htp_arch: spec.htp_arch,
            library: spec.library.clone(),
        })
    }

    /// The default target of `backend` on this host (for the HTP: SoC 60 on x86_64).
    pub fn host_default(backend: BackendKind) -> Target {
        Target::resolve(
            &TargetSpec {
                backend,
                ..TargetSpec::default()
            },
            None,
        )
        .expect("a default spec resolves")
    }

    /// The SoC, when it is in the table.
    pub fn soc(&self) -> Option<&'static Soc> {
        self.soc_model.and_then(soc::by_model)
    }

    /// The HTP architecture the target has, when known.
    pub fn arch(&self) -> Option<HtpArch> {
        self.htp_arch.or(self.soc().map(|s| s.arch))
    }

    /// Whether the target's HTP lacks a float path (v68 class): float graphs cannot run on it.
    pub fn lacks_float(&self) -> bool {
        self.backend == BackendKind::Htp && self.arch().is_some_and(|a| !a.has_fp16())
    }

    /// The target a backend was opened for (its configuration's SoC and arch).
    pub fn of_config(config: &BackendConfig) -> Target {
        match config {
            BackendConfig::Htp(c) => Target {
                backend: BackendKind::Htp,
                soc_model: c.device.soc_model,
                htp_arch: c.device.arch,
                library: None,
            },
            BackendConfig::Gpu(_) => Target::host_default(BackendKind::Gpu),
            BackendConfig::Cpu => Target::host_default(BackendKind::Cpu),
        }
    }

    /// Refuses a float plan for a target without a float path before QNN is asked: QNN's own
    /// message for it (3110 on the first float op) names neither the SoC nor the way out. A
    /// quantized plan may keep float graph inputs and outputs that it converts at the boundary
    /// (QNN `Quantize` / `Dequantize`): the HTP converts those without a float path.
    pub fn check_plan(&self, plan: &lowering::Plan) -> Result<()> {
        self.check_blockwise(plan)?;
        if !self.lacks_float() {
            return Ok(());
        }
        use lowering::plan::TensorKind;
        let boundary = |t: usize| {
            let kind = &plan.tensors[t].kind;
            plan.ops.iter().all(|o| {
                let reads = o.inputs.contains(&t);
                let writes = o.outputs.contains(&t);
                (!reads || (o.type_name == "Quantize" && *kind == TensorKind::Input))
                    && (!writes || (o.type_name == "Dequantize" && *kind == TensorKind::Output))
            })
        };
        let floats: Vec<usize> = (0..plan.tensors.len())
            // A NULL tensor holds no data; its dtype is not passed to QNN.
            .filter(|&t| {
                let pt = &plan.tensors[t];
                pt.dtype.is_float() && pt.kind != TensorKind::Null && !boundary(t)
            })
            .collect();
        if floats.is_empty() {
            return Ok(());
        }
        let quantized = plan.tensors.iter().any(|t| t.quant.is_some());
        // The ONNX nodes that compute in float, for a quantized model's message.
        let mut nodes: Vec<&str> = Vec::new();
        for o in &plan.ops {
            let float = o
                .inputs
                .iter()
                .chain(&o.outputs)
                .any(|t| floats.contains(t));
            if float && !nodes.contains(&o.onnx_node.as_str()) {
                nodes.push(&o.onnx_node);
            }
        }
        let list = |names: Vec<&str>| {
            let shown: Vec<&str> = names.iter().take(3).copied().collect();
            let more = if names.len() > shown.len() {
                ", ..."
            } else {
                ""
            };
            format!("{}{more}", shown.join(", "))
        };
        let message = if quantized {
            format!(
                "{} has no float path (its HTP runs quantized int8/int16 graphs only), and {} \
                 node(s) of this quantized model compute in float ({}): an op without a \
                 quantized lowering, or a tensor without an encoding\nhint: give those tensors \
                 QuantizeLinear/DequantizeLinear pairs, or target an FP16-capable SoC ({})",
                self.describe(),
                nodes.len(),
                list(nodes),
                soc::fp16_names()
            )
        } else {
            format!(
                "{} cannot run float models (its HTP has no FP16 path; it runs quantized \
                 int8/int16 models only), and this model has {} float tensor(s) ({})\nhint: \
                 quantize it (8a8w runs on every HTP): `qnnx quantize MODEL.onnx --calib DATA \
                 --scheme 8a8w -o MODEL.qdq.onnx`, or in Python options={{\"quantize\": \
                 \"8a8w\", \"calibration\": ...}}; or target an FP16-capable SoC ({})",
                self.describe(),
                floats.len(),
                list(
                    floats
                        .iter()
                        .map(|&t| plan.tensors[t].name.as_str())
                        .collect()
                ),
                soc::fp16_names()
            )
        };
        Err(Error::NoFloatPath {
            message,
            float_tensors: floats.len(),
        })
    }

    /// Refuses block-wise weights (QNN's block expansion) for an HTP older than v69, which has
    /// no such encoding: QNN would refuse the weight tensor without naming why.
    fn check_blockwise(&self, plan: &lowering::Plan) -> Result<()> {
        let Some(arch) = self.arch().filter(|_| self.backend == BackendKind::Htp) else {
            return Ok(());
        };
        if arch.has_blockwise_expansion() {
            return Ok(());
        }
        let blocked: Vec<&str> = plan
            .tensors
            .iter()
            .filter(|t| t.quant.as_ref().is_some_and(|q| q.is_blocked()))
            .map(|t| t.name.as_str())
            .collect();
        if blocked.is_empty() {
            return Ok(());
        }
        let shown: Vec<&str> = blocked.iter().take(3).copied().collect();
        Err(Error::TargetLacks(format!(
            "{} cannot run block-wise 4-bit weights: QNN's block expansion encoding (\"LPBQ\", \
             per-channel scale x integer scale per block) needs HTP v69 or newer, and this model \
             has {} such weight(s) ({}{})\nhint: quantize the weights per channel instead \
             (\"16a4w\" or \"16a8w\", which v68 runs), or target a v69+ SoC",
            self.describe(),
            blocked.len(),
            shown.join(", "),
            if blocked.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        )))
    }

    /// For messages: `SM8650 (Snapdragon 8 Gen 3, HTP v75)`, `SoC 99`, `HTP v75`, ...
    pub fn describe(&self) -> String {
        match self.backend {
            BackendKind::Gpu => return "the GPU".into(),
            BackendKind::Cpu => return "QNN's CPU backend".into(),
            BackendKind::Htp => {}
        }
        match (self.soc(), self.soc_model, self.htp_arch) {
            (Some(s), _, _) => format!("{} ({}, HTP {})", s.name, s.description, s.arch),
            (None, Some(m), Some(a)) => format!("SoC {m} (HTP {a})"),
            (None, Some(m), None) => format!("SoC {m}"),
            (None, None, Some(a)) => format!("HTP {a}"),
            (None, None, None) => "this device's HTP".into(),
        }
    }

    /// The configuration a backend for this target is opened with. `opt_level` (HTP finalize
    /// optimization 1 to 3) and `weight_sharing` are HTP settings: other backends refuse them.
    pub fn backend_config(
        &self,
        opt_level: Option<u8>,
        weight_sharing: bool,
    ) -> Result<BackendConfig> {
        let htp_setting = |what: &str| {
            Error::Target(format!(
                "{what} is an HTP setting; the {} has no such option",
                self.backend
            ))
        };
        match self.backend {
            BackendKind::Htp => {
                if let Some(l) = opt_level.filter(|l| !(1..=3).contains(l)) {
                    return Err(Error::Target(format!(
                        "optimization level {l}: use 1, 2 or 3"
                    )));
                }
                Ok(BackendConfig::Htp(HtpConfig {
                    device: HtpDeviceConfig {
                        soc_model: self.soc_model,
                        arch: self.htp_arch,
                    },
                    context: HtpContextConfig { weight_sharing },
                    graph: HtpGraphConfig {
                        opt_level,
                        ..HtpGraphConfig::default()
                    },
                }))
            }
            BackendKind::Gpu | BackendKind::Cpu if opt_level.is_some() => {
                Err(htp_setting("the finalize optimization level"))
            }
            BackendKind::Gpu | BackendKind::Cpu if weight_sharing => {
                Err(htp_setting("weight sharing"))
            }
            BackendKind::Gpu => Ok(BackendConfig::Gpu(GpuConfig::default())),
            BackendKind::Cpu => Ok(BackendConfig::Cpu),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(soc: Option<&str>, model: Option<u32>, arch: Option<HtpArch>) -> TargetSpec {
        TargetSpec {
            soc: soc.map(String::from),
            soc_model: model,
            htp_arch: arch,
            ..TargetSpec::default()
        }
    }

    #[test]
    fn soc_by_name_number_and_default() {
        let t = Target::resolve(&spec(Some("sm8650"), None, None), None).unwrap();
        assert_eq!(t.soc_model, Some(57));
        assert_eq!(t.arch(), Some(HtpArch::V75));
        assert!(!t.lacks_float());
        let t = Target::resolve(&spec(None, Some(35), None), None).unwrap();
        assert!(t.lacks_float());
        assert!(t.describe().starts_with("QCS6490"));
        let t = Target::resolve(&spec(None, None, None), Some(43)).unwrap();
        assert_eq!(t.soc().unwrap().name, "SM8550");
        let t = Target::resolve(&spec(None, None, Some(HtpArch::V68)), None).unwrap();
        assert_eq!(t.soc_model, None);
        assert!(t.lacks_float());
    }

    #[test]
    fn bad_targets_name_what_is_valid() {
        let e = Target::resolve(&spec(Some("SM9999"), None, None), None).unwrap_err();
        assert!(e.to_string().contains("SC8380XP (60)"), "{e}");
        let e = Target::resolve(&spec(Some("SM8650"), None, Some(HtpArch::V73)), None).unwrap_err();
        assert!(e.to_string().contains("HTP v75"), "{e}");
        let mut gpu = spec(Some("SM8650"), None, None);
        gpu.backend = BackendKind::Gpu;
        assert!(Target::resolve(&gpu, None).is_err());
    }

    #[test]
    fn htp_settings_are_refused_for_other_backends() {
        let gpu = Target::host_default(BackendKind::Gpu);
        assert!(gpu.backend_config(Some(2), false).is_err());
        assert!(gpu.backend_config(None, true).is_err());
        assert_eq!(
            gpu.backend_config(None, false).unwrap().kind(),
            BackendKind::Gpu
        );
        let htp = Target::host_default(BackendKind::Htp);
        let c = htp.backend_config(Some(3), true).unwrap();
        let h = c.htp().unwrap();
        assert_eq!(h.graph.opt_level, Some(3));
        assert!(h.context.weight_sharing);
        assert!(htp.backend_config(Some(4), false).is_err());
    }
}
