//! The GPU backend's configuration. The x86_64 GPU library cannot start (it needs a remote
//! tuning server: docs/qnn-notes.md §1), so nothing here has run against a GPU: graphs for the
//! GPU are lowered and validated on the host and executed only on a device.

/// Everything the GPU backend is configured with: nothing yet (its custom configs are not
/// declared in `qnn-sys`); the backend's defaults apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GpuConfig {}
