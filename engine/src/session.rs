//! `Session`: what Python's `qnnx_backend.runtime.InferenceSession` is, for Rust callers. Opens
//! a saved model ([`crate::saved`], no compile) or an ONNX model (compiled for a target, through
//! the context-binary cache when one is given) and runs it on host tensors in the model's dtypes.

use std::path::Path;

use lowering::plan::PlanIo;

use crate::cache::Cache;
use crate::compile::{compile, CompileOptions, Compiled};
use crate::error::{Error, Result};
use crate::io::HostTensor;
use crate::power::{self, PerformanceVote};
use crate::saved::{self, Manifest};
use crate::target::Target;
use qnn::HtpPerformanceMode;
use qnnx_types::BackendKind;

/// How [`Session::open`] compiles an ONNX model (a saved model ignores that: it is compiled) and
/// runs any model.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// The target (default: the HTP of this host, SoC 60 on the x86_64 emulator).
    pub target: Target,
    /// Precision, optimisation level, input shapes. `base_dir` defaults to the model's folder
    /// (external data files must be inside it).
    pub compile: CompileOptions,
    /// The context-binary cache, if any.
    pub cache: Option<Cache>,
    /// The HTP performance mode voted while the session lives ([`power::vote`]), for every kind
    /// of model; `None` votes nothing.
    pub performance_mode: Option<HtpPerformanceMode>,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions {
            target: Target::host_default(BackendKind::Htp),
            compile: CompileOptions {
                name: "qnnx".into(),
                ..Default::default()
            },
            cache: None,
            performance_mode: None,
        }
    }
}

/// A model ready to run.
pub struct Session {
    compiled: Compiled,
    manifest: Option<Manifest>,
    /// Dropped after `compiled` (fields drop in order): the vote outlives the graph.
    performance: Option<PerformanceVote>,
}

impl Session {
    /// A saved model (recognised by its first bytes) is loaded as [`saved::load`] does, a file
    /// named `*.onnx` is compiled with `opts`, any other file is loaded as a plain context
    /// binary ([`saved::load_context_binary`], its first graph).
    pub fn open(path: &Path, opts: &SessionOptions) -> Result<Session> {
        let (compiled, manifest) = Session::load(path, opts)?;
        let performance = opts
            .performance_mode
            .map(|m| power::vote(&compiled.runtime, m))
            .transpose()?;
        Ok(Session {
            compiled,
            manifest,
            performance,
        })
    }

    fn load(path: &Path, opts: &SessionOptions) -> Result<(Compiled, Option<Manifest>)> {
        let mut head = [0u8; 8];
        let n = {
            use std::io::Read;
            let mut f = std::fs::File::open(path)
                .map_err(|e| Error::Input(format!("cannot open {}: {e}", path.display())))?;
            f.read(&mut head)
                .map_err(|e| Error::Input(format!("cannot read {}: {e}", path.display())))?
        };
        if &head[..n] == saved::MAGIC {
            let loaded = saved::load(path)?;
            let mut graphs = loaded.graphs;
            if graphs.len() != 1 {
                return Err(Error::SavedModel(format!(
                    "{}: {} graphs; a session runs single-graph saved models",
                    path.display(),
                    graphs.len()
                )));
            }
            return Ok((graphs.remove(0), Some(loaded.manifest)));
        }
        let is_onnx = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
        if !is_onnx {
            return Ok((saved::load_context_binary(path, None)?, None));
        }
        let onnx = std::fs::read(path)
            .map_err(|e| Error::Input(format!("cannot read {}: {e}", path.display())))?;
        let mut copts = opts.compile.clone();
        if copts.base_dir.is_none() {
            copts.base_dir = path.parent().map(Path::to_path_buf);
        }
        let compiled = compile(&opts.target, &onnx, &copts, opts.cache.as_ref())?;
        for w in &compiled.warnings {
            tracing::warn!(target: "qnnx", "{w}");
        }
        Ok((compiled, None))
    }

    /// The performance-mode vote, when [`SessionOptions::performance_mode`] asked for one.
    pub fn performance(&self) -> Option<&PerformanceVote> {
        self.performance.as_ref()
    }

    /// Model inputs in ONNX order (name, dtype, shape).
    pub fn inputs(&self) -> &[PlanIo] {
        &self.compiled.emitted.inputs
    }

    /// Model outputs in ONNX order.
    pub fn outputs(&self) -> &[PlanIo] {
        &self.compiled.emitted.outputs
    }

    /// The manifest, for a saved model.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// The compiled graph and its context (to save it: [`saved::save`]).
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// Runs on `inputs` (model dtypes and shapes, ONNX order); outputs in ONNX order.
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.compiled.emitted.run(inputs)
    }
}
