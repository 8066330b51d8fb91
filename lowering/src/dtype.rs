//! Element types of IR values and constant tensors: [`DType`] from `qnnx-types`, wider than
//! what QNN accepts (the loader keeps the model's types and the passes narrow them:
//! `narrow_int64`, `fp16`), and its ONNX codes.

pub use qnnx_types::DType;

/// `TensorProto.DataType` codes of [`DType`]s. Strings, complex and float8 types have none.
pub trait OnnxCode: Sized {
    fn from_onnx(code: i32) -> Option<Self>;
    fn to_onnx(self) -> i32;
}

impl OnnxCode for DType {
    fn from_onnx(code: i32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.to_onnx() == code)
    }

    fn to_onnx(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::BF16 => 16,
            DType::U4 => 21,
            DType::I4 => 22,
        }
    }
}
