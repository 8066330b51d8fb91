//! Fixed-point encodings: how the integers of a quantized tensor stand for reals.

use std::fmt;

use crate::DType;

/// The encoding of a quantized tensor, in QNN's convention: `real = scale * (q + offset)`, so
/// `offset` is the negated ONNX zero point (docs/qnn-notes.md, "Quantization"). One scale and
/// offset for the whole tensor, or one per slice along `axis` (QNN's `AXIS_SCALE_OFFSET`: conv
/// and matmul weights per output channel, and their int32 biases), or per slice and block
/// ([`Blocks`]: QNN's `BLOCKWISE_EXPANSION`).
#[derive(Clone, Debug, PartialEq)]
pub struct Encoding {
    /// The element type the integers are stored in: u8, i8, u16, i16 or i32.
    pub storage: DType,
    /// Per-axis when `Some`: `scales.len()` is the size of that dim.
    pub axis: Option<usize>,
    pub scales: Vec<f32>,
    pub offsets: Vec<i32>,
    /// Block-wise scales within each slice of `axis` (which is then `Some`).
    pub blocks: Option<Blocks>,
}

/// QNN's block-wise expansion ("LPBQ", `QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION`, HTP v69
/// and newer): slice `c` of the encoding's axis is split along `axis` into blocks of `size`
/// elements, and element `(c, b)` has the scale `scales[c] * ints[c * count + b]` (offset 0): a
/// float scale per output channel times a small unsigned integer per block. The 4-bit weights
/// are expanded to 8 bits by their block's integer (`bits` = 8 - 4 = 4), so a weight keeps 4-bit
/// storage with almost the resolution of a float scale per block (docs/quantization.md,
/// "Block-wise 4-bit weights").
#[derive(Clone, Debug, PartialEq)]
pub struct Blocks {
    /// The dimension split into blocks: the one a weight is reduced over (the input features).
    pub axis: usize,
    /// Elements per block along `axis`.
    pub size: usize,
    /// The width of an integer block scale.
    pub bits: u32,
    /// `[channels][blocks]`, each in `1..=Blocks::max_int(bits)`.
    pub ints: Vec<u8>,
}

impl Blocks {
    /// The largest integer block scale of `bits` bits: `2^bits` (16 for 4-bit weights, as
    /// ExecuTorch's QNN backend writes them; 1..=16 measured exact on the HTP emulator,
    /// docs/qnn-notes.md "Block-wise expansion").
    pub fn max_int(bits: u32) -> u32 {
        1u32 << bits
    }

    /// Per-channel scales and integer block scales for float scales `s` of `channels` x
    /// `count` blocks. A channel whose block scales are already integer multiples of one scale
    /// (its largest over `t`, for the largest `t <= max_int` that fits: ExecuTorch's and
    /// qnnx_backend's LPBQ scales top out at 16, ONNX Runtime's at 15) is split exactly.
    /// Otherwise the channel's scale is its largest block scale over `max_int` and a block's
    /// integer that scale's multiple at or above the block's scale, so that no stored value
    /// saturates (a block's scale grows by less than one channel step).
    pub fn split(s: &[f64], channels: usize, count: usize, bits: u32) -> (Vec<f32>, Vec<u8>) {
        let top = Self::max_int(bits);
        let mut scales = Vec::with_capacity(channels);
        let mut ints = Vec::with_capacity(channels * count);
        for c in 0..channels {
            let row = &s[c * count..(c + 1) * count];
            let m = row.iter().copied().fold(0f64, f64::max);
            let exact = (1..=top).rev().find_map(|t| {
                let sc = (m / t as f64) as f32;
                let ks: Option<Vec<u8>> = row
                    .iter()
                    .map(|&x| {
                        let k = x / sc as f64;
                        ((k - k.round()).abs() < 1e-4 && k.round() >= 1.0).then(|| k.round() as u8)
                    })
                    .collect();
                ks.map(|ks| (sc, ks))
            });
            let (sc, ks) = exact.unwrap_or_else(|| {
                let sc = (m / top as f64) as f32;
                // The relative slack absorbs the f32 rounding of a scale written as sc * k.
                let ks = row
                    .iter()
                    .map(|&x| (x / sc as f64 * (1.0 - 1e-6)).ceil().clamp(1.0, top as f64) as u8)
                    .collect();
                (sc, ks)
            });
            scales.push(sc);
            ints.extend(ks);
        }
        (scales, ints)
    }

    /// Number of blocks per slice.
    pub fn count(&self, channels: usize) -> usize {
        self.ints.len() / channels.max(1)
    }
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
            blocks: None,
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
            blocks: None,
        }
    }

    /// The ONNX form of blocked quantization (DequantizeLinear-21 with `block_size`) of a 2-D
    /// weight of `shape`: `scales` has `shape` with dim `block_axis` divided by `block_size`;
    /// the channels are the other dim. Symmetric only (zero points 0); the float block scales
    /// become QNN's per-channel scale x integer block scale of `bits` bits ([`Blocks::split`]).
    pub fn from_onnx_blocked(
        storage: DType,
        shape: &[usize],
        block_axis: usize,
        block_size: usize,
        scales: &[f64],
        zero_points: &[i64],
        bits: u32,
    ) -> Result<Encoding, String> {
        if storage != DType::I4 {
            return Err(format!(
                "is blocked in {storage}; block-wise weights are int4 (QNN's block expansion                  widens 4-bit weights to 8 bits)"
            ));
        }
        if shape.len() != 2 || block_axis > 1 {
            return Err(format!(
                "is blocked along axis {block_axis} of a tensor of shape {shape:?}; block-wise                  weights are 2-D (MatMul and Gemm weights)"
            ));
        }
        let k = shape[block_axis];
        if block_size == 0 || k % block_size != 0 {
            return Err(format!(
                "has block_size {block_size}, which does not divide the blocked dim ({k}); QNN's                  blocks have one size"
            ));
        }
        let count = k / block_size;
        let ch_axis = 1 - block_axis;
        let channels = shape[ch_axis];
        if scales.len() != channels * count {
            return Err(format!(
                "has {} block scales for {channels} channels of {count} blocks",
                scales.len()
            ));
        }
        if zero_points.iter().any(|&z| z != 0) {
            return Err("has nonzero zero points; block-wise weights are symmetric".into());
        }
        if scales.iter().any(|&s| !(s.is_finite() && s > 0.0)) {
            return Err("has a block scale that is not finite and positive".into());
        }
        // ONNX lays the scales out like the weight; QNN channel-major.
        let s: Vec<f64> = if ch_axis == 0 {
            scales.to_vec()
        } else {
            (0..channels)
                .flat_map(|c| (0..count).map(move |b| scales[b * channels + c]))
                .collect()
        };
        let (per_channel, ints) = Blocks::split(&s, channels, count, bits);
        let enc = Encoding {
            storage,
            axis: Some(ch_axis),
            offsets: vec![0; per_channel.len()],
            scales: per_channel,
            blocks: Some(Blocks {
                axis: block_axis,
                size: block_size,
                bits,
                ints,
            }),
        };
        enc.check_scales()?;
        Ok(enc)
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
            blocks: None,
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
            Some(a) => match &self.blocks {
                None => Ok(()),
                Some(b) if b.axis == a || b.axis >= shape.len() => Err(format!(
                    "is blocked along axis {}, which must be another dim of a rank-{} tensor \
                     than its channel axis {a}",
                    b.axis,
                    shape.len()
                )),
                Some(b) if b.ints.len() * b.size != shape[b.axis] * shape[a] => Err(format!(
                    "has {} block scales of {} elements each for {} x {} elements",
                    b.ints.len(),
                    b.size,
                    shape[a],
                    shape[b.axis]
                )),
                Some(b)
                    if b.ints
                        .iter()
                        .any(|&k| k == 0 || k as u32 > Blocks::max_int(b.bits)) =>
                {
                    Err(format!(
                        "has an integer block scale outside 1..={}",
                        Blocks::max_int(b.bits)
                    ))
                }
                Some(_) => Ok(()),
            },
        }
    }

    /// The scale of the element at `index` (its coordinates in a tensor of `shape`): the
    /// slice's, times its block's integer for a blocked encoding.
    pub fn scale_at(&self, shape: &[usize], index: &[usize]) -> f64 {
        let Some(a) = self.axis else {
            return self.scales[0] as f64;
        };
        let c = index[a];
        match &self.blocks {
            None => self.scales[c] as f64,
            Some(b) => {
                let count = b.count(self.scales.len());
                let blk = index[b.axis] / b.size;
                debug_assert!(blk < count && shape[b.axis] == count * b.size);
                self.scales[c] as f64 * b.ints[c * count + blk] as f64
            }
        }
    }

    pub fn is_blocked(&self) -> bool {
        self.blocks.is_some()
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

    /// Scale and offset of slice `c` (of the axis, or the only one); of a blocked encoding, the
    /// slice's scale before its block's integer ([`Encoding::scale_at`] has the element's).
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
        if let Some(b) = e.blocks.as_mut() {
            b.axis = perm.iter().position(|&p| p == b.axis).unwrap_or(b.axis);
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
                )?;
                match &self.blocks {
                    Some(b) => write!(
                        f,
                        " blocks(axis={} size={} x{} int{})",
                        b.axis,
                        b.size,
                        b.count(self.scales.len()),
                        b.bits
                    ),
                    None => Ok(()),
                }
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

    #[test]
    fn block_scales_split_exactly_when_they_are_multiples_of_a_channel_scale() {
        // Two channels of three blocks, written as channel scale x integer (1..=16 and 1..=15).
        let s = [
            0.01 * 16.0,
            0.01 * 3.0,
            0.01,
            0.2 * 15.0,
            0.2 * 7.0,
            0.2 * 15.0,
        ];
        let (sc, ints) = Blocks::split(&s, 2, 3, 4);
        assert_eq!(ints, vec![16, 3, 1, 15, 7, 15]);
        assert!(
            (sc[0] - 0.01).abs() < 1e-7 && (sc[1] - 0.2).abs() < 1e-6,
            "{sc:?}"
        );
        // Free-form scales: the channel's top over 16, each block rounded up (never below).
        let s = [1.0, 0.3, 0.05];
        let (sc, ints) = Blocks::split(&s, 1, 3, 4);
        assert_eq!(sc, vec![1.0 / 16.0]);
        assert_eq!(ints, vec![16, 5, 1]);
        for (k, &x) in ints.iter().zip(&s) {
            assert!(*k as f64 * sc[0] as f64 >= x - 1e-9);
        }
    }

    #[test]
    fn onnx_blocked_scales_become_channel_major_blocks() {
        // A MatMul weight [K=4, N=2] blocked by 2 along K: ONNX scale [2, 2] (block, channel).
        let scales = [0.1 * 16.0, 0.5 * 16.0, 0.1 * 2.0, 0.5 * 4.0];
        let e = Encoding::from_onnx_blocked(DType::I4, &[4, 2], 0, 2, &scales, &[0; 4], 4).unwrap();
        assert_eq!(e.axis, Some(1));
        let b = e.blocks.as_ref().unwrap();
        assert_eq!((b.axis, b.size, b.bits), (0, 2, 4));
        assert_eq!(b.ints, vec![16, 2, 16, 4], "[channel][block]");
        e.check_shape(&[4, 2]).unwrap();
        // Element (k=3, n=1): channel 1, block 1.
        assert!((e.scale_at(&[4, 2], &[3, 1]) - 0.5 * 4.0).abs() < 1e-6);
        // Transposed to [N, K] the axes follow.
        let t = e.permuted(&[1, 0]);
        assert_eq!((t.axis, t.blocks.as_ref().unwrap().axis), (Some(0), 1));
        assert!(
            e.to_string().contains("blocks(axis=0 size=2 x2 int4)"),
            "{e}"
        );
    }

    #[test]
    fn bad_blocked_encodings_say_why() {
        let ok = [0.1; 4];
        let e = |dt, shape: &[usize], axis, size, zp: &[i64]| {
            Encoding::from_onnx_blocked(dt, shape, axis, size, &ok, zp, 4).unwrap_err()
        };
        assert!(e(DType::I8, &[4, 2], 0, 2, &[]).contains("int4"));
        assert!(e(DType::I4, &[4, 2, 1], 0, 2, &[]).contains("2-D"));
        assert!(e(DType::I4, &[6, 2], 0, 4, &[]).contains("does not divide"));
        assert!(e(DType::I4, &[4, 2], 0, 2, &[1, 0, 0, 0]).contains("symmetric"));
        assert!(
            e(DType::I4, &[8, 2], 0, 2, &[]).contains("4 block scales for 2 channels of 4 blocks")
        );
        let mut blocked =
            Encoding::from_onnx_blocked(DType::I4, &[4, 2], 0, 2, &ok, &[], 4).unwrap();
        blocked.blocks.as_mut().unwrap().ints[0] = 17;
        assert!(blocked.check_shape(&[4, 2]).unwrap_err().contains("1..=16"));
    }
}
