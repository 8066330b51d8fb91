"""The two numbers the partitioner's cost rule compares: what one call of a QNN graph costs,
measured on the backend, and what an island of FX nodes (a candidate partition) costs when it
runs eagerly on the host.

Why this rule (``partition_cost``): a QNN partition's time per call is at least the fixed cost
of one graph call (our input checks and output allocation, the graph execute and what the
backend does around it: on a phone the FastRPC round trip to the HTP) plus its compute on the
accelerator. An island whose eager time on the host is below that fixed cost alone cannot be
faster on QNN, however fast the accelerator is, so it stays eager. The converse does not hold:
an island above the cost may still be slower on QNN when the accelerator's compute is slower
than the host's for it (on the x86_64 emulator, which simulates the HTP on the host CPU, every
partition is). Knowing that would need each candidate compiled and timed on the device before
the split is chosen (one finalize per candidate, the expensive step of a compile); this rule
costs one tiny probe compile per process and backend, and a few eager runs per candidate.

Both numbers are medians of warm runs: a one-off stall (another process, a page fault) moves
a median much less than a mean, and the decision should not flip with one slow run. An island's
time also leaves out what a first run pays once and what the host's load does to torch's
intra-op pool (``island_us``): the split it decides is cached and kept.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Optional, Sequence

import torch

#: Timed calls of the probe graph (after ``PROBE_WARMUP``): at tens to hundreds of us a call, a
#: few ms in all.
PROBE_RUNS = 21
PROBE_WARMUP = 5
#: Timed eager runs of each candidate partition per thread setting (after a warm-up run): the
#: candidate's own ops at its real input sizes, so a large one costs real time; see
#: ``ISLAND_CLEAR`` and ``ISLAND_BUDGET_S``.
ISLAND_RUNS = 5
#: A candidate whose median over its first ``ISLAND_CLEAR_RUNS`` timed runs is this many times
#: above the call cost is kept without the other runs: no plausible noise brings it under the
#: cost, and a large candidate's runs are the expensive ones.
ISLAND_CLEAR = 10.0
ISLAND_CLEAR_RUNS = 3
#: Timed runs of a series stop once they have taken this long (after at least one), and a
#: warm-up run this long is the series' only run: next to a run of 0.1 s, the one-off costs of a
#: first run (a few ms) and a descheduled thread (a few to tens of ms) cannot move the decision,
#: and a candidate that takes seconds eagerly is timed in a few runs rather than a dozen.
ISLAND_BUDGET_S = 0.1

PROBE_SHAPE = (4, 4)


def probe_onnx() -> bytes:
    """A one-node ONNX model (``y = x + 1`` on an int32 [4, 4]): its graph's compute is nil, so
    a call of it costs the fixed per-call cost. int32 because every HTP runs it (v68 has no
    float path), and so does the GPU."""
    import onnx
    import onnx.helper as oh

    graph = oh.make_graph(
        [oh.make_node("Add", ["x", "one"], ["y"], name="probe")],
        "qnnx_call_cost_probe",
        [oh.make_tensor_value_info("x", onnx.TensorProto.INT32, list(PROBE_SHAPE))],
        [oh.make_tensor_value_info("y", onnx.TensorProto.INT32, list(PROBE_SHAPE))],
        [oh.make_tensor("one", onnx.TensorProto.INT32, [1], [1])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()


class ProbeAddOne(torch.nn.Module):
    """The probe's FX side: what the partition wrapper around the probe graph runs eagerly."""

    def forward(self, x):
        return x + 1


def probe_input() -> torch.Tensor:
    return torch.zeros(PROBE_SHAPE, dtype=torch.int32)


def median_us(fn: Callable[[], Any], runs: int, warmup: int) -> float:
    """The median time of ``fn()`` in microseconds over ``runs`` calls after ``warmup``."""
    with torch.no_grad():
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def _series_us(
    fn: Callable[[], Any], warmup_us: Optional[float], clear_above: float
) -> float:
    """The median of up to ``ISLAND_RUNS`` timed calls of ``fn`` after a warm-up call, which
    took ``warmup_us`` when already made (None: it is made here), in us. A warm-up of at least
    ``ISLAND_BUDGET_S`` is the answer; the runs stop at ``ISLAND_CLEAR_RUNS`` when their median
    is above ``clear_above``, and once they have taken ``ISLAND_BUDGET_S``."""
    if warmup_us is None:
        t = time.perf_counter()
        fn()
        warmup_us = (time.perf_counter() - t) * 1e6
    if warmup_us >= ISLAND_BUDGET_S * 1e6:
        return warmup_us
    times: list[float] = []
    while len(times) < ISLAND_RUNS:
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
        if len(times) == ISLAND_CLEAR_RUNS and statistics.median(times) > clear_above:
            break
        if sum(times) >= ISLAND_BUDGET_S * 1e6:
            break
    return statistics.median(times)


def island_us(fn: Callable[[], Any], first_us: float, call_cost_us: float) -> float:
    """The eager time of one candidate partition (``fn`` runs it on its recorded inputs, and
    that first run took ``first_us``), in us: the lower of the median of its warm runs with
    torch's intra-op threads and with one thread.

    Why this statistic. The first run pays one-off costs (kernel libraries creating their
    primitives, the thread pool starting, the allocator growing): it is only a warm-up, and so
    is the first run after the thread count changes. The median leaves out a run slowed by a
    page fault or a descheduled thread. Neither helps when a whole series is slow: on a shared
    host, each parallel region of a multi-threaded run waits for a worker another process holds
    off the core (a scheduler tick each), and for seconds every run of a 0.4 ms two-conv island
    took 20 to 280 ms (the report of 37, 3.5 and 47 ms for one island in three runs, whose model
    ran in 1.4 ms). A single-threaded run has no worker to wait for; it is at most the thread
    count times slower than a parallel one (1.4x for that island on 2 cores). The lower of the
    two medians is what eager PyTorch does with the island on this host when the host lets it:
    the parallel median when the pool runs unhindered, the single-threaded one when it stalls."""
    clear_above = ISLAND_CLEAR * call_cost_us
    with torch.no_grad():
        best = _series_us(fn, first_us, clear_above)
        threads = torch.get_num_threads()
        if threads > 1:
            torch.set_num_threads(1)
            try:
                best = min(best, _series_us(fn, None, clear_above))
            finally:
                torch.set_num_threads(threads)
    return best


def island_times(
    stitched: torch.fx.GraphModule, count: int, args: Sequence[Any], call_cost_us: float
) -> list[Optional[float]]:
    """The eager time in us (``island_us``) of each partition submodule ``qnn_partition_<i>``
    (i < ``count``) of ``stitched`` (a ``plan.split``), on the inputs one eager run of
    ``stitched`` on ``args`` gives it; None for a partition that run does not reach. That run
    is each partition's warm-up."""
    recorded: list[Optional[tuple]] = [None] * count
    first_us: list[float] = [0.0] * count
    originals = [stitched.get_submodule(f"qnn_partition_{i}") for i in range(count)]

    class _Record(torch.nn.Module):
        def __init__(self, i: int, inner: torch.nn.Module):
            super().__init__()
            self.i, self.inner = i, inner

        def forward(self, *a):
            if recorded[self.i] is not None:
                return self.inner(*a)
            recorded[self.i] = a
            t = time.perf_counter()
            out = self.inner(*a)
            first_us[self.i] = (time.perf_counter() - t) * 1e6
            return out

    for i, inner in enumerate(originals):
        setattr(stitched, f"qnn_partition_{i}", _Record(i, inner))
    try:
        with torch.no_grad():
            stitched(*args)
    finally:
        for i, inner in enumerate(originals):
            setattr(stitched, f"qnn_partition_{i}", inner)
    out: list[Optional[float]] = []
    for inner, a, first in zip(originals, recorded, first_us):
        if a is None:
            out.append(None)
        else:
            out.append(island_us(lambda: inner(*a), first, call_cost_us))  # noqa: B023 (called at once)
    return out
