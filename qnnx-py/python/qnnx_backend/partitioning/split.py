"""A graph split into QNN partitions and eager nodes: the partitions chosen (the lowering's
refusals, ``min_partition_size``, their eager time against the QNN call cost), compiled as
graphs of one context or loaded from a split alias, and called through ``_PartitionModule``.
``Splitting`` is the part of ``QnnCallable`` that does it; it makes the partitions' own
callables with ``type(self)``."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Optional, Sequence

import torch

from .. import _native, _warn
from ..exceptions import QnnxError
from ..compiling import fix_inputs, to_onnx, warm
from ..compiling.call import CompiledGraph
from ..compiling.stats import FALLBACK_ERRORS, STATS
from ..quantization import pt2e
from ..settings import QnnSettings
from . import callcost, plan as partition_plan

logger = logging.getLogger("qnnx_backend")


#: The measured call cost per (device, soc_model, htp_arch), once per process.
_CALL_COSTS: dict[tuple, float] = {}


class Splitting:
    """The partitioning methods of ``QnnCallable`` (whose attributes they use)."""

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
        self, args: Sequence[Any], device: str, tensor_idx: Sequence[int], call_tensors: Sequence[torch.Tensor]
    ) -> tuple[Optional["Partitioned"], Optional[str]]:
        """The graph split into QNN partitions for ``device`` and eager nodes, or (None, why
        not). The support answer is the lowering's own (``partition_plan.unsupported_nodes``) for
        an export in which each FX node is a scope of its own (``partition_plan.scoped``)."""
        scoped, names = partition_plan.scoped(self.export_gm)
        try:
            onnx_bytes = to_onnx._export_with("torchscript", to_onnx.Frozen(scoped, args, tensor_idx), call_tensors)
        except to_onnx.EXPORT_ERRORS as e:
            return None, f"the per-node export failed: {e}"
        STATS["exports"] += 1
        # The scoped export's inputs are the whole export's (input_<j> for the same arguments):
        # the same fixed values fold the same nodes.
        fixed = fix_inputs.onnx_fix_inputs(self.gm, tensor_idx, self.settings.fix_inputs)
        unsupported = partition_plan.unsupported_nodes(onnx_bytes, device, fix_inputs=fixed)
        by_fx, orphans = partition_plan.map_unsupported(unsupported, names)
        if orphans:
            return None, "ONNX node(s) of no FX node refused: " + ", ".join(n.node for n in orphans)
        if not by_fx:
            return None, "the per-node export has no unsupported node"
        return self.split_and_compile(args, device, by_fx)

    def plan_for(
        self, args: Sequence[Any], by_fx: dict, device: str, stored: Optional[dict] = None
    ) -> "partition_plan.Plan":
        """The split for refused FX nodes ``by_fx``: runs of at least ``min_partition_size``
        supported nodes, each then weighed by its eager time against the QNN call cost
        (``partition_cost``; see partitioning.callcost). ``stored`` is the decision a split alias recorded
        (``cost_record``): its times and cost are reused, so a warm start splits the graph as
        the process that cached it did, without measuring (timings vary from run to run; the
        cached context holds exactly the partitions that process chose)."""
        s = self.settings
        placeholders = [n for n in self.export_gm.graph.nodes if n.op == "placeholder"]
        param_sizes = {
            p.name: a.numel()
            for p, a in zip(placeholders, args)
            if isinstance(a, torch.Tensor) and to_onnx.is_static(a)
        }
        plan = partition_plan.plan(self.export_gm, by_fx, s.min_partition_size, param_sizes)
        if s.partition_cost == 0 or not plan.partitions:
            return plan
        if stored is not None:
            times = [stored["islands"].get(p[0]) for p in plan.partitions]
            return partition_plan.weigh(self.export_gm, plan, times, stored["call_cost_us"], stored["source"])
        if s.partition_cost == "measure":
            try:
                cost, source = self.call_cost_us(device, s), "measured"
            except FALLBACK_ERRORS as e:
                # The partitions themselves may still compile: without a cost, only
                # min_partition_size decides.
                logger.warning("qnn: could not measure the QNN call cost on %s (%s); islands are not weighed", device, e)
                return plan
        else:
            cost, source = float(s.partition_cost), "partition_cost"
        t = time.perf_counter()
        times = callcost.island_times(partition_plan.split(self.export_gm, plan), len(plan.partitions), args, cost)
        logger.info(
            "qnn: weighed %d island(s) against a QNN call cost of %.0f us (%s) in %.0f ms: eager %s us",
            len(times), cost, source, (time.perf_counter() - t) * 1e3,
            [None if x is None else round(x) for x in times],
        )
        return partition_plan.weigh(self.export_gm, plan, times, cost, source)

    def split_and_compile(
        self,
        args: Sequence[Any],
        device: str,
        by_fx: dict,
        cached: Optional[str] = None,
        stored: Optional[dict] = None,
    ) -> tuple[Optional["Partitioned"], Optional[str]]:
        """The graph split by the refused FX nodes ``by_fx`` and its partitions compiled as one
        context, or loaded: ``cached`` is the cache key of that context and ``stored``
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
        stitched = partition_plan.split(self.export_gm, plan)
        tensor_idx = [i for i in self.per_call if isinstance(args[i], torch.Tensor)]
        parts = []
        for i in range(len(plan.partitions)):
            name = f"qnn_partition_{i}"
            graph = stitched.get_submodule(name)
            fixed = fix_inputs.partition_fix_inputs(self.gm, tensor_idx, s.fix_inputs, graph)
            parts.append(_PartitionModule(graph, dataclasses.replace(s, device=device, fix_inputs=fixed), type(self)))
            setattr(stitched, name, parts[-1])
        if cached is not None:
            if not self.load_together(stitched, parts, args, device, cached):
                return None, "the cached partitions did not load"
            STATS["cache_hits"] += 1
        else:
            key = self.compile_together(stitched, parts, args, device)
            if s.quantize is not None and any(p.callable is None for p in parts):
                # A quantized partition cannot compile on its own later (its calibration data
                # are the recorded inputs): the graph falls back whole instead.
                return None, "its quantized partitions did not compile as one context (the log says why)"
            cache_dir = s.cache_folder()
            if key is not None and cache_dir is not None:
                fingerprint = self.fx_fingerprint(args, device, self.calibration_digest)
                warm.write_split_alias(cache_dir, fingerprint, key, by_fx, s, plan)
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
        calls = {n.name for n in self.export_gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")}
        record = warm.read_split_alias(cache_dir, fingerprint, self.settings, calls)
        if record is None:
            return None
        key, by_fx, stored = record
        split, why = self.split_and_compile(args, device, by_fx, cached=key, stored=stored)
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
                c = type(self)(p.graph, sub_args, p.settings, may_partition=False)
                idx = [i for i in c.per_call if isinstance(sub_args[i], torch.Tensor)]
                fix_list.append(fix_inputs.onnx_fix_inputs(c.gm, idx, p.settings.fix_inputs))
                if calibration is None:
                    frozen = to_onnx.Frozen(c.export_gm, sub_args, idx)
                    onnx_list.append(to_onnx.onnx_bytes(frozen, [sub_args[i] for i in idx], s))
                else:
                    traced = to_onnx.Interpreted(c.export_gm, sub_args, idx)
                    samples = [tuple(a[i] for i in idx) for a in calibration[k]]
                    q = pt2e.quantize(traced, [sub_args[i] for i in idx], samples, s.quantize_config())
                    onnx_list.append(q.onnx)
                    STATS["quantizations"] += 1
                STATS["exports"] += 1
                callables.append(c)
            spec = s.spec(device)
            t = time.perf_counter()
            # Without weight sharing: partitions share no weights, and the x86_64 HTP library
            # cannot load weight-shared binaries, which would make the context uncacheable.
            natives = _native.compile_many(
                onnx_list, [f"partition_{i}" for i in range(len(parts))], spec, weight_sharing=False, fix_inputs=fix_list
            )
        except FALLBACK_ERRORS as e:
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
        sample (this graph's per-call tensors in ``self.samples``): its calibration data, so its
        encodings are those a calibration of the whole model gives the same tensors."""
        idx = [i for i in self.per_call if isinstance(args[i], torch.Tensor)]
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
    ) -> bool:
        """The partitions' graphs from the cached context ``key`` (one load), bound to the
        inputs a recording run gives each partition; False (nothing bound) on a miss."""
        s = self.settings
        recorded = _record(stitched, parts, args)
        if recorded is None:
            return False
        natives = _native.load_cached_many(key, [f"partition_{i}" for i in range(len(parts))], s.spec(device))
        if natives is None or len(natives) != len(parts):
            return False
        for p, native, sub_args in zip(parts, natives, recorded):
            p.bind(type(self)(p.graph, sub_args, p.settings, may_partition=False), native, sub_args, device)
        return True

    @classmethod
    def call_cost_us(cls, device: str, s: QnnSettings) -> float:
        """The fixed cost of one QNN graph call on ``device`` (with ``s``'s SoC and arch) in us:
        the median time of a call of a one-node graph (callcost.probe_onnx) through the same
        path a partition's call takes (``_PartitionModule`` -> ``QnnCallable`` -> the graph
        execute), measured once per process and target. The probe compiles with the cache when
        ``s.cache`` is on (a later process loads it); a probe that does not compile raises what
        compiling raised."""
        soc_model, htp_arch = (s.soc_model, s.htp_arch) if device == "npu" else (None, None)
        key = (device, soc_model, htp_arch)
        if key in _CALL_COSTS:
            return _CALL_COSTS[key]
        t = time.perf_counter()
        # The probe's own options: the caller's fp16 and opt_level are the model's.
        native = _native.compile(callcost.probe_onnx(), _native.Spec(device, soc_model, htp_arch, cache_dir=s.cache_folder()))
        x = callcost.probe_input()
        gm = torch.fx.symbolic_trace(callcost.ProbeAddOne())
        # The caller's other options (quantize, fix_inputs, ...) are the model's, not the probe's.
        probe_settings = QnnSettings(device=device, soc_model=soc_model, htp_arch=htp_arch, check_nan=s.check_nan)
        part = _PartitionModule(gm, probe_settings, cls)
        part.bind(cls(gm, [x], probe_settings, may_partition=False), native, [x], device)
        got = part(x)
        if not torch.equal(got, x + 1):
            raise QnnxError(f"the call-cost probe graph on {device} returned {got.tolist()}, not x + 1")
        cost = callcost.median_us(lambda: part(x), callcost.PROBE_RUNS, callcost.PROBE_WARMUP)
        STATS["call_cost_probes"] += 1
        logger.info(
            "qnn: one QNN graph call on %s costs %.0f us (median of %d; probe compiled and timed in %.0f ms)",
            device, cost, callcost.PROBE_RUNS, (time.perf_counter() - t) * 1e3,
        )
        _CALL_COSTS[key] = cost
        return cost


class _PartitionModule(torch.nn.Module):
    """One QNN partition in a split graph. QnnCallable.compile_together gives it its graph of
    the context shared by all partitions; failing that it compiles at its first call like a
    whole graph (its parameters arrive as the same static tensors dynamo passes the whole
    graph), in a context of its own."""

    def __init__(self, graph: torch.fx.GraphModule, settings: QnnSettings, factory: Any):
        super().__init__()
        self.graph = graph
        self.settings = settings
        #: The class of the callables (``QnnCallable``).
        self.factory = factory
        self.callable: Any = None
        #: While QnnCallable.compile_together records each partition's inputs: runs eagerly.
        self.recording: Optional[list] = None

    def bind(self, c: Any, native: Any, args: Sequence[Any], device: str) -> None:
        """Runs calls like ``args`` through ``native``, this partition's graph of the shared
        context (compiled or loaded), with ``c`` as its callable."""
        c.graphs[c.signature(args)] = CompiledGraph(native, device, c.out_meta, self.settings.check_nan)
        self.callable = c

    def forward(self, *args):
        if self.recording is not None:
            self.recording.append(args)
            return self.graph(*args)
        if self.callable is None:
            self.callable = self.factory(self.graph, args, self.settings, may_partition=False)
        return self.callable(*args)


@dataclasses.dataclass
class Partitioned:
    """A graph split into QNN partitions (``_PartitionModule`` submodules) and eager nodes."""

    module: torch.fx.GraphModule
    plan: "partition_plan.Plan"
    device: str


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
