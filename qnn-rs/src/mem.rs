//! `QnnMem_register`: shared buffers that a graph could read and write in place instead of the
//! `clientBuf` copy. On a device the fds come from rpcmem (ION) or a dma-heap (DMA-BUF); the
//! x86_64 emulator has neither, and `tests/mem.rs` records what it answers (docs/qnn-notes.md,
//! "Registered shared buffers").

use std::sync::Arc;

use qnn_sys::mem::{
    htp_mem_kind, mem_kind, HtpMemDescriptor, HtpSharedBufferConfig, MemDescriptor, MemDmaBufInfo,
    MemInfo, MemShape,
};
use qnn_sys::Handle;

use crate::api::qnn_call;
use crate::context::{Context, ContextInner};
use crate::error::Result;
use crate::tensor::TensorInfo;

/// Memory to register for one tensor.
#[derive(Debug, Clone, Copy)]
pub enum SharedMemory {
    /// `QNN_MEM_TYPE_ION`: an ION (rpcmem) fd.
    Ion { fd: i32 },
    /// `QNN_MEM_TYPE_DMA_BUF`: a dma-buf fd and the caller's mapping of it.
    DmaBuf {
        fd: i32,
        data: *mut std::ffi::c_void,
    },
    /// `QNN_MEM_TYPE_CUSTOM` with an HTP shared-buffer descriptor: the tensor lives at `offset`
    /// in a buffer of `total_size` bytes behind `fd`.
    HtpSharedBuffer {
        fd: i32,
        offset: u64,
        total_size: u64,
    },
}

/// A registered buffer; deregistered on drop.
pub struct RegisteredMemory {
    ctx: Arc<ContextInner>,
    handle: Handle,
}

impl RegisteredMemory {
    /// The `Qnn_MemHandle_t`, for a tensor's `memHandle`.
    pub fn handle(&self) -> Handle {
        self.handle
    }
}

impl Drop for RegisteredMemory {
    fn drop(&mut self) {
        // SAFETY: a handle `memRegister` returned for this context, which `ctx` keeps alive.
        if let Err(e) = unsafe { qnn_call!(self.ctx.backend.api, memDeRegister(&self.handle, 1)) } {
            tracing::warn!(target: "qnn", "memDeRegister: {e}");
        }
    }
}

impl Context {
    /// `memRegister` of `memory` for a tensor shaped and typed like `tensor`.
    ///
    /// # Safety
    /// The fd (and, for DMA-BUF, the mapping) must stay valid and at least `tensor`'s size until
    /// the returned registration is dropped: the library may map it and, on execute, read and
    /// write it.
    pub unsafe fn register_memory(
        &self,
        memory: SharedMemory,
        tensor: &TensorInfo,
    ) -> Result<RegisteredMemory> {
        let mut dims = tensor.dims.clone();
        let mut htp = HtpMemDescriptor {
            kind: htp_mem_kind::SHARED_BUFFER,
            size: 0,
            shared_buffer: HtpSharedBufferConfig { fd: -1, offset: 0 },
        };
        let (mem_type, info) = match memory {
            SharedMemory::Ion { fd } => (mem_kind::ION, MemInfo { ion_fd: fd }),
            SharedMemory::DmaBuf { fd, data } => (
                mem_kind::DMA_BUF,
                MemInfo {
                    dma_buf: MemDmaBufInfo { fd, data },
                },
            ),
            SharedMemory::HtpSharedBuffer {
                fd,
                offset,
                total_size,
            } => {
                htp.size = total_size;
                htp.shared_buffer = HtpSharedBufferConfig { fd, offset };
                (
                    mem_kind::CUSTOM,
                    MemInfo {
                        custom: (&mut htp as *mut HtpMemDescriptor).cast(),
                    },
                )
            }
        };
        let desc = MemDescriptor {
            shape: MemShape {
                num_dim: dims.len() as u32,
                dim_size: dims.as_mut_ptr(),
                shape_config: std::ptr::null(),
            },
            data_type: tensor.qnn_data_type()?,
            mem_type,
            info,
        };
        let inner = &self.inner;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: live context; the descriptor, its dims and the HTP descriptor outlive the
        // call; the caller vouches for the fd and mapping (see above).
        unsafe {
            qnn_call!(inner.backend.api, memRegister(
                inner.handle,
                (&desc as *const MemDescriptor).cast(),
                1,
                &mut handle
            ); || format!("{memory:?} for tensor {:?}", tensor.name))
        }?;
        Ok(RegisteredMemory {
            ctx: inner.clone(),
            handle,
        })
    }
}
