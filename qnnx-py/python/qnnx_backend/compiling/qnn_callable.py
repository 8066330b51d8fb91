"""The "qnn" backend's policy: which device to try in which order, the cache (warm start by FX
fingerprint, then export and a cached compile), when to fall back to eager PyTorch and when
(``strict``) to raise instead, one compiled graph per input signature, and the STATS counters.

The flow for one graph from torch.compile: parameters and buffers (which dynamo passes as graph
inputs) are frozen into the graph as constants and the graph is exported to ONNX (to_onnx); the
native module lowers the model and finalizes one QNN graph, reporting every node it cannot run;
the returned callable checks each call's inputs against the compiled signature, hands tensor
memory to QNN without copies, and returns torch tensors (call).

Without ``strict``, a graph the lowering refuses some nodes of is split (``partitioned``): the
FX nodes behind the refused ONNX nodes, runs shorter than ``min_partition_size`` and runs whose
eager time is below the measured cost of a QNN call (``partition_cost``) stay eager, the rest
become QNN partitions, all compiled as graphs of one context: ``partitioning.split``. Warm starts
are ``warm``'s, torch's AOT path ``aot``'s.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from typing import Any, Callable, Optional, Sequence

import torch

from .. import _native, _warn
from ..exceptions import LibraryLoadError, LoweringError, UnsupportedOpError
from ..partitioning import plan as partition_plan
from ..partitioning.split import Partitioned, Splitting
from ..quantization import calibrate, mixed, pt2e
from ..settings import QnnSettings
from . import call, fingerprint, kvcache, scalars, to_onnx, warm
from .aot import AotArtifacts
from .kv_quant import QuantizedCache
from .call import CompiledGraph
from .decompose import decompose
from .fix_inputs import onnx_fix_inputs
from .shared import SharedCompiles
from .stats import FALLBACK_ERRORS, STATS

logger = logging.getLogger("qnnx_backend")


class QnnCallable(SharedCompiles, Splitting, AotArtifacts, QuantizedCache):
    """What the backend returns to dynamo: picks (or compiles) the graph for each call's input
    signature and falls back to the original graph when a signature cannot run on QNN.

    For torch's AOT path it serializes as the graph compiled for the example inputs, stored as
    a saved model; ``deserialize_compile_artifacts`` loads it with no export or compile
    (``AotGraph``)."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        settings: QnnSettings,
        may_partition: bool = True,
    ):
        self.gm = gm
        self.settings = settings
        # A QNN partition of a split graph is compiled by a QnnCallable of its own, which must
        # not split it again (its nodes were all found supported).
        self.may_partition = may_partition
        #: The last compile's outcome, for dry runs and ``explain``: "device", "whole" (the
        #: whole graph runs on QNN), "plan" (a partition_plan.Plan or None) and "reasons".
        self.outcome: dict = {}
        # Graphs that write into their inputs (KV caches) are compiled in a functional form whose
        # extra outputs replay the writes on the caller's tensors (compiling.kvcache); without kv_cache the
        # writes would be lost, so such graphs are refused.
        self.kv_plan: Optional[kvcache.MutationPlan] = None
        self.refusal: Optional[LoweringError] = None
        source = gm
        mutated = kvcache.mutated_inputs(gm)
        if mutated and not settings.kv_cache:
            self.refusal = LoweringError(
                f"the graph updates its input(s) {', '.join(mutated)} in place (a KV cache?); compiled "
                "without kv_cache=True those updates would be lost. Pass options={'kv_cache': True}."
            )
        elif mutated:
            try:
                source, self.kv_plan = kvcache.functionalize(gm, [to_onnx.is_static(a) for a in example_inputs])
            except LoweringError as e:
                self.refusal = e
        # Python numbers returned beside the tensors are computed on the host (compiling.scalars).
        self.host_scalars: Optional[scalars.HostScalars] = None
        if self.refusal is None:
            try:
                source, self.host_scalars = scalars.split(source)
            except LoweringError as e:
                self.refusal = e
        self.out_meta = call.out_meta(source)
        # Export rewrites a graph of its own: the original keeps running eagerly on fallback
        # (a functionalized graph is already a new one).
        if source is gm:
            source = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        self.export_gm = decompose(source)
        #: The arguments that change from call to call (not parameters or buffers), by index.
        self.per_call = [i for i, a in enumerate(example_inputs) if not to_onnx.is_static(a)]
        #: Per-call Python numbers that only the host scalars read: not part of the signature, so
        #: an int bumped at every step (a sliding-window cache's length) compiles no new graph.
        self.host_only = (
            {i for i in scalars.unread(source) if i in self.per_call and not isinstance(example_inputs[i], torch.Tensor)}
            if self.host_scalars is not None
            else set()
        )
        self.statics = [a for a in example_inputs if to_onnx.is_static(a)]
        self.returns_tuple = call.returns_sequence(gm)
        self.graphs: dict[Any, Optional[CompiledGraph | Partitioned]] = {}
        self.compile_lock = threading.Lock()
        self.warned = False
        #: The calibration samples of the last quantized compile (per-call tensors) and their
        #: digest: a split graph calibrates its partitions on them.
        self.samples: Optional[list] = None
        self.calibration_digest: Optional[str] = None
        # Which frame arguments the graph inputs come from, read while dynamo calls the backend
        # (calibration samples are the model's arguments; see quantization.calibrate).
        self.frame = calibrate.Frame.capture(gm) if settings.quantize is not None else None
        # The example call's per-call arguments as (shape, dtype) or the constant itself, not the
        # tensors: keeping them alive would hold a KV cache or a batch for the graph's lifetime.
        self.example = {
            i: (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else ("const", a)
            for i, a in enumerate(example_inputs)
            if i in self.per_call
        }
        self.example_statics = {i: a for i, a in enumerate(example_inputs) if i not in self.per_call}
        #: For a quantized KV-cache graph: argument index -> its role (quantization.prefill), set
        #: while calibrating, and the 8-bit cache tensors of the graph being compiled (kv8).
        self.kv_roles: dict = {}
        self.kv8_caches: list = []
        #: (input names, output names) the compiled graph's I/O is given instead of the export's
        #: (qnnx_backend.export names a saved model's I/O after the forward's parameters).
        self.io_names: Optional[tuple[list[str], list[str]]] = None


    def signature(self, args: Sequence[Any]) -> tuple:
        sig = []
        for i in self.per_call:
            if i in self.host_only:
                continue
            a = args[i]
            if isinstance(a, torch.Tensor):
                sig.append((tuple(a.shape), a.dtype))
            else:
                sig.append(("const", a))
        return tuple(sig)

    def compile(self, args: Sequence[Any]) -> Optional[CompiledGraph | Partitioned]:
        """Compiles for these concrete arguments; returns None (eager) on a fallback error."""
        s = self.settings
        call_tensors = [args[i] for i in self.per_call if isinstance(args[i], torch.Tensor)]
        tensor_idx = [i for i in self.per_call if isinstance(args[i], torch.Tensor)]
        fixed = onnx_fix_inputs(self.gm, tensor_idx, s.fix_inputs)
        devices = ["npu", "gpu"] if s.device == "auto" else [s.device]
        reasons: list[str] = []
        onnx_bytes = None
        samples: Optional[list] = None
        calibration_digest: Optional[str] = None
        if s.quantize is not None and self.refusal is None:
            # Quantized graphs are compiled for the HTP only. The samples are mapped (and
            # checked) before anything else: bad calibration data is the caller's to fix and
            # raises ValueError whatever `strict` says.
            devices = [d for d in devices if d == "npu"]
            samples = self.calibration_samples(args, call_tensors)
            calibration_digest = calibrate.digest(samples)
        # A split graph calibrates its partitions on what these samples give them.
        self.samples, self.calibration_digest = samples, calibration_digest
        cache_dir = s.cache_folder()
        if self.refusal is not None:
            if s.strict:
                raise self.refusal
            devices = []
            reasons.append(str(self.refusal))
        for device in devices:
            fp = None
            try:
                # With an explicit SoC or arch the native calls below open (and check) the
                # backend for that configuration themselves; is_available() would open a second
                # backend and device for the default configuration (70-190 ms here).
                # soc_model and htp_arch configure the HTP: with device="auto" the GPU after it
                # is opened with its defaults (the native module refuses a SoC for the GPU).
                spec = s.spec(device)
                if spec.soc_model is None and spec.htp_arch is None and not _native.is_available(device):
                    raise LibraryLoadError(_native.unavailable_reason(device))
                if cache_dir is not None and not (s.quantize is not None and self.kv_plan is not None):
                    # Warm start: an FX-level fingerprint maps straight to a cached binary, so
                    # neither the ONNX export nor lowering nor finalize runs. Not for quantized
                    # KV-cache graphs, whose host side (quantization.kv8) is made while
                    # calibrating; the compile cache below still applies to them.
                    fp = self.fx_fingerprint(args, device, calibration_digest)
                    hit = warm.read_alias(fp, spec)
                    if hit is not None:
                        STATS["cache_hits"] += 1
                        logger.info("qnn: loaded a cached graph for %s in %.1f ms", device, hit.load_ms)
                        return CompiledGraph(hit, device, self.out_meta, s.check_nan)
                    if self.can_partition() and not s.dry_run:
                        split = self.warm_partitioned(args, device, fp, cache_dir)
                        if split is not None:
                            return split
                if onnx_bytes is None:
                    onnx_bytes = self.export_onnx(args, tensor_idx, call_tensors, samples, spec)
                if self.io_names is not None:
                    onnx_bytes = to_onnx.rename_io(onnx_bytes, *self.io_names)
                if s.dry_run:
                    unsupported = partition_plan.unsupported_nodes(onnx_bytes, device, fix_inputs=fixed)
                    if unsupported:
                        raise partition_plan.unsupported_error(unsupported, device)
                    logger.info("qnn dry run: every node is supported on %s", device)
                    self.outcome = {"device": device, "whole": True, "plan": None, "reasons": []}
                    return None
                graph = self.compile_onnx(onnx_bytes, spec, fixed, fp)
                graph.kv8 = self.kv_host(tensor_idx)
                return graph
            except FALLBACK_ERRORS as e:
                # The native module's errors name everything but the device this loop chose.
                if e.device is None:
                    e.device = device
                if s.strict:
                    raise
                if isinstance(e, UnsupportedOpError) and self.can_partition():
                    split, why = self.partitioned(args, device, tensor_idx, call_tensors)
                    if split is not None or (s.dry_run and why is None):
                        return split
                    reasons.append(f"{device}: {e}" + (f"\n(not partitioned: {why})" if why else ""))
                    continue
                if isinstance(e, LibraryLoadError) and reasons:
                    # device="auto": a later device that cannot even be opened here (no GPU
                    # library, or the x86_64 GPU library that cannot execute) is one line, not
                    # its full diagnosis appended to the first device's reasons.
                    reasons.append(f"{device}: not available here ({_first_clause(str(e))})")
                    continue
                reasons.append(f"{device}: {e}")
        STATS["fallbacks"] += 1
        self.outcome = {"device": None, "whole": False, "plan": self.outcome.get("plan"), "reasons": reasons}
        if not self.warned:
            self.warned = True
            _warn.warn(
                "qnn backend: running this graph with eager PyTorch on the CPU because it cannot "
                "run on QNN:\n" + "\n".join(reasons)
            )
        return None

    def export_onnx(
        self,
        args: Sequence[Any],
        tensor_idx: Sequence[int],
        call_tensors: Sequence[torch.Tensor],
        samples: Optional[list],
        spec: "_native.Spec",
    ) -> bytes:
        """The ONNX model of this graph for these arguments: float, or quantized on the
        calibration ``samples`` (with ``target_sqnr_db``, by the mixed-precision search for the
        HTP of ``spec``)."""
        s = self.settings
        if samples is None:
            onnx_bytes = to_onnx.onnx_bytes(to_onnx.Frozen(self.export_gm, args, tensor_idx), call_tensors, s)
            STATS["exports"] += 1
            return onnx_bytes
        traced = to_onnx.Interpreted(self.export_gm, args, tensor_idx)
        if s.target_sqnr_db is not None:
            found = mixed.search(
                traced, call_tensors, samples, s.quantize_config(), spec, float(s.target_sqnr_db)
            )
            onnx_bytes = found.onnx
            logger.warning(
                "qnn mixed precision: %d module(s) and %d value(s) at 16-bit activations reach %.1f dB "
                "at the output (target %s dB; per attempt %s); pin it with options=%r",
                len(found.promoted), len(found.promoted_values), found.history[-1], s.target_sqnr_db,
                [round(h, 1) for h in found.history], found.options,
            )
        else:
            onnx_bytes = pt2e.quantize(traced, call_tensors, samples, s.quantize_config()).onnx
        if self.kv8_wanted():
            onnx_bytes = self.cache_at_8_bits(onnx_bytes, tensor_idx, samples)
        STATS["quantizations"] += 1
        STATS["exports"] += 1
        return onnx_bytes

    def compile_onnx(
        self,
        onnx_bytes: bytes,
        spec: "_native.Spec",
        fixed: dict,
        fp: Optional[str],
    ) -> CompiledGraph:
        """``onnx_bytes`` compiled (or found in the cache) for ``spec``; the FX fingerprint
        ``fp`` is recorded as an alias of the cache key."""
        s, device = self.settings, spec.device
        t = time.perf_counter()
        # No separate check() first: it runs the whole lowering (parse, passes, op
        # rules) only to discard the plan, and compile reports every unsupported node
        # itself (for resnet18 the check cost as much as the lowering).
        native = _native.compile(onnx_bytes, spec, fix_inputs=fixed or None)
        if native.from_cache:
            STATS["cache_hits"] += 1
        else:
            STATS["compiles"] += 1
        if fp is not None and native.cache_key:
            warm.write_alias(spec.cache_dir, fp, native.cache_key)
        logger.info(
            "qnn: compiled a graph with %d inputs and %d outputs for %s in %.0f ms "
            "(lowering %.1f ms, finalize %.1f ms)",
            len(native.inputs),
            len(native.outputs),
            device,
            (time.perf_counter() - t) * 1e3,
            native.lower_ms,
            native.finalize_ms,
        )
        # The engine's stages, as `qnnx compile --timings` names them.
        logger.info(
            "qnn: compile stages: %s", ", ".join(f"{name} {ms:.1f} ms" for name, ms in native.timings)
        )
        return CompiledGraph(native, device, self.out_meta, s.check_nan)

    def fx_fingerprint(self, args: Sequence[Any], device: str, calibration: Optional[str] = None) -> str:
        """The warm-start fingerprint of this graph called with ``args`` on ``device``;
        ``calibration`` is the digest of the calibration samples of a quantized graph."""
        return fingerprint.fx_fingerprint(
            self.gm, args, self.per_call, self.signature(args), device, self.settings, calibration
        )

    def calibration_samples(self, args: Sequence[Any], call_tensors: Sequence[torch.Tensor]) -> list:
        """The calibration data as tuples of this call's per-call tensors (ValueError naming what
        to change when it does not fit)."""
        assert self.frame is not None
        if self.kv_plan is not None or self.settings.kv_cache:
            return self.prefill_samples(args)
        mapper = calibrate.Mapper(self.frame, args, self.per_call)
        index = [i for i in self.per_call if isinstance(args[i], torch.Tensor)]

        def run_float(inputs):
            full = list(args)
            for i, t in zip(index, inputs):
                full[i] = t
            return self.gm(*full)

        samples = calibrate.collect(self.settings.calibration, mapper, run_float)
        STATS["calibrations"] += 1
        return samples

    def __call__(self, *args):
        sig = self.signature(args)
        if sig not in self.graphs:
            self.compile_once(sig, args)
        graph = self.graphs[sig]
        if graph is None:
            return self.gm(*args)
        if isinstance(graph, Partitioned):
            outs = graph.module(*args)
            if self.host_scalars is None:
                return outs
            outs = self.host_scalars.insert(outs, self.host_scalars(args))
            return tuple(outs) if self.returns_tuple else outs[0]
        tensors = [args[i] for i in self.per_call if isinstance(args[i], torch.Tensor)]
        shadow = getattr(graph, "kv8", None)
        if shadow is not None:
            tensors = shadow.inputs(args, tensors)
        outs = graph(tensors)
        if shadow is not None:
            outs = shadow.outputs(outs, args)
        if self.host_scalars is not None:
            outs = self.host_scalars.insert(outs, self.host_scalars(args))
        if self.kv_plan is not None:
            outs = self.kv_plan.finish(args, outs)
            if shadow is not None:
                shadow.settle(args)
        outs = call.guard_autograd(outs, list(args) + self.statics)
        return tuple(outs) if self.returns_tuple else outs[0]


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], settings: QnnSettings) -> Callable:
    """The backend entry: the original forward for device="cpu", otherwise a QnnCallable.

    Compilation happens at the first call of each input signature rather than here: dynamo
    wraps exceptions raised by a backend in BackendCompilerFailed, while exceptions raised by
    the compiled function reach the caller as they are, so strict mode's UnsupportedOpError
    (and the others) can be caught by their own class; they are raised as their ``compat.strict``
    twins, which are also BackendCompilerFailed, for code written for the 0.4 package.
    """
    if settings.device == "cpu":
        return gm.forward
    return QnnCallable(gm, example_inputs, settings)


def _first_clause(message: str) -> str:
    """The first clause of a library error (``QNN library libQnnGpu.so not found``)."""
    for sep in ("\n", "; ", " ("):
        message = message.split(sep)[0]
    return message.rstrip(".")
