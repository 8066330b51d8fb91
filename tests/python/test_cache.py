"""The persistent cache across processes: a warm start skips export, lowering and finalize, and a
corrupted entry (binary or I/O binding) is rebuilt."""

import contextlib
import json
import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

import qnnx_backend

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


class TwoInputs(torch.nn.Module):
    """Two inputs of one shape and dtype: a binding that swaps or repeats them passes every
    check in Python and reaches the native run path."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, a, b):
        return self.fc(a - 2 * b)


def compile_cached(cache_dir):
    """The model compiled in a fresh dynamo state (as a new process would), its inputs, and the
    counters of that compile."""
    torch._dynamo.reset()
    qnnx_backend.STATS.clear()
    torch.manual_seed(0)
    m = TwoInputs().eval()
    a, b = torch.randn(2, 8), torch.randn(2, 8)
    options = {"strict": True, "device": "npu", "cache": True, "cache_dir": str(cache_dir)}
    with torch.inference_mode():
        got = torch.compile(m, backend="qnn", options=options)(a, b)
        want = m(a, b)
    return got, want, dict(qnnx_backend.STATS)


@contextlib.contextmanager
def warnings_logged():
    """The warnings logged on logger qnnx_backend (where the native module's go) meanwhile."""
    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler = Collect(logging.WARNING)
    logger = logging.getLogger("qnnx_backend")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


def only_entry(cache_dir):
    """The one cache entry's metadata file, ``<dir>/<key[0..2]>/<key>.json``."""
    [meta] = pathlib.Path(cache_dir).glob("*/*.json")
    assert meta.parent.name == meta.stem[:2]
    return meta


def io_binding(meta):
    return json.loads(json.loads(meta.read_text())["extra"]["io"])


def set_io_binding(meta, io):
    doc = json.loads(meta.read_text())
    doc["extra"]["io"] = json.dumps(io)
    meta.write_text(json.dumps(doc))


@pytest.mark.parametrize("bad", ["repeated_slot", "slot_out_of_range"])
@pytest.mark.parametrize("path", ["compile", "warm_start"])
def test_an_io_binding_that_is_not_a_permutation_is_rebuilt(tmp_path, bad, path):
    """A cache entry whose `io` binding binds two inputs to one graph slot (or to a slot the
    graph does not have) is a bad entry: removed and rebuilt, with one warning and correct
    results; it must not reach the run path with an unfilled slot (once a PanicException).
    `compile` finds it through the native compile's own cache lookup; `warm_start` through the
    FX alias (no export)."""
    got, want, stats = compile_cached(tmp_path)
    assert stats == {"exports": 1, "compiles": 1}, stats
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
    meta = only_entry(tmp_path)
    good = io_binding(meta)
    assert [entry[2] for entry in good["inputs"]] == [0, 1], good
    broken = json.loads(json.dumps(good))
    broken["inputs"][1][2] = 0 if bad == "repeated_slot" else 7
    set_io_binding(meta, broken)
    aliases = list(pathlib.Path(tmp_path).glob("fx/*.key"))
    assert len(aliases) == 1, aliases
    if path == "compile":
        aliases[0].unlink()

    # A PanicException (a BaseException) would fail the test here.
    with warnings_logged() as logged:
        got, want, stats = compile_cached(tmp_path)
    assert stats == {"exports": 1, "compiles": 1}, stats
    assert len(logged) == 1 and meta.stem in logged[0], logged
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
    assert io_binding(only_entry(tmp_path)) == good

    got, want, stats = compile_cached(tmp_path)
    assert stats == {"cache_hits": 1}, stats
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
