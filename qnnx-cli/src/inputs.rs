//! The inputs of `qnnx run`, `qnnx compare` and `qnnx quantize`: `.npy` files given by name,
//! random data seeded by the input's name, or samples in `.npz` files.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use qnnx_engine::HostTensor;
use qnnx_types::DType;

use crate::npy;
use crate::Failure;

/// One graph input or output as the user sees it.
pub(crate) struct Io {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

pub(crate) fn name_seed(name: &str) -> u64 {
    // FNV-1a: the same input gets the same random values whatever the graph's input order.
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(crate) fn random_array(io: &Io) -> npy::Array {
    let mut s = name_seed(&io.name)
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    let mut next = move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 33) as u32
    };
    let n: usize = io.shape.iter().product();
    let mut data = Vec::with_capacity(n * io.dtype.size());
    for _ in 0..n {
        let u = next();
        let unit = u as f32 / u32::MAX as f32 * 2.0 - 1.0;
        match io.dtype {
            DType::F32 => data.extend_from_slice(&unit.to_le_bytes()),
            DType::F16 => data.extend_from_slice(&half::f16::from_f32(unit).to_le_bytes()),
            DType::F64 => data.extend_from_slice(&f64::from(unit).to_le_bytes()),
            DType::BF16 => data.extend_from_slice(&half::bf16::from_f32(unit).to_le_bytes()),
            DType::Bool => data.push((u & 1) as u8),
            // Small non-negative integers: valid as indices for most index inputs.
            d => {
                let v = (u % 8) as u64;
                data.extend_from_slice(&v.to_le_bytes()[..d.size()]);
            }
        }
    }
    npy::Array {
        dtype: io.dtype,
        shape: io.shape.clone(),
        data,
    }
}

/// The `--input NAME=FILE.npy` arrays by name.
pub(crate) fn given_arrays(specs: &[String]) -> Result<HashMap<String, npy::Array>, Failure> {
    let mut given = HashMap::new();
    for spec in specs {
        let (n, file) = spec
            .split_once('=')
            .ok_or_else(|| Failure::usage(format!("--input {spec:?}: expected NAME=FILE.npy")))?;
        given.insert(n.to_string(), npy::read(Path::new(file))?);
    }
    Ok(given)
}

/// The input arrays, in `ios` order: from `--input` files or random.
pub(crate) fn input_arrays(
    specs: &[String],
    ios: &[Io],
    what: &str,
) -> Result<Vec<npy::Array>, Failure> {
    let given = given_arrays(specs)?;
    let (arrays, given) = arrays_for(given, ios, what)?;
    if let Some(extra) = given.keys().next() {
        let names: Vec<_> = ios.iter().map(|t| t.name.clone()).collect();
        return Err(Failure::new(format!(
            "{what} has no input {extra:?}; its inputs are {names:?}"
        )));
    }
    Ok(arrays)
}

/// The arrays of `ios` taken from `given` (checked against `ios`) or random; returns what is
/// left of `given`.
pub(crate) fn arrays_for(
    mut given: HashMap<String, npy::Array>,
    ios: &[Io],
    what: &str,
) -> Result<(Vec<npy::Array>, HashMap<String, npy::Array>), Failure> {
    let mut arrays = Vec::new();
    for io in ios {
        let a = match given.remove(&io.name) {
            Some(a) => {
                if a.dtype != io.dtype || a.shape != io.shape {
                    return Err(Failure::new(format!(
                        "input {:?}: the file holds {} {:?}, {what} takes {} {:?}",
                        io.name, a.dtype, a.shape, io.dtype, io.shape
                    )));
                }
                a
            }
            None => random_array(io),
        };
        arrays.push(a);
    }
    Ok((arrays, given))
}

/// The .npy members of a .npz file, by name without `.npy`.
fn read_npz(path: &Path) -> Result<BTreeMap<String, npy::Array>, Failure> {
    let fail = |e: String| Failure::new(format!("{}: {e}", path.display()));
    let f = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut z = zip::ZipArchive::new(f).map_err(|e| fail(format!("not a .npz (zip) file: {e}")))?;
    let mut out = BTreeMap::new();
    for i in 0..z.len() {
        let mut m = z.by_index(i).map_err(|e| fail(e.to_string()))?;
        let name = m.name().trim_end_matches(".npy").to_string();
        let mut bytes = Vec::new();
        m.read_to_end(&mut bytes).map_err(|e| fail(e.to_string()))?;
        let a = npy::parse(&bytes).map_err(|e| fail(format!("array {name:?}: {e}")))?;
        out.insert(name, a);
    }
    Ok(out)
}

/// The samples of a .npz file (one array per model input, holding one sample or several
/// stacked on a new first axis) or of a folder of .npz files (one sample each, in name order):
/// each sample the model's inputs in order. `qnnx quantize --calib` and `qnnx compare --inputs`.
pub(crate) fn npz_samples(
    path: &Path,
    inputs: &[(String, DType, Vec<usize>)],
) -> Result<Vec<Vec<HostTensor>>, Failure> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| Failure::new(format!("{}: {e}", path.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "npz"))
            .collect();
        v.sort();
        if v.is_empty() {
            return Err(Failure::usage(format!(
                "{}: the folder has no .npz files (one per sample)",
                path.display()
            )));
        }
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut out = Vec::new();
    for f in &files {
        let mut arrays = read_npz(f)?;
        let unknown: Vec<&String> = arrays
            .keys()
            .filter(|k| !inputs.iter().any(|(n, ..)| n == *k))
            .collect();
        if !unknown.is_empty() {
            let names: Vec<&str> = inputs.iter().map(|(n, ..)| n.as_str()).collect();
            return Err(Failure::usage(format!(
                "{}: array {:?} is not a model input (the inputs are {})",
                f.display(),
                unknown[0],
                names.join(", ")
            )));
        }
        // Every input: one sample, or several stacked on a new first axis.
        let mut count = None;
        let mut per_input = Vec::new();
        for (name, dtype, shape) in inputs {
            let a = arrays.remove(name).ok_or_else(|| {
                Failure::usage(format!(
                    "{}: no array {name:?}: give one per model input",
                    f.display()
                ))
            })?;
            if a.dtype != *dtype {
                return Err(Failure::usage(format!(
                    "{}: {name:?} is {} but the model takes {dtype} (convert it with \
                     .astype before saving)",
                    f.display(),
                    a.dtype
                )));
            }
            let n = if a.shape == *shape {
                1
            } else if a.shape.len() == shape.len() + 1 && a.shape[1..] == shape[..] {
                a.shape[0]
            } else {
                return Err(Failure::usage(format!(
                    "{}: {name:?} has shape {:?}; the model takes {shape:?} (or N of them \
                     stacked: [N, ...])",
                    f.display(),
                    a.shape
                )));
            };
            if *count.get_or_insert(n) != n {
                return Err(Failure::usage(format!(
                    "{}: the inputs hold different numbers of samples",
                    f.display()
                )));
            }
            per_input.push(a);
        }
        for k in 0..count.unwrap_or(0) {
            let sample = per_input
                .iter()
                .zip(inputs)
                .map(|(a, (_, dtype, shape))| {
                    let size = shape.iter().product::<usize>() * dtype.size();
                    HostTensor {
                        dtype: *dtype,
                        shape: shape.clone(),
                        data: a.data[k * size..(k + 1) * size].to_vec(),
                    }
                })
                .collect();
            out.push(sample);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_inputs_depend_on_the_name_only() {
        let io = |name: &str| Io {
            name: name.into(),
            dtype: DType::F32,
            shape: vec![2, 3],
        };
        assert_eq!(random_array(&io("x")), random_array(&io("x")));
        assert_ne!(random_array(&io("x")).data, random_array(&io("y")).data);
    }
}
