//! `Context`: holds graphs; serialises to and loads from context binaries.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use qnn_sys::Handle;

use crate::api::qnn_call;
use crate::backend::{Backend, BackendInner, BackendKind};
use crate::device::{Device, DeviceInner};
use crate::error::{io, Error, Result};
use crate::graph::{Graph, GraphBuilder};
use crate::system::BinaryInfo;

pub(crate) struct ContextInner {
    pub(crate) backend: Arc<BackendInner>,
    _device: Option<Arc<DeviceInner>>,
    pub(crate) handle: Handle,
    info: Option<BinaryInfo>,
    // A context loaded from a mapped file keeps the mapping for its lifetime: the emulator copies
    // what it needs, but nothing in the API promises that on a device.
    _map: Option<memmap2::Mmap>,
}

// SAFETY: opaque handle owned by this struct; see `BackendInner`.
unsafe impl Send for ContextInner {}
// SAFETY: see above.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: created by `contextCreate`/`contextCreateFromBinary`; graphs hold Arcs to us.
        if let Err(e) = unsafe {
            qnn_call!(
                self.backend.api,
                contextFree(self.handle, std::ptr::null_mut())
            )
        } {
            tracing::warn!(target: "qnn", "contextFree: {e}");
        }
    }
}

/// A QNN context. Cheap to clone; graphs keep it alive.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl Context {
    /// `contextCreate` on `backend`, optionally on a `device`, with the context configs of the
    /// backend's configuration.
    pub fn new(backend: &Backend, device: Option<&Device>) -> Result<Context> {
        let b = &backend.inner;
        let mut customs = b.config.context_customs();
        let configs = customs.list();
        let list_ptr = configs.as_ptr();
        let dev = device
            .map(|d| d.inner.handle)
            .unwrap_or(std::ptr::null_mut());
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: handles are live (held below); the config list is NULL or NULL-terminated and
        // points at configs that live until after the call.
        unsafe {
            qnn_call!(
                b.api,
                contextCreate(b.handle, dev, list_ptr, &mut handle); || format!("{:?}", b.config)
            )
        }?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                backend: b.clone(),
                _device: device.map(|d| d.inner.clone()),
                handle,
                info: None,
                _map: None,
            }),
        })
    }

    /// `contextCreateFromBinary` from bytes. The bytes are first checked through `QnnSystem`
    /// (when the system library is available), which also records the graphs' I/O for
    /// [`Context::graph`].
    pub fn from_binary(
        backend: &Backend,
        device: Option<&Device>,
        bytes: &[u8],
    ) -> Result<Context> {
        Context::load(backend, device, bytes, None)
    }

    /// Memory-maps `path` and loads it like [`Context::from_binary`]; the context keeps the
    /// mapping.
    pub fn from_file(backend: &Backend, device: Option<&Device>, path: &Path) -> Result<Context> {
        let file = std::fs::File::open(path).map_err(io(path))?;
        // SAFETY: the mapping is read-only and private. Truncating the file while it is mapped
        // would fault; cache files are replaced by rename, never rewritten in place.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io(path))?;
        let bytes: &[u8] = &map;
        // The slice borrows the map, which moves into the context below; the heap pages it
        // points at do not move.
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        // SAFETY: `map` outlives this call (it is stored in the context on success, dropped on
        // failure after `load` returns).
        let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
        Context::load(backend, device, bytes, Some(map)).map_err(|e| match e {
            Error::Api(mut api) => {
                let ctx = format!("{}", path.display());
                api.context = Some(match api.context.take() {
                    Some(c) => format!("{ctx} ({c})"),
                    None => ctx,
                });
                Error::Api(api)
            }
            other => other,
        })
    }

    fn load(
        backend: &Backend,
        device: Option<&Device>,
        bytes: &[u8],
        map: Option<memmap2::Mmap>,
    ) -> Result<Context> {
        if bytes.is_empty() {
            return Err(Error::InvalidArgument("context binary is empty".into()));
        }
        let info = match backend.system() {
            Ok(sys) => Some(crate::system::binary_info(&sys, bytes)?),
            Err(e) => {
                tracing::debug!(target: "qnn", "loading without binary info: {e}");
                None
            }
        };
        let b = &backend.inner;
        if let Some(info) = &info {
            refuse_shared_weights_on_emulator(b.kind, info)?;
        }
        let mut customs = b.config.context_customs();
        let configs = customs.list();
        let list_ptr = configs.as_ptr();
        let dev = device
            .map(|d| d.inner.handle)
            .unwrap_or(std::ptr::null_mut());
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: `bytes` is valid for `len` bytes during the call; handles are live; the config
        // list is NULL or NULL-terminated and outlives the call.
        unsafe {
            qnn_call!(b.api, contextCreateFromBinary(
                b.handle,
                dev,
                list_ptr,
                bytes.as_ptr().cast(),
                bytes.len() as u64,
                &mut handle,
                std::ptr::null_mut()
            ); || format!("a {}-byte context binary", bytes.len()))
        }?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                backend: b.clone(),
                _device: device.map(|d| d.inner.clone()),
                handle,
                info,
                _map: map,
            }),
        })
    }

    /// The binary's description, for contexts loaded from a binary with `QnnSystem` available.
    pub fn binary_info(&self) -> Option<&BinaryInfo> {
        self.inner.info.as_ref()
    }

    /// Starts building a graph named `name` in this context (`graphCreate`, with the graph
    /// configs of the backend's configuration).
    pub fn build_graph(&self, name: &str) -> Result<GraphBuilder> {
        GraphBuilder::new(self.inner.clone(), name)
    }

    /// `graphRetrieve`: a graph of a context loaded from a binary, with its I/O from the
    /// binary info.
    pub fn graph(&self, name: &str) -> Result<Graph> {
        let info = self.inner.info.as_ref().ok_or_else(|| {
            Error::InvalidArgument(
                "graph I/O is known only for contexts loaded from a binary with QnnSystem available"
                    .into(),
            )
        })?;
        let g = info.graphs.iter().find(|g| g.name == name).ok_or_else(|| {
            let names: Vec<_> = info.graphs.iter().map(|g| g.name.as_str()).collect();
            Error::InvalidArgument(format!(
                "no graph {name:?} in this context binary; it has {names:?}"
            ))
        })?;
        Graph::retrieve(
            self.inner.clone(),
            name,
            g.inputs.clone(),
            g.outputs.clone(),
        )
    }

    /// Graph names, for contexts loaded from a binary.
    pub fn graph_names(&self) -> Vec<String> {
        self.inner
            .info
            .iter()
            .flat_map(|i| i.graphs.iter().map(|g| g.name.clone()))
            .collect()
    }

    /// `contextGetBinarySize` + `contextGetBinary`. Every graph of the context must be
    /// finalized (otherwise QNN returns 5003).
    pub fn to_binary(&self) -> Result<Vec<u8>> {
        let b = &self.inner.backend;
        let mut size: u64 = 0;
        // SAFETY: valid out-pointer.
        unsafe { qnn_call!(b.api, contextGetBinarySize(self.inner.handle, &mut size)) }?;
        let len = usize::try_from(size)
            .map_err(|_| Error::InvalidArgument(format!("context binary of {size} bytes")))?;
        let mut buf = vec![0u8; len];
        let mut written: u64 = 0;
        // SAFETY: `buf` is writable for `size` bytes.
        unsafe {
            qnn_call!(
                b.api,
                contextGetBinary(
                    self.inner.handle,
                    buf.as_mut_ptr().cast(),
                    size,
                    &mut written
                )
            )
        }?;
        buf.truncate(written.min(size) as usize);
        Ok(buf)
    }

    /// Writes the context binary to `path` atomically (temporary file, then rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = self.to_binary()?;
        write_atomic(path, &bytes)
    }
}

/// The x86_64 HTP library prepares weight-shared contexts but cannot load their binaries:
/// `contextCreateFromBinary` returns 1000 (`Shared weights buffer isn't supported on this
/// platform`) in a process that has finalized a graph before, and jumps to a NULL function
/// pointer (SIGSEGV) in one that has not. So such binaries are refused before QNN sees them.
fn refuse_shared_weights_on_emulator(kind: BackendKind, info: &BinaryInfo) -> Result<()> {
    if kind == BackendKind::Htp && cfg!(target_arch = "x86_64") && info.uses_shared_weights() {
        return Err(Error::InvalidArgument(
            "this context binary was prepared with HTP weight sharing, which the x86_64 HTP \
             library (the emulator) cannot load (QNN 1000: shared weights buffer not supported \
             on this platform); load it on a Snapdragon device, or compile without weight \
             sharing to run it here"
                .into(),
        ));
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary sibling and a rename, so readers never see a
/// partial file and an existing file is replaced whole or not at all.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io(path))
}
