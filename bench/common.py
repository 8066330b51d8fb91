"""Shared by the runner scripts: argument parsing, timing loops, peak RSS, the JSON result."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: Set at import, which is the first thing every runner does: process start as seen by Python.
T_START = time.perf_counter()

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def commit() -> str:
    """The tree's commit, short, with "+dirty" when tracked files differ from it: what a result
    file records, so that a figure can be traced to the code that made it."""

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", HERE, *a], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def qnnx_binary(prefer: str = "release") -> Path:
    """The `qnnx` command of this tree: $QNNX_BIN, else target/<prefer>/qnnx, else the other build
    (FileNotFoundError naming the build command)."""
    if os.environ.get("QNNX_BIN"):
        return Path(os.environ["QNNX_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path(HERE).parent / "target"))
    for b in (prefer, "debug" if prefer == "release" else "release"):
        if (target / b / "qnnx").exists():
            return target / b / "qnnx"
    raise FileNotFoundError(f"no qnnx binary under {target}: cargo build --release -p qnnx-cli (or set QNNX_BIN)")


def parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--model", required=True)
    ap.add_argument("--mode", choices=["cold", "warm", "steady"], default="cold")
    ap.add_argument("--cache-dir")
    ap.add_argument("--calls", type=int, default=0, help="timed calls after the first output (0: none)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", required=True, help="JSON result file")
    ap.add_argument("--save-output", help="torch.save the first output tensor here")
    return ap


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb() -> float:
    """Current resident set size."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def summarize(samples_ns: list) -> dict:
    """Median, p95, mean and min in ms of per-call samples in ns."""
    if not samples_ns:
        return {}
    ms = sorted(s / 1e6 for s in samples_ns)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return {
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "p95_ms": p95,
        "mean_ms": statistics.fmean(ms),
        "min_ms": ms[0],
    }


def time_calls(fn, args, calls: int, warmup: int) -> list:
    for _ in range(warmup):
        fn(*args)
    samples = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        t = clock()
        fn(*args)
        samples.append(clock() - t)
    return samples


def first_tensor(y):
    import torch

    while not isinstance(y, torch.Tensor):
        if isinstance(y, (tuple, list)):
            y = y[0]
        elif hasattr(y, "logits"):
            y = y.logits
        else:
            raise TypeError(f"no tensor in output of type {type(y).__name__}")
    return y


def mapped(fragment: str) -> list:
    """Files mapped into this process whose name contains `fragment`."""
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and fragment in parts[5]:
                out.add(os.path.realpath(parts[5].strip()))
    return sorted(out)


def write(path: str, result: dict) -> None:
    result.setdefault("peak_rss_mb", peak_rss_mb())
    result["process_s"] = time.perf_counter() - T_START
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
