//! The GPU backend's configuration and its custom configs (`QnnGpuContext_CustomConfig_t`,
//! `QnnGpuGraph_CustomConfig_t`, declared in `qnn_sys::gpu`). The x86_64 GPU library cannot
//! start (it needs a remote tuning server: docs/qnn-notes.md §1), so these configs have never
//! reached a GPU here: graphs for the GPU are lowered and validated on the host and run only on
//! a device. The unit tests check the structs they produce.

use qnn_sys::gpu::{
    context_option, perf_hint, precision, ContextCustomConfig, ContextCustomValue,
    GraphCustomConfig,
};

/// Everything the GPU backend is configured with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GpuConfig {
    pub context: GpuContextConfig,
    pub graph: GpuGraphConfig,
}

/// `contextCreate` configs of the GPU backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GpuContextConfig {
    /// `QNN_GPU_CONTEXT_CONFIG_OPTION_PERF_HINT` (the backend's default is high).
    pub perf_hint: Option<GpuPerfHint>,
}

/// `QnnGpuContext_PerfHint_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuPerfHint {
    High,
    Normal,
    Low,
}

/// `graphCreate` config of the GPU backend (one `QnnGpuGraph_CustomConfig_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GpuGraphConfig {
    /// The precision the backend may give internal tensors; `None`: the tensors' own dtypes.
    pub precision: Option<GpuPrecision>,
    /// Give every tensor its own memory instead of sharing native tensors' memory.
    pub disable_memory_optimizations: bool,
    /// Keep ops apart instead of fusing them.
    pub disable_node_optimizations: bool,
    /// Do not record the command queue.
    pub disable_queue_recording: bool,
}

/// `QnnGpu_Precision_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuPrecision {
    Fp32,
    Fp16,
    /// fp16 storage, fp32 arithmetic.
    Hybrid,
}

impl GpuContextConfig {
    pub(crate) fn customs(&self) -> Vec<ContextCustomConfig> {
        let mut customs = Vec::new();
        if let Some(hint) = self.perf_hint {
            let v = match hint {
                GpuPerfHint::High => perf_hint::HIGH,
                GpuPerfHint::Normal => perf_hint::NORMAL,
                GpuPerfHint::Low => perf_hint::LOW,
            };
            // Zero the whole union first so no uninitialised bytes cross into C.
            let mut value = ContextCustomValue {
                kernel_repo_dir: std::ptr::null(),
            };
            value.perf_hint = v;
            customs.push(ContextCustomConfig {
                option: context_option::PERF_HINT,
                value,
            });
        }
        customs
    }
}

impl GpuGraphConfig {
    /// The one graph config, or none when every field is the default.
    pub(crate) fn customs(&self) -> Vec<GraphCustomConfig> {
        if *self == GpuGraphConfig::default() {
            return Vec::new();
        }
        vec![GraphCustomConfig {
            precision: match self.precision {
                None => precision::USER_PROVIDED,
                Some(GpuPrecision::Fp32) => precision::FP32,
                Some(GpuPrecision::Fp16) => precision::FP16,
                Some(GpuPrecision::Hybrid) => precision::HYBRID,
            },
            disable_memory_optimizations: self.disable_memory_optimizations.into(),
            disable_node_optimizations: self.disable_node_optimizations.into(),
            disable_queue_recording: self.disable_queue_recording.into(),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_send_no_configs() {
        assert!(GpuContextConfig::default().customs().is_empty());
        assert!(GpuGraphConfig::default().customs().is_empty());
    }

    #[test]
    fn options_become_the_gpu_structs() {
        let c = GpuContextConfig {
            perf_hint: Some(GpuPerfHint::Low),
        }
        .customs();
        assert_eq!(c[0].option, context_option::PERF_HINT);
        // SAFETY: the PERF_HINT option's member.
        assert_eq!(unsafe { c[0].value.perf_hint }, perf_hint::LOW);
        let g = GpuGraphConfig {
            precision: Some(GpuPrecision::Fp16),
            disable_node_optimizations: true,
            ..Default::default()
        }
        .customs();
        assert_eq!(
            g,
            [GraphCustomConfig {
                precision: precision::FP16,
                disable_memory_optimizations: 0,
                disable_node_optimizations: 1,
                disable_queue_recording: 0,
            }]
        );
    }
}
