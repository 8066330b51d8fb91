//! GPU backend custom config structs: what the `customConfig` pointer of a CUSTOM
//! `QnnBackend_Config_t`, `QnnContext_Config_t` or `QnnGraph_Config_t` points at when the
//! backend is `QnnGpu` (provider `GPU_QTI_AISW`, backend id 4).
//!
//! Declared by hand from public copies of QNN's headers (the layouts, not their text):
//!
//! - `GPU/QnnGpuBackend.h`: `objeck/objeck-lang`
//!   `core/lib/onnx/qnn/win/onnx/include/QNN/GPU/QnnGpuBackend.h` at commit
//!   `f87271e8a7e753e593d1adacc91aa2466c4cdab1`. No version file sits beside it; the same
//!   repository's later copy of the SDK, `core/lib/onnx/eq/qnn/win/onnx/include/QNN/`, has
//!   `QnnSdkBuildId.h` v2.36.0.250627101419 (commit `5429f58b`) and `GPU/QnnGpuCommon.h` with GPU
//!   API 3.9.0 (commit `e5733cce`), so this is QNN 2.36 as far as can be told. The 2.16 header
//!   below declares no backend custom config at all.
//! - `GPU/QnnGpuContext.h`, `GPU/QnnGpuGraph.h`, `GPU/QnnGpuCommon.h`: `pytorch/executorch`
//!   `build_android-DCMAKE_BUILD_TYPE=Release/backends/qualcomm/qnn_executorch/backends/QNN/include/GPU/`
//!   at commit `e19776e5aef078649adbf02091e55c350a040785`: QNN 2.16.4 (`QnnSdkBuildId.h`
//!   v2.16.4.231110151339 there), GPU API 3.3.0.
//!
//! No copy as new as the 2.51 library (GPU backend API 3.15.0, docs/qnn-notes.md §1) was found.
//! ExecuTorch's QNN delegate, built against current SDKs, still fills these same members
//! (`backends/qualcomm/runtime/backends/gpu/`: `GpuGraphCustomConfig.cpp` at `4bf1fb8e` sets
//! the four graph fields, `target/GpuContextCustomConfig.cpp` at `e8f77a7f` the perf hint,
//! `GpuBackendCustomConfig.cpp` at `899a59d3` weight sharing). The backend config layout was
//! also observed on the 2.51 library (docs/qnn-notes.md §1). A newer `QnnGpuGraph.h` seen in
//! the code index, whose repository could not be identified, keeps `QnnGpuGraph_CustomConfig_t`
//! unchanged and adds an option-keyed `QnnGpuGraph_CustomConfigV2_t` (a leading `handshake`
//! of 0x7FFFFFFF, then `option` and a union that includes fence configs); it is not declared here.
//!
//! On x86_64 the GPU backend cannot start (docs/qnn-notes.md §1): these are for devices.

use std::ffi::c_char;

/// `QnnGpuBackend_ConfigOption_t` values: which member of [`BackendCustomValue`] a
/// [`BackendCustomConfig`] sets.
pub mod backend_option {
    /// `QNN_GPU_BACKEND_CONFIG_OPTION_ENABLE_TUNING_MODE`: `enableTuningMode`, non-zero enables.
    /// The x86_64 library requires it and then a remote TargetServer: with it set to 1 and a
    /// [`PERFORMANCE_CACHE_DIR`], `backendCreate` fails with 4012 (docs/qnn-notes.md §1).
    pub const ENABLE_TUNING_MODE: u32 = 0;
    /// `QNN_GPU_BACKEND_CONFIG_OPTION_PERFORMANCE_CACHE_DIR`: `performanceCacheDir`, non-NULL.
    pub const PERFORMANCE_CACHE_DIR: u32 = 1;
    /// `QNN_GPU_BACKEND_CONFIG_OPTION_INVALIDATE_PERFORMANCE_CACHE`:
    /// `invalidatePerformanceCache`, non-zero ignores the cache when initializing.
    pub const INVALIDATE_PERFORMANCE_CACHE: u32 = 2;
    /// `QNN_GPU_BACKEND_CONFIG_OPTION_WEIGHT_SHARING_ENABLED`: `weightSharingEnabled`.
    pub const WEIGHT_SHARING_ENABLED: u32 = 3;
    /// `QNN_GPU_BACKEND_CONFIG_OPTION_UNDEFINED`.
    pub const UNDEFINED: u32 = 0x7FFF_FFFF;
}

/// The anonymous union of `QnnGpuBackend_CustomConfig_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union BackendCustomValue {
    /// `uint8_t enableTuningMode`.
    pub enable_tuning_mode: u8,
    /// `const char* performanceCacheDir`.
    pub performance_cache_dir: *const c_char,
    /// `uint8_t invalidatePerformanceCache`.
    pub invalidate_performance_cache: u8,
    /// `uint8_t weightSharingEnabled`.
    pub weight_sharing_enabled: u8,
}

/// `QnnGpuBackend_CustomConfig_t`: `{QnnGpuBackend_ConfigOption_t option; union {...}}`, the
/// union pointer-aligned at offset 8, 16 bytes; one option per config.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BackendCustomConfig {
    /// One of [`backend_option`].
    pub option: u32,
    /// The member that [`option`](Self::option) names.
    pub value: BackendCustomValue,
}

/// `QnnGpuContext_ConfigOption_t` values: which member of [`ContextCustomValue`] a
/// [`ContextCustomConfig`] sets.
pub mod context_option {
    /// `QNN_GPU_CONTEXT_CONFIG_OPTION_PERF_HINT`: `perfHint`, one of [`super::perf_hint`].
    pub const PERF_HINT: u32 = 0;
    /// `QNN_GPU_CONTEXT_CONFIG_OPTION_USE_GL_BUFFERS`: `useGLBuffers`, non-zero uses OpenGL
    /// buffers.
    pub const USE_GL_BUFFERS: u32 = 1;
    /// `QNN_GPU_CONTEXT_CONFIG_OPTION_KERNEL_REPO_DIR`: `kernelRepoDir`, the kernel disk cache
    /// folder, non-NULL.
    pub const KERNEL_REPO_DIR: u32 = 2;
    /// `QNN_GPU_CONTEXT_CONFIG_OPTION_INVALIDATE_KERNEL_REPO`: `invalidateKernelRepo`, non-zero
    /// ignores the kernel disk cache when initializing.
    pub const INVALIDATE_KERNEL_REPO: u32 = 3;
    /// `QNN_GPU_CONTEXT_CONFIG_OPTION_UNDEFINED`.
    pub const UNDEFINED: u32 = 0x7FFF_FFFF;
}

/// `QnnGpuContext_PerfHint_t` values.
pub mod perf_hint {
    /// `QNN_GPU_CONTEXT_PERF_HINT_HIGH`: the default.
    pub const HIGH: u32 = 0;
    /// `QNN_GPU_CONTEXT_PERF_HINT_NORMAL`.
    pub const NORMAL: u32 = 1;
    /// `QNN_GPU_CONTEXT_PERF_HINT_LOW`.
    pub const LOW: u32 = 2;
}

/// The anonymous union of `QnnGpuContext_CustomConfig_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ContextCustomValue {
    /// `QnnGpuContext_PerfHint_t perfHint`.
    pub perf_hint: u32,
    /// `uint8_t useGLBuffers`.
    pub use_gl_buffers: u8,
    /// `const char* kernelRepoDir`.
    pub kernel_repo_dir: *const c_char,
    /// `uint8_t invalidateKernelRepo`.
    pub invalidate_kernel_repo: u8,
}

/// `QnnGpuContext_CustomConfig_t`: `{QnnGpuContext_ConfigOption_t option; union {...}}`, the
/// union pointer-aligned at offset 8, 16 bytes; one option per config.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ContextCustomConfig {
    /// One of [`context_option`].
    pub option: u32,
    /// The member that [`option`](Self::option) names.
    pub value: ContextCustomValue,
}

/// `QnnGpu_Precision_t` values: the precision the backend may give a graph's internal tensors
/// (those that are not graph inputs or outputs and do not join ops of different op packages).
pub mod precision {
    /// `QNN_GPU_PRECISION_FP32`.
    pub const FP32: u32 = 0;
    /// `QNN_GPU_PRECISION_FP16`.
    pub const FP16: u32 = 1;
    /// `QNN_GPU_PRECISION_HYBRID`: FP16 storage, FP32 arithmetic.
    pub const HYBRID: u32 = 2;
    /// `QNN_GPU_PRECISION_USER_PROVIDED`: the tensors' own data types; the default.
    pub const USER_PROVIDED: u32 = 3;
}

/// `QnnGpuGraph_CustomConfig_t`: not keyed by an option like the backend and context configs:
/// one config carries every field, 8 bytes, 4-aligned.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphCustomConfig {
    /// `QnnGpu_Precision_t precision`, one of [`precision`].
    pub precision: u32,
    /// `uint8_t disableMemoryOptimizations`: non-zero gives every tensor its own memory
    /// instead of sharing NATIVE tensor memory.
    pub disable_memory_optimizations: u8,
    /// `uint8_t disableNodeOptimizations`: non-zero keeps ops apart instead of fusing them.
    pub disable_node_optimizations: u8,
    /// `uint8_t disableQueueRecording`: non-zero disables the recorded command queue.
    pub disable_queue_recording: u8,
}

impl GraphCustomConfig {
    /// `QNN_GPU_GRAPH_CUSTOM_CONFIG_INIT`: the tensors' own precision, every optimization on.
    pub const INIT: GraphCustomConfig = GraphCustomConfig {
        precision: precision::USER_PROVIDED,
        disable_memory_optimizations: 0,
        disable_node_optimizations: 0,
        disable_queue_recording: 0,
    };
}

const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<BackendCustomConfig>() == 16);
    assert!(align_of::<BackendCustomConfig>() == 8);
    assert!(offset_of!(BackendCustomConfig, value) == 8);
    assert!(size_of::<ContextCustomConfig>() == 16);
    assert!(align_of::<ContextCustomConfig>() == 8);
    assert!(offset_of!(ContextCustomConfig, value) == 8);
    assert!(size_of::<GraphCustomConfig>() == 8);
    assert!(align_of::<GraphCustomConfig>() == 4);
    assert!(offset_of!(GraphCustomConfig, disable_memory_optimizations) == 4);
    assert!(offset_of!(GraphCustomConfig, disable_node_optimizations) == 5);
    assert!(offset_of!(GraphCustomConfig, disable_queue_recording) == 6);
};
