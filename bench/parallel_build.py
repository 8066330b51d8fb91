"""Parallel builds of several models: `qnnx compile A B C D --each --jobs 1` (one after another)
against `--jobs 4` (four processes at once), the release `qnnx`, no cache, alternated over
--reps rounds; medians, the speed-up, and whether the binaries of both runs are byte-identical.

    python3 bench/parallel_build.py [--reps 3] [--size 112]

Writes bench/results/parallel_build.json. The models are torchvision resnet18 and mobilenet_v2
(random weights, two seeds each) exported with the TorchScript exporter into bench/work/.
Needs QNNX_RUNTIME_DIR (or the runtime folder that scripts/setup-runtime fills).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common  # noqa: E402  (bench/common.py)

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / "work" / "parallel_build"
QNNX = ROOT / "target" / "release" / "qnnx"


def models(size: int) -> list[Path]:
    import torch
    import torchvision

    WORK.mkdir(parents=True, exist_ok=True)
    out = []
    for name, seed in [("resnet18", 0), ("resnet18", 1), ("mobilenet_v2", 0), ("mobilenet_v2", 1)]:
        path = WORK / f"{name}_{seed}_{size}.onnx"
        out.append(path)
        if path.exists():
            continue
        torch.manual_seed(seed)
        m = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.randn(1, 3, size, size)
        torch.onnx.export(m, (x,), str(path), dynamo=False, input_names=["x"], opset_version=17)
    return out


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def build(files: list[Path], jobs: int, out: Path) -> tuple[float, dict]:
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    r = subprocess.run(
        [str(QNNX), "--json", "compile", *map(str, files), "--each", "--jobs", str(jobs), "--soc", "60",
         "--out-dir", str(out)],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"qnnx compile failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    return wall, {f.name: digest(f) for f in sorted(out.glob("*.bin"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", type=int, default=112)
    a = ap.parse_args()
    if not QNNX.exists():
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "qnnx-cli"], cwd=ROOT, check=True)
    files = models(a.size)
    serial, parallel, same = [], [], True
    for _ in range(a.reps):
        s, ds = build(files, 1, WORK / "serial")
        p, dp = build(files, 4, WORK / "parallel")
        serial.append(s)
        parallel.append(p)
        same &= ds == dp and len(ds) == len(files)
        print(f"serial {s:.2f} s, 4 at a time {p:.2f} s: {s / p:.2f}x", flush=True)
    res = {
        "models": [f.name for f in files],
        "size": a.size,
        "reps": a.reps,
        "serial_s": serial,
        "parallel_s": parallel,
        "speedup_median": statistics.median(serial) / statistics.median(parallel),
        "speedups": [s / p for s, p in zip(serial, parallel)],
        "binaries_identical": same,
        "cpus": os.cpu_count(),
        "loadavg_after": os.getloadavg(),
        "commit": common.commit(),
    }
    out = ROOT / "bench" / "results" / "parallel_build.json"
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"median speed-up {res['speedup_median']:.2f}x, binaries identical: {same}; wrote {out}")


if __name__ == "__main__":
    main()
