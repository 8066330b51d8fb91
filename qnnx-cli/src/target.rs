//! What a command compiles for or runs on: backend, SoC, HTP architecture, from the command line.

use qnn::soc::Soc;
use qnn::{BackendKind, DeviceOptions};

use crate::Failure;

/// QNN backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// The NPU (Hexagon Tensor Processor); on x86_64 hosts, QNN's HTP emulator.
    #[default]
    Htp,
    /// The Adreno GPU.
    Gpu,
}

impl BackendArg {
    pub fn kind(self) -> BackendKind {
        match self {
            BackendArg::Htp => BackendKind::Htp,
            BackendArg::Gpu => BackendKind::Gpu,
        }
    }

    pub fn lowering(self) -> lowering::Backend {
        match self {
            BackendArg::Htp => lowering::Backend::Htp,
            BackendArg::Gpu => lowering::Backend::Gpu,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BackendArg::Htp => "htp",
            BackendArg::Gpu => "gpu",
        }
    }
}

/// Backend and target device options shared by `compile` and `run`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TargetArgs {
    /// QNN backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Htp)]
    pub backend: BackendArg,
    /// Target SoC by name: SM8350, QCS6490, SM8550, SM8650, SC8380XP (X1E80100), SM8750,
    /// SM8850. Default on x86_64: SC8380XP.
    #[arg(long, value_name = "NAME", conflicts_with = "soc_model")]
    pub soc: Option<String>,
    /// Target SoC by QNN model number (Qnn_SocModel_t), e.g. 57 for SM8650.
    #[arg(long, value_name = "N")]
    pub soc_model: Option<u32>,
    /// HTP architecture: v68, v69, v73, v75, v79 or v81. With --soc it must be that SoC's.
    #[arg(long, value_name = "vNN", value_parser = parse_arch)]
    pub htp_arch: Option<u32>,
}

/// HTP architectures the flag accepts.
pub const ARCHS: &[u32] = &[68, 69, 73, 75, 79, 81];

fn parse_arch(s: &str) -> Result<u32, String> {
    let digits = s.trim().trim_start_matches(['v', 'V']);
    match digits.parse::<u32>() {
        Ok(a) if ARCHS.contains(&a) => Ok(a),
        _ => Err(format!(
            "unknown HTP architecture {s:?}; use one of {}",
            ARCHS
                .iter()
                .map(|a| format!("v{a}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// A resolved target.
#[derive(Debug, Clone)]
pub struct Target {
    pub backend: BackendArg,
    pub device: DeviceOptions,
    /// The SoC, when it is in [`qnn::soc::SOCS`].
    pub soc: Option<&'static Soc>,
}

impl Target {
    /// Resolves the flags. Without a SoC or arch, the HTP uses `default_soc` if given, else
    /// [`DeviceOptions::host_default`] (SoC 60 on x86_64, the device's own SoC elsewhere).
    pub fn resolve(args: &TargetArgs, default_soc: Option<u32>) -> Result<Target, Failure> {
        if args.backend == BackendArg::Gpu {
            if args.soc.is_some() || args.soc_model.is_some() || args.htp_arch.is_some() {
                return Err(Failure::usage(
                    "--soc, --soc-model and --htp-arch apply to --backend htp only",
                ));
            }
            return Ok(Target {
                backend: args.backend,
                device: DeviceOptions::default(),
                soc: None,
            });
        }
        let soc_model = match (&args.soc, args.soc_model) {
            (Some(name), _) => Some(
                qnn::soc::find(name)
                    .ok_or_else(|| {
                        Failure::usage(format!(
                            "unknown SoC {name:?}; known: {}\nhint: --soc-model N takes any QNN SoC number",
                            qnn::soc::known_names()
                        ))
                    })?
                    .model,
            ),
            (None, Some(n)) => Some(n),
            (None, None) => None,
        };
        let soc = soc_model.and_then(qnn::soc::by_model);
        if let (Some(soc), Some(arch)) = (soc, args.htp_arch) {
            if soc.arch != arch {
                return Err(Failure::usage(format!(
                    "--htp-arch v{arch} does not match {} (HTP v{}); give one or the other",
                    soc.name, soc.arch
                )));
            }
        }
        let device = match (soc_model, args.htp_arch) {
            (None, None) => match default_soc {
                Some(s) => DeviceOptions {
                    soc_model: Some(s),
                    arch: None,
                },
                None => DeviceOptions::host_default(),
            },
            (soc_model, arch) => DeviceOptions { soc_model, arch },
        };
        Ok(Target {
            backend: args.backend,
            device,
            soc: device.soc_model.and_then(qnn::soc::by_model),
        })
    }

    /// The HTP architecture the target has, when known.
    pub fn arch(&self) -> Option<u32> {
        self.device.arch.or(self.soc.map(|s| s.arch))
    }

    /// Whether the target's HTP lacks an FP16 path (v68 class): float models cannot run on it.
    pub fn lacks_fp16(&self) -> bool {
        self.backend == BackendArg::Htp
            && match self.soc {
                Some(s) => !s.fp16,
                None => self.device.arch.is_some_and(|a| a < 69),
            }
    }

    /// For messages: `SM8650 (Snapdragon 8 Gen 3, HTP v75)`, `SoC 99`, `HTP v75`, ...
    pub fn describe(&self) -> String {
        if self.backend == BackendArg::Gpu {
            return "the GPU".into();
        }
        match (self.soc, self.device.soc_model, self.device.arch) {
            (Some(s), _, _) => format!("{} ({}, HTP v{})", s.name, s.description, s.arch),
            (None, Some(m), Some(a)) => format!("SoC {m} (HTP v{a})"),
            (None, Some(m), None) => format!("SoC {m}"),
            (None, None, Some(a)) => format!("HTP v{a}"),
            (None, None, None) => "this device's HTP".into(),
        }
    }
}

/// Names of the SoCs with an FP16 HTP, for messages.
pub fn fp16_socs() -> String {
    qnn::soc::SOCS
        .iter()
        .filter(|s| s.fp16)
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(soc: Option<&str>, model: Option<u32>, arch: Option<u32>) -> TargetArgs {
        TargetArgs {
            backend: BackendArg::Htp,
            soc: soc.map(String::from),
            soc_model: model,
            htp_arch: arch,
        }
    }

    #[test]
    fn arch_flag_accepts_v_prefix_and_rejects_unknown() {
        assert_eq!(parse_arch("v73"), Ok(73));
        assert_eq!(parse_arch("V81"), Ok(81));
        assert_eq!(parse_arch("75"), Ok(75));
        assert!(parse_arch("v70").unwrap_err().contains("v68, v69"));
    }

    #[test]
    fn soc_by_name_number_and_default() {
        let t = Target::resolve(&args(Some("sm8650"), None, None), None).unwrap();
        assert_eq!(t.device.soc_model, Some(57));
        assert_eq!(t.arch(), Some(75));
        assert!(!t.lacks_fp16());
        let t = Target::resolve(&args(None, Some(35), None), None).unwrap();
        assert!(t.lacks_fp16());
        assert!(t.describe().starts_with("QCS6490"));
        let t = Target::resolve(&args(None, None, None), Some(43)).unwrap();
        assert_eq!(t.soc.unwrap().name, "SM8550");
        let t = Target::resolve(&args(None, None, Some(68)), None).unwrap();
        assert_eq!(t.device.soc_model, None);
        assert!(t.lacks_fp16());
    }

    #[test]
    fn bad_targets_are_usage_errors() {
        let e = Target::resolve(&args(Some("SM9999"), None, None), None).unwrap_err();
        assert_eq!(e.code, crate::EXIT_USAGE);
        assert!(e.msg.contains("SC8380XP (60)"), "{}", e.msg);
        let e = Target::resolve(&args(Some("SM8650"), None, Some(73)), None).unwrap_err();
        assert!(e.msg.contains("HTP v75"), "{}", e.msg);
        let mut gpu = args(Some("SM8650"), None, None);
        gpu.backend = BackendArg::Gpu;
        assert!(Target::resolve(&gpu, None).is_err());
    }
}
