"""One graph of an LLM artifact compiled in a process of its own (``python -m
qnnx_backend.llm.finalize JOB.json``), started by ``llm/shards.py``'s pool: it reads the graph's
ONNX file (one shard's weights only), compiles it, saves it as a saved model and writes what
happened (stage timings, peak RSS, the saved model's description) to the job's result file.
With a cache entry to fill (``job["cache"]``), the saved model is written beside it and
committed (``buildcache.BuildCache.commit``: renamed into place, then its description). Imports no torch: a child costs
the native module and its graph only."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

from ..buildcache import BuildCache, write_json


def run(job: dict) -> dict:
    from .. import _native

    t0 = time.perf_counter()
    onnx = Path(job["onnx"]).read_bytes()
    read_s = time.perf_counter() - t0
    spec = _native.Spec("npu", job["soc_model"], None, True, job.get("opt_level"))
    t0 = time.perf_counter()
    compiled = _native.compile(onnx, spec, name=job["name"])
    compile_s = time.perf_counter() - t0
    del onnx
    t0 = time.perf_counter()
    cache = BuildCache(job["cache"]["dir"]) if job["cache"] else None
    tmp = cache.temporary(job["cache"]["key"]) if cache else Path(job["out"] + f".{os.getpid()}.tmp")
    saved = json.loads(_native.save(compiled, str(tmp), job["options"], {}))
    if not cache:
        os.replace(tmp, job["out"])
    save_s = time.perf_counter() - t0
    result = {
        "read_s": round(read_s, 3),
        "compile_s": round(compile_s, 3),
        "save_s": round(save_s, 3),
        "stages_ms": {name: round(ms, 1) for name, ms in compiled.timings},
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "saved": saved,
    }
    if cache:
        result = cache.commit(job["cache"]["key"], tmp, result)
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m qnnx_backend.llm.finalize JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[1]).read_text())
    write_json(Path(job["result"]), run(job))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
