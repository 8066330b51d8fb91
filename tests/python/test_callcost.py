"""The cost rule's measurements (qnnx_backend._callcost): the probe model, the medians, and the
eager time of each partition of a split graph. The partitioner's use of them is tested in
test_partition_htp.py."""

import time

import pytest
import torch
import torch.nn as nn

from qnnx_backend import _callcost, _partition


def test_the_probe_runs_on_every_backend_whole():
    # One int32 Add: nothing a backend refuses (v68 has no float path).
    probe = _callcost.probe_onnx()
    for device in ("npu", "gpu"):
        assert _partition.unsupported_nodes(probe, device) == [], device
    x = _callcost.probe_input()
    assert torch.equal(_callcost.ProbeAddOne()(x), x + 1) and x.dtype == torch.int32


def test_median_us_is_a_median_and_stops_early_only_far_above_the_bound():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(1e-3)

    t = _callcost.median_us(slow, runs=5, warmup=2)
    assert len(calls) == 7 and 1e3 <= t < 1e6
    calls.clear()
    # ~1 ms a call: far above a 10 us bound, so the first ISLAND_CLEAR_RUNS decide.
    _callcost.median_us(slow, runs=5, warmup=1, clear_above=10.0)
    assert len(calls) == 1 + _callcost.ISLAND_CLEAR_RUNS
    calls.clear()
    _callcost.median_us(slow, runs=5, warmup=1, clear_above=1e9)
    assert len(calls) == 6


class TwoBlocks(nn.Module):
    def forward(self, x):
        y = torch.relu(x) * 2
        d = torch.linalg.det(y[..., :2, :2])
        return torch.tanh(y) + d[..., None, None]


def test_island_times_of_a_split_graph():
    made = []

    def capture(gm, inputs):
        made.append((gm, inputs))
        return gm.forward

    torch.compile(TwoBlocks(), backend=capture)(torch.randn(1, 4, 4))
    [(gm, inputs)] = made
    det = next(n.name for n in gm.graph.nodes if "det" in str(n.target))
    p = _partition.plan(gm, {det: []}, 1)
    stitched = _partition.split(gm, p)
    times = _callcost.island_times(stitched, len(p.partitions), inputs, call_cost_us=1e9)
    # Far above a tiny cost, the recording run alone decides (and is the time reported).
    assert all(t is not None and t > 0 for t in _callcost.island_times(stitched, len(p.partitions), inputs, 1e-6))
    assert len(times) == len(p.partitions) >= 2 and all(t is not None and t > 0 for t in times), times
    # The submodules are put back as they were.
    assert all(isinstance(stitched.get_submodule(f"qnn_partition_{i}"), torch.fx.GraphModule) for i in range(len(times)))
    # weigh: a cost between the two times keeps the slower island only, and names both numbers.
    lo, hi = sorted(times)
    w = _partition.weigh(gm, p, times, (lo + hi) / 2, "measured")
    assert len(w.partitions) == len(p.partitions) - 1 and w.eager_us == [pytest.approx(hi, abs=1e-3)]
    assert w.islands == {part[0]: pytest.approx(t, abs=1e-3) for part, t in zip(p.partitions, times)}
    dropped = p.partitions[times.index(lo)]
    assert all("island eager time" in w.eager[n] and "< measured QNN call cost" in w.eager[n] for n in dropped), w.eager
    assert list(w.eager) == sorted(w.eager, key=[n.name for n in gm.graph.nodes].index)
