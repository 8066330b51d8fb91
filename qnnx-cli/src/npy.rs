//! Minimal `.npy` (NumPy format 1.0/2.0) reading and writing for the tensor types QNN graphs
//! take: little-endian, C order.

use std::path::Path;

use qnnx_types::DType;

/// A host tensor: dtype, shape and little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

fn descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::F64 => "<f8",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::I32 => "<i4",
        DType::U32 => "<u4",
        DType::I64 => "<i8",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        // NumPy has no bfloat16 and no 4-bit types.
        DType::BF16 | DType::I4 | DType::U4 => return None,
    })
}

fn from_descr(s: &str) -> Option<DType> {
    let s = s.replace('=', "<");
    DType::ALL.into_iter().find(|&d| {
        let Some(want) = descr(d) else { return false };
        want == s || (want.starts_with('|') && s.len() == 3 && want[1..] == s[1..])
    })
}

/// What `qnnx run` prints of an output it does not write.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Over all elements, as f64 (bool: 0 and 1); `None` for an empty tensor.
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}", self.dtype, self.shape)?;
        if let (Some(lo), Some(hi), Some(mean)) = (self.min, self.max, self.mean) {
            write!(f, ", min {lo:.6}, max {hi:.6}, mean {mean:.6}")?;
        }
        Ok(())
    }
}

impl Array {
    /// The values as f64, little-endian as stored; `None` for bf16 and 4-bit types (which .npy
    /// cannot hold).
    fn values(&self) -> Option<Vec<f64>> {
        let d = &self.data;
        let n = self.dtype.size();
        let each = |f: fn(&[u8]) -> f64| d.chunks_exact(n).map(f).collect();
        Some(match self.dtype {
            DType::F32 => each(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).into()),
            DType::F16 => each(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()),
            DType::F64 => each(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))),
            DType::I8 => each(|c| (c[0] as i8).into()),
            DType::U8 | DType::Bool => each(|c| c[0].into()),
            DType::I16 => each(|c| i16::from_le_bytes([c[0], c[1]]).into()),
            DType::U16 => each(|c| u16::from_le_bytes([c[0], c[1]]).into()),
            DType::I32 => each(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).into()),
            DType::U32 => each(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]).into()),
            DType::I64 => each(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64),
            DType::U64 => each(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as f64),
            DType::BF16 | DType::I4 | DType::U4 => return None,
        })
    }

    /// dtype, shape, range and mean.
    pub fn summary(&self) -> Summary {
        let v = self.values().unwrap_or_default();
        let (min, max, mean) = if v.is_empty() {
            (None, None, None)
        } else {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (
                Some(lo),
                Some(hi),
                Some(v.iter().sum::<f64>() / v.len() as f64),
            )
        };
        Summary {
            dtype: self.dtype,
            shape: self.shape.clone(),
            min,
            max,
            mean,
        }
    }
}

/// Writes `a` to `path` as `.npy` version 1.0.
pub fn write(path: &Path, a: &Array) -> Result<(), String> {
    let d = descr(a.dtype).ok_or_else(|| format!("cannot write {} as .npy", a.dtype))?;
    let shape = match a.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", a.shape[0]),
        _ => format!(
            "({})",
            a.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6) + version (2) + length (2) + header + '\n' is padded to a multiple of 64.
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + a.data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&a.data);
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a `.npy` file.
pub fn read(path: &Path) -> Result<Array, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses `.npy` bytes.
pub fn parse(bytes: &[u8]) -> Result<Array, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file".into());
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = bytes
        .get(start..start + hlen)
        .ok_or("truncated .npy header")
        .map(String::from_utf8_lossy)?;
    let field = |key: &str| -> Result<String, String> {
        let i = header
            .find(&format!("'{key}'"))
            .ok_or(format!("no '{key}' in header"))?;
        Ok(header[i + key.len() + 2..]
            .trim_start_matches([':', ' '])
            .to_string())
    };
    let d = field("descr")?;
    let d = d.split('\'').nth(1).ok_or("bad descr")?.to_string();
    let dtype = from_descr(&d).ok_or(format!("unsupported dtype {d}"))?;
    if field("fortran_order")?.starts_with("True") {
        return Err(
            "Fortran-order arrays are not supported; save with np.ascontiguousarray".into(),
        );
    }
    let s = field("shape")?;
    let s = &s[s.find('(').ok_or("bad shape")? + 1..s.find(')').ok_or("bad shape")?];
    let shape = s
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<usize>()
                .map_err(|_| format!("bad dimension {t:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let n: usize = shape.iter().product();
    let data = &bytes[start + hlen..];
    if data.len() != n * dtype.size() {
        return Err(format!(
            "shape {shape:?} of {d} needs {} bytes, file has {}",
            n * dtype.size(),
            data.len()
        ));
    }
    Ok(Array {
        dtype,
        shape,
        data: data.to_vec(),
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn summaries_give_range_and_mean() {
        let a = Array {
            dtype: DType::F32,
            shape: vec![2, 2],
            data: [1.0f32, -2.0, 3.0, 6.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        };
        let s = a.summary();
        assert_eq!((s.min, s.max, s.mean), (Some(-2.0), Some(6.0), Some(2.0)));
        assert_eq!(
            s.to_string(),
            "f32 [2, 2], min -2.000000, max 6.000000, mean 2.000000"
        );
        let empty = Array {
            dtype: DType::I64,
            shape: vec![0],
            data: vec![],
        };
        assert_eq!(empty.summary().to_string(), "i64 [0]");
    }

    use super::*;

    #[test]
    fn round_trip_every_dtype_and_rank() {
        let dir = std::env::temp_dir().join(format!("npy-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (dtype, shape) in [
            (DType::F32, vec![2, 3]),
            (DType::F16, vec![4]),
            (DType::Bool, vec![]),
            (DType::I64, vec![1, 1, 2]),
        ] {
            let n: usize = shape.iter().product();
            let data = (0..n * dtype.size()).map(|i| (i % 2) as u8).collect();
            let a = Array { dtype, shape, data };
            let p = dir.join("a.npy");
            write(&p, &a).unwrap();
            assert_eq!(read(&p).unwrap(), a);
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn rejects_bad_files() {
        assert!(parse(b"hello").is_err());
        let mut ok = Vec::new();
        ok.extend_from_slice(b"\x93NUMPY\x01\x00");
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n";
        ok.extend_from_slice(&(h.len() as u16).to_le_bytes());
        ok.extend_from_slice(h.as_bytes());
        ok.extend_from_slice(&[0; 8]);
        assert!(parse(&ok).unwrap_err().contains("needs 12 bytes"));
    }
}
