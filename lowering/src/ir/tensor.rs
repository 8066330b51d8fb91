//! Constant tensors: element type, static shape and little-endian bytes.

use std::sync::Arc;

use half::{bf16, f16};

use crate::dtype::DType;

/// Largest tensor we accept, in bytes. `Qnn_ClientBuffer_t.dataSize` is a `u32`, so nothing
/// larger can be handed to QNN as one tensor.
pub const MAX_TENSOR_BYTES: u64 = u32::MAX as u64;

/// Number of elements of `shape`, or `None` on overflow or when the byte size for `dtype`
/// exceeds [`MAX_TENSOR_BYTES`].
pub fn checked_numel(shape: &[usize], dtype: DType) -> Option<usize> {
    let mut n: u64 = 1;
    for &d in shape {
        n = n.checked_mul(d as u64)?;
    }
    if n.checked_mul(dtype.size() as u64)? > MAX_TENSOR_BYTES {
        return None;
    }
    usize::try_from(n).ok()
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major element strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// For every element of `out_shape` (row-major), the flat index into `in_shape` under numpy
/// broadcasting.
pub fn broadcast_map(out_shape: &[usize], in_shape: &[usize]) -> Vec<usize> {
    let off = out_shape.len() - in_shape.len();
    let st = strides(in_shape);
    map_indices(out_shape, |idx| {
        let mut f = 0;
        for (i, &d) in in_shape.iter().enumerate() {
            if d != 1 {
                f += idx[off + i] * st[i];
            }
        }
        f
    })
}

/// `f` of every multi-index of `shape`, in row-major order.
pub fn map_indices(shape: &[usize], mut f: impl FnMut(&[usize]) -> usize) -> Vec<usize> {
    let n = numel(shape);
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        out.push(f(&idx));
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

/// A constant tensor. Data is shared so that cloning graphs and values is cheap.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    data: Arc<[u8]>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({} {:?}", self.dtype, self.shape)?;
        if self.numel() <= 16 {
            if self.dtype.is_float() {
                write!(f, " {:?}", self.to_f64())?;
            } else {
                write!(f, " {:?}", self.to_i64())?;
            }
        }
        write!(f, ")")
    }
}

impl Tensor {
    /// Wraps little-endian bytes. Fails when the byte count does not match the shape.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Tensor, String> {
        let n = checked_numel(&shape, dtype)
            .ok_or_else(|| format!("shape {shape:?} of {dtype} is too large"))?;
        if data.len() != n * dtype.size() {
            return Err(format!(
                "has {} bytes of data but shape {shape:?} of {dtype} needs {}",
                data.len(),
                n * dtype.size()
            ));
        }
        Ok(Tensor {
            dtype,
            shape,
            data: data.into(),
        })
    }

    pub fn from_f32(shape: Vec<usize>, v: &[f32]) -> Tensor {
        Tensor::from_f64_as(
            DType::F32,
            shape,
            &v.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        )
    }

    pub fn from_i64(shape: Vec<usize>, v: &[i64]) -> Tensor {
        Tensor::from_i64_as(DType::I64, shape, v)
    }

    pub fn scalar_f32(v: f32) -> Tensor {
        Tensor::from_f32(vec![], &[v])
    }

    /// Stores `v` as `dtype`, rounding or truncating like a C cast.
    pub fn from_f64_as(dtype: DType, shape: Vec<usize>, v: &[f64]) -> Tensor {
        Self::from_f64_iter(dtype, shape, v.iter().copied())
    }

    pub fn from_i64_as(dtype: DType, shape: Vec<usize>, v: &[i64]) -> Tensor {
        Self::from_i64_iter(dtype, shape, v.iter().copied())
    }

    /// Stores the values of `v`, in order, as `dtype` (as [`Tensor::from_i64_as`], without the
    /// intermediate `Vec<i64>`: quantized weights are millions of elements).
    pub fn from_i64_iter(dtype: DType, shape: Vec<usize>, v: impl Iterator<Item = i64>) -> Tensor {
        Self::from_iter_with(dtype, shape, v, push_i64)
    }

    /// Stores the values of `v`, in order, as `dtype` (as [`Tensor::from_f64_as`], without the
    /// intermediate `Vec<f64>`).
    pub fn from_f64_iter(dtype: DType, shape: Vec<usize>, v: impl Iterator<Item = f64>) -> Tensor {
        Self::from_iter_with(dtype, shape, v, push_f64)
    }

    fn from_iter_with<T>(
        dtype: DType,
        shape: Vec<usize>,
        v: impl Iterator<Item = T>,
        push: fn(&mut Vec<u8>, DType, T),
    ) -> Tensor {
        let n = numel(&shape);
        let mut out = Vec::with_capacity(n * dtype.size());
        for x in v {
            push(&mut out, dtype, x);
        }
        assert_eq!(
            out.len(),
            n * dtype.size(),
            "tensor shape and value count differ"
        );
        Tensor {
            dtype,
            shape,
            data: out.into(),
        }
    }

    /// The values as f64, in order ([`Tensor::get_f64`] of each; f32 read without a dtype match
    /// per element).
    pub fn iter_f64(&self) -> Box<dyn Iterator<Item = f64> + '_> {
        match self.dtype {
            DType::F32 => Box::new(
                self.data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64),
            ),
            _ => Box::new((0..self.numel()).map(|i| self.get_f64(i))),
        }
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The data itself, shared: a plan's static tensor holds the weights without a copy.
    pub fn shared_bytes(&self) -> Arc<[u8]> {
        self.data.clone()
    }

    /// This tensor with its dims permuted: output dim `i` is input dim `perm[i]`.
    pub fn transpose(&self, perm: &[usize]) -> Tensor {
        let out_shape: Vec<usize> = perm.iter().map(|&p| self.shape[p]).collect();
        let st = strides(&self.shape);
        let src: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
        self.gather_strided(out_shape, &src)
    }

    /// This tensor broadcast to `shape` under numpy rules (`shape` has at least this rank, and
    /// each of this tensor's dims is 1 or equal to the matching trailing dim of `shape`):
    /// broadcast dims are read with stride 0.
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor {
        let pad = shape.len() - self.shape.len();
        let mut st = vec![0; shape.len()];
        let mut s = 1;
        for (i, &d) in self.shape.iter().enumerate().rev() {
            if d != 1 {
                st[pad + i] = s;
            }
            s *= d;
        }
        self.gather_strided(shape.to_vec(), &st)
    }

    /// Elements read with per-dim element `strides` into this tensor's data, written row-major
    /// as `shape` (a transpose is `strides[i] = source stride of dim perm[i]`). Walks the
    /// output once with an odometer instead of building an index per element: resnet18's
    /// weight transposes took a seventh of its lowering the other way.
    pub fn gather_strided(&self, shape: Vec<usize>, strides: &[usize]) -> Tensor {
        let s = self.dtype.size();
        let n = numel(&shape);
        let mut out = Vec::with_capacity(n * s);
        if n > 0 {
            let r = shape.len();
            let (inner, inner_stride) = match r {
                0 => (1, 0),
                _ => (shape[r - 1], strides[r - 1]),
            };
            let outer = &shape[..r.saturating_sub(1)];
            let mut idx = vec![0usize; outer.len()];
            let mut base = 0usize;
            for _ in 0..n / inner {
                let mut off = base * s;
                for _ in 0..inner {
                    out.extend_from_slice(&self.data[off..off + s]);
                    off += inner_stride * s;
                }
                for k in (0..outer.len()).rev() {
                    idx[k] += 1;
                    base += strides[k];
                    if idx[k] < outer[k] {
                        break;
                    }
                    base -= strides[k] * outer[k];
                    idx[k] = 0;
                }
            }
        }
        Tensor {
            dtype: self.dtype,
            shape,
            data: out.into(),
        }
    }

    pub fn with_shape(&self, shape: Vec<usize>) -> Tensor {
        assert_eq!(numel(&shape), self.numel(), "reshape changes element count");
        Tensor {
            dtype: self.dtype,
            shape,
            data: self.data.clone(),
        }
    }

    fn elem(&self, i: usize) -> &[u8] {
        let s = self.dtype.size();
        &self.data[i * s..(i + 1) * s]
    }

    pub fn get_f64(&self, i: usize) -> f64 {
        let b = self.elem(i);
        match self.dtype {
            DType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::F16 => f16::from_le_bytes(b.try_into().unwrap()).to_f64(),
            DType::BF16 => bf16::from_le_bytes(b.try_into().unwrap()).to_f64(),
            DType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
            DType::U64 => u64::from_le_bytes(b.try_into().unwrap()) as f64,
            _ => self.get_i64(i) as f64,
        }
    }

    pub fn get_i64(&self, i: usize) -> i64 {
        let b = self.elem(i);
        match self.dtype {
            DType::I8 | DType::I4 => b[0] as i8 as i64,
            DType::U8 | DType::U4 => b[0] as i64,
            DType::Bool => (b[0] != 0) as i64,
            DType::I16 => i16::from_le_bytes(b.try_into().unwrap()) as i64,
            DType::U16 => u16::from_le_bytes(b.try_into().unwrap()) as i64,
            DType::I32 => i32::from_le_bytes(b.try_into().unwrap()) as i64,
            DType::U32 => u32::from_le_bytes(b.try_into().unwrap()) as i64,
            DType::I64 => i64::from_le_bytes(b.try_into().unwrap()),
            DType::U64 => u64::from_le_bytes(b.try_into().unwrap()) as i64,
            _ => float_to_i64(self.get_f64(i)),
        }
    }

    /// The data as ONNX's `raw_data` holds it: as in memory, but 4-bit values packed two to a
    /// byte, the first in the low nibble.
    pub fn onnx_raw_data(&self) -> Vec<u8> {
        if self.dtype.is_sub_byte() {
            self.data
                .chunks(2)
                .map(|p| (p[0] & 0x0F) | (p.get(1).map_or(0, |b| b & 0x0F) << 4))
                .collect()
        } else {
            self.data.to_vec()
        }
    }

    pub fn to_f64(&self) -> Vec<f64> {
        self.iter_f64().collect()
    }

    pub fn to_f32(&self) -> Vec<f32> {
        (0..self.numel()).map(|i| self.get_f64(i) as f32).collect()
    }

    pub fn to_i64(&self) -> Vec<i64> {
        (0..self.numel()).map(|i| self.get_i64(i)).collect()
    }

    /// Converts element-wise with ONNX `Cast` semantics (float to int truncates toward zero).
    pub fn cast(&self, to: DType) -> Tensor {
        if to == self.dtype {
            return self.clone();
        }
        if to.is_float() || (self.dtype.is_float() && to == DType::Bool) {
            let v = self.to_f64();
            if to == DType::Bool {
                let b: Vec<i64> = v.iter().map(|&x| (x != 0.0) as i64).collect();
                return Tensor::from_i64_as(to, self.shape.clone(), &b);
            }
            Tensor::from_f64_as(to, self.shape.clone(), &v)
        } else {
            Tensor::from_i64_as(to, self.shape.clone(), &self.to_i64())
        }
    }

    /// New tensor whose element `i` is element `idx[i]` of `self`.
    pub fn gather_flat(&self, shape: Vec<usize>, idx: &[usize]) -> Tensor {
        let s = self.dtype.size();
        let mut out = Vec::with_capacity(idx.len() * s);
        for &i in idx {
            out.extend_from_slice(self.elem(i));
        }
        Tensor {
            dtype: self.dtype,
            shape,
            data: out.into(),
        }
    }

    /// Concatenates the byte data of same-typed tensors (callers compute the shape).
    pub fn concat_flat(dtype: DType, shape: Vec<usize>, parts: &[&Tensor]) -> Tensor {
        let mut out = Vec::new();
        for p in parts {
            out.extend_from_slice(p.bytes());
        }
        Tensor {
            dtype,
            shape,
            data: out.into(),
        }
    }

    /// True when every element equals `v` (compares as f64).
    pub fn all_eq(&self, v: f64) -> bool {
        (0..self.numel()).all(|i| self.get_f64(i) == v)
    }
}

fn float_to_i64(x: f64) -> i64 {
    if x.is_nan() {
        0
    } else {
        x as i64
    }
}

fn push_f64(out: &mut Vec<u8>, dtype: DType, x: f64) {
    match dtype {
        DType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
        DType::F16 => out.extend_from_slice(&f16::from_f64(x).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&bf16::from_f64(x).to_le_bytes()),
        DType::F64 => out.extend_from_slice(&x.to_le_bytes()),
        DType::Bool => out.push((x != 0.0) as u8),
        _ => push_i64(out, dtype, float_to_i64(x)),
    }
}

fn push_i64(out: &mut Vec<u8>, dtype: DType, x: i64) {
    match dtype {
        DType::I8 => out.push(x as i8 as u8),
        DType::U8 => out.push(x as u8),
        // One 4-bit value per byte (an i4 sign-extended), wrapped to 4 bits like the 8-bit
        // types to 8.
        DType::I4 => out.push((((x as i8) << 4) >> 4) as u8),
        DType::U4 => out.push(x as u8 & 0x0F),
        DType::Bool => out.push((x != 0) as u8),
        DType::I16 => out.extend_from_slice(&(x as i16).to_le_bytes()),
        DType::U16 => out.extend_from_slice(&(x as u16).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
        DType::U32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
        DType::I64 => out.extend_from_slice(&x.to_le_bytes()),
        DType::U64 => out.extend_from_slice(&(x as u64).to_le_bytes()),
        _ => push_f64(out, dtype, x as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cast_float_to_int_truncates() {
        let t = Tensor::from_f32(vec![3], &[1.7, -1.7, 2.0]);
        assert_eq!(t.cast(DType::I32).to_i64(), vec![1, -1, 2]);
    }

    #[test]
    fn f16_round_trip() {
        let t = Tensor::from_f32(vec![2], &[0.5, -2.0]).cast(DType::F16);
        assert_eq!(t.bytes().len(), 4);
        assert_eq!(t.to_f32(), vec![0.5, -2.0]);
    }

    #[test]
    fn from_bytes_rejects_size_mismatch() {
        assert!(Tensor::from_bytes(DType::F32, vec![2], vec![0; 7]).is_err());
    }

    #[test]
    fn checked_numel_caps_bytes() {
        assert!(checked_numel(&[1 << 20, 1 << 20], DType::F32).is_none());
        assert!(checked_numel(&[usize::MAX, 2], DType::U8).is_none());
        assert_eq!(checked_numel(&[2, 3], DType::F32), Some(6));
    }

    #[test]
    fn transpose_matches_the_index_map_for_every_permutation() {
        let shape = [2usize, 3, 1, 4];
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let t = Tensor::from_f32(shape.to_vec(), &v);
        let h = Tensor::from_f64_as(
            DType::F16,
            shape.to_vec(),
            &v.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        );
        let mut perms: Vec<Vec<usize>> = vec![vec![]];
        for _ in 0..shape.len() {
            let mut next = Vec::new();
            for p in &perms {
                for d in (0..shape.len()).filter(|d| !p.contains(d)) {
                    next.push([p.clone(), vec![d]].concat());
                }
            }
            perms = next;
        }
        assert_eq!(perms.len(), 24);
        let st = strides(&shape);
        for perm in perms {
            let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let map = map_indices(&out, |idx| {
                idx.iter().zip(&perm).map(|(&i, &p)| i * st[p]).sum()
            });
            for x in [&t, &h] {
                assert_eq!(
                    x.transpose(&perm),
                    x.gather_flat(out.clone(), &map),
                    "{perm:?}"
                );
            }
        }
        let scalar = Tensor::from_f32(vec![], &[7.0]);
        assert_eq!(scalar.transpose(&[]).to_f64(), vec![7.0]);
        let empty = Tensor::from_f32(vec![2, 0], &[]);
        assert_eq!(empty.transpose(&[1, 0]).shape, vec![0, 2]);
    }

    #[test]
    fn broadcast_to_matches_the_index_map() {
        let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
        for (from, to) in [
            (vec![3, 1, 4], vec![2, 3, 5, 4]),
            (vec![1, 3, 4], vec![2, 3, 4]),
            (vec![3, 4], vec![2, 3, 4]),
            (vec![12], vec![2, 12]),
            (vec![3, 4], vec![3, 4]),
        ] {
            let t = Tensor::from_f32(from.clone(), &v);
            let want = t.gather_flat(to.clone(), &broadcast_map(&to, &from));
            assert_eq!(t.broadcast_to(&to), want, "{from:?} -> {to:?}");
        }
        let one = Tensor::from_f32(vec![1], &[5.0]);
        assert_eq!(one.broadcast_to(&[2, 2]).to_f64(), vec![5.0; 4]);
    }
}
