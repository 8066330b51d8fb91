"""The cost rule's measurements (qnnx_backend.partitioning.callcost): the probe model, the medians, and the
eager time of each partition of a split graph. The partitioner's use of them is tested in
test_partition_htp.py."""

import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn as nn

from qnnx_backend.partitioning import callcost as _callcost, plan as _partition


def test_the_probe_runs_on_every_backend_whole():
    # One int32 Add: nothing a backend refuses (v68 has no float path).
    probe = _callcost.probe_onnx()
    for device in ("npu", "gpu"):
        assert _partition.unsupported_nodes(probe, device) == [], device
    x = _callcost.probe_input()
    assert torch.equal(_callcost.ProbeAddOne()(x), x + 1) and x.dtype == torch.int32


def test_median_us_is_a_median_after_the_warmup():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(1e-3)

    t = _callcost.median_us(slow, runs=5, warmup=2)
    assert len(calls) == 7 and 1e3 <= t < 1e6


def test_island_us_stops_early_only_far_above_the_cost_or_past_the_budget():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(1e-3)

    series = 2 if torch.get_num_threads() > 1 else 1  # torch's threads, then one thread
    # ~1 ms a call: far above a 10 us cost, so the first ISLAND_CLEAR_RUNS decide (after the
    # warm-up that a thread switch needs).
    t = _callcost.island_us(slow, 1e3, call_cost_us=10.0)
    assert len(calls) == _callcost.ISLAND_CLEAR_RUNS + (series - 1) * (1 + _callcost.ISLAND_CLEAR_RUNS)
    assert 1e3 <= t < 1e6
    calls.clear()
    _callcost.island_us(slow, 1e3, call_cost_us=1e9)
    assert len(calls) == _callcost.ISLAND_RUNS + (series - 1) * (1 + _callcost.ISLAND_RUNS)
    calls.clear()
    # A warm-up run past the budget is the series' answer; later runs stop once they are past it.
    assert _callcost.island_us(slow, 2e5, call_cost_us=1e9) < 1e5
    assert len(calls) == (0 if series == 1 else 1 + _callcost.ISLAND_RUNS)

    def slower():
        calls.append(1)
        time.sleep(_callcost.ISLAND_BUDGET_S / 2)

    calls.clear()
    _callcost.island_us(slower, 1e3, call_cost_us=1e9)
    assert len(calls) == 2 + (series - 1) * 3


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
    # Far above a tiny cost, the first ISLAND_CLEAR_RUNS warm runs decide.
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


# ---------------------------------------------------------------------------------------------
# The islands' eager times must not depend on one-off costs or on the host's momentary load:
# the split they decide is cached and kept.


_LAZY = {"ready": False}


@torch.fx.wrap
def lazily_initialised_relu(x):
    """relu whose first call pays a one-off 30 ms, as a kernel library creating its primitives or
    torch starting its thread pool on a first run does."""
    if not _LAZY["ready"]:
        time.sleep(0.03)
        _LAZY["ready"] = True
    return torch.relu(x)


@torch.fx.wrap
def relu_stalled_by_the_pool(x):
    """relu that takes 5 ms whenever torch's intra-op pool has more than one thread: the stall a
    shared host gives a whole series of multi-threaded runs (a worker descheduled at each
    parallel region), here made certain."""
    if torch.get_num_threads() > 1:
        time.sleep(0.005)
    return torch.relu(x)


class LazyIslands(nn.Module):
    """Two islands around a refused det, the first with a one-off cost on its first run."""

    def forward(self, x):
        y = lazily_initialised_relu(x) * 2
        return torch.tanh(torch.linalg.det(y)) + 1


class StalledIslands(nn.Module):
    """Two islands around a refused det, the first stalled whenever the pool has two threads."""

    def forward(self, x):
        y = relu_stalled_by_the_pool(x) * 2
        return torch.tanh(torch.linalg.det(y)) + 1


def split_islands(model):
    gm = torch.fx.symbolic_trace(model)
    det = next(n.name for n in gm.graph.nodes if "det" in str(n.target))
    p = _partition.plan(gm, {det: []}, 1)
    assert len(p.partitions) == 2, p.partitions
    return gm, p, _partition.split(gm, p)


def test_the_cold_first_run_does_not_decide():
    # The first run takes 30 ms, 300 times the cost; every later run a few us, well under it.
    _LAZY["ready"] = False
    gm, p, stitched = split_islands(LazyIslands())
    times = _callcost.island_times(stitched, 2, [torch.randn(4, 4)], call_cost_us=100.0)
    assert times[0] is not None and times[0] < 1000, times
    w = _partition.weigh(gm, p, times, 100.0, "partition_cost")
    assert w.partitions == [p.partitions[1]] or times[1] <= 100.0, (w.partitions, times)
    assert all(n in w.eager for n in p.partitions[0]), w.eager


def test_a_series_stalled_by_the_intra_op_pool_does_not_decide():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _, _, stitched = split_islands(StalledIslands())
        times = _callcost.island_times(stitched, 2, [torch.randn(4, 4)], call_cost_us=100.0)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert times[0] is not None and times[0] < 1000, times


#: One fresh process's measurement of the two conv islands of a 32-channel det CNN on
#: [1, 3, 48, 48] (a few hundred us each eagerly here), against a 30 us call cost.
MEASURE = textwrap.dedent(
    """
    import json, torch, torch.nn as nn
    from qnnx_backend.partitioning import callcost as _callcost, plan as _partition

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 32, 3, padding=1)
            self.c2 = nn.Conv2d(32, 32, 3, padding=1)
            self.c3 = nn.Conv2d(32, 32, 3, padding=1)

        def forward(self, x):
            y = torch.relu(self.c2(torch.relu(self.c1(x))))
            d = torch.linalg.det(y[..., :3, :3])
            return torch.relu(self.c3(y * torch.sigmoid(d)[..., None, None])).mean((2, 3))

    torch.manual_seed(0)
    m, x = M().eval(), torch.randn(1, 3, 48, 48)
    gm = torch.fx.symbolic_trace(m)
    det = next(n.name for n in gm.graph.nodes if "det" in str(n.target))
    p = _partition.plan(gm, {det: []}, 1)
    print(json.dumps(_callcost.island_times(_partition.split(gm, p), len(p.partitions), [x], 30.0)))
    """
)

#: Another process running multi-threaded convolutions meanwhile: on this 2-core host it makes
#: series of 2-thread eager runs stall for tens to hundreds of ms each (the report's 37 ms and
#: 47 ms for an island of 0.4 ms).
CONTENTION = textwrap.dedent(
    """
    import sys, time, torch
    c, x = torch.nn.Conv2d(32, 32, 3, padding=1), torch.randn(1, 32, 96, 96)
    end = time.time() + float(sys.argv[1])
    with torch.no_grad():
        while time.time() < end:
            c(x)
    """
)


# `alone`: the load is this test's own burner. Beside a second pytest worker (scripts/test runs
# two) a fresh run once measured 5.5 ms for an island of 0.7 ms.
@pytest.mark.alone
def test_island_times_are_stable_across_fresh_processes_under_contention():
    import json

    burner = subprocess.Popen([sys.executable, "-c", CONTENTION, "60"])
    try:
        time.sleep(1.0)
        runs = [
            json.loads(subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, check=True).stdout)
            for _ in range(3)
        ]
    finally:
        burner.kill()
        burner.wait()
    for i in range(2):
        times = [r[i] for r in runs]
        # Under this load the fresh measurements spread up to 2.1x (one thread is 1.4x slower
        # than two on these islands, and its runs are time-shared too); the old rule's, which
        # took the cold first run or a stalled series, spread 9 to 500x.
        assert max(times) <= 4 * min(times), runs
        assert all(t > 30.0 for t in times), runs
