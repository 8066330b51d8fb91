//! int64 → int32 (and uint64 → uint32): HTP has no 64-bit integer tensors.
//!
//! Activations are narrowed unconditionally (their values are produced on the device; the
//! runtime range-checks int64 graph inputs when it converts them, see `plan::PlanIo`).
//! Constants are narrowed only when every value fits; one that does not stays 64-bit, which is
//! fine when a rule reads it on the host (Slice ends of `INT64_MAX`) and an error naming the
//! node when it would have to become a QNN tensor.

use crate::dtype::{DType, OnnxCode};
use crate::ir::{Attr, Graph};

pub fn run(g: &mut Graph) {
    for v in &mut g.values {
        let to = match v.dtype {
            DType::I64 => DType::I32,
            DType::U64 => DType::U32,
            _ => continue,
        };
        match &v.konst {
            Some(t) => {
                let vals = t.to_i64();
                let fits = match to {
                    DType::I32 => vals.iter().all(|&x| i32::try_from(x).is_ok()),
                    _ => vals.iter().all(|&x| u32::try_from(x).is_ok()),
                };
                if fits {
                    let nt = t.cast(to);
                    v.konst = Some(nt);
                    v.dtype = to;
                }
            }
            None => v.dtype = to,
        }
    }
    for n in &mut g.nodes {
        if n.op_type == "Cast" {
            match n.attrs.get("to") {
                Some(Attr::Int(7)) => {
                    n.attrs
                        .insert("to".into(), Attr::Int(DType::I32.to_onnx() as i64));
                }
                Some(Attr::Int(13)) => {
                    n.attrs
                        .insert("to".into(), Attr::Int(DType::U32.to_onnx() as i64));
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::tensor::Tensor;
    use crate::testing::{ModelBuilder, A};

    #[test]
    fn narrows_activations_and_fitting_constants() {
        let mut g = ModelBuilder::new(17)
            .input("ids", DType::I64, &[4])
            .init("small", Tensor::from_i64(vec![1], &[3]))
            .init("huge", Tensor::from_i64(vec![1], &[i64::MAX]))
            .node("Add", &["ids", "small"], &["a"], &[])
            .node("Cast", &["a"], &["y"], &[("to", A::I(7))])
            .output("y")
            .load()
            .graph;
        let _ = crate::passes::const_fold::run(&mut g);
        run(&mut g);
        let m = g.name_map();
        assert_eq!(g.dtype(m["ids"]), DType::I32);
        assert_eq!(g.dtype(m["small"]), DType::I32);
        assert_eq!(g.dtype(m["huge"]), DType::I64);
        assert_eq!(g.dtype(m["y"]), DType::I32);
        assert_eq!(g.nodes[1].attrs["to"], Attr::Int(6));
    }
}
