//! Model inputs that a compiled graph does not take: their value was fixed at compile time
//! ([`crate::LowerOptions::fix_inputs`]) or resolved from the shapes the model declares (a
//! Reshape's `shape`, an Unsqueeze's `axes`, a Resize's `scales` given as graph inputs). The
//! graph was built for that value, so a caller that still passes the input has it checked on
//! the host ([`AssumedInput::check`]) and never silently ignored.

use crate::dtype::DType;
use crate::ir::tensor::Tensor;
use crate::ops::shape::reshape::reshape_shape;

/// A model input whose value the compiled graph assumes.
#[derive(Clone, Debug, PartialEq)]
pub struct AssumedInput {
    /// The ONNX graph input name.
    pub onnx_name: String,
    /// Its position among all of the model's graph inputs (ONNX order), assumed ones included.
    pub index: usize,
    /// The value the graph was compiled for, in the model's dtype and shape.
    pub value: Tensor,
    /// Where the value comes from.
    pub origin: Source,
    /// How a value passed at run time is compared with `value`: it must pass every one.
    pub accept: Vec<Accept>,
}

/// Where an assumed value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Given by the caller (`--fix-input`, `fix_inputs`).
    Fixed,
    /// Resolved from the declared shape of `value`, the output of ONNX node `node`.
    Declared { node: String, value: String },
}

/// What a value passed at run time must satisfy. Shape-defining inputs are compared by what
/// they mean for their node, not by their spelling: a Reshape `shape` of `[2, -1]` and one of
/// `[2, 12]` give the same result for a `[2, 3, 4]` input.
#[derive(Clone, Debug, PartialEq)]
pub enum Accept {
    /// The same values (floats compared as numbers: `-0.0 == 0.0`, NaN never equal).
    Equal,
    /// A Reshape `shape` that turns a tensor of shape `input` into `output`.
    Reshape {
        input: Vec<usize>,
        allowzero: bool,
        output: Vec<usize>,
    },
    /// Unsqueeze `axes` that turn `input` into `output`.
    Unsqueeze {
        input: Vec<usize>,
        output: Vec<usize>,
    },
    /// Squeeze `axes` that turn `input` into `output`.
    Squeeze {
        input: Vec<usize>,
        output: Vec<usize>,
    },
    /// An Expand `shape` that broadcasts `input` to `output`.
    Expand {
        input: Vec<usize>,
        output: Vec<usize>,
    },
    /// Reduce `axes` that reduce the same elements of an `input`-shaped tensor (see
    /// [`reduce_key`]).
    Reduce {
        input: Vec<usize>,
        keepdims: bool,
        noop_with_empty_axes: bool,
    },
}

impl Accept {
    /// Whether `given` means for its node what `assumed` does.
    pub fn accepts(&self, assumed: &Tensor, given: &Tensor) -> bool {
        let ints = || given.to_i64();
        match self {
            Accept::Equal => {
                given.shape == assumed.shape
                    && given
                        .to_f64()
                        .iter()
                        .zip(assumed.to_f64())
                        .all(|(a, b)| *a == b)
            }
            Accept::Reshape {
                input,
                allowzero,
                output,
            } => {
                given.shape.len() == 1
                    && reshape_shape(input, &ints(), *allowzero).as_ref() == Ok(output)
            }
            Accept::Unsqueeze { input, output } => {
                unsqueeze_shape(input, &ints()).as_ref() == Some(output)
            }
            Accept::Squeeze { input, output } => {
                squeeze_shape(input, &ints()).as_ref() == Some(output)
            }
            Accept::Expand { input, output } => {
                given.shape.len() == 1 && expand_shape(input, &ints()).as_ref() == Some(output)
            }
            Accept::Reduce {
                input,
                keepdims,
                noop_with_empty_axes,
            } => {
                let key =
                    |t: &Tensor| reduce_key(input, &t.to_i64(), *keepdims, *noop_with_empty_axes);
                let k = key(given);
                k.is_some() && k == key(assumed)
            }
        }
    }

    /// What else a value may be, for messages (nothing for [`Accept::Equal`]).
    fn describe(&self) -> String {
        match self {
            Accept::Equal => String::new(),
            Accept::Reshape { input, output, .. } => {
                format!("or any shape that reshapes {input:?} to {output:?}; ")
            }
            Accept::Unsqueeze { input, output } | Accept::Squeeze { input, output } => {
                format!("or any axes that turn {input:?} into {output:?}; ")
            }
            Accept::Expand { input, output } => {
                format!("or any shape that expands {input:?} to {output:?}; ")
            }
            Accept::Reduce { input, .. } => {
                format!("or any axes that reduce the same dims of {input:?}; ")
            }
        }
    }
}

impl AssumedInput {
    /// Checks a value passed at run time for this input (in the model's dtype); the error says
    /// which value the compiled graph assumes.
    pub fn check(&self, given: &Tensor) -> Result<(), String> {
        if given.dtype != self.value.dtype {
            return Err(format!(
                "input {:?} is {} but the model declares {}",
                self.onnx_name,
                given.dtype.name(),
                self.value.dtype.name()
            ));
        }
        let bad = self.accept.iter().find(|a| !a.accepts(&self.value, given));
        let Some(bad) = bad else { return Ok(()) };
        let why = match &self.origin {
            Source::Fixed => "it was fixed at compile time".to_string(),
            Source::Declared { node, value } => format!(
                "it was resolved at compile time from the declared shape of {value:?} (the \
                 output of node {node:?})"
            ),
        };
        Err(format!(
            "input {:?} is {} but the compiled graph assumes {} ({}{why}); pass that value, or \
             compile again with it fixed (--fix-input {}=VALUE, Python fix_inputs)",
            self.onnx_name,
            fmt_value(given),
            fmt_value(&self.value),
            bad.describe(),
            self.onnx_name,
        ))
    }
}

/// A small tensor's values for messages: `3`, `0.5`, `true`, `[1, 2, 3]`.
pub fn fmt_value(t: &Tensor) -> String {
    let one = |i: usize| -> String {
        match t.dtype {
            DType::Bool => (t.get_i64(i) != 0).to_string(),
            // As the value was written: 0.8 for an f32 0.8, not its f64 expansion.
            DType::F32 | DType::F16 | DType::BF16 => format!("{}", t.get_f64(i) as f32),
            DType::F64 => format!("{}", t.get_f64(i)),
            _ => t.get_i64(i).to_string(),
        }
    };
    let n = t.numel();
    if t.shape.is_empty() && n == 1 {
        return one(0);
    }
    let shown: Vec<String> = (0..n.min(16)).map(one).collect();
    let more = if n > 16 { ", ..." } else { "" };
    let shape = if t.shape.len() > 1 {
        format!(" (shape {:?})", t.shape)
    } else {
        String::new()
    };
    format!("[{}{more}]{shape}", shown.join(", "))
}

/// `a` in `[0, rank)` (negative counts from the end), or `None`.
pub fn norm_axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    (0..r).contains(&v).then_some(v as usize)
}

/// Sorted, distinct axes in `[0, rank)`, or `None` (out of range or repeated).
fn norm_set(axes: &[i64], rank: usize) -> Option<Vec<usize>> {
    let mut v: Vec<usize> = axes
        .iter()
        .map(|&a| norm_axis(a, rank))
        .collect::<Option<_>>()?;
    v.sort_unstable();
    let n = v.len();
    v.dedup();
    (v.len() == n).then_some(v)
}

/// ONNX Unsqueeze of `input` at `axes` (of the output rank), or `None`.
pub fn unsqueeze_shape(input: &[usize], axes: &[i64]) -> Option<Vec<usize>> {
    let rank = input.len() + axes.len();
    let axes = norm_set(axes, rank)?;
    let mut it = input.iter();
    (0..rank)
        .map(|i| {
            if axes.contains(&i) {
                Some(1)
            } else {
                it.next().copied()
            }
        })
        .collect()
}

/// ONNX Squeeze of `input` at `axes` (every size-1 dim when empty), or `None`.
pub fn squeeze_shape(input: &[usize], axes: &[i64]) -> Option<Vec<usize>> {
    let axes = if axes.is_empty() {
        (0..input.len()).filter(|&i| input[i] == 1).collect()
    } else {
        norm_set(axes, input.len())?
    };
    if axes.iter().any(|&a| input[a] != 1) {
        return None;
    }
    Some(
        (0..input.len())
            .filter(|i| !axes.contains(i))
            .map(|i| input[i])
            .collect(),
    )
}

/// ONNX Expand of `input` to `shape` (numpy broadcast of the two), or `None`.
pub fn expand_shape(input: &[usize], shape: &[i64]) -> Option<Vec<usize>> {
    let shape: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()?;
    let rank = input.len().max(shape.len());
    let pad = |s: &[usize], i: usize| {
        let off = rank - s.len();
        if i < off {
            1
        } else {
            s[i - off]
        }
    };
    (0..rank)
        .map(|i| {
            let (a, b) = (pad(input, i), pad(&shape, i));
            match (a, b) {
                (a, b) if a == b => Some(a),
                (1, b) => Some(b),
                (a, 1) => Some(a),
                _ => None,
            }
        })
        .collect()
}

/// What a Reduce with `axes` computes on an `input`-shaped tensor, as a comparable key: the
/// reduced dims, and whether the reduction applies at all (an empty `axes` with
/// `noop_with_empty_axes` leaves the data alone; without it, it reduces every dim). With
/// `keepdims`, reducing a size-1 dim changes neither the grouping of elements nor the shape,
/// so such dims are left out; without it they are removed from the shape and count. `None`
/// for invalid axes.
pub fn reduce_key(
    input: &[usize],
    axes: &[i64],
    keepdims: bool,
    noop_with_empty_axes: bool,
) -> Option<(Vec<usize>, bool)> {
    let set = if axes.is_empty() {
        if noop_with_empty_axes {
            return Some((vec![], false));
        }
        (0..input.len()).collect()
    } else {
        norm_set(axes, input.len())?
    };
    let applies = !set.is_empty() || input.is_empty();
    let dims = if keepdims {
        set.into_iter().filter(|&a| input[a] != 1).collect()
    } else {
        set
    };
    Some((dims, applies))
}

/// The output shape of a Reduce (see [`reduce_key`] for `axes`), or `None`.
pub fn reduce_shape(
    input: &[usize],
    axes: &[i64],
    keepdims: bool,
    noop_with_empty_axes: bool,
) -> Option<Vec<usize>> {
    let set = if axes.is_empty() {
        if noop_with_empty_axes {
            return Some(input.to_vec());
        }
        (0..input.len()).collect()
    } else {
        norm_set(axes, input.len())?
    };
    Some(if keepdims {
        (0..input.len())
            .map(|i| if set.contains(&i) { 1 } else { input[i] })
            .collect()
    } else {
        (0..input.len())
            .filter(|i| !set.contains(i))
            .map(|i| input[i])
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> Tensor {
        Tensor::from_i64(vec![v.len()], v)
    }

    #[test]
    fn reshape_accepts_spellings_of_the_same_shape() {
        let a = Accept::Reshape {
            input: vec![2, 3, 4],
            allowzero: false,
            output: vec![2, 12],
        };
        let assumed = ints(&[2, 12]);
        for ok in [&[2, 12][..], &[2, -1], &[0, -1], &[-1, 12]] {
            assert!(a.accepts(&assumed, &ints(ok)), "{ok:?}");
        }
        for bad in [&[12, 2][..], &[24], &[2, 3, 4], &[-1, -1]] {
            assert!(!a.accepts(&assumed, &ints(bad)), "{bad:?}");
        }
    }

    #[test]
    fn axes_accept_negative_and_reordered_spellings() {
        let u = Accept::Unsqueeze {
            input: vec![3, 4],
            output: vec![3, 1, 4, 1],
        };
        let assumed = ints(&[1, 3]);
        assert!(u.accepts(&assumed, &ints(&[3, 1])));
        assert!(u.accepts(&assumed, &ints(&[-1, 1])));
        assert!(!u.accepts(&assumed, &ints(&[0, 1])));
        assert!(!u.accepts(&assumed, &ints(&[1, 1])));
        let s = Accept::Squeeze {
            input: vec![1, 3, 1],
            output: vec![3],
        };
        assert!(s.accepts(&ints(&[0, 2]), &ints(&[])));
        assert!(s.accepts(&ints(&[0, 2]), &ints(&[-1, 0])));
        assert!(!s.accepts(&ints(&[0, 2]), &ints(&[0])));
        let e = Accept::Expand {
            input: vec![3, 1],
            output: vec![2, 3, 6],
        };
        assert!(e.accepts(&ints(&[2, 3, 6]), &ints(&[2, 1, 6])));
        assert!(!e.accepts(&ints(&[2, 3, 6]), &ints(&[2, 3, 5])));
    }

    #[test]
    fn reduce_compares_what_is_reduced() {
        let r = |keepdims, noop| Accept::Reduce {
            input: vec![3, 1, 2],
            keepdims,
            noop_with_empty_axes: noop,
        };
        // Every dim, written as no axes, all axes or all non-unit axes (keepdims).
        let all = ints(&[0, 1, 2]);
        assert!(r(true, false).accepts(&all, &ints(&[])));
        assert!(r(true, false).accepts(&all, &ints(&[0, 2])));
        assert!(r(true, false).accepts(&all, &ints(&[-1, -3, 1])));
        assert!(!r(true, false).accepts(&all, &ints(&[0])));
        // Without keepdims a size-1 dim disappears from the output: it counts.
        assert!(!r(false, false).accepts(&all, &ints(&[0, 2])));
        // An empty axes with noop_with_empty_axes does nothing, unlike reducing a unit dim.
        assert!(!r(true, true).accepts(&ints(&[1]), &ints(&[])));
        assert!(!r(true, false).accepts(&all, &ints(&[0, 0])));
    }

    #[test]
    fn equal_and_messages() {
        let a = AssumedInput {
            onnx_name: "sr".into(),
            index: 1,
            value: Tensor::from_i64(vec![], &[16000]),
            origin: Source::Fixed,
            accept: vec![Accept::Equal],
        };
        assert!(a.check(&Tensor::from_i64(vec![], &[16000])).is_ok());
        let e = a.check(&Tensor::from_i64(vec![], &[8000])).unwrap_err();
        assert_eq!(
            e,
            "input \"sr\" is 8000 but the compiled graph assumes 16000 (it was fixed at compile \
             time); pass that value, or compile again with it fixed (--fix-input sr=VALUE, Python \
             fix_inputs)"
        );
        let e = a.check(&Tensor::from_f32(vec![], &[1.0])).unwrap_err();
        assert!(e.contains("is f32 but the model declares i64"), "{e}");
        assert_eq!(
            fmt_value(&Tensor::from_f32(vec![2], &[0.5, 2.0])),
            "[0.5, 2]"
        );
        assert_eq!(
            fmt_value(&Tensor::from_i64_as(DType::Bool, vec![], &[1])),
            "true"
        );
    }

    #[test]
    fn shape_functions() {
        assert_eq!(unsqueeze_shape(&[3], &[0, -1]), Some(vec![1, 3, 1]));
        assert_eq!(unsqueeze_shape(&[3], &[0, 0]), None);
        assert_eq!(squeeze_shape(&[1, 3], &[1]), None);
        assert_eq!(expand_shape(&[2, 1], &[3, 1, 4]), Some(vec![3, 2, 4]));
        assert_eq!(reduce_shape(&[3, 2], &[], false, false), Some(vec![]));
        assert_eq!(reduce_shape(&[3, 2], &[-1], true, false), Some(vec![3, 1]));
        assert!(reshape_shape(&[2, 3], &[0, 0], true).is_err());
    }
}
