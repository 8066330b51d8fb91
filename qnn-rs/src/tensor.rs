//! Tensor descriptions, data types and host buffers.

use std::ffi::CString;

use half::f16;
use qnn_sys::consts::{data_type as dt, tensor_type as tt};

use crate::error::{Error, Result};

pub use qnnx_types::DType;

/// The `Qnn_DataType_t` of a tensor of element type `dtype`: the fixed-point type of that width
/// and signedness when `quantized` (`UFIXED_POINT_8` for a quantized u8), the plain type
/// otherwise. `None` for combinations QNN has no type for (quantized floats or bools, bf16).
pub fn qnn_data_type(dtype: DType, quantized: bool) -> Option<u32> {
    Some(match (dtype, quantized) {
        (DType::F32, false) => dt::FLOAT_32,
        (DType::F16, false) => dt::FLOAT_16,
        (DType::F64, false) => dt::FLOAT_64,
        (DType::I8, false) => dt::INT_8,
        (DType::U8, false) => dt::UINT_8,
        (DType::I16, false) => dt::INT_16,
        (DType::U16, false) => dt::UINT_16,
        (DType::I32, false) => dt::INT_32,
        (DType::U32, false) => dt::UINT_32,
        (DType::I64, false) => dt::INT_64,
        (DType::U64, false) => dt::UINT_64,
        (DType::Bool, false) => dt::BOOL_8,
        (DType::I8, true) => dt::SFIXED_POINT_8,
        (DType::U8, true) => dt::UFIXED_POINT_8,
        (DType::I16, true) => dt::SFIXED_POINT_16,
        (DType::U16, true) => dt::UFIXED_POINT_16,
        (DType::I32, true) => dt::SFIXED_POINT_32,
        (DType::U32, true) => dt::UFIXED_POINT_32,
        // 4-bit values are 8-bit fixed point whose encoding says 4 bits (`BW_*` encodings, one
        // sign-extended value per byte): the form QNN's HTP takes 4-bit weights in; it refuses
        // `SFIXED_POINT_4` ("tensor datatype 772 not supported"; docs/qnn-notes.md, "4-bit
        // weights").
        (DType::I4, true) => dt::SFIXED_POINT_8,
        (DType::U4, true) => dt::UFIXED_POINT_8,
        (DType::I4 | DType::U4, false) => return None,
        (DType::BF16, _)
        | (DType::F32 | DType::F16 | DType::F64 | DType::Bool, true)
        | (DType::I64 | DType::U64, true) => return None,
    })
}

/// The element type of a raw `Qnn_DataType_t` and whether it is fixed-point; `None` for codes
/// this crate does not know (packed 4-bit, strings). 8-bit fixed point reads as 8 bits: a 4-bit
/// encoding on it is read by [`info_from_raw`].
pub fn from_qnn_data_type(raw: u32) -> Option<(DType, bool)> {
    DType::ALL
        .into_iter()
        .flat_map(|d| [(d, false), (d, true)])
        .find(|&(d, q)| qnn_data_type(d, q) == Some(raw))
}

/// Rust element types of host buffers.
pub trait Element: Copy + 'static {
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => { $(impl Element for $t { const DTYPE: DType = DType::$d; })* };
}
element!(f32 => F32, f16 => F16, i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32, i64 => I64, u64 => U64);

/// How a graph tensor is used (`Qnn_TensorType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    /// Graph input written by the application (`APP_WRITE`).
    Input,
    /// Graph output read by the application (`APP_READ`).
    Output,
    /// Intermediate tensor owned by the graph (`NATIVE`).
    Native,
    /// Constant data copied into the graph at creation (`STATIC`).
    Static,
    /// An optional op input left out (`NULL`): no data, data type UNDEFINED, dims `[0]`.
    Null,
}

impl TensorKind {
    pub(crate) fn raw(self) -> u32 {
        match self {
            TensorKind::Input => tt::APP_WRITE,
            TensorKind::Output => tt::APP_READ,
            TensorKind::Native => tt::NATIVE,
            TensorKind::Static => tt::STATIC,
            TensorKind::Null => tt::NULL,
        }
    }

    pub(crate) fn from_raw(raw: u32) -> Option<TensorKind> {
        match raw {
            tt::APP_WRITE => Some(TensorKind::Input),
            tt::APP_READ => Some(TensorKind::Output),
            tt::NATIVE => Some(TensorKind::Native),
            tt::STATIC => Some(TensorKind::Static),
            tt::NULL => Some(TensorKind::Null),
            _ => None,
        }
    }
}

/// Quantization of a fixed-point tensor: `real = scale * (q + offset)` (QNN's sign convention:
/// `offset` is the negated ONNX zero point).
#[derive(Debug, Clone, PartialEq)]
pub enum Quantization {
    /// Float or plain integer tensor.
    None,
    /// One scale and offset for the whole tensor.
    ScaleOffset { scale: f32, offset: i32 },
    /// One scale and offset per slice along `axis`.
    PerAxis {
        axis: i32,
        scale_offsets: Vec<(f32, i32)>,
    },
    /// QNN's block-wise expansion (`BLOCKWISE_EXPANSION`, "LPBQ", HTP v69+): slice `c` of `axis`
    /// has the scale and offset `scale_offsets[c]`, and each of its `blocks` blocks an unsigned
    /// integer `block_scales[c * blocks + b]` of `block_scale_bits` bits that scale is
    /// multiplied by. The blocks split the dimension the weight is reduced over; which one is
    /// the op's (FullyConnected: in `[out, in]` the `in` dim).
    BlockwiseExpansion {
        axis: i32,
        scale_offsets: Vec<(f32, i32)>,
        blocks: u32,
        block_scale_bits: u32,
        block_scales: Vec<u8>,
    },
    /// A fixed-point tensor read from a context binary whose encoding this crate does not parse
    /// (`Qnn_QuantizationEncoding_t`, such as block encodings): its data is still fixed-point.
    Unparsed { encoding: u32 },
}

impl Quantization {
    /// Whether the tensor is fixed-point (has an encoding).
    pub fn is_quantized(&self) -> bool {
        !matches!(self, Quantization::None)
    }
}

/// A tensor of a graph, as created or as read back from a context binary.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The id QNN assigned; execution binds buffers by id.
    pub id: u32,
    pub name: String,
    pub kind: TensorKind,
    pub dtype: DType,
    pub dims: Vec<u32>,
    pub quantization: Quantization,
}

impl TensorInfo {
    /// Number of elements.
    pub fn num_elements(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }

    /// Size of the tensor's data in bytes.
    pub fn num_bytes(&self) -> usize {
        self.num_elements() * self.dtype.size()
    }

    /// Its `Qnn_DataType_t` ([`qnn_data_type`]).
    pub fn qnn_data_type(&self) -> Result<u32> {
        qnn_data_type(self.dtype, self.quantization.is_quantized()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor {:?}: QNN has no {}{} type",
                self.name,
                if self.quantization.is_quantized() {
                    "quantized "
                } else {
                    ""
                },
                self.dtype
            ))
        })
    }
}

/// An owned raw `Qnn_Tensor_t` with the memory its pointers refer to. The raw struct is only
/// handed out while `self` is borrowed.
pub(crate) struct RawTensor {
    raw: qnn_sys::Tensor,
    _name: CString,
    _dims: Box<[u32]>,
    _scale_offsets: Box<[qnn_sys::ScaleOffset]>,
    _bw: BwLists,
    _blockwise: Option<Blockwise>,
}

/// The memory a `BLOCKWISE_EXPANSION` encoding points into.
pub(crate) struct Blockwise {
    raw: Box<qnn_sys::BlockwiseExpansion>,
    _scale_offsets: Box<[qnn_sys::ScaleOffset]>,
    _block_scales: Box<[u8]>,
}

impl Blockwise {
    fn new(
        axis: i32,
        scale_offsets: &[(f32, i32)],
        blocks: u32,
        bits: u32,
        block_scales: &[u8],
    ) -> Result<Blockwise> {
        if blocks == 0 || block_scales.len() != scale_offsets.len() * blocks as usize {
            return Err(Error::InvalidArgument(format!(
                "blockwise expansion: {} block scales for {} channels of {blocks} blocks",
                block_scales.len(),
                scale_offsets.len()
            )));
        }
        let mut so: Box<[qnn_sys::ScaleOffset]> = scale_offsets
            .iter()
            .map(|&(scale, offset)| qnn_sys::ScaleOffset { scale, offset })
            .collect();
        let mut bs: Box<[u8]> = block_scales.into();
        // The boxed slices do not move when `Blockwise` moves: the pointers stay valid.
        let raw = Box::new(qnn_sys::BlockwiseExpansion {
            axis,
            scale_offsets: so.as_mut_ptr(),
            num_blocks_per_axis: blocks,
            block_scale_bitwidth: bits,
            block_scale_storage_type: qnn_sys::consts::BLOCKWISE_EXPANSION_STORAGE_8,
            blocks_scale: bs.as_mut_ptr().cast(),
        });
        Ok(Blockwise {
            raw,
            _scale_offsets: so,
            _block_scales: bs,
        })
    }
}

/// The separate scale and offset arrays of a `BW_AXIS_SCALE_OFFSET` encoding.
#[derive(Default)]
struct BwLists {
    scales: Box<[f32]>,
    offsets: Box<[i32]>,
}

impl RawTensor {
    pub(crate) fn new(info: &TensorInfo, data: Option<&[u8]>) -> Result<RawTensor> {
        let name = CString::new(info.name.as_str()).map_err(|_| {
            Error::InvalidArgument(format!("tensor name {:?} contains NUL", info.name))
        })?;
        let mut dims: Box<[u32]> = info.dims.clone().into_boxed_slice();
        let data_type = match info.kind {
            TensorKind::Null => qnn_sys::consts::data_type::UNDEFINED,
            _ => info.qnn_data_type()?,
        };
        let (mut quantize_params, mut scale_offsets) = quantize_params(&info.quantization)?;
        let mut bw = BwLists::default();
        let mut blockwise = None;
        if let Quantization::BlockwiseExpansion {
            axis,
            scale_offsets: so,
            blocks,
            block_scale_bits,
            block_scales,
        } = &info.quantization
        {
            // 4-bit weights too: their width is what the block scales expand (8 - 4 bits), so
            // the encoding has no `BW_` form.
            let mut b = Blockwise::new(*axis, so, *blocks, *block_scale_bits, block_scales)?;
            quantize_params.encoding = qnn_sys::QuantizeEncoding {
                blockwise_expansion: &mut *b.raw,
            };
            blockwise = Some(b);
        } else if let Some(bits) = sub_byte_bits(info.dtype) {
            bw = to_bitwidth(&mut quantize_params, &scale_offsets, bits);
            scale_offsets = Box::new([]);
        }
        let mut raw = qnn_sys::TensorV2 {
            id: info.id,
            name: name.as_ptr(),
            tensor_type: info.kind.raw(),
            data_format: qnn_sys::consts::DATA_FORMAT_DENSE,
            data_type,
            quantize_params,
            rank: dims.len() as u32,
            dimensions: dims.as_mut_ptr(),
            mem_type: qnn_sys::consts::mem_type::RAW,
            memory: qnn_sys::TensorMemory {
                client_buf: qnn_sys::ClientBuffer::NULL,
            },
            is_dynamic_dimensions: std::ptr::null_mut(),
            sparse_params: Default::default(),
            is_produced: 0,
        };
        if let Some(data) = data {
            let size = u32::try_from(data.len()).map_err(|_| {
                Error::InvalidArgument(format!(
                    "tensor {:?}: {} bytes exceed 4 GiB",
                    info.name,
                    data.len()
                ))
            })?;
            // QNN copies STATIC data during tensorCreateGraphTensor and never writes through this
            // pointer, so casting away const is sound.
            raw.memory.client_buf = qnn_sys::ClientBuffer {
                data: data.as_ptr() as *mut _,
                data_size: size,
            };
        }
        match raw.quantize_params.quantization_encoding {
            qnn_sys::consts::QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET => {
                // Writing, not reading, a union field; the pointer targets the boxed slice owned
                // by `self`, which does not move when `self` moves.
                raw.quantize_params.encoding.axis_scale_offset.scale_offset =
                    scale_offsets.as_mut_ptr();
            }
            qnn_sys::consts::QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET => {
                // As above; the tag says the bw_axis member is the live one (`to_bitwidth`).
                raw.quantize_params.encoding.bw_axis_scale_offset.scales = bw.scales.as_mut_ptr();
                raw.quantize_params.encoding.bw_axis_scale_offset.offsets = bw.offsets.as_mut_ptr();
            }
            _ => {}
        }
        Ok(RawTensor {
            raw: qnn_sys::Tensor {
                version: qnn_sys::consts::TENSOR_VERSION_2,
                v: qnn_sys::TensorVersions { v2: raw },
            },
            _name: name,
            _dims: dims,
            _scale_offsets: scale_offsets,
            _bw: bw,
            _blockwise: blockwise,
        })
    }

    pub(crate) fn raw(&self) -> &qnn_sys::Tensor {
        &self.raw
    }

    /// The memory a block-wise encoding points into, which must outlive this descriptor (see
    /// `GraphBuilder`); the descriptor must not be used after.
    pub(crate) fn take_blockwise(&mut self) -> Option<Blockwise> {
        self._blockwise.take()
    }

    pub(crate) fn raw_mut(&mut self) -> &mut qnn_sys::Tensor {
        &mut self.raw
    }
}

/// The bit width of a type narrower than its byte.
fn sub_byte_bits(dtype: DType) -> Option<u32> {
    dtype.is_sub_byte().then_some(4)
}

/// `params` (a `SCALE_OFFSET` or `AXIS_SCALE_OFFSET` encoding, its list in `list`) rewritten as
/// the `BW_` encoding of `bits`-bit values; the arrays a per-axis one points into are returned
/// (the caller sets the pointers once the arrays are where they stay).
fn to_bitwidth(
    params: &mut qnn_sys::QuantizeParams,
    list: &[qnn_sys::ScaleOffset],
    bits: u32,
) -> BwLists {
    use qnn_sys::consts::*;
    match params.quantization_encoding {
        QUANTIZATION_ENCODING_SCALE_OFFSET => {
            // SAFETY: the tag says the scale_offset member is live.
            let so = unsafe { params.encoding.scale_offset };
            params.quantization_encoding = QUANTIZATION_ENCODING_BW_SCALE_OFFSET;
            params.encoding = qnn_sys::QuantizeEncoding {
                bw_scale_offset: qnn_sys::BwScaleOffset {
                    bitwidth: bits,
                    scale: so.scale,
                    offset: so.offset,
                },
            };
            BwLists::default()
        }
        QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET => {
            // SAFETY: as above, the axis member.
            let axis = unsafe { params.encoding.axis_scale_offset.axis };
            params.quantization_encoding = QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET;
            params.encoding = qnn_sys::QuantizeEncoding {
                bw_axis_scale_offset: qnn_sys::BwAxisScaleOffset {
                    bitwidth: bits,
                    axis,
                    num_elements: list.len() as u32,
                    scales: std::ptr::null_mut(),
                    offsets: std::ptr::null_mut(),
                },
            };
            BwLists {
                scales: list.iter().map(|so| so.scale).collect(),
                offsets: list.iter().map(|so| so.offset).collect(),
            }
        }
        _ => BwLists::default(),
    }
}

fn quantize_params(
    q: &Quantization,
) -> Result<(qnn_sys::QuantizeParams, Box<[qnn_sys::ScaleOffset]>)> {
    use qnn_sys::consts::*;
    match q {
        Quantization::None => Ok((qnn_sys::QuantizeParams::UNDEFINED, Box::new([]))),
        Quantization::ScaleOffset { scale, offset } => Ok((
            qnn_sys::QuantizeParams {
                encoding_definition: DEFINITION_DEFINED,
                quantization_encoding: QUANTIZATION_ENCODING_SCALE_OFFSET,
                encoding: qnn_sys::QuantizeEncoding {
                    scale_offset: qnn_sys::ScaleOffset {
                        scale: *scale,
                        offset: *offset,
                    },
                },
            },
            Box::new([]),
        )),
        Quantization::PerAxis {
            axis,
            scale_offsets,
        } => {
            let list: Box<[qnn_sys::ScaleOffset]> = scale_offsets
                .iter()
                .map(|&(scale, offset)| qnn_sys::ScaleOffset { scale, offset })
                .collect();
            Ok((
                qnn_sys::QuantizeParams {
                    encoding_definition: DEFINITION_DEFINED,
                    quantization_encoding: QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET,
                    encoding: qnn_sys::QuantizeEncoding {
                        axis_scale_offset: qnn_sys::AxisScaleOffset {
                            axis: *axis,
                            num_scale_offsets: list.len() as u32,
                            scale_offset: std::ptr::null_mut(),
                        },
                    },
                },
                list,
            ))
        }
        Quantization::BlockwiseExpansion { .. } => Ok((
            qnn_sys::QuantizeParams {
                encoding_definition: DEFINITION_DEFINED,
                quantization_encoding: QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION,
                // The pointer is set by `RawTensor::new`, which owns what it points at.
                encoding: qnn_sys::QuantizeEncoding {
                    blockwise_expansion: std::ptr::null_mut(),
                },
            },
            Box::new([]),
        )),
        Quantization::Unparsed { encoding } => Err(Error::InvalidArgument(format!(
            "quantization encoding {encoding} cannot be built by this crate"
        ))),
    }
}

/// Reads a tensor description returned by QNN (binary info). Works for v1 and v2 tensors: the
/// fields read are the shared prefix.
///
/// # Safety
/// `t` must point at a valid `Qnn_Tensor_t` whose pointers are valid.
pub(crate) unsafe fn info_from_raw(t: &qnn_sys::Tensor) -> Result<TensorInfo> {
    // SAFETY: v1 is a prefix of v2, so reading v1 is valid for both versions.
    let v = unsafe { t.v.v1 };
    let name = crate::api::owned_str(v.name);
    let (dtype, fixed_point) = from_qnn_data_type(v.data_type).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "tensor {name:?} has unsupported data type {:#x}",
            v.data_type
        ))
    })?;
    let dims = if v.dimensions.is_null() || v.rank == 0 {
        Vec::new()
    } else {
        // SAFETY: QNN gives `rank` dimensions.
        unsafe { std::slice::from_raw_parts(v.dimensions, v.rank as usize) }.to_vec()
    };
    let q = v.quantize_params;
    let mut bits = 0;
    let quantization = match q.quantization_encoding {
        _ if !fixed_point => Quantization::None,
        qnn_sys::consts::QUANTIZATION_ENCODING_SCALE_OFFSET => {
            // SAFETY: the encoding tag says which union member is live.
            let so = unsafe { q.encoding.scale_offset };
            Quantization::ScaleOffset {
                scale: so.scale,
                offset: so.offset,
            }
        }
        qnn_sys::consts::QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET => {
            // SAFETY: as above.
            let a = unsafe { q.encoding.axis_scale_offset };
            let list = if a.scale_offset.is_null() {
                &[][..]
            } else {
                // SAFETY: QNN gives `num_scale_offsets` entries.
                unsafe { std::slice::from_raw_parts(a.scale_offset, a.num_scale_offsets as usize) }
            };
            Quantization::PerAxis {
                axis: a.axis,
                scale_offsets: list.iter().map(|so| (so.scale, so.offset)).collect(),
            }
        }
        qnn_sys::consts::QUANTIZATION_ENCODING_BW_SCALE_OFFSET => {
            // SAFETY: as above.
            let so = unsafe { q.encoding.bw_scale_offset };
            bits = so.bitwidth;
            Quantization::ScaleOffset {
                scale: so.scale,
                offset: so.offset,
            }
        }
        qnn_sys::consts::QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET => {
            // SAFETY: as above.
            let a = unsafe { q.encoding.bw_axis_scale_offset };
            bits = a.bitwidth;
            let n = a.num_elements as usize;
            let scale_offsets = if a.scales.is_null() || a.offsets.is_null() {
                Vec::new()
            } else {
                // SAFETY: QNN gives `num_elements` scales and offsets.
                let (s, o) = unsafe {
                    (
                        std::slice::from_raw_parts(a.scales, n),
                        std::slice::from_raw_parts(a.offsets, n),
                    )
                };
                s.iter().copied().zip(o.iter().copied()).collect()
            };
            Quantization::PerAxis {
                axis: a.axis,
                scale_offsets,
            }
        }
        qnn_sys::consts::QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION => {
            // SAFETY: as above; QNN gives a pointer to the struct, or NULL.
            match unsafe { q.encoding.blockwise_expansion.as_ref() } {
                Some(b)
                    if b.block_scale_storage_type
                        == qnn_sys::consts::BLOCKWISE_EXPANSION_STORAGE_8
                        && !b.scale_offsets.is_null()
                        && !b.blocks_scale.is_null()
                        && b.axis >= 0
                        && (b.axis as usize) < dims.len() =>
                {
                    let c = dims[b.axis as usize] as usize;
                    let n = c * b.num_blocks_per_axis as usize;
                    // SAFETY: QNN gives axis-size scale offsets and axis-size x blocks scales.
                    let (so, bs) = unsafe {
                        (
                            std::slice::from_raw_parts(b.scale_offsets, c),
                            std::slice::from_raw_parts(b.blocks_scale.cast::<u8>(), n),
                        )
                    };
                    Quantization::BlockwiseExpansion {
                        axis: b.axis,
                        scale_offsets: so.iter().map(|so| (so.scale, so.offset)).collect(),
                        blocks: b.num_blocks_per_axis,
                        block_scale_bits: b.block_scale_bitwidth,
                        block_scales: bs.to_vec(),
                    }
                }
                _ => Quantization::Unparsed {
                    encoding: q.quantization_encoding,
                },
            }
        }
        encoding => Quantization::Unparsed { encoding },
    };
    let dtype = match (dtype, bits) {
        (DType::I8, 4) => DType::I4,
        (DType::U8, 4) => DType::U4,
        _ => dtype,
    };
    Ok(TensorInfo {
        id: v.id,
        name,
        kind: TensorKind::from_raw(v.tensor_type).unwrap_or(TensorKind::Native),
        dtype,
        dims,
        quantization,
    })
}

/// A host buffer read by `Graph::execute`.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub(crate) dtype: DType,
    pub(crate) bytes: &'a [u8],
}

/// A host buffer written by `Graph::execute`.
#[derive(Debug)]
pub struct Output<'a> {
    pub(crate) dtype: DType,
    pub(crate) bytes: &'a mut [u8],
}

fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: every `Element` is a plain number type without padding or invalid bit patterns.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast(), std::mem::size_of_val(data)) }
}

fn as_bytes_mut<T: Element>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as above; any byte pattern QNN writes is a valid value of these types.
    unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr().cast(), std::mem::size_of_val(data)) }
}

impl<'a> Input<'a> {
    /// A typed slice.
    pub fn new<T: Element>(data: &'a [T]) -> Input<'a> {
        Input {
            dtype: T::DTYPE,
            bytes: as_bytes(data),
        }
    }
    /// Raw bytes of a given type (bool tensors: one byte per element, 0 or 1).
    pub fn from_bytes(dtype: DType, bytes: &'a [u8]) -> Input<'a> {
        Input { dtype, bytes }
    }
}

impl<'a> Output<'a> {
    /// A typed slice.
    pub fn new<T: Element>(data: &'a mut [T]) -> Output<'a> {
        Output {
            dtype: T::DTYPE,
            bytes: as_bytes_mut(data),
        }
    }
    /// Raw bytes of a given type.
    pub fn from_bytes(dtype: DType, bytes: &'a mut [u8]) -> Output<'a> {
        Output { dtype, bytes }
    }
}

impl<'a, T: Element> From<&'a [T]> for Input<'a> {
    fn from(d: &'a [T]) -> Self {
        Input::new(d)
    }
}

impl<'a, T: Element> From<&'a Vec<T>> for Input<'a> {
    fn from(d: &'a Vec<T>) -> Self {
        Input::new(d)
    }
}

impl<'a, T: Element> From<&'a mut [T]> for Output<'a> {
    fn from(d: &'a mut [T]) -> Self {
        Output::new(d)
    }
}

impl<'a, T: Element> From<&'a mut Vec<T>> for Output<'a> {
    fn from(d: &'a mut Vec<T>) -> Self {
        Output::new(d)
    }
}

/// The index of the first NaN element of a float buffer (`None` for other types).
///
/// The HTP computes float graphs in saturating fp16 arithmetic: a NaN comes back as a large
/// finite number (the emulator's Relu returned 65536), so callers that promise eager semantics
/// refuse NaN inputs rather than return a silently different answer. Infinities are not
/// refused: they saturate to the fp16 range like any large value, which is what masks with
/// -inf rely on.
pub fn first_nan(dtype: DType, bytes: &[u8]) -> Option<usize> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .position(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_nan()),
        // An f16 NaN has all exponent bits set and a non-zero mantissa.
        DType::F16 => bytes.chunks_exact(2).position(|c| {
            let v = u16::from_le_bytes([c[0], c[1]]);
            v & 0x7C00 == 0x7C00 && v & 0x03FF != 0
        }),
        DType::BF16 => bytes.chunks_exact(2).position(|c| {
            let v = u16::from_le_bytes([c[0], c[1]]);
            v & 0x7F80 == 0x7F80 && v & 0x007F != 0
        }),
        DType::F64 => bytes
            .chunks_exact(8)
            .position(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")).is_nan()),
        DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::Bool
        | DType::I4
        | DType::U4 => None,
    }
}

/// Checks one buffer against its tensor: same dtype (QNN does not check it) and exactly the
/// tensor's byte size (QNN neither checks nor honours `dataSize`, and writes past short output
/// buffers: docs/qnn-notes.md gotcha 8).
pub(crate) fn check_buffer(info: &TensorInfo, dtype: DType, len: usize, what: &str) -> Result<()> {
    if dtype != info.dtype {
        return Err(Error::InvalidArgument(format!(
            "{what} {:?}: buffer is {dtype} but the tensor is {}",
            info.name, info.dtype
        )));
    }
    let want = info.num_bytes();
    if len != want {
        return Err(Error::InvalidArgument(format!(
            "{what} {:?}: buffer has {len} bytes but the tensor {} {:?} needs {want}",
            info.name, info.dtype, info.dims
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(dtype: DType, dims: &[u32]) -> TensorInfo {
        TensorInfo {
            id: 1,
            name: "x".into(),
            kind: TensorKind::Input,
            dtype,
            dims: dims.to_vec(),
            quantization: Quantization::None,
        }
    }

    #[test]
    fn raw_codes_round_trip() {
        for (d, q) in [
            (DType::F32, false),
            (DType::F16, false),
            (DType::Bool, false),
            (DType::U8, true),
            (DType::I32, true),
            (DType::I64, false),
        ] {
            let raw = qnn_data_type(d, q).unwrap();
            assert_eq!(from_qnn_data_type(raw), Some((d, q)));
        }
        assert_eq!(qnn_data_type(DType::F16, false), Some(0x0216));
        assert_eq!(qnn_data_type(DType::U8, true), Some(0x0408));
        assert_eq!(qnn_data_type(DType::F32, true), None);
        assert_eq!(qnn_data_type(DType::BF16, false), None);
        assert_eq!(from_qnn_data_type(0x1234), None);
    }

    #[test]
    fn null_tensors_are_type_null_with_undefined_data() {
        assert_eq!(TensorKind::Null.raw(), qnn_sys::consts::tensor_type::NULL);
        assert_eq!(TensorKind::from_raw(5), Some(TensorKind::Null));
        let mut t = info(DType::F32, &[0]);
        t.kind = TensorKind::Null;
        let raw = RawTensor::new(&t, None).unwrap();
        // SAFETY: `RawTensor::new` writes the v2 member.
        let v2 = unsafe { &raw.raw().v.v2 };
        assert_eq!(v2.tensor_type, 5);
        assert_eq!(v2.data_type, qnn_sys::consts::data_type::UNDEFINED);
        assert_eq!(v2.rank, 1);
    }

    #[test]
    fn buffer_size_and_dtype_are_checked() {
        let t = info(DType::F32, &[1, 4, 4, 8]);
        assert!(check_buffer(&t, DType::F32, 512, "input").is_ok());
        let short = check_buffer(&t, DType::F32, 256, "input")
            .unwrap_err()
            .to_string();
        assert!(
            short.contains("256 bytes") && short.contains("needs 512"),
            "{short}"
        );
        assert!(check_buffer(&t, DType::F16, 512, "input").is_err());
        assert!(check_buffer(&t, DType::F32, 516, "input").is_err());
    }

    #[test]
    fn nan_elements_are_found_and_infinities_are_not() {
        let f: Vec<u8> = [1.0f32, f32::INFINITY, f32::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(first_nan(DType::F32, &f), Some(2));
        let h: Vec<u8> = [f16::ONE, f16::NEG_INFINITY, f16::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(first_nan(DType::F16, &h), Some(2));
        let ok: Vec<u8> = [f16::MAX, f16::INFINITY]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(first_nan(DType::F16, &ok), None);
        assert_eq!(first_nan(DType::I32, &[0xFF; 8]), None);
    }

    #[test]
    fn raw_tensor_points_at_owned_memory() {
        let mut t = info(DType::F32, &[2, 3]);
        t.kind = TensorKind::Static;
        let data = [0u8; 24];
        let raw = RawTensor::new(&t, Some(&data)).unwrap();
        // SAFETY: we built v2.
        let v2 = unsafe { raw.raw().v.v2 };
        assert_eq!(v2.rank, 2);
        // SAFETY: dims points into the RawTensor's boxed slice.
        assert_eq!(
            unsafe { std::slice::from_raw_parts(v2.dimensions, 2) },
            &[2, 3]
        );
        // SAFETY: RAW memory type: client_buf is live.
        assert_eq!(unsafe { v2.memory.client_buf.data_size }, 24);
        assert_eq!(v2.tensor_type, qnn_sys::consts::tensor_type::STATIC);
    }

    #[test]
    fn quantized_tensors_carry_their_encoding() {
        let mut t = info(DType::U8, &[4]);
        t.quantization = Quantization::PerAxis {
            axis: 0,
            scale_offsets: vec![(0.5, -3); 4],
        };
        let raw = RawTensor::new(&t, None).unwrap();
        // SAFETY: we built v2.
        assert_eq!(
            unsafe { raw.raw().v.v2.data_type },
            qnn_sys::consts::data_type::UFIXED_POINT_8
        );
        // SAFETY: per-axis encoding was written above.
        let enc = unsafe { raw.raw().v.v2.quantize_params.encoding.axis_scale_offset };
        assert_eq!(enc.num_scale_offsets, 4);
        // SAFETY: points into the owned list.
        assert_eq!(unsafe { (*enc.scale_offset).offset }, -3);
    }
}
