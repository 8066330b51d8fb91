"""One graph of an LLM artifact compiled in a process of its own (``python -m
qnnx_backend.llm.finalize JOB.json``), started by ``llm/shards.py``'s pool: it reads the graph's
ONNX file (one shard's weights only), compiles it, saves it as a saved model and writes what
happened (stage timings, peak RSS, the saved model's description) to the job's result file.
With a cache entry to fill (``job["entry"]``), the saved model is written to a temporary file
beside it, its sha256 taken, and renamed into place; the entry's description (the commit mark
``GraphCache.get`` looks for) is written the same way after it. Imports no torch: a child costs
the native module and its graph only."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
from pathlib import Path


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
    out = Path(job["entry"] or job["out"])
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    saved = json.loads(_native.save(compiled, str(tmp), job["options"], {}))
    sha = _sha256(tmp)
    os.replace(tmp, out)
    save_s = time.perf_counter() - t0
    return {
        "sha256": sha,
        "size": out.stat().st_size,
        "read_s": round(read_s, 3),
        "compile_s": round(compile_s, 3),
        "save_s": round(save_s, 3),
        "stages_ms": {name: round(ms, 1) for name, ms in compiled.timings},
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "saved": saved,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m qnnx_backend.llm.finalize JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[1]).read_text())
    result = run(job)
    if job["entry"]:
        _write(Path(job["entry"]).with_suffix(".json"), result)
    _write(Path(job["result"]), result)
    return 0


def _write(path: Path, value: dict) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
