"""The "qnn" backend's policy: which device to try in which order, the cache (warm start by FX
fingerprint, then export and a cached compile), when to fall back to eager PyTorch and when
(``strict``) to raise instead, one compiled graph per input signature, and the STATS counters.

The flow for one graph from torch.compile: parameters and buffers (which dynamo passes as graph
inputs) are frozen into the graph as constants and the graph is exported to ONNX (_export); the
native module lowers the model and finalizes one QNN graph, reporting every node it cannot run;
the returned callable checks each call's inputs against the compiled signature, hands tensor
memory to QNN without copies, and returns torch tensors (_runtime).

Without ``strict``, a graph the lowering refuses some nodes of is split (``partitioned``): the
FX nodes behind the refused ONNX nodes, runs shorter than ``min_partition_size`` and runs whose
eager time is below the measured cost of a QNN call (``partition_cost``, _callcost) stay eager,
the rest become QNN partitions, all compiled as graphs of one context (``compile_together``).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import logging
import threading
import time
import weakref
from typing import Any, Callable, Optional, Sequence

import torch

from . import _calibrate, _callcost, _export, _fingerprint, _kvcache, _mixed, _native, _partition, _quantize, _runtime, _strict, _warn
from ._decompose import decompose
from ._runtime import CompiledGraph
from .exceptions import CacheError, LibraryLoadError, LoweringError, QnnApiError, QnnxError, UnsupportedOpError
from .settings import QnnSettings, fixed_values

logger = logging.getLogger("qnnx_backend")

#: Counters of the work done in this process (exports, compiles, cache hits, fallbacks,
#: partitions, call-cost probes, and for quantized graphs calibrations and quantizations);
#: tests use them to prove that a warm start skipped export, lowering and finalize.
STATS: collections.Counter = collections.Counter()

_FALLBACK_ERRORS = (UnsupportedOpError, LoweringError, QnnApiError, LibraryLoadError)

try:
    # torch's AOT path (torch.compile(fn).aot_compile(...), torch.compiler.load_compiled_function)
    # takes backends whose result implements this ABC; experimental in torch 2.13 to 2.15.
    from torch._dynamo.aot_compile_types import SerializableCallable as _Serializable
except ImportError:  # older torch: no AOT path
    _Serializable = object  # type: ignore[assignment,misc]

# Prefix of what serialize_compile_artifacts returns: then a u64 length, a JSON header and the
# bytes of a saved model (the file qnnx_backend.export writes).
_AOT_MAGIC = b"qnnx-aot-1\0"


# Graphs by what determines them (QnnCallable._share_key), while some QnnCallable holds them:
# dynamo calls the backend once per thread that makes the first call of a compiled model at
# once, and those QnnCallables share one compile. Per-key locks exist while a compile runs.
_SHARED: "weakref.WeakValueDictionary[tuple, Any]" = weakref.WeakValueDictionary()
_KEY_LOCKS: dict[tuple, threading.Lock] = {}
_SHARED_LOCK = threading.Lock()


def shared_outcome(graph: Any) -> dict:
    """The outcome (``QnnCallable.outcome``) of a graph another QnnCallable compiled."""
    if isinstance(graph, Partitioned):
        return {"device": graph.device, "whole": False, "plan": graph.plan, "reasons": []}
    return {"device": graph.device, "whole": True, "plan": None, "reasons": []}


class QnnCallable(_Serializable):
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
        #: whole graph runs on QNN), "plan" (a _partition.Plan or None) and "reasons".
        self.outcome: dict = {}
        # Graphs that write into their inputs (KV caches) are compiled in a functional form whose
        # extra outputs replay the writes on the caller's tensors (_kvcache); without kv_cache the
        # writes would be lost, so such graphs are refused.
        self.kv_plan: Optional[_kvcache.MutationPlan] = None
        self.refusal: Optional[LoweringError] = None
        source = gm
        mutated = _kvcache.mutated_inputs(gm)
        if mutated and not settings.kv_cache:
            self.refusal = LoweringError(
                f"the graph updates its input(s) {', '.join(mutated)} in place (a KV cache?); compiled "
                "without kv_cache=True those updates would be lost. Pass options={'kv_cache': True}."
            )
        elif mutated:
            try:
                source, self.kv_plan = _kvcache.functionalize(gm, [_export.is_static(a) for a in example_inputs])
            except LoweringError as e:
                self.refusal = e
        self.out_meta = _runtime.out_meta(source)
        # Export rewrites a graph of its own: the original keeps running eagerly on fallback
        # (a functionalized graph is already a new one).
        if source is gm:
            source = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        self.export_gm = decompose(source)
        self.runtime = [i for i, a in enumerate(example_inputs) if not _export.is_static(a)]
        self.statics = [a for a in example_inputs if _export.is_static(a)]
        self.returns_tuple = _runtime.returns_sequence(gm)
        self.graphs: dict[Any, Optional[CompiledGraph | Partitioned]] = {}
        self.compile_lock = threading.Lock()
        self.warned = False
        #: The calibration samples of the last quantized compile (runtime tensors) and their
        #: digest: a split graph calibrates its partitions on them.
        self.samples: Optional[list] = None
        self.calibration_digest: Optional[str] = None
        # Which frame arguments the graph inputs come from, read while dynamo calls the backend
        # (calibration samples are the model's arguments; see _calibrate).
        self.frame = _calibrate.Frame.capture(gm) if settings.quantize is not None else None
        # The example call's runtime arguments as (shape, dtype) or the constant itself, not the
        # tensors: keeping them alive would hold a KV cache or a batch for the graph's lifetime.
        self.example = {
            i: (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else ("const", a)
            for i, a in enumerate(example_inputs)
            if i in self.runtime
        }
        self.example_statics = {i: a for i, a in enumerate(example_inputs) if i not in self.runtime}
        #: (input names, output names) the compiled graph's I/O is given instead of the export's
        #: (qnnx_backend.export names a saved model's I/O after the forward's parameters).
        self.io_names: Optional[tuple[list[str], list[str]]] = None

    def compile_once(self, sig: tuple, args: Sequence[Any]) -> None:
        """Compiles the graph of signature ``sig`` unless another thread has meanwhile. Threads
        making the first call of one compiled model at once (a threaded server starting up) wait
        for one compile and use its graph: dynamo calls the backend once per such thread, so the
        graph is shared by what determines it (``_share_key``) between those QnnCallables too.
        A failed strict compile is not recorded, so each waiting thread raises it in turn."""
        key = self._share_key(sig)
        with _SHARED_LOCK:
            lock = _KEY_LOCKS.setdefault(key, threading.Lock())
        with lock, self.compile_lock:
            if sig in self.graphs:
                return
            shared = _SHARED.get(key)
            if shared is not None:
                self.graphs[sig] = shared
                self.outcome = shared_outcome(shared)
                STATS["shared_graphs"] += 1
                return
            if self.graphs and self.settings.strict:
                logger.warning(
                    "qnn backend: input signature %s differs from the compiled one(s); compiling a new graph",
                    sig,
                )
            failure = None
            try:
                graph = self.compile(args)
                self.graphs[sig] = graph
                if graph is not None:
                    _SHARED[key] = graph
            except QnnxError as e:
                if not self.settings.strict:
                    raise
                # Also a BackendCompilerFailed, as the 0.4 package's strict errors were; raised
                # outside the handler so that it carries no context.
                failure = _strict.as_backend_failure(e)
            finally:
                with _SHARED_LOCK:
                    # Later arrivals find the graph in _SHARED; threads already waiting hold the lock.
                    _KEY_LOCKS.pop(key, None)
            if failure is not None:
                raise failure

    def _share_key(self, sig: tuple) -> tuple:
        """What makes two QnnCallables' graphs for ``sig`` the same: the graph's code, the very
        parameter and buffer tensors (by identity: alive as long as a callable holding the shared
        graph holds them, so an id cannot be reused meanwhile), the settings and the
        calibration data object."""
        return (
            self.gm.code,
            tuple(id(a) for a in self.statics),
            tuple((i, id(v)) for i, v in self.example_statics.items() if not isinstance(v, (bool, int, float, str, type(None)))),
            tuple((i, v) for i, v in self.example_statics.items() if isinstance(v, (bool, int, float, str, type(None)))),
            sig,
            repr(self.settings),
            id(self.settings.calibration),
            self.may_partition,
        )

    def signature(self, args: Sequence[Any]) -> tuple:
        sig = []
        for i in self.runtime:
            a = args[i]
            if isinstance(a, torch.Tensor):
                sig.append((tuple(a.shape), a.dtype))
            else:
                sig.append(("const", a))
        return tuple(sig)

    def compile(self, args: Sequence[Any]) -> Optional[CompiledGraph | Partitioned]:
        """Compiles for these concrete arguments; returns None (eager) on a fallback error."""
        s = self.settings
        runtime_tensors = [args[i] for i in self.runtime if isinstance(args[i], torch.Tensor)]
        tensor_idx = [i for i in self.runtime if isinstance(args[i], torch.Tensor)]
        fixed = onnx_fix_inputs(self.gm, tensor_idx, s.fix_inputs)
        frozen = _export.Frozen(self.export_gm, args, tensor_idx)
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
            samples = self.calibration_samples(args, runtime_tensors)
            calibration_digest = _calibrate.digest(samples)
        # A split graph calibrates its partitions on what these samples give them.
        self.samples, self.calibration_digest = samples, calibration_digest
        cache_dir = _cache_dir(s)
        if self.refusal is not None:
            if s.strict:
                raise self.refusal
            devices = []
            reasons.append(str(self.refusal))
        for device in devices:
            fingerprint = None
            try:
                # With an explicit SoC or arch the native calls below open (and check) the
                # runtime for that configuration themselves; is_available() would open a second
                # backend and device for the default configuration (70-190 ms here).
                # soc_model and htp_arch configure the HTP: with device="auto" the GPU after it
                # is opened with its defaults (the native module refuses a SoC for the GPU).
                soc_model, htp_arch = (s.soc_model, s.htp_arch) if device == "npu" else (None, None)
                if soc_model is None and htp_arch is None and not _native.is_available(device):
                    raise LibraryLoadError(_native.unavailable_reason(device))
                if cache_dir is not None:
                    # Warm start: an FX-level fingerprint maps straight to a cached binary, so
                    # neither the ONNX export nor lowering nor finalize runs.
                    fingerprint = self.fx_fingerprint(args, device, calibration_digest)
                    hit = _read_alias(fingerprint, cache_dir, device, s)
                    if hit is not None:
                        STATS["cache_hits"] += 1
                        logger.info("qnn: loaded a cached graph for %s in %.1f ms", device, hit.load_ms)
                        return CompiledGraph(hit, device, self.out_meta, s.check_nan)
                    if self.can_partition() and not s.dry_run:
                        warm = self.warm_partitioned(args, device, fingerprint, cache_dir)
                        if warm is not None:
                            return warm
                if onnx_bytes is None and samples is not None:
                    traced = _export.Interpreted(self.export_gm, args, tensor_idx)
                    if s.target_sqnr_db is not None:
                        mixed = _mixed.search(
                            traced, runtime_tensors, samples, s.quantize_config(), soc_model, htp_arch,
                            float(s.target_sqnr_db),
                        )
                        onnx_bytes = mixed.onnx
                        logger.warning(
                            "qnn mixed precision: %d module(s) at 16-bit activations reach %.1f dB at the output "
                            "(target %s dB; per attempt %s); pin it with options={'quantize_modules': %r}",
                            len(mixed.promoted), mixed.history[-1], s.target_sqnr_db,
                            [round(h, 1) for h in mixed.history], mixed.quantize_modules,
                        )
                    else:
                        onnx_bytes = _quantize.quantize(traced, runtime_tensors, samples, s.quantize_config()).onnx
                    STATS["quantizations"] += 1
                    STATS["exports"] += 1
                elif onnx_bytes is None:
                    onnx_bytes = _export.export(frozen, runtime_tensors, s)
                    STATS["exports"] += 1
                if self.io_names is not None:
                    onnx_bytes = _export.rename_io(onnx_bytes, *self.io_names)
                if s.dry_run:
                    unsupported = _partition.unsupported_nodes(onnx_bytes, device, fix_inputs=fixed)
                    if unsupported:
                        raise _partition.unsupported_error(unsupported, device)
                    logger.info("qnn dry run: every node is supported on %s", device)
                    self.outcome = {"device": device, "whole": True, "plan": None, "reasons": []}
                    return None
                t = time.perf_counter()
                # No separate check() first: it runs the whole lowering (parse, passes, op
                # rules) only to discard the plan, and compile reports every unsupported node
                # itself (for resnet18 the check cost as much as the lowering).
                native = _native.compile(
                    onnx_bytes,
                    device=device,
                    soc_model=soc_model,
                    htp_arch=htp_arch,
                    fp16=s.fp16,
                    opt_level=s.opt_level,
                    cache_dir=cache_dir,
                    fix_inputs=fixed or None,
                )
                if native.from_cache:
                    STATS["cache_hits"] += 1
                else:
                    STATS["compiles"] += 1
                if fingerprint is not None and native.cache_key:
                    _write_alias(cache_dir, fingerprint, native.cache_key)
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
            except _FALLBACK_ERRORS as e:
                # The native module's errors name everything but the device this loop chose.
                if e.device is None:
                    e.device = device
                if s.strict:
                    raise
                if isinstance(e, UnsupportedOpError) and self.can_partition():
                    split, why = self.partitioned(args, device, tensor_idx, runtime_tensors)
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

    def can_partition(self) -> bool:
        """Whether a graph with unsupported nodes may be split (else it falls back whole).
        Not (yet) for KV cache graphs (the replayed writes) and the mixed-precision search
        (``target_sqnr_db``: one search per graph). A quantized graph's partitions are each
        calibrated on the inputs the calibration samples give them, their float boundaries
        quantized inside each QNN graph. With ``fix_inputs``, each partition that reads a fixed
        input has it fixed (``partition_fix_inputs``)."""
        s = self.settings
        return self.may_partition and s.target_sqnr_db is None and self.kv_plan is None and self.refusal is None

    def partitioned(
        self, args: Sequence[Any], device: str, tensor_idx: Sequence[int], runtime_tensors: Sequence[torch.Tensor]
    ) -> tuple[Optional["Partitioned"], Optional[str]]:
        """The graph split into QNN partitions for ``device`` and eager nodes, or (None, why
        not). The support answer is the lowering's own (``_partition.unsupported_nodes``) for
        an export in which each FX node is a scope of its own (``_partition.scoped``)."""
        scoped, names = _partition.scoped(self.export_gm)
        try:
            onnx_bytes = _export._export_with("torchscript", _export.Frozen(scoped, args, tensor_idx), runtime_tensors)
        except _export.EXPORT_ERRORS as e:
            return None, f"the per-node export failed: {e}"
        STATS["exports"] += 1
        # The scoped export's inputs are the whole export's (input_<j> for the same arguments):
        # the same fixed values fold the same nodes.
        fixed = onnx_fix_inputs(self.gm, tensor_idx, self.settings.fix_inputs)
        unsupported = _partition.unsupported_nodes(onnx_bytes, device, fix_inputs=fixed)
        by_fx, orphans = _partition.map_unsupported(unsupported, names)
        if orphans:
            return None, "ONNX node(s) of no FX node refused: " + ", ".join(n.node for n in orphans)
        if not by_fx:
            return None, "the per-node export has no unsupported node"
        return self.split_and_compile(args, device, by_fx)

    def plan_for(
        self, args: Sequence[Any], by_fx: dict, device: str, stored: Optional[dict] = None
    ) -> "_partition.Plan":
        """The split for refused FX nodes ``by_fx``: runs of at least ``min_partition_size``
        supported nodes, each then weighed by its eager time against the QNN call cost
        (``partition_cost``; see _callcost). ``stored`` is the decision a split alias recorded
        (``cost_record``): its times and cost are reused, so a warm start splits the graph as
        the process that cached it did, without measuring (timings vary from run to run; the
        cached context holds exactly the partitions that process chose)."""
        s = self.settings
        placeholders = [n for n in self.export_gm.graph.nodes if n.op == "placeholder"]
        param_sizes = {
            p.name: a.numel()
            for p, a in zip(placeholders, args)
            if isinstance(a, torch.Tensor) and _export.is_static(a)
        }
        plan = _partition.plan(self.export_gm, by_fx, s.min_partition_size, param_sizes)
        if s.partition_cost == 0 or not plan.partitions:
            return plan
        if stored is not None:
            times = [stored["islands"].get(p[0]) for p in plan.partitions]
            return _partition.weigh(self.export_gm, plan, times, stored["call_cost_us"], stored["source"])
        if s.partition_cost == "measure":
            try:
                cost, source = call_cost_us(device, s), "measured"
            except _FALLBACK_ERRORS as e:
                # The partitions themselves may still compile: without a cost, only
                # min_partition_size decides.
                logger.warning("qnn: could not measure the QNN call cost on %s (%s); islands are not weighed", device, e)
                return plan
        else:
            cost, source = float(s.partition_cost), "partition_cost"
        t = time.perf_counter()
        times = _callcost.island_times(_partition.split(self.export_gm, plan), len(plan.partitions), args, cost)
        logger.info(
            "qnn: weighed %d island(s) against a QNN call cost of %.0f us (%s) in %.0f ms: eager %s us",
            len(times), cost, source, (time.perf_counter() - t) * 1e3,
            [None if x is None else round(x) for x in times],
        )
        return _partition.weigh(self.export_gm, plan, times, cost, source)

    def split_and_compile(
        self,
        args: Sequence[Any],
        device: str,
        by_fx: dict,
        cached: Optional[tuple[str, str]] = None,
        stored: Optional[dict] = None,
    ) -> tuple[Optional["Partitioned"], Optional[str]]:
        """The graph split by the refused FX nodes ``by_fx`` and its partitions compiled as one
        context, or loaded: ``cached`` is (cache key, cache dir) of that context and ``stored``
        the cost decision, from a split alias (a warm start: no export, no measuring)."""
        s = self.settings
        plan = self.plan_for(args, by_fx, device, stored)
        self.outcome = {"device": device, "whole": False, "plan": plan, "reasons": []}
        if not plan.partitions:
            why = "is min_partition_size long" if plan.call_cost_us is None else "is min_partition_size long and worth a QNN call"
            return None, f"no run of supported nodes {why}:\n" + plan.text()
        if s.dry_run:
            logger.info("qnn dry run on %s:\n%s", device, plan.text())
            _warn.warn(f"qnn backend dry run on {device}: this graph would be split\n{plan.text()}")
            return None, None
        stitched = _partition.split(self.export_gm, plan)
        tensor_idx = [i for i in self.runtime if isinstance(args[i], torch.Tensor)]
        parts = []
        for i in range(len(plan.partitions)):
            name = f"qnn_partition_{i}"
            graph = stitched.get_submodule(name)
            fixed = partition_fix_inputs(self.gm, tensor_idx, s.fix_inputs, graph)
            parts.append(_PartitionModule(graph, dataclasses.replace(s, device=device, fix_inputs=fixed)))
            setattr(stitched, name, parts[-1])
        if cached is not None:
            if not self.load_together(stitched, parts, args, device, *cached):
                return None, "the cached partitions did not load"
            STATS["cache_hits"] += 1
        else:
            key = self.compile_together(stitched, parts, args, device)
            if s.quantize is not None and any(p.callable is None for p in parts):
                # A quantized partition cannot compile on its own later (its calibration data
                # are the recorded inputs): the graph falls back whole instead.
                return None, "its quantized partitions did not compile as one context (the log says why)"
            cache_dir = _cache_dir(s)
            if key is not None and cache_dir is not None:
                refused = {fx: [list(n) for n in nodes] for fx, nodes in by_fx.items()}
                try:
                    _native.alias_put_split(
                        cache_dir,
                        self.fx_fingerprint(args, device, self.calibration_digest),
                        key,
                        # The lowering of another qnnx may refuse other nodes: its plan is not reused.
                        json.dumps(
                            {
                                "qnnx": _native.versions()["qnnx"],
                                "refused": refused,
                                "rule": partition_rule(s),
                                "cost": cost_record(plan),
                            }
                        ),
                    )
                except (CacheError, ValueError) as e:
                    logger.warning("qnn: could not record the split alias: %s", e)
        STATS["partitions"] += len(plan.partitions)
        if not self.warned:
            self.warned = True
            _warn.warn(f"qnn backend: part of this graph runs with eager PyTorch on the CPU; on {device}:\n{plan.text()}")
        return Partitioned(stitched, plan, device), None

    def warm_partitioned(
        self, args: Sequence[Any], device: str, fingerprint: str, cache_dir: str
    ) -> Optional["Partitioned"]:
        """The graph split as a previous process split it (its split alias: the refused FX
        nodes and the context of its partitions), with no ONNX export; None when there is no
        usable record (then the graph is exported and checked as on a cold start)."""
        rec = _native.alias_get_split(cache_dir, fingerprint)
        if rec is None:
            return None
        key, plan_json = rec
        calls = {n.name for n in self.export_gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")}
        try:
            record = json.loads(plan_json)
            if record.get("qnnx") != _native.versions()["qnnx"]:
                return None
            refused = record["refused"]
            by_fx = {
                str(fx): [_partition.UnsupportedNode(str(a), str(b), str(c)) for a, b, c in nodes]
                for fx, nodes in refused.items()
            }
            if record.get("rule") != partition_rule(self.settings):
                # Another min_partition_size or partition_cost chooses other partitions than
                # the cached context holds.
                logger.info("qnn: split alias not used: recorded for %s", record.get("rule"))
                return None
            stored = parse_cost_record(record["cost"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            logger.warning("qnn: ignoring a split alias that does not parse: %s", e)
            return None
        if not by_fx or not set(by_fx) <= calls:
            logger.warning("qnn: ignoring a split alias whose nodes are not this graph's")
            return None
        split, why = self.split_and_compile(args, device, by_fx, cached=(key, cache_dir), stored=stored)
        if split is None:
            logger.info("qnn: split alias not used: %s", why)
            return None
        logger.info("qnn: loaded %d cached partitions for %s", len(split.plan.partitions), device)
        return split

    def compile_together(
        self, stitched: torch.fx.GraphModule, parts: list["_PartitionModule"], args: Sequence[Any], device: str
    ) -> Optional[str]:
        """All partitions of ``stitched`` as graphs of one QNN context (one finalize call, one
        binary, one cache entry), for the inputs each partition gets from ``args``: the stitched
        graph runs eagerly once to record them. Returns the context's cache key (None when not
        cached). Where that fails (the reason is logged) each partition compiles on its own at
        its first call, in a context of its own."""
        s = self.settings
        recorded = _record(stitched, parts, args)
        if recorded is None:
            logger.warning("qnn: a partition was not reached by the recording run; compiling each on its own")
            return None
        calibration = self.partition_samples(stitched, parts, args) if s.quantize is not None else None
        callables, onnx_list, fix_list = [], [], []
        try:
            for k, (p, sub_args) in enumerate(zip(parts, recorded)):
                c = QnnCallable(p.graph, sub_args, p.settings, may_partition=False)
                idx = [i for i in c.runtime if isinstance(sub_args[i], torch.Tensor)]
                fix_list.append(onnx_fix_inputs(c.gm, idx, p.settings.fix_inputs))
                if calibration is None:
                    frozen = _export.Frozen(c.export_gm, sub_args, idx)
                    onnx_list.append(_export.export(frozen, [sub_args[i] for i in idx], s))
                else:
                    traced = _export.Interpreted(c.export_gm, sub_args, idx)
                    samples = [tuple(a[i] for i in idx) for a in calibration[k]]
                    q = _quantize.quantize(traced, [sub_args[i] for i in idx], samples, s.quantize_config())
                    onnx_list.append(q.onnx)
                    STATS["quantizations"] += 1
                STATS["exports"] += 1
                callables.append(c)
            soc_model, htp_arch = (s.soc_model, s.htp_arch) if device == "npu" else (None, None)
            t = time.perf_counter()
            # Without weight sharing: partitions share no weights, and the x86_64 HTP library
            # cannot load weight-shared binaries, which would make the context uncacheable.
            natives = _native.compile_many(
                onnx_list,
                [f"partition_{i}" for i in range(len(parts))],
                device=device,
                soc_model=soc_model,
                htp_arch=htp_arch,
                fp16=s.fp16,
                opt_level=s.opt_level,
                weight_sharing=False,
                cache_dir=_cache_dir(s),
                fix_inputs=fix_list,
            )
        except _FALLBACK_ERRORS as e:
            logger.warning("qnn: the partitions do not compile as one context (%s); compiling each on its own", e)
            return None
        STATS["cache_hits" if natives[0].from_cache else "compiles"] += 1
        logger.info(
            "qnn: compiled %d partitions as one context for %s in %.0f ms",
            len(parts),
            device,
            (time.perf_counter() - t) * 1e3,
        )
        for p, c, native, sub_args in zip(parts, callables, natives, recorded):
            p.bind(c, native, sub_args, device)
        return natives[0].cache_key

    def partition_samples(
        self, stitched: torch.fx.GraphModule, parts: list["_PartitionModule"], args: Sequence[Any]
    ) -> list[list]:
        """Per partition, the inputs it gets in eager runs of ``stitched`` on each calibration
        sample (this graph's runtime tensors in ``self.samples``): its calibration data, so its
        encodings are those a calibration of the whole model gives the same tensors."""
        idx = [i for i in self.runtime if isinstance(args[i], torch.Tensor)]
        out: list[list] = [[] for _ in parts]
        for sample in self.samples or []:
            full = list(args)
            for i, t in zip(idx, sample):
                full[i] = t
            for k, calls in enumerate(_record(stitched, parts, full, every=True) or []):
                out[k].extend(calls)
        return out

    def load_together(
        self,
        stitched: torch.fx.GraphModule,
        parts: list["_PartitionModule"],
        args: Sequence[Any],
        device: str,
        key: str,
        cache_dir: str,
    ) -> bool:
        """The partitions' graphs from the cached context ``key`` (one load), bound to the
        inputs a recording run gives each partition; False (nothing bound) on a miss."""
        s = self.settings
        recorded = _record(stitched, parts, args)
        if recorded is None:
            return False
        soc_model, htp_arch = (s.soc_model, s.htp_arch) if device == "npu" else (None, None)
        natives = _native.load_cached_many(
            key,
            cache_dir,
            [f"partition_{i}" for i in range(len(parts))],
            device=device,
            soc_model=soc_model,
            htp_arch=htp_arch,
            opt_level=s.opt_level,
        )
        if natives is None or len(natives) != len(parts):
            return False
        for p, native, sub_args in zip(parts, natives, recorded):
            p.bind(QnnCallable(p.graph, sub_args, p.settings, may_partition=False), native, sub_args, device)
        return True

    def fx_fingerprint(self, args: Sequence[Any], device: str, calibration: Optional[str] = None) -> str:
        """The warm-start fingerprint of this graph called with ``args`` on ``device``;
        ``calibration`` is the digest of the calibration samples of a quantized graph."""
        return _fingerprint.fx_fingerprint(
            self.gm, args, self.runtime, self.signature(args), device, self.settings, calibration
        )

    def calibration_samples(self, args: Sequence[Any], runtime_tensors: Sequence[torch.Tensor]) -> list:
        """The calibration data as tuples of this call's runtime tensors (ValueError naming what
        to change when it does not fit)."""
        assert self.frame is not None
        mapper = _calibrate.Mapper(self.frame, args, self.runtime)
        index = [i for i in self.runtime if isinstance(args[i], torch.Tensor)]

        def run_float(inputs):
            full = list(args)
            for i, t in zip(index, inputs):
                full[i] = t
            return self.gm(*full)

        samples = _calibrate.collect(self.settings.calibration, mapper, run_float)
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
            return graph.module(*args)
        tensors = [args[i] for i in self.runtime if isinstance(args[i], torch.Tensor)]
        outs = graph(tensors)
        if self.kv_plan is not None:
            outs = self.kv_plan.finish(args, outs)
        outs = _runtime.guard_autograd(outs, list(args) + self.statics)
        return tuple(outs) if self.returns_tuple else outs[0]


    @classmethod
    def serialize_compile_artifacts(cls, fn: "QnnCallable") -> bytes:
        """The graph compiled for the example call (compiled now if it has not run yet) as a
        saved model, with what a call needs around it. Raises what compiling raises, and
        LoweringError for graphs that cannot be saved (eager fallback, KV-cache replay)."""
        if fn.kv_plan is not None:
            raise LoweringError("kv_cache graphs replay their cache writes on the host; the AOT path cannot save them yet")
        args: list[Any] = []
        for i in range(len(fn.example) + len(fn.example_statics)):
            if i in fn.example_statics:
                args.append(fn.example_statics[i])
                continue
            shape, value = fn.example[i]
            if shape == "const":
                args.append(value)
            else:
                # Export traces the graph, whose values do not steer it (dynamo graphs have no
                # data-dependent control flow): zeros of the example's shape and dtype do.
                args.append(torch.zeros(shape, dtype=value))
        sig = fn.signature(args)
        if sig not in fn.graphs:
            fn.graphs[sig] = fn.compile(args)
        graph = fn.graphs[sig]
        if graph is None:
            raise LoweringError("the graph cannot run on QNN (it falls back to eager PyTorch), so there is no binary to save")
        if isinstance(graph, Partitioned):
            raise LoweringError(
                "the graph is split into QNN partitions and eager nodes; the AOT path saves whole QNN graphs only"
            )
        header = {
            "runtime": fn.runtime,
            "returns_tuple": fn.returns_tuple,
            "out_meta": [None if m is None else list(m) for m in fn.out_meta],
            "device": graph.device,
            "check_nan": fn.settings.check_nan,
        }
        saved = _native.saved_bytes(
            graph.native,
            {k: repr(v) for k, v in sorted(fn.settings.compile_settings().items())},
            {"outputs": json.dumps("tuple" if fn.returns_tuple else "tensor"), "torch": torch.__version__},
        )
        text = json.dumps(header).encode()
        return _AOT_MAGIC + len(text).to_bytes(8, "little") + text + saved

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "AotGraph":
        return AotGraph(data)


class AotGraph:
    """A graph of torch's AOT path, loaded from what ``QnnCallable.serialize_compile_artifacts``
    wrote: the saved model's binary is loaded (no export, lowering or finalize) and called with
    dynamo's arguments (parameters are frozen in the graph; only the runtime tensors are
    passed to QNN)."""

    def __init__(self, data: bytes):
        if not data.startswith(_AOT_MAGIC):
            raise LoweringError("not a qnnx AOT artifact (it does not start with qnnx-aot-1)")
        n = int.from_bytes(data[len(_AOT_MAGIC) : len(_AOT_MAGIC) + 8], "little")
        start = len(_AOT_MAGIC) + 8
        header = json.loads(data[start : start + n])
        graphs, _ = _native.load_saved_bytes("the AOT-compiled function's qnnx graph", data[start + n :])
        out_meta = [None if m is None else torch.Size(m) for m in header["out_meta"]]
        self.graph = CompiledGraph(graphs[0], header["device"], out_meta, header["check_nan"])
        self.runtime = list(header["runtime"])
        self.returns_tuple = bool(header["returns_tuple"])
        STATS["aot_loads"] += 1

    def __call__(self, *args):
        outs = self.graph([args[i] for i in self.runtime if isinstance(args[i], torch.Tensor)])
        outs = _runtime.guard_autograd(outs, args)
        return tuple(outs) if self.returns_tuple else outs[0]


class _PartitionModule(torch.nn.Module):
    """One QNN partition in a split graph. QnnCallable.compile_together gives it its graph of
    the context shared by all partitions; failing that it compiles at its first call like a
    whole graph (its parameters arrive as the same static tensors dynamo passes the whole
    graph), in a context of its own."""

    def __init__(self, graph: torch.fx.GraphModule, settings: QnnSettings):
        super().__init__()
        self.graph = graph
        self.settings = settings
        self.callable: Optional[QnnCallable] = None
        #: While QnnCallable.compile_together records each partition's inputs: runs eagerly.
        self.recording: Optional[list] = None

    def bind(self, c: "QnnCallable", native: Any, args: Sequence[Any], device: str) -> None:
        """Runs calls like ``args`` through ``native``, this partition's graph of the shared
        context (compiled or loaded), with ``c`` as its callable."""
        c.graphs[c.signature(args)] = CompiledGraph(native, device, c.out_meta, self.settings.check_nan)
        self.callable = c

    def forward(self, *args):
        if self.recording is not None:
            self.recording.append(args)
            return self.graph(*args)
        if self.callable is None:
            self.callable = QnnCallable(self.graph, args, self.settings, may_partition=False)
        return self.callable(*args)


@dataclasses.dataclass
class Partitioned:
    """A graph split into QNN partitions (``_PartitionModule`` submodules) and eager nodes."""

    module: torch.fx.GraphModule
    plan: "_partition.Plan"
    device: str


def _argument_name(placeholder: str) -> str:
    """The ``forward`` argument a dynamo placeholder stands for: ``L_flag_`` / ``l_flag_`` ->
    ``flag``."""
    name = placeholder
    if name[:2] in ("L_", "l_"):
        name = name[2:]
    return name[:-1] if name.endswith("_") else name


def _fixed_matches(gm: torch.fx.GraphModule, tensor_idx: Sequence[int], fix_inputs: Any) -> list[tuple[int, str, str]]:
    """(j, placeholder name, fix_inputs key) for each runtime tensor input ``input_<j>`` of
    ``gm`` (argument ``tensor_idx[j]``) a key of ``fix_inputs`` names: keys are matched against
    the exported name, dynamo's placeholder name and target, and the ``forward`` argument they
    stand for. Keys that match no input of this graph are left out (with graph breaks they may
    be another graph's)."""
    if not fix_inputs:
        return []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    matched = set()
    for j, i in enumerate(tensor_idx):
        names = {f"input_{j}"}
        p = placeholders[i] if i < len(placeholders) else None
        if p is not None:
            for n in (p.name, str(p.target)):
                names.update((n, _argument_name(n)))
        for key in fix_inputs:
            if key in names:
                out.append((j, p.name if p is not None else f"input_{j}", key))
                matched.add(key)
    if set(fix_inputs) - matched:
        logger.info("qnn: fix_inputs %s name no input of this graph", sorted(set(fix_inputs) - matched))
    return out


def onnx_fix_inputs(gm: torch.fx.GraphModule, tensor_idx: Sequence[int], fix_inputs: Any) -> dict[str, str]:
    """The ``fix_inputs`` setting for the ONNX export of ``gm``, whose input ``input_<j>`` is
    argument ``tensor_idx[j]`` (see ``_fixed_matches`` for how keys name inputs)."""
    values = fixed_values(fix_inputs)
    return {f"input_{j}": values[key] for j, _, key in _fixed_matches(gm, tensor_idx, values)}


def partition_fix_inputs(
    gm: torch.fx.GraphModule, tensor_idx: Sequence[int], fix_inputs: Any, partition: torch.fx.GraphModule
) -> Optional[dict[str, Any]]:
    """The ``fix_inputs`` of one QNN partition of ``gm``: the fixed inputs of ``gm`` that the
    partition reads, keyed by their placeholder name (a partition's placeholders are named after
    the nodes of ``gm`` they receive, so a whole-graph name such as ``input_1``, which would
    name another input of the partition, never reaches it). None when it reads none."""
    matches = _fixed_matches(gm, tensor_idx, fix_inputs)
    reads = {n.name for n in partition.graph.nodes if n.op == "placeholder"}
    out = {name: fix_inputs[key] for _, name, key in matches if name in reads}
    return out or None


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], settings: QnnSettings) -> Callable:
    """The backend entry: the original forward for device="cpu", otherwise a QnnCallable.

    Compilation happens at the first call of each input signature rather than here: dynamo
    wraps exceptions raised by a backend in BackendCompilerFailed, while exceptions raised by
    the compiled function reach the caller as they are, so strict mode's UnsupportedOpError
    (and the others) can be caught by their own class; they are raised as their ``_strict``
    twins, which are also BackendCompilerFailed, for code written for the 0.4 package.
    """
    if settings.device == "cpu":
        return gm.forward
    return QnnCallable(gm, example_inputs, settings)


def _record(
    stitched: torch.fx.GraphModule, parts: list["_PartitionModule"], args: Sequence[Any], every: bool = False
) -> Optional[list]:
    """The inputs each partition of ``stitched`` gets from ``args``, from one eager run of the
    stitched graph (with ``every``, the list of all its calls' inputs); None when a partition
    is not reached."""
    for p in parts:
        p.recording = []
    try:
        with torch.no_grad():
            stitched(*args)
    finally:
        recorded = [(list(p.recording) if every else p.recording[0]) if p.recording else None for p in parts]
        for p in parts:
            p.recording = None
    return None if any(r is None for r in recorded) else recorded


def partition_rule(s: QnnSettings) -> dict:
    """The options that choose a split's partitions, as a split alias records them."""
    return {"min_partition_size": s.min_partition_size, "partition_cost": s.partition_cost}


def cost_record(plan: "_partition.Plan") -> Optional[dict]:
    """The cost decision of ``plan`` as a split alias stores it (None: the rule was off)."""
    if plan.call_cost_us is None:
        return None
    # Integer nanoseconds (``weigh`` rounds to them): JSON floats may not read back to the bit.
    return {
        "call_cost_ns": round(plan.call_cost_us * 1000),
        "source": plan.cost_source,
        "islands_ns": {k: round(v * 1000) for k, v in plan.islands.items()},
    }


def parse_cost_record(rec: Any) -> Optional[dict]:
    """``cost_record``'s dict read back (ValueError, KeyError or TypeError when it is not one)."""
    if rec is None:
        return None
    source = str(rec["source"])
    if source not in ("measured", "partition_cost"):
        raise ValueError(f"cost source {source!r}")
    return {
        "call_cost_us": int(rec["call_cost_ns"]) / 1000,
        "source": source,
        "islands": {str(k): int(v) / 1000 for k, v in rec["islands_ns"].items()},
    }


#: The measured call cost per (device, soc_model, htp_arch), once per process.
_CALL_COSTS: dict[tuple, float] = {}


def call_cost_us(device: str, s: QnnSettings) -> float:
    """The fixed cost of one QNN graph call on ``device`` (with ``s``'s SoC and arch) in us:
    the median time of a call of a one-node graph (_callcost.probe_onnx) through the same
    path a partition's call takes (``_PartitionModule`` -> ``QnnCallable`` -> the graph
    execute), measured once per process and target. The probe compiles with the cache when
    ``s.cache`` is on (a later process loads it); a probe that does not compile raises what
    compiling raised."""
    soc_model, htp_arch = (s.soc_model, s.htp_arch) if device == "npu" else (None, None)
    key = (device, soc_model, htp_arch)
    if key in _CALL_COSTS:
        return _CALL_COSTS[key]
    t = time.perf_counter()
    native = _native.compile(
        _callcost.probe_onnx(), device=device, soc_model=soc_model, htp_arch=htp_arch, cache_dir=_cache_dir(s)
    )
    x = _callcost.probe_input()
    gm = torch.fx.symbolic_trace(_callcost.ProbeAddOne())
    # The caller's other options (quantize, fix_inputs, ...) are the model's, not the probe's.
    probe_settings = QnnSettings(device=device, soc_model=soc_model, htp_arch=htp_arch, check_nan=s.check_nan)
    part = _PartitionModule(gm, probe_settings)
    part.bind(QnnCallable(gm, [x], probe_settings, may_partition=False), native, [x], device)
    got = part(x)
    if not torch.equal(got, x + 1):
        raise QnnxError(f"the call-cost probe graph on {device} returned {got.tolist()}, not x + 1")
    cost = _callcost.median_us(lambda: part(x), _callcost.PROBE_RUNS, _callcost.PROBE_WARMUP)
    STATS["call_cost_probes"] += 1
    logger.info(
        "qnn: one QNN graph call on %s costs %.0f us (median of %d; probe compiled and timed in %.0f ms)",
        device, cost, _callcost.PROBE_RUNS, (time.perf_counter() - t) * 1e3,
    )
    _CALL_COSTS[key] = cost
    return cost


def _first_clause(message: str) -> str:
    """The first clause of a library error (``QNN library libQnnGpu.so not found``)."""
    for sep in ("\n", "; ", " ("):
        message = message.split(sep)[0]
    return message.rstrip(".")


def _cache_dir(s: QnnSettings) -> Optional[str]:
    if not s.cache:
        return None
    d = s.cache_dir or _native.default_cache_dir()
    if d is None:
        raise CacheError("cache=True but no cache folder is known: set cache_dir or QNNX_CACHE_DIR")
    return str(d)


def _read_alias(fingerprint: str, cache_dir: str, device: str, s: QnnSettings):
    key = _native.alias_get(cache_dir, fingerprint)
    if key is None:
        return None
    return _native.load_cached(
        key,
        cache_dir,
        device=device,
        soc_model=s.soc_model if device == "npu" else None,
        htp_arch=s.htp_arch if device == "npu" else None,
        opt_level=s.opt_level,
    )


def _write_alias(cache_dir: str, fingerprint: str, key: str) -> None:
    try:
        _native.alias_put(cache_dir, fingerprint, key)
    except CacheError as e:
        logger.warning("qnn: could not record the cache alias of %s: %s", fingerprint, e)
