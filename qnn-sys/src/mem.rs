//! `QnnMem_register` descriptors, declared from the geniex-qairt-plugin header copy
//! (`qnn-api/include/QnnMem.h` and `qnn-api/include/HTP/QnnHtpMem.h`, mirror commit
//! `fb1c582bad66efbfa02dac83f5cc0f31afd26ee1`; see docs/qnn-notes.md). Only what the registration
//! probe uses is declared.

use std::ffi::{c_char, c_void};

/// `Qnn_MemType_t`.
pub mod mem_kind {
    /// `QNN_MEM_TYPE_ION`: an ION fd (Android's rpcmem heap).
    pub const ION: u32 = 1;
    /// `QNN_MEM_TYPE_CUSTOM`: a backend struct, for HTP a `QnnMemHtp_Descriptor_t`.
    pub const CUSTOM: u32 = 2;
    /// `QNN_MEM_TYPE_DMA_BUF`: a dma-buf fd and the caller's mapping of it.
    pub const DMA_BUF: u32 = 3;
}

/// `QnnHtpMem_Type_t`: what a `QnnMemHtp_Descriptor_t` describes.
pub mod htp_mem_kind {
    pub const QURT: u32 = 0;
    pub const SHARED_BUFFER: u32 = 1;
}

/// `Qnn_MemShape_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemShape {
    pub num_dim: u32,
    pub dim_size: *mut u32,
    /// NULL, or a string such as `"DATA_FORMAT_UBWC_NV12"`.
    pub shape_config: *const c_char,
}

/// `Qnn_MemDmaBufInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemDmaBufInfo {
    pub fd: i32,
    /// The caller's `mmap` of `fd`.
    pub data: *mut c_void,
}

/// The union of `Qnn_MemDescriptor_t`: `ionInfo` (just the fd), `customInfo`, `dmaBufInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union MemInfo {
    pub ion_fd: i32,
    pub custom: *mut c_void,
    pub dma_buf: MemDmaBufInfo,
}

/// `Qnn_MemDescriptor_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemDescriptor {
    pub shape: MemShape,
    /// `Qnn_DataType_t`.
    pub data_type: u32,
    /// A [`mem_kind`] value.
    pub mem_type: u32,
    pub info: MemInfo,
}

/// `QnnHtpMem_SharedBufferConfig_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HtpSharedBufferConfig {
    pub fd: i32,
    /// Where this tensor starts in the shared buffer.
    pub offset: u64,
}

/// `QnnMemHtp_Descriptor_t`: what `customInfo` points at for the HTP backend.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HtpMemDescriptor {
    /// An [`htp_mem_kind`] value.
    pub kind: u32,
    /// The whole buffer's size (for QURT, the tensor's).
    pub size: u64,
    /// The union's `sharedBufferConfig` member (the other members are no larger).
    pub shared_buffer: HtpSharedBufferConfig,
}

// Offsets from the header on LP64, checked at compile time: the dma-buf info's pointer makes the
// union 16 bytes, 8-aligned, after two u32 enums.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<MemShape>() == 24);
    assert!(offset_of!(MemShape, dim_size) == 8);
    assert!(offset_of!(MemShape, shape_config) == 16);
    assert!(size_of::<MemDmaBufInfo>() == 16);
    assert!(offset_of!(MemDmaBufInfo, data) == 8);
    assert!(size_of::<MemInfo>() == 16);
    assert!(offset_of!(MemDescriptor, data_type) == 24);
    assert!(offset_of!(MemDescriptor, mem_type) == 28);
    assert!(offset_of!(MemDescriptor, info) == 32);
    assert!(size_of::<MemDescriptor>() == 48);
    assert!(offset_of!(HtpSharedBufferConfig, offset) == 8);
    assert!(offset_of!(HtpMemDescriptor, size) == 8);
    assert!(offset_of!(HtpMemDescriptor, shared_buffer) == 16);
    assert!(size_of::<HtpMemDescriptor>() == 32);
};
