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
use crate::profile::Profile;
use crate::system::BinaryInfo;

pub(crate) struct ContextInner {
    pub(crate) backend: Arc<BackendInner>,
    _device: Option<Arc<DeviceInner>>,
    pub(crate) handle: Handle,
    info: Option<BinaryInfo>,
    // A context loaded from a mapped file keeps the mapping for its lifetime: the emulator copies
    // what it needs, but nothing in the API promises that on a device.
    _map: Option<Arc<memmap2::Mmap>>,
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

    /// `contextCreateFromBinary` from bytes. The bytes are first read through `QnnSystem`
    /// (when the system library is available), which also records the graphs' I/O for
    /// [`Context::graph`], and checked as [`Context::from_binary_expecting`] describes, with
    /// nothing expected of the target.
    pub fn from_binary(
        backend: &Backend,
        device: Option<&Device>,
        bytes: &[u8],
    ) -> Result<Context> {
        Context::from_binary_expecting(backend, device, bytes, &ExpectedBinary::default())
    }

    /// `contextCreateFromBinary` from bytes, after checks that cost nothing next to what QNN
    /// does with a binary (which is executable content for the NPU): its binary info must parse
    /// (`QnnSystem`), the blob it declares must fit in `bytes`, it must be for this backend and
    /// not from a newer QNN backend API than this library's (an older library refuses such a
    /// binary itself, after parsing it), and it must be for the SoC and QNN build that
    /// `expected` names. A mismatch is [`Error::InvalidArgument`] naming both values. With
    /// anything expected, a missing `QnnSystem` is an error too, since nothing can be checked.
    pub fn from_binary_expecting(
        backend: &Backend,
        device: Option<&Device>,
        bytes: &[u8],
        expected: &ExpectedBinary,
    ) -> Result<Context> {
        Context::load(backend, device, bytes, None, expected, None)
    }

    /// [`Context::from_binary_expecting`], recording the load's events in `profile`.
    pub fn from_binary_profiled(
        backend: &Backend,
        device: Option<&Device>,
        bytes: &[u8],
        expected: &ExpectedBinary,
        profile: &Profile,
    ) -> Result<Context> {
        Context::load(backend, device, bytes, None, expected, Some(profile))
    }

    /// Memory-maps `path` and loads it like [`Context::from_binary`]; the context keeps the
    /// mapping.
    pub fn from_file(backend: &Backend, device: Option<&Device>, path: &Path) -> Result<Context> {
        Context::from_file_expecting(backend, device, path, &ExpectedBinary::default())
    }

    /// Memory-maps `path` and loads it like [`Context::from_binary_expecting`]; the context
    /// keeps the mapping.
    pub fn from_file_expecting(
        backend: &Backend,
        device: Option<&Device>,
        path: &Path,
        expected: &ExpectedBinary,
    ) -> Result<Context> {
        let file = MappedFile::open(path)?;
        Context::from_mapped_expecting(backend, device, &file, 0..file.len(), expected)
    }

    /// Loads the context binary at `range` of a mapped file (a binary inside a larger file,
    /// such as a saved model) like [`Context::from_binary_expecting`]; the context keeps the
    /// mapping. A range outside the file is [`Error::InvalidArgument`].
    pub fn from_mapped_expecting(
        backend: &Backend,
        device: Option<&Device>,
        file: &MappedFile,
        range: std::ops::Range<usize>,
        expected: &ExpectedBinary,
    ) -> Result<Context> {
        let path = file.path();
        let bytes = file.bytes().get(range.clone()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{}: bytes {}..{} are outside the {}-byte file",
                path.display(),
                range.start,
                range.end,
                file.len()
            ))
        })?;
        Context::load(
            backend,
            device,
            bytes,
            Some(file.map.clone()),
            expected,
            None,
        )
        .map_err(|e| match e {
            Error::Api(mut api) => {
                let ctx = format!("{}", path.display());
                api.context = Some(match api.context.take() {
                    Some(c) => format!("{ctx} ({c})"),
                    None => ctx,
                });
                Error::Api(api)
            }
            Error::InvalidArgument(m) => Error::InvalidArgument(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    fn load(
        backend: &Backend,
        device: Option<&Device>,
        bytes: &[u8],
        map: Option<Arc<memmap2::Mmap>>,
        expected: &ExpectedBinary,
        profile: Option<&Profile>,
    ) -> Result<Context> {
        if bytes.is_empty() {
            return Err(Error::InvalidArgument("context binary is empty".into()));
        }
        let info = match backend.system() {
            Ok(sys) => Some(crate::system::binary_info(&sys, bytes)?),
            Err(e) if *expected == ExpectedBinary::default() => {
                tracing::debug!(target: "qnn", "loading without binary info: {e}");
                None
            }
            Err(e) => {
                return Err(Error::InvalidArgument(format!(
                    "cannot check the context binary against {expected} without QnnSystem: {e}"
                )))
            }
        };
        let b = &backend.inner;
        if let Some(info) = &info {
            let library = Library {
                kind: b.kind,
                api: b.api_version,
                build_id: &|| {
                    backend
                        .build_id()
                        .unwrap_or_else(|e| format!("(build id unknown: {e})"))
                },
            };
            check_binary(info, bytes.len(), &library, expected)?;
            refuse_shared_weights_on_emulator(b.kind, info)?;
        }
        let mut customs = b.config.context_customs();
        let configs = customs.list();
        let list_ptr = configs.as_ptr();
        let dev = device
            .map(|d| d.inner.handle)
            .unwrap_or(std::ptr::null_mut());
        let mut handle: Handle = std::ptr::null_mut();
        let p = profile.map_or(std::ptr::null_mut(), Profile::handle);
        let _lifecycle = crate::backend::lifecycle_shared();
        // SAFETY: `bytes` is valid for `len` bytes during the call; handles are live; the config
        // list is NULL or NULL-terminated and outlives the call; the profile handle is NULL or a
        // live profile of this backend.
        unsafe {
            qnn_call!(b.api, contextCreateFromBinary(
                b.handle,
                dev,
                list_ptr,
                bytes.as_ptr().cast(),
                bytes.len() as u64,
                &mut handle,
                p
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

/// A file mapped read-only into memory, for loading context binaries without reading them
/// into the heap (a context loaded from it keeps the mapping alive). Cheap to clone.
#[derive(Clone)]
pub struct MappedFile {
    map: Arc<memmap2::Mmap>,
    path: std::path::PathBuf,
}

impl MappedFile {
    /// Opens and maps `path`. An empty file maps to an empty slice.
    pub fn open(path: &Path) -> Result<MappedFile> {
        let file = std::fs::File::open(path).map_err(io(path))?;
        // SAFETY: the mapping is read-only and private. Truncating the file while it is mapped
        // would fault; cache files and saved models are replaced by rename, never rewritten in
        // place.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io(path))?;
        Ok(MappedFile {
            map: Arc::new(map),
            path: path.to_path_buf(),
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The file's size in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What a caller knows a context binary must be, for [`Context::from_binary_expecting`] and
/// [`Context::from_file_expecting`]. `None` fields are not checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpectedBinary {
    /// The SoC (`Qnn_SocModel_t`) the binary must be prepared for. A binary that records no SoC
    /// (binary info before version 3, or SoC 0: compiled without one) passes.
    pub soc_model: Option<u32>,
    /// The QNN build id of the library that must have produced it, such as
    /// `v2.51.0.260929181845`.
    pub build_id: Option<String>,
}

impl std::fmt::Display for ExpectedBinary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(s) = self.soc_model {
            parts.push(format!("SoC {}", soc_label(s)));
        }
        if let Some(b) = &self.build_id {
            parts.push(format!("QNN {b}"));
        }
        if parts.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&parts.join(" and "))
        }
    }
}

/// `57 (SM8650)`, or the bare number for a SoC the table does not know.
fn soc_label(model: u32) -> String {
    match qnnx_types::soc::by_model(model) {
        Some(s) => format!("{model} ({})", s.name),
        None => model.to_string(),
    }
}

/// What [`check_binary`] knows of the library about to load a binary.
struct Library<'a> {
    kind: BackendKind,
    api: qnn_sys::ApiVersion,
    /// Only asked for a message.
    build_id: &'a dyn Fn() -> String,
}

/// The QNN backend id a binary for `kind` records (`QNN_BACKEND_ID_*`; the HTP's 6 is what its
/// binaries' info says here; the GPU's 4 is its provider's, unmeasured in a binary, which no
/// GPU library on x86_64 can make). The CPU backend makes no context binaries.
fn backend_id(kind: BackendKind) -> Option<u32> {
    match kind {
        BackendKind::Htp => Some(qnn_sys::consts::backend_id::HTP),
        BackendKind::Gpu => Some(qnn_sys::consts::backend_id::GPU),
        BackendKind::Cpu => None,
    }
}

/// The checks of [`Context::from_binary_expecting`] on a binary's info, before QNN loads it.
fn check_binary(
    info: &BinaryInfo,
    len: usize,
    library: &Library,
    expected: &ExpectedBinary,
) -> Result<()> {
    let refuse = |m: String| Err(Error::InvalidArgument(m));
    // The 2.47 to 2.51 libraries record a blob 4096 bytes shorter than the binary (its header).
    if info.blob_size > len as u64 {
        return refuse(format!(
            "the context binary's info says its blob is {} bytes, but the binary has only {len}",
            info.blob_size
        ));
    }
    if let Some(id) = backend_id(library.kind) {
        if info.backend_id != id {
            return refuse(format!(
                "the context binary is for QNN backend id {}, not the {} backend (id {id})",
                info.backend_id,
                library.kind.name()
            ));
        }
    }
    let (bin, lib) = (info.backend_api_version, library.api.backend_api_version);
    if (bin.major, bin.minor) > (lib.major, lib.minor) {
        return refuse(format!(
            "the context binary was made by QNN {} (backend API {}.{}), newer than this library, \
             QNN {} (backend API {}.{}), which refuses binaries of newer releases; load it with \
             the release that made it or a newer one",
            info.build_id,
            bin.major,
            bin.minor,
            (library.build_id)(),
            lib.major,
            lib.minor
        ));
    }
    if let (Some(want), Some(got)) = (expected.soc_model, info.soc_model) {
        if got != 0 && got != want {
            return refuse(format!(
                "the context binary is for SoC {}, the target is SoC {}",
                soc_label(got),
                soc_label(want)
            ));
        }
    }
    if let Some(want) = &expected.build_id {
        if info.build_id != *want {
            return refuse(format!(
                "the context binary was made by QNN {}, expected QNN {want}",
                info.build_id
            ));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use qnn_sys::{ApiVersion, Version};

    fn v(major: u32, minor: u32) -> Version {
        Version {
            major,
            minor,
            patch: 0,
        }
    }

    /// The info of a 49152-byte binary made by the 2.51 HTP library for SoC 60, as read here.
    fn info() -> BinaryInfo {
        BinaryInfo {
            version: 3,
            backend_id: 6,
            build_id: "v2.51.0.260929181845".into(),
            core_api_version: v(2, 40),
            backend_api_version: v(5, 51),
            soc_version: String::new(),
            blob_version: Version {
                major: 4,
                minor: 0,
                patch: 6,
            },
            blob_size: 45056,
            soc_model: Some(60),
            graphs: Vec::new(),
        }
    }

    fn check(
        info: &BinaryInfo,
        len: usize,
        lib_api: Version,
        expected: &ExpectedBinary,
    ) -> Result<()> {
        let library = Library {
            kind: BackendKind::Htp,
            api: ApiVersion {
                core_api_version: v(2, 40),
                backend_api_version: lib_api,
            },
            build_id: &|| "v2.47.0.260601114230".into(),
        };
        check_binary(info, len, &library, expected)
    }

    fn refused(r: Result<()>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_binary_matching_the_target_passes() {
        let expected = ExpectedBinary {
            soc_model: Some(60),
            build_id: Some("v2.51.0.260929181845".into()),
        };
        check(&info(), 49152, v(5, 51), &expected).unwrap();
        // A newer library loads older binaries (2.51 loads those of 2.47 to 2.50).
        check(&info(), 49152, v(5, 52), &ExpectedBinary::default()).unwrap();
    }

    #[test]
    fn a_binary_for_another_soc_is_refused_naming_both() {
        let expected = ExpectedBinary {
            soc_model: Some(57),
            build_id: None,
        };
        let e = refused(check(&info(), 49152, v(5, 51), &expected));
        assert_eq!(
            e,
            "the context binary is for SoC 60 (SC8380XP), the target is SoC 57 (SM8650)"
        );
        // One compiled for no particular SoC, or whose info cannot say, passes.
        for soc in [Some(0), None] {
            let i = BinaryInfo {
                soc_model: soc,
                ..info()
            };
            check(&i, 49152, v(5, 51), &expected).unwrap();
        }
    }

    #[test]
    fn a_binary_of_another_build_is_refused_naming_both() {
        let expected = ExpectedBinary {
            soc_model: None,
            build_id: Some("v2.50.40.260831140417".into()),
        };
        let e = refused(check(&info(), 49152, v(5, 51), &expected));
        assert!(
            e.contains("v2.51.0.260929181845") && e.contains("expected QNN v2.50.40.260831140417"),
            "{e}"
        );
    }

    #[test]
    fn a_binary_of_a_newer_release_is_refused_before_qnn_parses_it() {
        let e = refused(check(&info(), 49152, v(5, 47), &ExpectedBinary::default()));
        assert!(
            e.contains("QNN v2.51.0.260929181845 (backend API 5.51)")
                && e.contains("QNN v2.47.0.260601114230 (backend API 5.47)"),
            "{e}"
        );
    }

    #[test]
    fn a_blob_larger_than_the_binary_is_refused() {
        let e = refused(check(&info(), 40000, v(5, 51), &ExpectedBinary::default()));
        assert!(e.contains("45056 bytes") && e.contains("only 40000"), "{e}");
    }

    #[test]
    fn a_binary_for_another_backend_is_refused() {
        let i = BinaryInfo {
            backend_id: 4,
            ..info()
        };
        let e = refused(check(&i, 49152, v(5, 51), &ExpectedBinary::default()));
        assert!(e.contains("backend id 4") && e.contains("htp"), "{e}");
    }

    #[test]
    fn expectations_read_as_text() {
        assert_eq!(ExpectedBinary::default().to_string(), "nothing");
        let e = ExpectedBinary {
            soc_model: Some(57),
            build_id: Some("v2.51.0.1".into()),
        };
        assert_eq!(e.to_string(), "SoC 57 (SM8650) and QNN v2.51.0.1");
    }
}
