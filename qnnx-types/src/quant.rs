//! Fixed-point encodings: how the integers of a quantized tensor stand for reals.

use std::fmt;

use crate::DType;

/// The encoding of a quantized tensor, in QNN's convention: `real = scale * (q + offset)`, so
/// `offset` is the negated ONNX zero point (docs/qnn-notes.md, "Quantization"). One scale and
/// offset for the whole tensor, or one per slice along `axis` (QNN's `AXIS_SCALE_OFFSET`: conv
/// and matmul weights per output channel, and their int32 biases).
#[derive(Clone, Debug, PartialEq)]
pub struct Encoding {
    /// The element type the integers are stored in: u8, i8, u16, i16 or i32.
    pub storage: DType,
    /// Per-axis when `Some`: `scales.len()` is the size of that dim.
    pub axis: Option<usize>,
    pub scales: Vec<f32>,
    pub offsets: Vec<i32>,
}

/// Storage types QNN has fixed-point types for (`QNN_DATATYPE_{U,S}FIXED_POINT_{8,16,32}`, and
/// 4-bit values as 8-bit fixed point with a 4-bit encoding: `BW_SCALE_OFFSET`,
/// `BW_AXIS_SCALE_OFFSET`).
pub const STORAGE_TYPES: [DType; 7] = [
    DType::U8,
    DType::I8,
    DType::U16,
    DType::I16,
    DType::I32,
    DType::I4,
    DType::U4,
];

impl Encoding {
    /// One scale and offset for the whole tensor.
    pub fn per_tensor(storage: DType, scale: f32, offset: i32) -> Encoding {
        Encoding {
            storage,
            axis: None,
            scales: vec![scale],
            offsets: vec![offset],
        }
    }

    /// Symmetric (offset 0) encodings per slice along `axis`.
    pub fn per_axis(storage: DType, axis: usize, scales: Vec<f32>) -> Encoding {
        let offsets = vec![0; scales.len()];
        Encoding {
            storage,
            axis: Some(axis),
            scales,
            offsets,
        }
    }

    /// The ONNX form: `scale` and `zero_point` per tensor or per slice of `axis`.
    pub fn from_onnx(
        storage: DType,
        axis: Option<usize>,
        scales: &[f64],
        zero_points: &[i64],
    ) -> Result<Encoding, String> {
        if !STORAGE_TYPES.contains(&storage) {
            return Err(format!(
                "quantized type {storage} has no QNN fixed-point type (use uint8, int8, uint16, \
                 int16, int32, int4 or uint4)"
            ));
        }
        if scales.is_empty() {
            return Err("has no scale".into());
        }
        if !zero_points.is_empty() && zero_points.len() != scales.len() {
            return Err(format!(
                "has {} scales but {} zero points",
                scales.len(),
                zero_points.len()
            ));
        }
        let (lo, hi) = range(storage);
        let mut offsets = Vec::with_capacity(scales.len());
        for k in 0..scales.len() {
            let zp = zero_points.get(k).copied().unwrap_or(0);
            if zp < lo || zp > hi {
                return Err(format!(
                    "zero point {zp} is outside {storage} ({lo}..={hi})"
                ));
            }
            offsets.push(-(zp as i32));
        }
        let enc = Encoding {
            storage,
            axis: if scales.len() > 1 { axis } else { None },
            scales: scales.iter().map(|&s| s as f32).collect(),
            offsets,
        };
        enc.check_scales()?;
        Ok(enc)
    }

    fn check_scales(&self) -> Result<(), String> {
        for &s in &self.scales {
            if !(s.is_finite() && s > 0.0) {
                return Err(format!(
                    "has scale {s}; QNN needs finite positive scales (a constant tensor's \
                     encoding must cover a nonzero range)"
                ));
            }
        }
        Ok(())
    }

    /// Why this encoding cannot describe a tensor of `shape`, or `Ok`.
    pub fn check_shape(&self, shape: &[usize]) -> Result<(), String> {
        self.check_scales()?;
        if self.offsets.len() != self.scales.len() {
            return Err("has different numbers of scales and offsets".into());
        }
        match self.axis {
            None if self.scales.len() == 1 => Ok(()),
            None => Err(format!("has {} scales but no axis", self.scales.len())),
            Some(a) if a >= shape.len() => Err(format!(
                "is per-channel along axis {a}, which a rank-{} tensor does not have",
                shape.len()
            )),
            Some(a) if shape[a] != self.scales.len() => Err(format!(
                "has {} scales along axis {a}, which has size {}",
                self.scales.len(),
                shape[a]
            )),
            Some(_) => Ok(()),
        }
    }

    /// Whether the stored values are narrower than a byte (4-bit weights).
    pub fn is_sub_byte(&self) -> bool {
        self.storage.is_sub_byte()
    }

    pub fn is_per_axis(&self) -> bool {
        self.axis.is_some()
    }

    /// The smallest and largest stored integer.
    pub fn range(&self) -> (i64, i64) {
        range(self.storage)
    }

    /// Scale and offset of slice `c` (of the axis, or the only one).
    pub fn at(&self, c: usize) -> (f32, i32) {
        let k = if self.axis.is_some() { c } else { 0 };
        (self.scales[k], self.offsets[k])
    }

    /// `x` stored: rounded to nearest (ties to even, as ONNX QuantizeLinear), saturated.
    pub fn quantize(&self, x: f64, c: usize) -> i64 {
        let (s, o) = self.at(c);
        let q = round_ties_even(x / s as f64) - o as f64;
        let (lo, hi) = self.range();
        if q.is_nan() {
            return (-(o as i64)).clamp(lo, hi);
        }
        (q as i64).clamp(lo, hi)
    }

    /// The real a stored `q` stands for.
    pub fn dequantize(&self, q: i64, c: usize) -> f64 {
        let (s, o) = self.at(c);
        s as f64 * (q + o as i64) as f64
    }

    /// This encoding for the tensor permuted by `perm` (output dim `i` is input dim `perm[i]`).
    pub fn permuted(&self, perm: &[usize]) -> Encoding {
        let mut e = self.clone();
        if let Some(a) = self.axis {
            e.axis = perm.iter().position(|&p| p == a);
        }
        e
    }

    /// Whether two encodings are the same (exactly: requantizing is needed otherwise).
    pub fn same_as(&self, o: &Encoding) -> bool {
        self == o
    }
}

/// The stored range of a fixed-point storage type.
/// `y` rounded to nearest, ties to even: `f64::round_ties_even`, which on x86_64 without SSE4.1
/// (Rust's baseline there) is a call into libm's `rint`, a fifth of a QDQ model's compile time
/// when millions of weights are stored. Adding and subtracting 2^52 rounds in the FPU's default
/// mode (nearest, ties to even): exact for |y| < 2^52, and every larger f64 is an integer.
#[inline]
fn round_ties_even(y: f64) -> f64 {
    const TWO52: f64 = 4_503_599_627_370_496.0;
    if y.abs() < TWO52 {
        ((y.abs() + TWO52) - TWO52).copysign(y)
    } else {
        y
    }
}

pub fn range(storage: DType) -> (i64, i64) {
    match storage {
        DType::I4 => (-8, 7),
        DType::U4 => (0, 15),
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::U16 => (0, 65535),
        DType::I16 => (-32768, 32767),
        DType::U32 => (0, u32::MAX as i64),
        _ => (i32::MIN as i64, i32::MAX as i64),
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.axis {
            None => write!(
                f,
                "q{} scale={} offset={}",
                self.storage, self.scales[0], self.offsets[0]
            ),
            Some(a) => {
                let (lo, hi) = self
                    .scales
                    .iter()
                    .fold((f32::INFINITY, 0f32), |(l, h), &s| (l.min(s), h.max(s)));
                write!(
                    f,
                    "q{} axis={a} x{} scale={lo}..{hi}",
                    self.storage,
                    self.scales.len()
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_ties_even_is_std_s() {
        let mut ys = vec![
            0.5,
            1.5,
            2.5,
            -0.5,
            -1.5,
            -2.5,
            0.49999999999999994,
            1e15 + 0.5,
            4.5e15 + 0.5,
        ];
        ys.extend([
            f64::MAX,
            f64::MIN_POSITIVE,
            1e300,
            2f64.powi(52) - 0.5,
            2f64.powi(53) + 2.0,
        ]);
        let mut r = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..100_000 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            ys.push((r as i64 as f64) / (1u64 << (r % 60)) as f64);
        }
        for y in ys {
            for y in [y, -y] {
                assert_eq!(
                    round_ties_even(y).to_bits(),
                    y.round_ties_even().to_bits(),
                    "{y}"
                );
            }
        }
        assert!(round_ties_even(f64::NAN).is_nan());
        assert_eq!(round_ties_even(f64::INFINITY), f64::INFINITY);
    }

    use super::*;

    #[test]
    fn onnx_zero_point_is_negated_offset() {
        let e = Encoding::from_onnx(DType::U8, None, &[0.5], &[128]).unwrap();
        assert_eq!(e.offsets, vec![-128]);
        assert_eq!(e.quantize(1.0, 0), 130);
        assert_eq!(e.dequantize(130, 0), 1.0);
        assert_eq!(e.quantize(1000.0, 0), 255);
        assert_eq!(e.quantize(0.25, 0), 128, "ties to even");
    }

    #[test]
    fn bad_encodings_say_why() {
        let zp = Encoding::from_onnx(DType::I8, None, &[0.1], &[200]).unwrap_err();
        assert!(zp.contains("zero point 200 is outside i8"), "{zp}");
        let s = Encoding::from_onnx(DType::U8, None, &[0.0], &[]).unwrap_err();
        assert!(s.contains("scale 0"), "{s}");
        let n = Encoding::from_onnx(DType::U8, None, &[f64::NAN], &[]).unwrap_err();
        assert!(n.contains("scale NaN"), "{n}");
        let t = Encoding::from_onnx(DType::F32, None, &[1.0], &[]).unwrap_err();
        assert!(t.contains("no QNN fixed-point type"), "{t}");
        let e = Encoding::per_axis(DType::I8, 3, vec![0.1; 4]);
        assert!(e.check_shape(&[4, 3]).unwrap_err().contains("axis 3"));
        assert!(e
            .check_shape(&[1, 1, 1, 5])
            .unwrap_err()
            .contains("4 scales"));
        assert!(e.check_shape(&[1, 1, 1, 4]).is_ok());
    }

    #[test]
    fn permuting_moves_the_axis() {
        let e = Encoding::per_axis(DType::I8, 0, vec![0.1, 0.2]);
        // OIHW -> HWIO
        assert_eq!(e.permuted(&[2, 3, 1, 0]).axis, Some(3));
        let t = Encoding::per_tensor(DType::U8, 0.1, 0);
        assert_eq!(t.permuted(&[1, 0]), t);
    }
}
