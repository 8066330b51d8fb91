//! Element types.

use std::fmt;

/// The element type of a tensor: of a model's values (wider than QNN graphs hold: the lowering
/// narrows i64 and f64), of a QNN graph tensor, of host buffers. A quantized tensor has an
/// integer element type and, beside it, its encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    /// One byte per element, 0 or 1.
    Bool,
    /// 4-bit integers (ONNX INT4 / UINT4), held one per byte (an i4 sign-extended): the storage
    /// of 4-bit quantized weights, which QNN takes as 8-bit fixed point with a 4-bit encoding.
    /// Only constants behind a DequantizeLinear have them; no graph input or output does.
    I4,
    U4,
}

impl DType {
    /// Every element type, in declaration order.
    pub const ALL: [DType; 15] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
        DType::I4,
        DType::U4,
    ];

    /// The one spelling of this type (`f32`, `i64`, `bool`): op tables, cache metadata, the
    /// command line, the Python module and messages use it.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::I4 => "i4",
            DType::U4 => "u4",
        }
    }

    /// The type [`DType::name`] spells.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element (in memory: 4-bit types take a byte each; ONNX files pack them two to
    /// a byte).
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool | DType::I4 | DType::U4 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// The 4-bit types, held a value per byte, which ONNX files pack two to a byte and QNN takes
    /// as 8-bit fixed point with a 4-bit encoding.
    pub fn is_sub_byte(self) -> bool {
        matches!(self, DType::I4 | DType::U4)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// Signed or unsigned integer (not bool).
    pub fn is_int(self) -> bool {
        !self.is_float() && self != DType::Bool
    }

    pub fn is_signed(self) -> bool {
        matches!(
            self,
            DType::I4 | DType::I8 | DType::I16 | DType::I32 | DType::I64
        ) || self.is_float()
    }
}

/// A tensor's element type as one word: [`DType::name`], prefixed by `q` when the tensor is
/// quantized (`qu8`: quantized u8). Cache metadata and inspection output use it.
pub fn tensor_type_name(dtype: DType, quantized: bool) -> String {
    if quantized {
        format!("q{}", dtype.name())
    } else {
        dtype.name().to_string()
    }
}

/// The element type and quantization of a [`tensor_type_name`].
pub fn parse_tensor_type(name: &str) -> Option<(DType, bool)> {
    match DType::from_name(name) {
        Some(d) => Some((d, false)),
        None => DType::from_name(name.strip_prefix('q')?).map(|d| (d, true)),
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::DType;

    #[test]
    fn names_round_trip_and_are_unique() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        let mut names: Vec<_> = DType::ALL.iter().map(|d| d.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DType::ALL.len());
        assert_eq!(DType::from_name("float32"), None);
    }

    #[test]
    fn tensor_type_names() {
        use super::{parse_tensor_type, tensor_type_name};
        assert_eq!(tensor_type_name(DType::U8, true), "qu8");
        assert_eq!(parse_tensor_type("qi32"), Some((DType::I32, true)));
        assert_eq!(parse_tensor_type("bool"), Some((DType::Bool, false)));
        assert_eq!(parse_tensor_type("quantized"), None);
    }
}
