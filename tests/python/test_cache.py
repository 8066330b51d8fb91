"""The persistent cache across processes: a warm start skips export, lowering and finalize, and a
corrupted entry is rebuilt."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.htp

SCRIPT = textwrap.dedent(
    """
    import json, sys, torch, torch.nn as nn
    import qnnx_backend
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 5)).eval()
    x = torch.randn(1, 3, 8, 8)
    c = torch.compile(m, backend="qnn", options={"strict": True, "device": "npu", "cache": True, "cache_dir": sys.argv[1]})
    with torch.inference_mode():
        y = c(x)
    print("RESULT " + json.dumps({"stats": dict(qnnx_backend.STATS), "y": y.flatten().tolist()}))
    """
)


def run_fresh(cache_dir):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(cache_dir)], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), out.stderr


def test_second_process_hits_the_cache(tmp_path):
    cold, _ = run_fresh(tmp_path)
    assert cold["stats"].get("exports") == 1 and cold["stats"].get("compiles") == 1, cold["stats"]
    warm, _ = run_fresh(tmp_path)
    # No export, no lowering/finalize: only a cache load.
    assert warm["stats"] == {"cache_hits": 1}, warm["stats"]
    assert warm["y"] == cold["y"]


def test_corrupted_entry_is_rebuilt(tmp_path):
    cold, _ = run_fresh(tmp_path)
    bins = list(pathlib.Path(tmp_path).glob("*/*.bin"))
    assert len(bins) == 1
    data = bytearray(bins[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    bins[0].write_bytes(bytes(data))
    again, stderr = run_fresh(tmp_path)
    assert again["stats"].get("compiles") == 1, again["stats"]
    assert again["y"] == cold["y"]
    third, _ = run_fresh(tmp_path)
    assert third["stats"] == {"cache_hits": 1}, third["stats"]
