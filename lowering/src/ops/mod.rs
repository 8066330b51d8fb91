//! Lowering rules and everything else lowering knows per op: one module per op family, each op's
//! registry entry ([`OpDef`]) in its file, and the [`registry`] that looks entries up by ONNX
//! op type.

pub mod activation;
pub mod attention;
pub mod cast;
pub mod conv;
pub mod elementwise;
pub mod folded;
pub mod loss;
pub mod lower_cx;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod registry;
pub mod resize;
pub mod shape;

pub use lower_cx::{plan_shape, u32s, LowerCx};
pub use registry::{def, defs, rule, Expander, OpDef, Rule};

#[cfg(test)]
pub(crate) mod test_util {
    use crate::plan::Plan;
    use crate::testing::ModelBuilder;
    use crate::{Backend, LowerOptions};

    pub fn lower(b: &ModelBuilder) -> Plan {
        lower_with(b, &LowerOptions::default())
    }

    pub fn lower_with(b: &ModelBuilder, o: &LowerOptions) -> Plan {
        match crate::lower(b.load(), o) {
            Ok(p) => p,
            Err(e) => panic!("lowering failed: {e}"),
        }
    }

    pub fn lower_err(b: &ModelBuilder) -> String {
        lower_err_on(b, Backend::Htp)
    }

    pub fn lower_err_on(b: &ModelBuilder, backend: Backend) -> String {
        let o = LowerOptions {
            backend,
            ..Default::default()
        };
        match crate::lower(b.load(), &o) {
            Ok(p) => panic!("expected an error, got plan:\n{}", p.dump()),
            Err(e) => e.to_string(),
        }
    }
}
