"""Partitioned graphs against whole-graph fallback and ONNX Runtime's QNN EP with CPU fallback.

For small CNNs with 1 to 3 nodes the lowering refuses (`qnnx check` lists them: ONNX Det, a
TopK over a non-last axis from an argsort over channels, Asin/Acos/Erf), steady-state latency
(median of --calls calls after --warmup calls, one process, SoC 60 on the emulated HTP) of

- **qnnx default**: `torch.compile(m, backend="qnn", options={"soc_model": 60})`: runs of
  supported nodes whose eager time beats the measured QNN call cost (`partition_cost="measure"`)
  as QNN partitions of one context, the rest eager (the chosen partition count is reported);
- **qnnx partitioned**: the same with `partition_cost=0` (no cost rule): every run of at least
  `min_partition_size` supported nodes is a QNN partition, the refused nodes eager;
- **whole fallback**: the same with `min_partition_size` larger than the graph, so the whole
  graph runs eagerly as before partitioning (dynamo's per-call cost included);
- **ORT QNN EP**: ONNX Runtime with the QNN EP plugin (same libQnnHtp.so, SoC 60, HTP v73, fp16
  precision as bench/ort_ref_backend.py) on the model exported to ONNX, with its CPU EP fallback
  ON (ORT's default, unlike the main benchmark): ORT runs the nodes QNN refuses on its CPU EP.

Each with its max abs error against eager PyTorch and how many QNN partitions (qnnx) or QNN EP
nodes (ORT's own count from its session log) it ran. The emulator's times say nothing about a
device (it simulates the HTP on the host CPU; an emulated QNN call costs hundreds of us).

    python3 bench/partition.py [--calls 20] [--warmup 3] [--threads 1]

Needs the qnnx Python package (PYTHONPATH) and bench/.venv-ort (bench/run makes it). Writes
bench/results/partition.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

import common  # noqa: E402  (bench/common.py)

ROOT = Path(__file__).resolve().parent.parent
ORT_PY = ROOT / "bench" / ".venv-ort" / "bin" / "python"


class DetCNN(nn.Module):
    """tests/python/test_partition_htp.py's model, wider and deeper: one Det in the middle."""

    refused = "Det (torch.linalg.det)"

    def __init__(self, c: int = 16):
        super().__init__()
        self.c1 = nn.Conv2d(3, c, 3, padding=1)
        self.c2 = nn.Conv2d(c, c, 3, padding=1)
        self.c3 = nn.Conv2d(c, c, 3, padding=1)
        self.c4 = nn.Conv2d(c, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        d = torch.linalg.det(y[..., :3, :3])
        y = y * torch.sigmoid(d)[..., None, None]
        return torch.relu(self.c4(torch.relu(self.c3(y)))).mean((2, 3))


class ArgsortCNN(nn.Module):
    """Channels sorted per pixel: argsort over dim 1 is a TopK on a non-last axis (refused)."""

    refused = "TopK axis 1 (torch.argsort over channels)"

    def __init__(self, c: int = 16):
        super().__init__()
        self.c1 = nn.Conv2d(3, c, 3, padding=1)
        self.c2 = nn.Conv2d(c, c, 3, padding=1)
        self.c3 = nn.Conv2d(c, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        y = torch.gather(y, 1, torch.argsort(y, dim=1))
        return torch.relu(self.c3(y)).mean((2, 3))


class ThreeRefused(nn.Module):
    """Three refused elementwise ops between conv blocks: four QNN partitions, three eager nodes."""

    refused = "Asin, Acos, Erf"

    def __init__(self, c: int = 16):
        super().__init__()
        self.c1 = nn.Conv2d(3, c, 3, padding=1)
        self.c2 = nn.Conv2d(c, c, 3, padding=1)
        self.c3 = nn.Conv2d(c, c, 3, padding=1)
        self.c4 = nn.Conv2d(c, 8, 3, padding=1)

    def forward(self, x):
        y = torch.asin(torch.tanh(self.c1(x)) * 0.5)
        y = torch.acos(torch.tanh(self.c2(torch.relu(y))) * 0.5)
        y = torch.erf(self.c3(torch.relu(y)) * 0.5)
        return torch.relu(self.c4(y)).mean((2, 3))


MODELS = {"det_cnn": DetCNN, "argsort_cnn": ArgsortCNN, "three_refused": ThreeRefused}


def median_ms(fn, x, warmup: int, calls: int) -> float:
    for _ in range(warmup):
        fn(x)
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def run_qnnx(model: nn.Module, x: torch.Tensor, want: torch.Tensor, options: dict, warmup: int, calls: int) -> dict:
    import qnnx_backend

    from qnnx_backend.partitioning import split

    torch._dynamo.reset()
    qnnx_backend.STATS.clear()
    # Measured again for each variant (a few ms), so a row reports the cost only when it used it.
    split._CALL_COSTS.clear()
    compiled = torch.compile(model, backend="qnn", options=options)
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        got = compiled(x)
        first = (time.perf_counter() - t) * 1e3
        ms = median_ms(compiled, x, warmup, calls)
    del compiled
    torch._dynamo.reset()  # drop the QNN context before the next measurement
    costs = list(split._CALL_COSTS.values())
    return {
        "call_cost_us": costs[0] if costs else None,
        "median_ms": ms,
        "first_call_ms": first,
        "max_abs": float((got - want).abs().max()),
        "qnn_partitions": int(qnnx_backend.STATS["partitions"]),
        "fallbacks": int(qnnx_backend.STATS["fallbacks"]),
    }


# The session has the reference backend's options except session.disable_cpu_ep_fallback, whose
# default (0) keeps ORT's CPU EP fallback. ORT prints where its nodes went ("Node placements") only
# at VERBOSE, which also logs every run: a first, verbose session is made for that log alone and
# dropped, and a quiet one is timed.
ORT_SCRIPT = r"""
import json, statistics, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import onnxruntime as ort
import ort_ref_backend as ref
model, x_path, warmup, calls = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
def session(level):
    so = ort.SessionOptions()
    so.log_severity_level = level
    so.add_provider_for_devices(ref._ep_devices(), ref.provider_options())
    return ort.InferenceSession(model, sess_options=so)
session(0)  # dropped at once: only its log is wanted
sys.stderr.flush()
s = session(3)
x = np.load(x_path)
feeds = {s.get_inputs()[0].name: x}
y = s.run(None, feeds)[0]
for _ in range(warmup):
    s.run(None, feeds)
ts = []
for _ in range(calls):
    t = time.perf_counter(); s.run(None, feeds); ts.append((time.perf_counter() - t) * 1e3)
np.save(sys.argv[6], y)
print(json.dumps({"median_ms": statistics.median(ts)}))
"""


def run_ort(onnx_path: Path, x_path: Path, warmup: int, calls: int, out: Path) -> dict:
    if not ORT_PY.exists():
        return {"error": "bench/.venv-ort missing (bench/run creates it)"}
    p = subprocess.run(
        [str(ORT_PY), "-c", ORT_SCRIPT, str(ROOT / "bench"), str(onnx_path), str(x_path), str(warmup), str(calls), str(out)],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    # "Node(s) placed on [QNNExecutionProvider]. Number of nodes: 2": each QNN EP node is one
    # fused QNN graph (a partition); CPU EP nodes are single ONNX nodes.
    for ep, n in re.findall(r"placed on \[(\w+)\]\. Number of nodes: (\d+)", p.stderr):
        r[{"QNNExecutionProvider": "qnn_ep_nodes", "CPUExecutionProvider": "cpu_ep_nodes"}.get(ep, ep)] = int(n)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    # One intra-op thread: with torch's default two on this 2-vCPU VM, a series of eager calls was
    # now and then 100x slower (0.4 -> 44 ms), which made the eager columns noise.
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "partition"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("QNNX_RUNTIME_DIR", str(ROOT / "runtime"))
    work = Path(tempfile.mkdtemp(prefix="qnnx-bench-partition-"))

    rows = []
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = MODELS[name]().eval()
        x = torch.randn(1, 3, args.size, args.size)
        with torch.inference_mode():
            want = model(x)
            eager_ms = median_ms(model, x, args.warmup, args.calls)
        base = {"model": name, "refused": MODELS[name].refused}
        variants = {
            "qnnx default (measured partition_cost)": {"soc_model": 60},
            "qnnx partitioned (partition_cost=0)": {"soc_model": 60, "partition_cost": 0},
            # Larger than any partition: every graph falls back whole, as before partitioning.
            "qnnx whole fallback": {"soc_model": 60, "min_partition_size": 10**6},
        }
        for variant, options in variants.items():
            row = {**base, "engine": variant, **run_qnnx(model, x, want, options, args.warmup, args.calls)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        onnx_path = work / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (x,), str(onnx_path), input_names=["x"], output_names=["y"],
                              dynamo=False, opset_version=17)
        np.save(work / "x.npy", x.numpy())
        o = run_ort(onnx_path, work / "x.npy", args.warmup, args.calls, work / f"ort-{name}.npy")
        row = {**base, "engine": "ORT QNN EP + CPU fallback", **o}
        if "error" not in o:
            row["max_abs"] = float(np.abs(np.load(work / f"ort-{name}.npy") - want.numpy()).max())
        rows.append(row)
        print(json.dumps(row), flush=True)
        # Eager again after the QNN runs, to show the eager figures did not drift meanwhile.
        with torch.inference_mode():
            eager_after = median_ms(model, x, args.warmup, args.calls)
        for r in rows:
            if r["model"] == name:
                r["eager_ms"], r["eager_after_ms"] = eager_ms, eager_after

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = common.commit()
    out.with_suffix(".json").write_text(json.dumps(
        {"commit": commit, "size": args.size, "calls": args.calls, "warmup": args.warmup, "threads": args.threads, "rows": rows}, indent=1))
    lines = [
        f"[1, 3, {args.size}, {args.size}] inputs, SoC 60 on the x86_64 emulator, at {commit}: "
        f"`python3 bench/partition.py --calls {args.calls} --warmup {args.warmup} --threads {args.threads}`",
        "",
        "| model (refused) | engine | median ms per call | max abs error vs eager | QNN partitions (ORT: nodes per EP) | eager PyTorch ms (before / after) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        label = f"{r['model']} ({r['refused']})"
        if "error" in r:
            lines.append(f"| {label} | {r['engine']} | {r['error']} | | | {r['eager_ms']:.2f} / {r['eager_after_ms']:.2f} |")
            continue
        if r["engine"].startswith("ORT"):
            parts = f"{r.get('qnn_ep_nodes', '?')} QNN EP, {r.get('cpu_ep_nodes', 0)} CPU EP node(s)"
        elif r["fallbacks"]:
            parts = "0 (eager)"
        else:
            parts = str(r["qnn_partitions"])
        if r.get("call_cost_us") is not None:
            parts += f" (call cost {r['call_cost_us']:.0f} us)"
        lines.append(
            f"| {label} | {r['engine']} | {r['median_ms']:.2f} | {r['max_abs']:.1e} | {parts} | {r['eager_ms']:.2f} / {r['eager_after_ms']:.2f} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
