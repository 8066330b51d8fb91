//! Context-binary introspection through `QnnSystem`.

use qnn_sys::{Handle, SystemLibrary, Version};

use crate::error::{ApiError, Error, Result};
use crate::tensor::{info_from_raw, TensorInfo};

/// What a context binary says about itself (`QnnSystemContext_BinaryInfo_t`).
#[derive(Debug, Clone, PartialEq)]
pub struct BinaryInfo {
    /// The binary-info struct version the library returned (3 for 2.4x libraries).
    pub version: u32,
    pub backend_id: u32,
    /// The QNN build that produced the binary.
    pub build_id: String,
    pub core_api_version: Version,
    pub backend_api_version: Version,
    pub soc_version: String,
    pub blob_version: Version,
    pub blob_size: u64,
    /// The SoC the binary was prepared for (version 3 only).
    pub soc_model: Option<u32>,
    pub graphs: Vec<GraphInfo>,
}

impl BinaryInfo {
    /// Whether the binary was prepared with HTP weight sharing
    /// ([`ContextOptions::weight_sharing`](crate::ContextOptions)): some graph keeps weights in
    /// the context's shared-weights buffer.
    pub fn uses_shared_weights(&self) -> bool {
        self.graphs
            .iter()
            .any(|g| g.htp.is_some_and(|h| h.shared_weights_size > 0))
    }
}

/// One graph of a context binary.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphInfo {
    pub name: String,
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
    /// The HTP's memory figures for the graph, when the binary carries them (graph info
    /// version 3 with the 2.5x graph blob).
    pub htp: Option<HtpGraphInfo>,
}

/// Memory figures of one graph that the HTP library records in a context binary
/// ([`qnn_sys::htp::GraphBlobInfoV2`]), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HtpGraphInfo {
    pub spill_fill_buffer_size: u64,
    /// Graph inputs and outputs.
    pub io_tensor_size: u64,
    /// Op data such as run lists.
    pub op_data_size: u64,
    /// Static data (weights) the graph does not share.
    pub const_size: u64,
    /// Weights in the context's shared-weights buffer: non-zero exactly when the context was
    /// prepared with weight sharing; every graph of such a context reports the whole buffer.
    pub shared_weights_size: u64,
}

/// Reads the HTP graph blob of a version-3 graph info, if it has the layout the 2.5x libraries
/// write (a V1 blob followed by a V2 one).
///
/// # Safety
/// `g` must come from `systemContextGetBinaryInfo` and its memory must still be valid.
unsafe fn htp_graph_info(g: &qnn_sys::system::GraphInfo) -> Option<HtpGraphInfo> {
    use qnn_sys::htp::{GraphBlobInfoV1, GraphBlobInfoV2, GRAPH_BLOB_INFO_V2_OFFSET};
    if g.version != 3 {
        return None;
    }
    let t = &g.v3;
    let need = GRAPH_BLOB_INFO_V2_OFFSET + std::mem::size_of::<GraphBlobInfoV2>();
    if t.graph_blob_info.is_null() || (t.graph_blob_info_size as usize) < need {
        return None;
    }
    let base = t.graph_blob_info.cast::<u8>();
    // SAFETY: the blob is `graph_blob_info_size` bytes (checked above); unaligned reads.
    let (v1, v2) = unsafe {
        (
            base.cast::<GraphBlobInfoV1>().read_unaligned(),
            base.add(GRAPH_BLOB_INFO_V2_OFFSET)
                .cast::<GraphBlobInfoV2>()
                .read_unaligned(),
        )
    };
    (v1.version == 1 && v2.version == 2).then_some(HtpGraphInfo {
        spill_fill_buffer_size: v1.spill_fill_buffer_size,
        io_tensor_size: v2.io_tensor_size,
        op_data_size: v2.op_data_size,
        const_size: v2.const_size,
        shared_weights_size: v2.shared_weights_size,
    })
}

fn system_error(call: &'static str, rc: u64, context: String) -> Error {
    let code = (rc & 0xFFFF) as u32;
    ApiError {
        call,
        code,
        handle: rc,
        name: qnn_sys::errors::name(code),
        family: qnn_sys::errors::family(code),
        // The backend's errorGetMessage does not know system codes; the name says enough.
        message: None,
        context: Some(context),
        log: crate::log::take_recent(),
    }
    .into()
}

/// Reads a context binary's description. Checks the bytes without creating a context: a
/// truncated binary gives 30010 (malformed), garbage 30001, never a crash.
pub fn binary_info(system: &SystemLibrary, bytes: &[u8]) -> Result<BinaryInfo> {
    let f = system.functions();
    let missing = |call: &'static str| Error::NotProvided {
        call,
        library: system.path().display().to_string(),
    };
    let create = f
        .systemContextCreate
        .ok_or_else(|| missing("systemContextCreate"))?;
    let get = f
        .systemContextGetBinaryInfo
        .ok_or_else(|| missing("systemContextGetBinaryInfo"))?;
    let free = f
        .systemContextFree
        .ok_or_else(|| missing("systemContextFree"))?;
    if bytes.is_empty() {
        return Err(Error::InvalidArgument("context binary is empty".into()));
    }
    let mut sys: Handle = std::ptr::null_mut();
    crate::log::clear_recent();
    // SAFETY: valid out-pointer.
    let rc = unsafe { create(&mut sys) };
    if rc != 0 {
        return Err(system_error(
            "systemContextCreate",
            rc,
            "reading a context binary".into(),
        ));
    }
    let mut info: *const qnn_sys::system::BinaryInfo = std::ptr::null();
    let mut info_size: u64 = 0;
    // SAFETY: the library only reads the buffer although the parameter is not const (docs/qnn-notes.md
    // gotcha 12); the info it returns stays valid until systemContextFree below.
    let rc = unsafe {
        get(
            sys,
            bytes.as_ptr() as *mut _,
            bytes.len() as u64,
            &mut info,
            &mut info_size,
        )
    };
    let result = if rc != 0 {
        Err(system_error(
            "systemContextGetBinaryInfo",
            rc,
            format!(
                "a {}-byte context binary (truncated or not a QNN context binary?)",
                bytes.len()
            ),
        ))
    } else if info.is_null() {
        Err(Error::InvalidArgument(
            "QnnSystem returned no binary info".into(),
        ))
    } else {
        // SAFETY: valid until systemContextFree; everything is copied out.
        unsafe { copy_info(&*info) }
    };
    // SAFETY: frees the system context created above, once.
    unsafe { free(sys) };
    result
}

unsafe fn copy_info(info: &qnn_sys::system::BinaryInfo) -> Result<BinaryInfo> {
    use crate::api::owned_str;
    let (common, graphs_ptr, num_graphs, soc_model) = match info.version {
        1 | 2 => {
            // SAFETY: version says v1/v2 is live.
            let v = unsafe { info.v.v1 };
            (
                (
                    v.backend_id,
                    v.build_id,
                    v.core_api_version,
                    v.backend_api_version,
                    v.soc_version,
                ),
                v.graphs,
                v.num_graphs,
                None,
            )
        }
        3 => {
            // SAFETY: version says v3 is live.
            let v = unsafe { info.v.v3 };
            (
                (
                    v.backend_id,
                    v.build_id,
                    v.core_api_version,
                    v.backend_api_version,
                    v.soc_version,
                ),
                v.graphs,
                v.num_graphs,
                Some(v.soc_model),
            )
        }
        other => {
            return Err(Error::InvalidArgument(format!(
                "context binary info version {other} is newer than this build understands"
            )))
        }
    };
    let (blob_version, blob_size) = match info.version {
        // SAFETY: as above.
        3 => unsafe { (info.v.v3.context_blob_version, info.v.v3.context_blob_size) },
        // SAFETY: as above.
        _ => unsafe { (info.v.v1.context_blob_version, info.v.v1.context_blob_size) },
    };
    let mut graphs = Vec::with_capacity(num_graphs as usize);
    for i in 0..num_graphs as usize {
        // SAFETY: the library returned `num_graphs` graph infos; all versions share the prefix.
        let full = unsafe { &*graphs_ptr.add(i) };
        let g = &full.common;
        let read = |p: *mut qnn_sys::Tensor, n: u32| -> Result<Vec<TensorInfo>> {
            (0..n as usize)
                // SAFETY: `n` tensors of stride 144 (docs/qnn-notes.md §2).
                .map(|k| unsafe { info_from_raw(&*p.add(k)) })
                .collect()
        };
        graphs.push(GraphInfo {
            name: owned_str(g.graph_name),
            inputs: read(g.graph_inputs, g.num_graph_inputs)?,
            outputs: read(g.graph_outputs, g.num_graph_outputs)?,
            // SAFETY: from the same binary info, valid until systemContextFree.
            htp: unsafe { htp_graph_info(full) },
        });
    }
    Ok(BinaryInfo {
        version: info.version,
        backend_id: common.0,
        build_id: owned_str(common.1),
        core_api_version: common.2,
        backend_api_version: common.3,
        soc_version: owned_str(common.4),
        blob_version,
        blob_size,
        soc_model,
        graphs,
    })
}
