//! Snapdragon SoCs by name: QNN identifies the target SoC by a number (`Qnn_SocModel_t`), which
//! users should not have to learn. Only SoCs whose number and HTP architecture were observed
//! with the 2.51 HTP library are listed (docs/qnn-notes.md §4.9: the library logs the arch it picks).

/// One SoC the HTP backend can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Soc {
    /// Marketing part name, such as `SC8380XP`.
    pub name: &'static str,
    /// Other names the same SoC model number covers.
    pub aliases: &'static [&'static str],
    /// `Qnn_SocModel_t`.
    pub model: u32,
    /// HTP architecture version (68, 73, ...).
    pub arch: u32,
    /// Whether its HTP computes float graphs in fp16. v68 parts have no fp16 HTP path: float
    /// ops fail validation with 3110 "The SocModel doesn't support FP16" (docs/qnn-notes.md gotcha 2).
    pub fp16: bool,
    /// Devices built on it, for messages.
    pub description: &'static str,
}

/// Known SoCs, by model number.
pub const SOCS: &[Soc] = &[
    Soc {
        name: "SM8350",
        aliases: &[],
        model: 30,
        arch: 68,
        fp16: false,
        description: "Snapdragon 888",
    },
    Soc {
        name: "QCS6490",
        aliases: &["QCM6490"],
        model: 35,
        arch: 68,
        fp16: false,
        description: "Qualcomm Linux boards (RB3 Gen 2 class)",
    },
    Soc {
        name: "SM8550",
        aliases: &[],
        model: 43,
        arch: 73,
        fp16: true,
        description: "Snapdragon 8 Gen 2",
    },
    Soc {
        name: "SM8650",
        aliases: &[],
        model: 57,
        arch: 75,
        fp16: true,
        description: "Snapdragon 8 Gen 3",
    },
    Soc {
        name: "SC8380XP",
        aliases: &["X1E80100", "X-ELITE"],
        model: 60,
        arch: 73,
        fp16: true,
        description: "Snapdragon X Elite laptops (Windows ARM64)",
    },
    Soc {
        name: "SM8750",
        aliases: &[],
        model: 69,
        arch: 79,
        fp16: true,
        description: "Snapdragon 8 Elite",
    },
    Soc {
        name: "SM8850",
        aliases: &[],
        model: 87,
        arch: 81,
        fp16: true,
        description: "Snapdragon 8 Elite Gen 5",
    },
];

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

/// Names for an "unknown SoC" message.
pub fn known_names() -> String {
    SOCS.iter()
        .map(|s| format!("{} ({})", s.name, s.model))
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
        assert!(!find("QCS6490").unwrap().fp16);
        assert!(SOCS.windows(2).all(|w| w[0].model < w[1].model));
    }
}
