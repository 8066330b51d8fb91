//! The target flags (`--backend`, `--soc`, `--soc-model`, `--htp-arch`), parsed into the
//! engine's [`TargetSpec`]; resolution and checks are the engine's ([`Target::resolve`]).

use qnnx_engine::{Target, TargetSpec};
use qnnx_types::{BackendKind, HtpArch};

use crate::{Cli, Failure};

/// Backend and target device options shared by `compile`, `check` and `run`.
#[derive(clap::Args, Debug, Clone)]
pub struct TargetArgs {
    /// QNN backend: htp (the NPU; `npu` works too), gpu, or cpu (QNN's reference backend).
    #[arg(long, value_name = "NAME", default_value = "htp", value_parser = parse_backend)]
    pub backend: BackendKind,
    /// Target SoC by name: SM8350, QCS6490, SM8550, SM8650, SC8380XP (X1E80100), SM8750,
    /// SM8850. Default on x86_64: SC8380XP.
    #[arg(long, value_name = "NAME", conflicts_with = "soc_model")]
    pub soc: Option<String>,
    /// Target SoC by QNN model number (Qnn_SocModel_t), e.g. 57 for SM8650.
    #[arg(long, value_name = "N")]
    pub soc_model: Option<u32>,
    /// HTP architecture: v68, v69, v73, v75, v79, v81, v85 or v89. With --soc it must be that
    /// SoC's.
    #[arg(long, value_name = "vNN", value_parser = parse_arch)]
    pub htp_arch: Option<HtpArch>,
}

impl Default for TargetArgs {
    fn default() -> TargetArgs {
        TargetArgs {
            backend: BackendKind::Htp,
            soc: None,
            soc_model: None,
            htp_arch: None,
        }
    }
}

pub fn parse_backend(s: &str) -> Result<BackendKind, String> {
    s.parse()
}

fn parse_arch(s: &str) -> Result<HtpArch, String> {
    s.parse()
}

/// Resolves the flags (with `--qnn-lib` as the backend library). Without a SoC or arch, the
/// HTP uses `default_soc` if given, else the host default (SoC 60 on x86_64).
pub fn resolve(cli: &Cli, args: &TargetArgs, default_soc: Option<u32>) -> Result<Target, Failure> {
    let spec = TargetSpec {
        backend: args.backend,
        soc: args.soc.clone(),
        soc_model: args.soc_model,
        htp_arch: args.htp_arch,
        library: cli.qnn_lib.clone(),
    };
    Target::resolve(&spec, default_soc).map_err(|e| Failure::usage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_names() {
        assert_eq!(parse_arch("v73"), Ok(HtpArch::V73));
        assert!(parse_arch("v70").unwrap_err().contains("v68, v69"));
        assert_eq!(parse_backend("npu"), Ok(BackendKind::Htp));
        assert!(parse_backend("dsp").is_err());
    }
}
