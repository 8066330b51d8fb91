#!/usr/bin/env python3
"""Where a qnnx session's memory goes: the process's RSS (from /proc/self/status) before the
import, after it, after `InferenceSession` (the compile, cache off), after the first run and
after --runs runs, and the largest mappings by resident size at the end. Same target as every
benchmark (bench/htp_target.py). Linux only; numpy and qnnx_backend only, no torch.

    python3 bench/session_rss.py model.onnx x.npy [--runs 200]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import htp_target  # noqa: E402


def status() -> dict:
    """VmRSS, VmHWM (the peak so far), RssAnon and RssFile in MB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) // 1024
    return out


def largest_mappings(n: int = 6) -> list:
    """(resident MB, mapping) of the n largest mappings, anonymous ones grouped."""
    rss: dict = {}
    name = None
    with open("/proc/self/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                parts = line.split()
                name = parts[5] if len(parts) > 5 else "[anonymous]"
            elif line.startswith("Rss:") and name:
                rss[name] = rss.get(name, 0) + int(line.split()[1])
    return sorted(((kb // 1024, k) for k, kb in rss.items()), reverse=True)[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("input", help=".npy for the model's first input")
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    x = np.load(a.input)
    print("numpy and input", status())
    from qnnx_backend.runtime import InferenceSession

    print("import", status())
    s = InferenceSession(a.model, provider_options=[dict(htp_target.PROVIDER_OPTIONS)], cache=False)
    print("session (compiled)", status())
    feed = {s.get_inputs()[0].name: x}
    for k in range(1, a.runs + 1):
        s.run(None, feed)
        if k in (1, 2, 3) or k == a.runs:
            print(f"after {k} run(s)", status())
    for mb, name in largest_mappings():
        print(f"  {mb:5d} MB  {name}")


if __name__ == "__main__":
    main()
