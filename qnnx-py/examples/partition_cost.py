"""What a QNN partition costs per call, and a partitioned graph next to eager and whole-graph
fallback (the emulator on x86_64, SoC 60): the figures behind ``min_partition_size`` and
``partition_cost``.

    python3 qnnx-py/examples/partition_cost.py [--runs 200]

Prints the QNN call cost the partitioner measures (``partition_cost="measure"``: a one-node
graph called through a partition's call path), the steady-state time per call (after 5 warm-up
calls) of a one-node graph (``x * 0.5`` on [1, 8, 8, 8]) eager and through torch.compile on QNN
(dynamo's guards included), and of a small CNN with a ``torch.linalg.det`` in the middle eager,
partitioned with the cost rule off (2 QNN partitions, det eager), with the default measured
rule (its islands take about one QNN call eagerly at this size: what it chose is printed) and
with every node eager (a ``min_partition_size`` larger than the graph: the whole-graph fallback).
"""

import argparse
import time
import warnings

import torch
import torch.nn as nn

import qnnx_backend  # noqa: F401  (registers the "qnn" backend)

OPTIONS = {"device": "npu", "soc_model": 60}


class Mul(nn.Module):
    def forward(self, x):
        return x * 0.5


class DetCNN(nn.Module):
    """As in tests/python/test_partition_htp.py."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        d = torch.linalg.det(y[..., :3, :3])
        y = y * torch.sigmoid(d)[..., None, None]
        return torch.relu(self.c3(y)).mean((2, 3))


def per_call_us(f, x, runs):
    with torch.inference_mode():
        for _ in range(5):
            f(x)
        t = time.perf_counter()
        for _ in range(runs):
            f(x)
        return (time.perf_counter() - t) / runs * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    # One intra-op thread, as bench/partition.py: with torch's default two on a loaded 2-vCPU VM,
    # series of eager calls were now and then 100x slower, which would make the eager figures
    # (and the islands' measured eager times) noise.
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    a = ap.parse_args()
    runs = a.runs
    torch.set_num_threads(a.threads)
    warnings.simplefilter("ignore")
    x = torch.randn(1, 8, 8, 8)
    m = Mul().eval()
    qnn = torch.compile(m, backend="qnn", options={**OPTIONS, "strict": True})
    print(f"one-node graph: eager {per_call_us(m, x, runs):.1f} us, QNN {per_call_us(qnn, x, runs):.1f} us per call")
    torch._dynamo.reset()
    from qnnx_backend import parse_options
    from qnnx_backend.compiling.qnn_callable import QnnCallable

    print(f"measured QNN call cost: {QnnCallable.call_cost_us('npu', parse_options(OPTIONS)):.1f} us")
    torch.manual_seed(0)
    m, x = DetCNN().eval(), torch.randn(1, 3, 8, 8)
    parts = torch.compile(m, backend="qnn", options={**OPTIONS, "partition_cost": 0})
    p = per_call_us(parts, x, runs)
    torch._dynamo.reset()
    [report] = qnnx_backend.explain(m, (x,), OPTIONS)
    measured = torch.compile(m, backend="qnn", options=OPTIONS)
    r = per_call_us(measured, x, runs)
    torch._dynamo.reset()
    whole = torch.compile(m, backend="qnn", options={**OPTIONS, "min_partition_size": 1000})
    w = per_call_us(whole, x, runs)
    print(
        f"DetCNN: eager {per_call_us(m, x, runs):.1f} us, partitioned (partition_cost=0) {p:.1f} us, "
        f"measured rule {r:.1f} us ({len(report['partitions'])} partition(s); islands eager "
        f"{report['partition_eager_us'] or [why for why in report['eager'].values() if 'island' in why][:1]}), "
        f"whole fallback {w:.1f} us per call"
    )


if __name__ == "__main__":
    main()
