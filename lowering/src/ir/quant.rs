//! Constants stored fixed-point: quantizing real values with an [`Encoding`], and the
//! encodings derived for constants a quantized model gives none (see `passes::qdq`).

use qnnx_types::quant::range;
use qnnx_types::Encoding;

use crate::dtype::DType;
use crate::ir::tensor::{numel, strides, Tensor};

/// The slice of `axis` each element of a row-major tensor of `shape` lies in, element by element
/// in order: counted, not divided out per element (a model's weights are millions of elements
/// and the two divisions cost more than quantizing one).
fn channels(shape: &[usize], axis: Option<usize>) -> impl Iterator<Item = usize> {
    let (stride, size) = match axis {
        Some(a) if a < shape.len() => (strides(shape)[a], shape[a]),
        _ => (numel(shape), 1),
    };
    let outer = numel(shape) / (stride * size).max(1);
    (0..outer).flat_map(move |_| (0..size).flat_map(move |c| std::iter::repeat(c).take(stride)))
}

/// The scale of every element of a tensor of `shape` with the blocked encoding `q`, in order.
fn block_scales(shape: &[usize], q: &Encoding) -> Vec<f64> {
    let st = strides(shape);
    (0..numel(shape))
        .map(|k| {
            let index: Vec<usize> = st.iter().zip(shape).map(|(&s, &d)| (k / s) % d).collect();
            q.scale_at(shape, &index)
        })
        .collect()
}

/// `t`'s real values stored in `q` (rounded to nearest even, saturated), as a tensor of the
/// storage type.
pub fn quantize_tensor(t: &Tensor, q: &Encoding) -> Tensor {
    if q.is_blocked() {
        let (lo, hi) = q.range();
        let v = t
            .iter_f64()
            .zip(block_scales(&t.shape, q))
            .map(|(x, s)| ((x / s).round_ties_even() as i64).clamp(lo, hi));
        return Tensor::from_i64_iter(q.storage, t.shape.clone(), v);
    }
    let v = t
        .iter_f64()
        .zip(channels(&t.shape, q.axis))
        .map(|(x, c)| q.quantize(x, c));
    Tensor::from_i64_iter(q.storage, t.shape.clone(), v)
}

/// The reals a tensor of stored integers stands for, as `dtype`.
pub fn dequantize_tensor(t: &Tensor, q: &Encoding, dtype: DType) -> Tensor {
    if q.is_blocked() {
        let v = block_scales(&t.shape, q)
            .into_iter()
            .enumerate()
            .map(|(k, s)| s * t.get_i64(k) as f64);
        return Tensor::from_f64_iter(dtype, t.shape.clone(), v);
    }
    let v = channels(&t.shape, q.axis)
        .enumerate()
        .map(|(k, c)| q.dequantize(t.get_i64(k), c));
    Tensor::from_f64_iter(dtype, t.shape.clone(), v)
}

/// An asymmetric per-tensor encoding in `storage` covering `t`'s values and 0 (so that zero is
/// exact, as QNN requires of padding and ReLU outputs).
pub fn derive_per_tensor(t: &Tensor, storage: DType) -> Encoding {
    let (mut lo, mut hi) = (0f64, 0f64);
    for x in t.to_f64() {
        if x.is_finite() {
            lo = lo.min(x);
            hi = hi.max(x);
        }
    }
    let (qmin, qmax) = range(storage);
    let span = hi - lo;
    let scale = if span > 0.0 {
        span / (qmax - qmin) as f64
    } else {
        1.0 / (qmax - qmin) as f64
    };
    let zp = (qmin as f64 - lo / scale)
        .round()
        .clamp(qmin as f64, qmax as f64) as i64;
    Encoding::per_tensor(storage, scale as f32, -(zp as i32))
}

/// A symmetric encoding in `storage` (offset 0, range ±max|x| over `qmax`), one per slice of
/// `axis` when given: weights the model gives no encoding for.
pub fn derive_symmetric(t: &Tensor, storage: DType, axis: Option<usize>) -> Encoding {
    let (_, qmax) = range(storage);
    let n = axis.map_or(1, |a| t.shape[a]);
    let mut amax = vec![0f64; n];
    for (k, c) in channels(&t.shape, axis).enumerate() {
        let x = t.get_f64(k).abs();
        if x.is_finite() {
            amax[c] = amax[c].max(x);
        }
    }
    let scales: Vec<f32> = amax
        .iter()
        .map(|&m| {
            if m > 0.0 {
                (m / qmax as f64) as f32
            } else {
                1.0 / qmax as f32
            }
        })
        .collect();
    match axis {
        Some(a) => Encoding::per_axis(storage, a, scales),
        None => Encoding::per_tensor(storage, scales[0], 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_channel_round_trip() {
        let t = Tensor::from_f32(vec![2, 3], &[0.5, -1.0, 0.25, 10.0, 0.0, -5.0]);
        let q = derive_symmetric(&t, DType::I8, Some(0));
        assert_eq!(q.scales, vec![1.0 / 127.0, 10.0 / 127.0]);
        let s = quantize_tensor(&t, &q);
        assert_eq!(s.to_i64(), vec![64, -127, 32, 127, 0, -64]);
        let back = dequantize_tensor(&s, &q, DType::F32).to_f64();
        for (a, b) in back.iter().zip(t.to_f64()) {
            assert!((a - b).abs() <= 10.0 / 127.0 / 2.0 + 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn per_tensor_covers_zero() {
        let t = Tensor::from_f32(vec![3], &[1.0, 2.0, 3.0]);
        let q = derive_per_tensor(&t, DType::U8);
        assert_eq!(q.offsets, vec![0]);
        assert_eq!(quantize_tensor(&t, &q).to_i64(), vec![85, 170, 255]);
        let n = Tensor::from_f32(vec![2], &[-1.0, 1.0]);
        let q = derive_per_tensor(&n, DType::U8);
        // The f32 scale rounds up: -1 lands one step inside the range.
        assert_eq!(quantize_tensor(&n, &q).to_i64(), vec![1, 255]);
        assert_eq!(q.quantize(0.0, 0), 128);
        assert_eq!(q.dequantize(128, 0), 0.0);
    }

    #[test]
    fn channels_count_the_axis_slice_of_each_element() {
        let shape = [2, 3, 2];
        for axis in [None, Some(0), Some(1), Some(2)] {
            let got: Vec<usize> = channels(&shape, axis).collect();
            let want: Vec<usize> = (0..12)
                .map(|k| match axis {
                    Some(a) => (k / strides(&shape)[a]) % shape[a],
                    None => 0,
                })
                .collect();
            assert_eq!(got, want, "axis {axis:?}");
        }
        assert_eq!(channels(&[0, 4], Some(1)).count(), 0);
        assert_eq!(channels(&[], None).collect::<Vec<_>>(), vec![0]);
    }
}
