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

Both numbers are medians: a one-off stall (another process, a page fault) moves a median much
less than a mean, and the decision should not flip with one slow run.
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
#: Timed eager runs of each candidate partition (after one warm-up): the candidate's own ops at
#: its real input sizes, so a large one costs real time; see ``ISLAND_CLEAR``.
ISLAND_RUNS = 5
#: A candidate whose median over its first ``ISLAND_CLEAR_RUNS`` timed runs is this many times
#: above the call cost is kept without the other runs: no plausible noise brings it under the
#: cost, and a large candidate's runs are the expensive ones.
ISLAND_CLEAR = 10.0
ISLAND_CLEAR_RUNS = 3
#: A candidate whose first run (the one that records its inputs, which also warms it up) takes
#: this many times the call cost is kept on that run alone: for a large model a candidate can
#: take seconds eagerly, and a first run only overstates the steady-state time.
ISLAND_FAR = 100.0

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


def median_us(
    fn: Callable[[], Any], runs: int, warmup: int, clear_above: Optional[float] = None
) -> float:
    """The median time of ``fn()`` in microseconds over ``runs`` calls after ``warmup``; with
    ``clear_above``, the median of the first ``ISLAND_CLEAR_RUNS`` when it is above that."""
    with torch.no_grad():
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e6)
            if (
                clear_above is not None
                and len(times) == ISLAND_CLEAR_RUNS
                and statistics.median(times) > clear_above
            ):
                break
    return statistics.median(times)


def island_times(
    stitched: torch.fx.GraphModule, count: int, args: Sequence[Any], call_cost_us: float
) -> list[Optional[float]]:
    """The eager time in us of each partition submodule ``qnn_partition_<i>`` (i < ``count``) of
    ``stitched`` (a ``_partition.split``), on the inputs one eager run of ``stitched`` on
    ``args`` gives it; None for a partition that run does not reach. That run is each
    partition's warm-up (and, ``ISLAND_FAR`` times above ``call_cost_us``, its only run)."""
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
        elif first > ISLAND_FAR * call_cost_us:
            out.append(first)
        else:
            out.append(median_us(lambda: inner(*a), ISLAND_RUNS, 0, clear_above=ISLAND_CLEAR * call_cost_us))
    return out
