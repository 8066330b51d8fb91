//! HTP architectures and Snapdragon SoCs by name. QNN identifies the target SoC by a number
//! (`Qnn_SocModel_t`) that users should not have to learn. Only SoCs whose number and HTP
//! architecture were observed with the 2.51 HTP library are listed (the library logs the arch it
//! picks for a SoC number; docs/qnn-notes.md §4.9).

use std::fmt;
use std::str::FromStr;

/// A Hexagon Tensor Processor generation (`QnnHtpDevice_Arch_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HtpArch {
    V68,
    V69,
    V73,
    V75,
    V79,
    V81,
    V85,
    V89,
}

impl HtpArch {
    /// Every architecture QNN's headers name, oldest first (85 and 89 from the 2.5x
    /// `QnnHtpDeviceConfigShared.h`; docs/qnn-notes.md §2).
    pub const ALL: [HtpArch; 8] = [
        HtpArch::V68,
        HtpArch::V69,
        HtpArch::V73,
        HtpArch::V75,
        HtpArch::V79,
        HtpArch::V81,
        HtpArch::V85,
        HtpArch::V89,
    ];

    /// The number QNN uses (68 for v68).
    pub fn number(self) -> u32 {
        match self {
            HtpArch::V68 => 68,
            HtpArch::V69 => 69,
            HtpArch::V73 => 73,
            HtpArch::V75 => 75,
            HtpArch::V79 => 79,
            HtpArch::V81 => 81,
            HtpArch::V85 => 85,
            HtpArch::V89 => 89,
        }
    }

    /// The architecture of a QNN arch number.
    pub fn from_number(n: u32) -> Option<HtpArch> {
        HtpArch::ALL.into_iter().find(|a| a.number() == n)
    }

    /// The one spelling: `v73`.
    pub fn name(self) -> String {
        format!("v{}", self.number())
    }

    /// Whether the HTP computes float graphs (in fp16). v68 has no float path at all: its float
    /// ops fail validation with 3110 "The SocModel doesn't support FP16" (docs/qnn-notes.md
    /// gotcha 2), so only quantized graphs run there.
    pub fn has_fp16(self) -> bool {
        self != HtpArch::V68
    }

    /// Whether the HTP takes weights in QNN's block-wise expansion encoding (per-channel scale
    /// x integer scale per block, "LPBQ"): v69 and newer (Qualcomm's QNN documentation;
    /// ExecuTorch's QNN backend gates block quantization the same way).
    pub fn has_blockwise_expansion(self) -> bool {
        self != HtpArch::V68
    }

    /// Every architecture as `v68, v69, ...`, for messages.
    pub fn names() -> String {
        HtpArch::ALL
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for HtpArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.number())
    }
}

/// Parses `v73`, `V73` or `73`.
impl FromStr for HtpArch {
    type Err = String;
    fn from_str(s: &str) -> Result<HtpArch, String> {
        let digits = s.trim().trim_start_matches(['v', 'V']);
        digits
            .parse::<u32>()
            .ok()
            .and_then(HtpArch::from_number)
            .ok_or_else(|| {
                format!(
                    "unknown HTP architecture {s:?}; use one of {}",
                    HtpArch::names()
                )
            })
    }
}

/// One SoC the HTP backend can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Soc {
    /// Marketing part name, such as `SC8380XP`.
    pub name: &'static str,
    /// Other names the same SoC model number covers.
    pub aliases: &'static [&'static str],
    /// `Qnn_SocModel_t`.
    pub model: u32,
    /// Its HTP generation.
    pub arch: HtpArch,
    /// Devices built on it, for messages.
    pub description: &'static str,
}

impl Soc {
    /// Whether its HTP computes float graphs ([`HtpArch::has_fp16`]).
    pub fn has_fp16(&self) -> bool {
        self.arch.has_fp16()
    }
}

/// Known SoCs, by model number.
pub const SOCS: &[Soc] = &[
    Soc {
        name: "SM8350",
        aliases: &[],
        model: 30,
        arch: HtpArch::V68,
        description: "Snapdragon 888",
    },
    Soc {
        name: "QCS6490",
        aliases: &["QCM6490"],
        model: 35,
        arch: HtpArch::V68,
        description: "Qualcomm Linux boards (RB3 Gen 2 class)",
    },
    Soc {
        name: "SM8550",
        aliases: &[],
        model: 43,
        arch: HtpArch::V73,
        description: "Snapdragon 8 Gen 2",
    },
    Soc {
        name: "SM8650",
        aliases: &[],
        model: 57,
        arch: HtpArch::V75,
        description: "Snapdragon 8 Gen 3",
    },
    Soc {
        name: "SC8380XP",
        aliases: &["X1E80100", "X-ELITE"],
        model: 60,
        arch: HtpArch::V73,
        description: "Snapdragon X Elite laptops (Windows ARM64)",
    },
    Soc {
        name: "SM8750",
        aliases: &[],
        model: 69,
        arch: HtpArch::V79,
        description: "Snapdragon 8 Elite",
    },
    Soc {
        name: "SM8850",
        aliases: &[],
        model: 87,
        arch: HtpArch::V81,
        description: "Snapdragon 8 Elite Gen 5",
    },
];

/// SoC 60 (SC8380XP, Snapdragon X Elite, HTP v73): what the x86_64 HTP emulator targets unless
/// told otherwise. Without a SoC the emulator picks a v68 part and computes exact fp32, hiding
/// precision bugs; with SoC 60 it computes in fp16 like the NPU (docs/qnn-notes.md gotcha 2).
pub const EMULATOR_DEFAULT_SOC: u32 = 60;

/// Finds a SoC by name or alias (case-insensitive) or by its model number given as text.
pub fn find(name_or_model: &str) -> Option<&'static Soc> {
    let s = name_or_model.trim();
    if let Ok(n) = s.parse::<u32>() {
        return by_model(n);
    }
    SOCS.iter().find(|soc| {
        soc.name.eq_ignore_ascii_case(s) || soc.aliases.iter().any(|a| a.eq_ignore_ascii_case(s))
    })
}

/// The SoC with this model number, if known.
pub fn by_model(model: u32) -> Option<&'static Soc> {
    SOCS.iter().find(|s| s.model == model)
}

/// `SM8350 (30), QCS6490 (35), ...`, for an "unknown SoC" message.
pub fn known_names() -> String {
    SOCS.iter()
        .map(|s| format!("{} ({})", s.name, s.model))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Names of the SoCs whose HTP computes float graphs, for messages.
pub fn fp16_names() -> String {
    SOCS.iter()
        .filter(|s| s.has_fp16())
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_name_alias_and_number() {
        assert_eq!(find("sc8380xp").unwrap().model, 60);
        assert_eq!(find("QCM6490").unwrap().model, 35);
        assert_eq!(find("43").unwrap().name, "SM8550");
        assert!(find("SM9999").is_none());
        assert!(!find("QCS6490").unwrap().has_fp16());
        assert!(SOCS.windows(2).all(|w| w[0].model < w[1].model));
        assert_eq!(by_model(EMULATOR_DEFAULT_SOC).unwrap().arch, HtpArch::V73);
    }

    #[test]
    fn arch_parses_with_and_without_v() {
        assert_eq!("v73".parse::<HtpArch>(), Ok(HtpArch::V73));
        assert_eq!("V81".parse::<HtpArch>(), Ok(HtpArch::V81));
        assert_eq!("75".parse::<HtpArch>(), Ok(HtpArch::V75));
        assert!("v70".parse::<HtpArch>().unwrap_err().contains("v68, v69"));
        for a in HtpArch::ALL {
            assert_eq!(HtpArch::from_number(a.number()), Some(a));
        }
    }
}
