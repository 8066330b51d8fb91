//! Tensor decoding: ONNX `TensorProto`s (raw or typed fields, int4 packing, sparse
//! initializers) into IR tensors, with their dims and sizes checked.

use crate::dtype::{DType, OnnxCode};
use crate::error::{invalid, Result};
use crate::frontend::onnx::{self, data_location, TensorProto};
use crate::ir::tensor::{checked_numel, Tensor};

use super::external::ExternalData;

pub(super) fn dims_of(dims: &[i64]) -> std::result::Result<Vec<usize>, String> {
    dims.iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("has negative dim {d} in {dims:?}")))
        .collect()
}

/// Decodes a serialized `TensorProto` (as the ONNX backend tests store inputs and outputs) into
/// its name and tensor. External data is not allowed here.
pub fn tensor_from_bytes(bytes: &[u8]) -> Result<(String, Tensor)> {
    use prost::Message;
    let t = TensorProto::decode(bytes).map_err(|e| invalid(format!("not a TensorProto: {e}")))?;
    let name = t.name.clone().unwrap_or_default();
    let tensor = tensor_from_proto(&t, &mut ExternalData::new(None))
        .map_err(|e| invalid(format!("tensor {name:?} {e}")))?;
    Ok((name, tensor))
}

pub(super) fn tensor_from_proto(
    t: &TensorProto,
    ext: &mut ExternalData,
) -> std::result::Result<Tensor, String> {
    let code = t.data_type.unwrap_or(0);
    let dtype =
        DType::from_onnx(code).ok_or_else(|| format!("has unsupported element type {code}"))?;
    let shape = dims_of(&t.dims)?;
    let n = checked_numel(&shape, dtype)
        .ok_or_else(|| format!("shape {shape:?} of {dtype} exceeds the 4 GiB tensor limit"))?;
    if dtype.is_sub_byte() {
        return int4_from_proto(t, ext, dtype, shape, n);
    }
    let want = n * dtype.size();
    if t.data_location == Some(data_location::EXTERNAL) {
        let bytes = ext.read(t, want)?;
        return Tensor::from_bytes(dtype, shape, bytes);
    }
    if let Some(raw) = &t.raw_data {
        return Tensor::from_bytes(dtype, shape, raw.clone());
    }
    let count_err = |got: usize, field: &str| {
        format!("has {got} values in {field} but shape {shape:?} needs {n}")
    };
    let mut out = Vec::with_capacity(want);
    match dtype {
        DType::F32 => {
            if t.float_data.len() != n {
                return Err(count_err(t.float_data.len(), "float_data"));
            }
            for v in &t.float_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::F64 => {
            if t.double_data.len() != n {
                return Err(count_err(t.double_data.len(), "double_data"));
            }
            for v in &t.double_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::I64 => {
            if t.int64_data.len() != n {
                return Err(count_err(t.int64_data.len(), "int64_data"));
            }
            for v in &t.int64_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::U32 | DType::U64 => {
            if t.uint64_data.len() != n {
                return Err(count_err(t.uint64_data.len(), "uint64_data"));
            }
            for &v in &t.uint64_data {
                if dtype == DType::U32 {
                    out.extend_from_slice(&(v as u32).to_le_bytes());
                } else {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        // int32_data carries every type of 32 bits or less; 16-bit floats as their bit pattern.
        _ => {
            if t.int32_data.len() != n {
                return Err(count_err(t.int32_data.len(), "int32_data"));
            }
            for &v in &t.int32_data {
                match dtype.size() {
                    1 => out.push(v as u8),
                    2 => out.extend_from_slice(&(v as u16).to_le_bytes()),
                    _ => out.extend_from_slice(&v.to_le_bytes()),
                }
            }
        }
    }
    Tensor::from_bytes(dtype, shape, out)
}

/// A 4-bit tensor: ONNX packs two values to a byte, the first in the low nibble (in raw data,
/// external data and, one byte per entry, `int32_data`); held one value per byte, an i4
/// sign-extended.
pub(super) fn int4_from_proto(
    t: &TensorProto,
    ext: &mut ExternalData,
    dtype: DType,
    shape: Vec<usize>,
    n: usize,
) -> std::result::Result<Tensor, String> {
    let packed_len = n.div_ceil(2);
    let packed: Vec<u8> = if t.data_location == Some(data_location::EXTERNAL) {
        ext.read(t, packed_len)?
    } else if let Some(raw) = &t.raw_data {
        raw.clone()
    } else {
        t.int32_data.iter().map(|&v| v as u8).collect()
    };
    if packed.len() != packed_len {
        return Err(format!(
            "has {} bytes of packed {dtype} data but shape {shape:?} needs {packed_len}",
            packed.len()
        ));
    }
    let out = (0..n)
        .map(|i| {
            let nibble = (packed[i / 2] >> (4 * (i % 2))) & 0x0F;
            if dtype == DType::I4 {
                (((nibble << 4) as i8) >> 4) as u8
            } else {
                nibble
            }
        })
        .collect();
    Tensor::from_bytes(dtype, shape, out)
}

pub(super) fn sparse_to_dense(
    s: &onnx::SparseTensorProto,
    ext: &mut ExternalData,
) -> std::result::Result<(String, Tensor), String> {
    let values = s.values.as_ref().ok_or("sparse tensor has no values")?;
    let indices = s.indices.as_ref().ok_or("sparse tensor has no indices")?;
    let name = values.name.clone().unwrap_or_default();
    let vals = tensor_from_proto(values, ext)?;
    let idx = tensor_from_proto(indices, ext)?;
    let shape = dims_of(&s.dims)?;
    let n = checked_numel(&shape, vals.dtype).ok_or("sparse tensor is too large")?;
    let nnz = vals.numel();
    let idx_v = idx.to_i64();
    let rank = shape.len();
    let linear: Vec<i64> = if idx.shape.len() == 1 && idx_v.len() == nnz {
        idx_v
    } else if idx.shape == [nnz, rank] {
        idx_v
            .chunks(rank.max(1))
            .map(|c| {
                c.iter().zip(&shape).fold(0i64, |acc, (&i, &d)| {
                    acc.saturating_mul(d as i64).saturating_add(i)
                })
            })
            .collect()
    } else {
        return Err(format!(
            "sparse indices have shape {:?} for {nnz} values",
            idx.shape
        ));
    };
    let es = vals.dtype.size();
    let mut out = vec![0u8; n * es];
    for (k, &li) in linear.iter().enumerate() {
        let li = usize::try_from(li)
            .ok()
            .filter(|&i| i < n)
            .ok_or_else(|| format!("sparse index {li} is out of range"))?;
        out[li * es..(li + 1) * es].copy_from_slice(&vals.bytes()[k * es..(k + 1) * es]);
    }
    Ok((name, Tensor::from_bytes(vals.dtype, shape, out)?))
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use crate::dtype::DType;
    use crate::frontend::onnx;
    use crate::ir::tensor::Tensor;

    use super::*;
    use crate::frontend::load::Model;
    use crate::testing::{input_dims, load_error as err, relu_model, tensor_proto, ModelBuilder};

    #[test]
    fn raw_data_size_mismatch_rejected() {
        let mut b = relu_model();
        let mut t = tensor_proto("w", &Tensor::from_f32(vec![2], &[1.0, 2.0]));
        t.dims = vec![3];
        b.model.graph.as_mut().unwrap().initializer.push(t);
        assert!(err(&b.model)
            .contains("initializer 'w' has 8 bytes of data but shape [3] of f32 needs 12"));
    }

    #[test]
    fn typed_data_count_mismatch_rejected() {
        let mut b = relu_model();
        let t = onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![2, 2],
            data_type: Some(1),
            float_data: vec![1.0, 2.0, 3.0],
            ..Default::default()
        };
        b.model.graph.as_mut().unwrap().initializer.push(t);
        assert!(err(&b.model).contains("has 3 values in float_data but shape [2, 2] needs 4"));
    }

    #[test]
    fn negative_and_absurd_dims_rejected() {
        let mut b = relu_model();
        let t = onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![-1],
            data_type: Some(1),
            ..Default::default()
        };
        b.model.graph.as_mut().unwrap().initializer.push(t);
        assert!(err(&b.model).contains("negative dim -1"));

        let mut b = relu_model();
        let t = onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![1 << 40, 1 << 40],
            data_type: Some(1),
            ..Default::default()
        };
        b.model.graph.as_mut().unwrap().initializer.push(t);
        assert!(err(&b.model).contains("exceeds the 4 GiB tensor limit"));

        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[1, 4])
            .node("Relu", &["x"], &["y"], &[])
            .output("y");
        let mut m = b.model.clone();
        input_dims(&mut m, 0)[0].value = Some(onnx::DimensionValue::DimValue(-3));
        assert!(err(&m).contains("graph input 'x' has negative dim -3"));
    }

    #[test]
    fn typed_fields_of_every_dtype() {
        let cases: Vec<(DType, onnx::TensorProto, Vec<f64>)> = vec![
            (
                DType::F16,
                onnx::TensorProto {
                    int32_data: vec![0x3C00, 0xC000],
                    ..Default::default()
                },
                vec![1.0, -2.0],
            ),
            (
                DType::BF16,
                onnx::TensorProto {
                    int32_data: vec![0x3F80, 0x4000],
                    ..Default::default()
                },
                vec![1.0, 2.0],
            ),
            (
                DType::Bool,
                onnx::TensorProto {
                    int32_data: vec![1, 0],
                    ..Default::default()
                },
                vec![1.0, 0.0],
            ),
            (
                DType::I8,
                onnx::TensorProto {
                    int32_data: vec![-3, 4],
                    ..Default::default()
                },
                vec![-3.0, 4.0],
            ),
            (
                DType::U16,
                onnx::TensorProto {
                    int32_data: vec![65535, 4],
                    ..Default::default()
                },
                vec![65535.0, 4.0],
            ),
            (
                DType::I64,
                onnx::TensorProto {
                    int64_data: vec![-1, 1 << 40],
                    ..Default::default()
                },
                vec![-1.0, (1u64 << 40) as f64],
            ),
            (
                DType::U64,
                onnx::TensorProto {
                    uint64_data: vec![5, 6],
                    ..Default::default()
                },
                vec![5.0, 6.0],
            ),
            (
                DType::U32,
                onnx::TensorProto {
                    uint64_data: vec![5, 4_000_000_000],
                    ..Default::default()
                },
                vec![5.0, 4e9],
            ),
            (
                DType::F64,
                onnx::TensorProto {
                    double_data: vec![0.25, -8.0],
                    ..Default::default()
                },
                vec![0.25, -8.0],
            ),
            (
                DType::I32,
                onnx::TensorProto {
                    raw_data: Some([(-7i32).to_le_bytes(), 9i32.to_le_bytes()].concat()),
                    ..Default::default()
                },
                vec![-7.0, 9.0],
            ),
        ];
        for (dt, mut t, want) in cases {
            t.dims = vec![2];
            t.data_type = Some(dt.to_onnx());
            let mut ext = ExternalData::new(None);
            let got = tensor_from_proto(&t, &mut ext).unwrap();
            assert_eq!(got.dtype, dt);
            assert_eq!(got.to_f64(), want, "{dt}");
        }
    }

    #[test]
    fn int4_initializers_are_unpacked_one_value_per_byte() {
        // Five values (an odd count: the last byte's high nibble is padding), from raw data and
        // from int32_data (one packed byte per entry); i4 sign-extended, u4 not.
        let v = [-8i64, 7, -1, 0, 3];
        let i4 = Tensor::from_i64_as(DType::I4, vec![5], &v);
        let mut p = tensor_proto("w", &i4);
        assert_eq!(p.raw_data.as_deref(), Some(&[0x78u8, 0x0F, 0x03][..]));
        let (_, t) = tensor_from_bytes(&p.encode_to_vec()).unwrap();
        assert_eq!((t.dtype, t.to_i64()), (DType::I4, v.to_vec()));
        p.int32_data = p
            .raw_data
            .take()
            .unwrap()
            .iter()
            .map(|&b| b as i32)
            .collect();
        let (_, t) = tensor_from_bytes(&p.encode_to_vec()).unwrap();
        assert_eq!(t.to_i64(), v.to_vec());
        let u4 = Tensor::from_i64_as(DType::U4, vec![3], &[15, 0, 9]);
        let (_, t) = tensor_from_bytes(&tensor_proto("u", &u4).encode_to_vec()).unwrap();
        assert_eq!(t.to_i64(), vec![15, 0, 9]);
        // Too few packed bytes is a clear error, not a panic.
        p.int32_data.pop();
        let e = tensor_from_bytes(&p.encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains("packed i4"), "{e}");
    }

    #[test]
    fn sparse_initializer_densified() {
        let mut b = relu_model();
        let s = onnx::SparseTensorProto {
            values: Some(tensor_proto("s", &Tensor::from_f32(vec![2], &[5.0, 6.0]))),
            indices: Some(tensor_proto("", &Tensor::from_i64(vec![2], &[1, 3]))),
            dims: vec![2, 2],
        };
        b.model.graph.as_mut().unwrap().sparse_initializer.push(s);
        let m = Model::from_proto(&b.model, None).unwrap();
        let id = m.graph.name_map()["s"];
        assert_eq!(
            m.graph.konst(id).unwrap().to_f64(),
            vec![0.0, 5.0, 0.0, 6.0]
        );
    }
}
