//! What a compiled context binary depends on, as a [`CacheKey`]: the key policy of the compile
//! driver. The encoding is the cache's [`KeyBuilder`]; the choice of fields is here, once, for
//! single- and multi-model compiles, beside the options they are taken from (the cache below
//! stores keys and knows nothing of compile options).

use std::collections::BTreeMap;

use qnnx_types::{BackendKind, HtpArch};

use super::multi::{GraphSpec, MultiOptions};
use super::CompileOptions;
use crate::cache::{CacheKey, KeyBuilder};
use crate::error::Result;

/// What a key takes from the backend a binary is compiled on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTarget {
    pub backend: BackendKind,
    /// [`qnn::Backend::build_id`].
    pub qnn_build_id: String,
    /// The SoC and arch the HTP is configured for.
    pub soc_model: Option<u32>,
    pub arch: Option<HtpArch>,
}

impl KeyTarget {
    /// Of an opened backend.
    pub fn of(backend: &qnn::Backend) -> Result<KeyTarget> {
        let (soc_model, arch) = match backend.config() {
            qnn::BackendConfig::Htp(c) => (c.device.soc_model, c.device.arch),
            qnn::BackendConfig::Gpu(_) | qnn::BackendConfig::Cpu => (None, None),
        };
        Ok(KeyTarget {
            backend: backend.kind(),
            qnn_build_id: backend.build_id()?,
            soc_model,
            arch,
        })
    }
}

/// The key of `onnx` compiled on `backend` with `opts` ([`model_key_for`]).
pub fn model_key(backend: &qnn::Backend, onnx: &[u8], opts: &CompileOptions) -> Result<CacheKey> {
    Ok(model_key_for(&KeyTarget::of(backend)?, onnx, opts))
}

/// The key of `onnx` compiled for `target` with `opts`: the model bytes, the backend, the SoC
/// and arch, the QNN build id, and the settings `graph_name`, `fp16`, `opt_level` (and
/// `input_shapes`, `fix_inputs`, `quantized_io` and `observe` when given).
pub fn model_key_for(target: &KeyTarget, onnx: &[u8], opts: &CompileOptions) -> CacheKey {
    let mut b = target_key(target, opts.fp16, opts.opt_level)
        .model(onnx)
        .setting("graph_name", &opts.name);
    if !opts.input_shapes.is_empty() {
        b = b.setting("input_shapes", &shapes_setting(&opts.input_shapes));
    }
    if !opts.fix_inputs.is_empty() {
        b = b.setting("fix_inputs", &fixed_setting(&opts.fix_inputs));
    }
    if opts.quantized_io {
        b = b.setting("quantized_io", "true");
    }
    if opts.observe {
        b = b.setting("observe", "true");
    }
    b.build()
}

/// The key of `specs` compiled together with `opts`: for each graph in order its name, model
/// bytes (as a digest) and input shapes, then the backend, SoC, arch, QNN build id and `fp16`,
/// `opt_level`, `weight_sharing`. A `multi` setting keeps these keys apart from single-model
/// ones.
pub fn multi_key(
    backend: &qnn::Backend,
    specs: &[GraphSpec],
    opts: &MultiOptions,
) -> Result<CacheKey> {
    Ok(multi_key_for(&KeyTarget::of(backend)?, specs, opts))
}

/// [`multi_key`] for a [`KeyTarget`].
pub fn multi_key_for(target: &KeyTarget, specs: &[GraphSpec], opts: &MultiOptions) -> CacheKey {
    let mut b = target_key(target, opts.fp16, opts.opt_level)
        .setting("multi", &specs.len().to_string())
        .setting("weight_sharing", &opts.weight_sharing.to_string());
    for (i, s) in specs.iter().enumerate() {
        // A key of the model bytes alone is a digest of them.
        let digest = CacheKey::builder().model(s.onnx).build();
        b = b
            .setting(&format!("graph{i}.name"), &s.name)
            .setting(&format!("graph{i}.model"), digest.as_str())
            .setting(
                &format!("graph{i}.input_shapes"),
                &shapes_setting(&s.input_shapes),
            );
        if !s.fix_inputs.is_empty() {
            b = b.setting(
                &format!("graph{i}.fix_inputs"),
                &fixed_setting(&s.fix_inputs),
            );
        }
    }
    b.build()
}

/// What single- and multi-model keys share: the backend, its QNN build id, the SoC and arch it
/// is configured for, and the settings `fp16` and `opt_level`.
fn target_key(target: &KeyTarget, fp16: bool, opt_level: Option<u8>) -> KeyBuilder {
    let mut b = CacheKey::builder()
        .backend(target.backend.name())
        .qnn_build_id(&target.qnn_build_id)
        .setting("fp16", &fp16.to_string())
        .setting("opt_level", &format!("{opt_level:?}"));
    if let Some(s) = target.soc_model {
        b = b.soc_model(s);
    }
    if let Some(a) = target.arch {
        b = b.arch(a.number());
    }
    b
}

/// Input shapes as a cache-key setting: `name=d,d;name=d` in name order.
pub fn shapes_setting(shapes: &BTreeMap<String, Vec<usize>>) -> String {
    let shapes: Vec<String> = shapes
        .iter()
        .map(|(name, dims)| {
            let dims: Vec<String> = dims.iter().map(usize::to_string).collect();
            format!("{name}={}", dims.join(","))
        })
        .collect();
    shapes.join(";")
}

/// Fixed inputs as a cache-key setting: `name=value` in name order, each length-prefixed (a
/// value may hold any character, `;` and `=` included).
pub fn fixed_setting(fixed: &BTreeMap<String, String>) -> String {
    fixed
        .iter()
        .map(|(name, v)| format!("{}:{name}={}:{v}", name.len(), v.len()))
        .collect::<Vec<_>>()
        .join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys of one model for two targets and setting sets, single and multi-graph, as the
    /// code before the compile/run core existed computed them (`lowering::emit::cache_key` and
    /// `multi_cache_key` at a239d1c, against libQnnHtp v2.51.0.260929181845): a change of key
    /// policy or encoding makes every user's cache miss, so it must be deliberate.
    #[test]
    fn keys_are_those_of_earlier_releases() {
        let onnx = include_bytes!("../../tests/key_model.onnx");
        let cases = [
            (
                Some(60),
                None,
                false,
                None,
                false,
                "f59ce4e329fa7e5d7a61c228ddea8a410f61df07a870d1c34a9e56653dd354a7",
                "f0214bae54ac1ffaa417bf2a5f38469ce080133318e9289977c2013e2c9b29a1",
            ),
            (
                Some(35),
                Some(HtpArch::V68),
                true,
                Some(3),
                true,
                "684eabcf37a4c0406d8ead6d615149c320dd4150cb50eaebc5e373cb9e484155",
                "1175fd18bcd6a7524c22e2d8094a0327e4aaa0962a5603f4d3ec886949fa0982",
            ),
        ];
        for (soc_model, arch, fp16, opt_level, shapes, single, multi) in cases {
            let target = KeyTarget {
                backend: BackendKind::Htp,
                qnn_build_id: "v2.51.0.260929181845".into(),
                soc_model,
                arch,
            };
            let mut input_shapes = BTreeMap::new();
            if shapes {
                input_shapes.insert("x".to_string(), vec![1usize, 4]);
            }
            let opts = CompileOptions {
                name: "qnnx".into(),
                fp16,
                input_shapes: input_shapes.clone(),
                opt_level,
                quantized_io: false,
                observe: false,
                base_dir: None,
                fix_inputs: BTreeMap::new(),
                profile_finalize: false,
            };
            assert_eq!(model_key_for(&target, onnx, &opts).as_str(), single);
            let raw = CompileOptions {
                quantized_io: true,
                ..opts.clone()
            };
            assert_ne!(model_key_for(&target, onnx, &raw).as_str(), single);
            let specs = [
                GraphSpec {
                    name: "prefill".into(),
                    onnx,
                    ..Default::default()
                },
                GraphSpec {
                    name: "decode".into(),
                    onnx,
                    input_shapes,
                    ..Default::default()
                },
            ];
            let m = MultiOptions {
                fp16,
                opt_level,
                weight_sharing: shapes,
            };
            assert_eq!(multi_key_for(&target, &specs, &m).as_str(), multi);
        }
    }

    /// Fixed inputs change the compiled graph: they enter the key, their values distinctly
    /// (`a=1,2` is not `a=1` and `2=...`), and leave keys without them as they were.
    #[test]
    fn fixed_inputs_enter_the_key() {
        let target = KeyTarget {
            backend: BackendKind::Htp,
            qnn_build_id: "v2.51.0.260929181845".into(),
            soc_model: Some(60),
            arch: None,
        };
        let onnx = include_bytes!("../../tests/key_model.onnx");
        let key = |fixed: &[(&str, &str)]| {
            let opts = CompileOptions {
                name: "qnnx".into(),
                fix_inputs: fixed
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            };
            model_key_for(&target, onnx, &opts).to_string()
        };
        assert_eq!(
            key(&[]),
            "f59ce4e329fa7e5d7a61c228ddea8a410f61df07a870d1c34a9e56653dd354a7"
        );
        let a = key(&[("mode", "1")]);
        assert_ne!(a, key(&[]));
        assert_ne!(a, key(&[("mode", "2")]));
        assert_eq!(a, key(&[("mode", "1")]));
        assert_ne!(key(&[("a", "1;b=2")]), key(&[("a", "1"), ("b", "2")]));
    }
}
