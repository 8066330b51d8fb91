//! Graph inputs fixed to a constant at compile time ([`crate::LowerOptions::fix_inputs`]): a
//! sample rate, a mode flag, a shape. The input becomes a constant before shape inference, so
//! everything it decides folds (an `If` on a flag, a Reshape to a given shape), and it leaves
//! the compiled graph; a caller that still passes it has it checked
//! ([`crate::plan::AssumedInput`]).

use std::collections::BTreeMap;

use crate::dtype::DType;
use crate::error::{invalid, Result};
use crate::frontend::load::Model;
use crate::ir::tensor::Tensor;
use crate::ir::Graph;
use crate::plan::{Accept, AssumedInput, Source};

/// The most values a fixed input may have: it is meant for scalars and short shapes.
pub const MAX_VALUES: usize = 4096;

/// Parses a fixed input's value as the front ends spell it: `3`, `0.5`, `true`, `1,2,3`
/// (optionally in brackets; an empty list is `[]`). The dtype and shape come from the model's
/// declaration of the input: a declared static shape must hold exactly the values given; a
/// rank-1 shape with a symbolic length takes their count; without a declared shape one value
/// is a scalar and a list is 1-D.
pub fn parse_value(
    text: &str,
    dtype: DType,
    declared: Option<&[Option<usize>]>,
) -> Result<Tensor, String> {
    let t = text.trim();
    let inner = t
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(t)
        .trim();
    let items: Vec<&str> = if inner.is_empty() {
        vec![]
    } else {
        inner.split(',').map(str::trim).collect()
    };
    let listed = t.starts_with('[') || t.contains(',');
    if items.len() > MAX_VALUES {
        return Err(format!(
            "{} values; a fixed input holds at most {MAX_VALUES}",
            items.len()
        ));
    }
    let n = items.len();
    let shape: Vec<usize> = match declared {
        None if n == 1 && !listed => vec![],
        None => vec![n],
        Some(d) if d.iter().all(Option::is_some) => {
            let shape: Vec<usize> = d.iter().map(|x| x.unwrap_or(0)).collect();
            let want: usize = shape.iter().product();
            if want != n {
                return Err(format!(
                    "{n} value(s) given, but the model declares shape {shape:?} ({want} value(s))"
                ));
            }
            shape
        }
        Some([None]) => vec![n],
        Some(d) => {
            return Err(format!(
                "the model declares {} symbolic dims of rank {}; only a scalar or a 1-D input \
                 can be fixed",
                d.iter().filter(|x| x.is_none()).count(),
                d.len()
            ))
        }
    };
    let bad = |s: &str| format!("{s:?} is not a {} value", dtype.name());
    match dtype {
        DType::I4 | DType::U4 => Err(format!(
            "{} inputs cannot be fixed (4-bit types are only weight storage)",
            dtype.name()
        )),
        DType::Bool => {
            let v = items
                .iter()
                .map(|s| match s.to_ascii_lowercase().as_str() {
                    "true" | "1" => Ok(1),
                    "false" | "0" => Ok(0),
                    _ => Err(bad(s)),
                })
                .collect::<Result<Vec<i64>, String>>()?;
            Ok(Tensor::from_i64_as(dtype, shape, &v))
        }
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 => {
            let v = items
                .iter()
                .map(|s| s.parse::<f64>().map_err(|_| bad(s)))
                .collect::<Result<Vec<f64>, String>>()?;
            Ok(Tensor::from_f64_as(dtype, shape, &v))
        }
        DType::I8
        | DType::U8
        | DType::I16
        | DType::U16
        | DType::I32
        | DType::U32
        | DType::I64
        | DType::U64 => {
            let (lo, hi): (i128, i128) = match dtype {
                DType::I8 => (i8::MIN.into(), i8::MAX.into()),
                DType::U8 => (0, u8::MAX.into()),
                DType::I16 => (i16::MIN.into(), i16::MAX.into()),
                DType::U16 => (0, u16::MAX.into()),
                DType::I32 => (i32::MIN.into(), i32::MAX.into()),
                DType::U32 => (0, u32::MAX.into()),
                // Held as i64 on the host.
                _ => (
                    if dtype == DType::U64 {
                        0
                    } else {
                        i64::MIN.into()
                    },
                    i64::MAX.into(),
                ),
            };
            let v = items
                .iter()
                .map(|s| {
                    let x = s.parse::<i128>().map_err(|_| bad(s))?;
                    if x < lo || x > hi {
                        return Err(format!("{x} is out of range for {}", dtype.name()));
                    }
                    Ok(x as i64)
                })
                .collect::<Result<Vec<i64>, String>>()?;
            Ok(Tensor::from_i64_as(dtype, shape, &v))
        }
    }
}

/// Makes each input named in `fix` a constant of its parsed value and removes it from the graph
/// inputs; returns what the plan records of each, in ONNX order.
pub fn run(
    g: &mut Graph,
    model: &Model,
    fix: &BTreeMap<String, String>,
) -> Result<Vec<AssumedInput>> {
    let mut assumed = Vec::new();
    for (k, &v) in model.graph.inputs.iter().enumerate() {
        let name = &model.graph.values[v].name;
        let Some(text) = fix.get(name) else { continue };
        let declared = model.input_dims.get(k).and_then(|d| d.as_deref());
        let value = parse_value(text, g.values[v].dtype, declared)
            .map_err(|e| invalid(format!("fix_inputs: input '{name}' = {text:?}: {e}")))?;
        g.set_const(v, value.clone());
        g.inputs.retain(|&i| i != v);
        assumed.push(AssumedInput {
            onnx_name: name.clone(),
            index: k,
            value,
            origin: Source::Fixed,
            accept: vec![Accept::Equal],
        });
    }
    for name in fix.keys() {
        if !model
            .graph
            .inputs
            .iter()
            .any(|&v| &model.graph.values[v].name == name)
        {
            let names: Vec<&str> = model
                .graph
                .inputs
                .iter()
                .map(|&v| model.graph.values[v].name.as_str())
                .collect();
            return Err(invalid(format!(
                "fix_inputs names '{name}', which is not a graph input (the inputs are {names:?})"
            )));
        }
    }
    Ok(assumed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_take_the_declared_dtype_and_shape() {
        let p = |t: &str, d: DType, decl: Option<&[Option<usize>]>| parse_value(t, d, decl);
        let s = p("3", DType::I64, Some(&[])).unwrap();
        assert_eq!((s.shape.clone(), s.to_i64()), (vec![], vec![3]));
        let s = p("0.5", DType::F32, Some(&[Some(1)])).unwrap();
        assert_eq!((s.shape.clone(), s.to_f64()), (vec![1], vec![0.5]));
        let s = p("true", DType::Bool, None).unwrap();
        assert_eq!((s.shape.clone(), s.to_i64()), (vec![], vec![1]));
        let s = p("1, 2,3", DType::I64, Some(&[None])).unwrap();
        assert_eq!((s.shape.clone(), s.to_i64()), (vec![3], vec![1, 2, 3]));
        let s = p("[4]", DType::I32, None).unwrap();
        assert_eq!(s.shape, vec![1]);
        let s = p("[]", DType::I64, Some(&[None])).unwrap();
        assert_eq!(s.shape, vec![0]);
        let s = p("1,2,3,4", DType::F16, Some(&[Some(2), Some(2)])).unwrap();
        assert_eq!(s.to_f64(), vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn bad_values_are_refused() {
        let e = |t: &str, d: DType, decl: Option<&[Option<usize>]>| {
            parse_value(t, d, decl).unwrap_err()
        };
        assert!(e("1,2", DType::I64, Some(&[])).contains("declares shape []"));
        assert!(e("yes", DType::Bool, None).contains("\"yes\" is not a bool value"));
        assert!(e("0.5", DType::I64, None).contains("not a i64 value"));
        assert!(e("300", DType::U8, None).contains("300 is out of range for u8"));
        assert!(e("-1", DType::U32, None).contains("out of range"));
        assert!(e("1", DType::F32, Some(&[None, Some(2)])).contains("only a scalar or a 1-D"));
    }

    use crate::plan::Source;
    use crate::testing::ModelBuilder;
    use crate::{lower, LowerOptions};

    fn fixed(pairs: &[(&str, &str)]) -> LowerOptions {
        LowerOptions {
            fix_inputs: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn fixed_inputs_fold_and_leave_the_graph() {
        // A shape given as an input, and a scale: both fixed, the Reshape's target folds and
        // the scale becomes a static operand.
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2, 6])
            .input("shape", DType::I64, &[3])
            .input("scale", DType::F32, &[])
            .node("Reshape", &["x", "shape"], &["r"], &[])
            .node("Mul", &["r", "scale"], &["y"], &[])
            .output("y");
        let e = lower(b.bytes(), &LowerOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("input 'shape' must be a constant"), "{e}");
        let p = lower(b.bytes(), &fixed(&[("shape", "2,3,-1"), ("scale", "0.5")])).unwrap();
        assert_eq!(
            p.dump(),
            "input x:f32[2, 6]\nassumed shape = [2, 3, -1]\nassumed scale = 0.5\n\
             Reshape(x:f32[2, 6]) -> r:f32[2, 3, 2]\n\
             ElementWiseMultiply(r:f32[2, 3, 2], static scale_r3:f32[1, 1, 1]) -> y:f32[2, 3, 2]\n\
             output y:f32[2, 3, 2]\n"
        );
        let a = &p.assumed_inputs;
        assert_eq!((a[0].onnx_name.as_str(), a[0].index), ("shape", 1));
        assert_eq!((a[1].onnx_name.as_str(), a[1].index), ("scale", 2));
        assert_eq!(a[1].origin, Source::Fixed);
        assert!(a[1].check(&Tensor::from_f32(vec![], &[0.5])).is_ok());
        assert!(a[1].check(&Tensor::from_f32(vec![], &[0.25])).is_err());
    }

    #[test]
    fn fixing_an_unknown_input_or_a_bad_value_is_an_error() {
        let b = ModelBuilder::new(17)
            .input("x", DType::F32, &[2])
            .input("n", DType::I64, &[])
            .node("Relu", &["x"], &["y"], &[])
            .output("y");
        let e = lower(b.bytes(), &fixed(&[("m", "1")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "fix_inputs names 'm', which is not a graph input (the inputs are [\"x\", \"n\"])"
            ),
            "{e}"
        );
        let e = lower(b.bytes(), &fixed(&[("n", "1,2")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fix_inputs: input 'n' = \"1,2\": 2 value(s) given"),
            "{e}"
        );
        // An input only fixed (its value unused) still leaves the graph.
        let p = lower(b.bytes(), &fixed(&[("n", "7")])).unwrap();
        assert_eq!(p.inputs.len(), 1);
        assert_eq!(p.assumed_inputs.len(), 1);
    }
}
