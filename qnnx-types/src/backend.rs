//! QNN backends.

use std::fmt;
use std::str::FromStr;

/// A QNN backend: which library runs a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// The Hexagon NPU (`QnnHtp`); on x86_64 an emulator that really executes graphs.
    Htp,
    /// The Adreno GPU (`QnnGpu`); cannot run on x86_64 (it needs a remote tuning server).
    Gpu,
    /// QNN's reference CPU backend (`QnnCpu`).
    Cpu,
}

impl BackendKind {
    pub const ALL: [BackendKind; 3] = [BackendKind::Htp, BackendKind::Gpu, BackendKind::Cpu];

    /// The one spelling (`htp`, `gpu`, `cpu`): op-table files, cache keys and metadata, the
    /// command line and the Python module use it.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Htp => "htp",
            BackendKind::Gpu => "gpu",
            BackendKind::Cpu => "cpu",
        }
    }

    /// For messages: `HTP`, `GPU`, `CPU`.
    pub fn label(self) -> &'static str {
        match self {
            BackendKind::Htp => "HTP",
            BackendKind::Gpu => "GPU",
            BackendKind::Cpu => "CPU",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Parses [`BackendKind::name`], case-insensitively; `npu` is the HTP (the word PyTorch users
/// know, as in `device="npu"`).
impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<BackendKind, String> {
        let s = s.trim().to_ascii_lowercase();
        if s == "npu" {
            return Ok(BackendKind::Htp);
        }
        BackendKind::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| format!("unknown QNN backend {s:?} (htp or npu, gpu, cpu)"))
    }
}

#[cfg(test)]
mod tests {
    use super::BackendKind;

    #[test]
    fn parse_names_and_the_npu_alias() {
        for b in BackendKind::ALL {
            assert_eq!(b.name().parse::<BackendKind>(), Ok(b));
        }
        assert_eq!("NPU".parse::<BackendKind>(), Ok(BackendKind::Htp));
        assert!("dsp".parse::<BackendKind>().unwrap_err().contains("htp"));
    }
}
