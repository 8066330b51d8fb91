//! The HTP backend's configuration and its custom configs (`QnnHtpDevice_CustomConfig_t`,
//! `QnnHtpContext_CustomConfig_t`, `QnnHtpGraph_CustomConfig_t`, declared in `qnn_sys::htp`).

use qnn_sys::htp::{
    context_option, device_option, graph_option, optimization_type, ContextCustomConfig,
    ContextCustomValue, DeviceArch, DeviceConfigLayout, DeviceCustomConfig,
    DeviceCustomConfigPacked, DeviceCustomValue, DeviceCustomValuePacked, GraphCustomConfig,
    GraphCustomValue, GraphOptimization,
};
use qnnx_types::soc::EMULATOR_DEFAULT_SOC;
use qnnx_types::HtpArch;

use crate::error::{Error, Result};

/// Everything the HTP backend is configured with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct HtpConfig {
    pub device: HtpDeviceConfig,
    pub context: HtpContextConfig,
    pub graph: HtpGraphConfig,
}

impl HtpConfig {
    /// What to use when the caller does not say: on an x86_64 host (the HTP emulator) SoC 60,
    /// so the emulator computes in fp16 like the NPU; without it the emulator picks a v68 part
    /// and computes exact fp32, hiding precision bugs (docs/qnn-notes.md gotcha 2). On a device,
    /// the device's own SoC.
    pub fn host_default() -> HtpConfig {
        HtpConfig {
            device: HtpDeviceConfig::host_default(),
            ..HtpConfig::default()
        }
    }
}

/// `deviceCreate` configs: the target SoC and arch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct HtpDeviceConfig {
    /// `QNN_HTP_DEVICE_CONFIG_OPTION_SOC`: the target SoC (`Qnn_SocModel_t`, for example 60 =
    /// SC8380XP, v73). Decides the HTP arch and whether floats compute in fp16.
    pub soc_model: Option<u32>,
    /// `QNN_HTP_DEVICE_CONFIG_OPTION_ARCH`: a minimum HTP architecture. The SoC wins when both
    /// are given (docs/qnn-notes.md gotcha 2).
    pub arch: Option<HtpArch>,
}

impl HtpDeviceConfig {
    /// SoC 60 on x86_64 hosts, nothing (the device's own SoC) elsewhere; see
    /// [`HtpConfig::host_default`].
    pub fn host_default() -> HtpDeviceConfig {
        if cfg!(target_arch = "x86_64") {
            HtpDeviceConfig {
                soc_model: Some(EMULATOR_DEFAULT_SOC),
                arch: None,
            }
        } else {
            HtpDeviceConfig::default()
        }
    }

    /// The (option, value) pairs, before they take a release's struct layout.
    pub(crate) fn options(&self) -> Vec<(u32, DeviceArch)> {
        let mut v = Vec::new();
        if let Some(soc) = self.soc_model {
            // A SOC value is a bare u32: `device_id` stands for it in the pair.
            v.push((
                device_option::SOC,
                DeviceArch {
                    device_id: soc,
                    arch: 0,
                },
            ));
        }
        if let Some(arch) = self.arch {
            v.push((
                device_option::ARCH,
                DeviceArch {
                    device_id: 0,
                    arch: arch.number(),
                },
            ));
        }
        v
    }

    pub(crate) fn customs(&self, layout: DeviceConfigLayout) -> super::Customs {
        let opts = self.options();
        match layout {
            DeviceConfigLayout::UnionAt8 => super::Customs::HtpDevice(
                opts.into_iter()
                    .map(|(option, a)| {
                        // Zero the whole union first so no uninitialised bytes cross into C.
                        let mut value = DeviceCustomValue {
                            dynamic_partitioning: qnn_sys::htp::DeviceDynamicPartitioning {
                                device_id: 0,
                                use_dynamic_partitioning: false,
                                rsm_handle: std::ptr::null_mut(),
                            },
                        };
                        if option == device_option::SOC {
                            value.soc_model = a.device_id;
                        } else {
                            value.arch = a;
                        }
                        DeviceCustomConfig { option, value }
                    })
                    .collect(),
            ),
            DeviceConfigLayout::UnionAt4 => super::Customs::HtpDevicePacked(
                opts.into_iter()
                    .map(|(option, a)| {
                        let mut value = DeviceCustomValuePacked {
                            arch: DeviceArch {
                                device_id: 0,
                                arch: 0,
                            },
                        };
                        if option == device_option::SOC {
                            value.soc_model = a.device_id;
                        } else {
                            value.arch = a;
                        }
                        DeviceCustomConfigPacked { option, value }
                    })
                    .collect(),
            ),
        }
    }
}

/// `contextCreate` configs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct HtpContextConfig {
    /// `QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED`: static tensors with equal
    /// contents are stored once for all graphs of the context (observed: tensor names do not
    /// matter). Qualcomm documents it for offline prepare on x86_64 Linux and HTP v73 or later,
    /// at most 64 graphs per context. The x86_64 library cannot load the binaries it writes this
    /// way (see [`crate::BinaryInfo::uses_shared_weights`]).
    pub weight_sharing: bool,
}

impl HtpContextConfig {
    pub(crate) fn customs(&self) -> Vec<ContextCustomConfig> {
        let mut customs = Vec::new();
        if self.weight_sharing {
            customs.push(ContextCustomConfig {
                option: context_option::WEIGHT_SHARING_ENABLED,
                // Zero the whole union first so no uninitialised bytes cross into C.
                value: {
                    let mut v = ContextCustomValue { raw: [0; 2] };
                    v.flag = true;
                    v
                },
            });
        }
        customs
    }
}

/// Float precision the HTP computes a float graph in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    Fp32,
    Fp16,
}

/// `graphCreate` configs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct HtpGraphConfig {
    /// `QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION` (no observable effect on SoC 60 numerics:
    /// docs/qnn-notes.md gotcha 3).
    pub precision: Option<Precision>,
    /// Finalize optimization level 1 to 3 (`FINALIZE_OPTIMIZATION_FLAG`): higher spends more
    /// finalize time for a faster graph.
    pub opt_level: Option<u8>,
    /// `VTCM_SIZE_IN_MB`.
    pub vtcm_mb: Option<u32>,
    /// `NUM_HVX_THREADS`.
    pub hvx_threads: Option<u64>,
}

impl HtpGraphConfig {
    pub(crate) fn customs(&self) -> Result<Vec<GraphCustomConfig>> {
        let custom = |option, set: &dyn Fn(&mut GraphCustomValue)| {
            // Zero the whole union first so no uninitialised bytes cross into C.
            let mut value = GraphCustomValue { raw: [0; 6] };
            set(&mut value);
            GraphCustomConfig { option, value }
        };
        let mut customs = Vec::new();
        if let Some(p) = self.precision {
            let v = match p {
                Precision::Fp32 => qnn_sys::htp::precision::FLOAT32,
                Precision::Fp16 => qnn_sys::htp::precision::FLOAT16,
            };
            customs.push(custom(graph_option::PRECISION, &|u| u.precision = v));
        }
        if let Some(level) = self.opt_level {
            if !(1..=3).contains(&level) {
                return Err(Error::InvalidArgument(format!(
                    "opt_level {level}: must be 1, 2 or 3"
                )));
            }
            customs.push(custom(graph_option::OPTIMIZATION, &|u| {
                u.optimization = GraphOptimization {
                    option_type: optimization_type::FINALIZE_OPTIMIZATION_FLAG,
                    float_value: level as f32,
                }
            }));
        }
        if let Some(mb) = self.vtcm_mb {
            customs.push(custom(graph_option::VTCM_SIZE_IN_MB, &|u| {
                u.vtcm_size_in_mb = mb
            }));
        }
        if let Some(n) = self.hvx_threads {
            customs.push(custom(graph_option::NUM_HVX_THREADS, &|u| {
                u.num_hvx_threads = n
            }));
        }
        Ok(customs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_customs_carry_soc_and_arch_in_either_layout() {
        let d = HtpDeviceConfig {
            soc_model: Some(57),
            arch: Some(HtpArch::V75),
        };
        let super::super::Customs::HtpDevice(c) = d.customs(DeviceConfigLayout::UnionAt8) else {
            panic!("offset-8 layout expected")
        };
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].option, device_option::SOC);
        // SAFETY: the SOC option's member.
        assert_eq!(unsafe { c[0].value.soc_model }, 57);
        // SAFETY: the ARCH option's member.
        assert_eq!(unsafe { c[1].value.arch.arch }, 75);
        let super::super::Customs::HtpDevicePacked(p) = d.customs(DeviceConfigLayout::UnionAt4)
        else {
            panic!("offset-4 layout expected")
        };
        // SAFETY: as above.
        assert_eq!(unsafe { p[0].value.soc_model }, 57);
        // The bytes QNN reads: the SoC number right after the option.
        // SAFETY: plain-old-data struct viewed as its 12 bytes.
        let raw: [u8; 12] = unsafe { std::mem::transmute(p[0]) };
        assert_eq!(raw[4..8], 57u32.to_le_bytes());
        assert!(matches!(
            HtpDeviceConfig::default().customs(DeviceConfigLayout::UnionAt8),
            super::super::Customs::HtpDevice(v) if v.is_empty()
        ));
    }

    #[test]
    fn graph_opt_level_is_checked() {
        let bad = HtpGraphConfig {
            opt_level: Some(4),
            ..Default::default()
        };
        let Err(e) = bad.customs() else {
            panic!("opt_level 4 accepted")
        };
        assert!(e.to_string().contains("1, 2 or 3"), "{e}");
        let ok = HtpGraphConfig {
            opt_level: Some(3),
            precision: Some(Precision::Fp16),
            ..Default::default()
        };
        assert_eq!(ok.customs().unwrap().len(), 2);
    }
}
