"""Build matrices: every model of a list compiled for every target of a list (SoC, QNN release,
scheme), each job in a process of its own, on a local pool by default or on a Dask distributed
cluster given its scheduler's address; results, failures and timings in one manifest.

    python -m qnnx_backend.matrix MATRIX.json -o OUT [--jobs N] [--scheduler tcp://host:8786]
        [--cache DIR]

``MATRIX.json``: ``{"models": ["a.onnx", ...], "targets": [{"soc_model": 60, "scheme":
"fp16", "qnn": "/opt/qnn-2.51"}, ...]}``; a target's ``qnn`` is a runtime folder
(``QNNX_RUNTIME_DIR`` of its jobs: the QNN release they compile with; default this process's),
its ``scheme`` ``fp16`` (a float model compiled in fp16) or ``native`` (the model's own types: a
QDQ-quantized model with its encodings), ``opt_level`` optional. The Python call is ``build``.

Each job writes ``OUT/<model>/<target>.qnnx`` (a saved model: ``qnnx run``, ``load``) and its
line of ``OUT/matrix.json``: status ``built``, ``cached`` or ``failed`` (with the error), wall
and compile seconds, the QNN build, the host. A failing job does not stop the others. With a
cache folder (shared by the cluster's hosts), a job whose output is already there, under a key
of the model's bytes, the target and the QNN build (``buildcache``), is taken from it, not
compiled. Dask's workers run ``run_job``, which starts the job's process and waits for it: a
crash in the QNN library fails that job only, and a worker holds no QNN state between jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional, Sequence

from .buildcache import BuildCache, key_of, place, write_json

SCHEMES = ("fp16", "native")


def target_name(t: dict) -> str:
    """``soc60-fp16`` (``-qnn-<folder>`` with a QNN release, ``-o<level>`` with opt_level)."""
    name = f"soc{t['soc_model']}-{t.get('scheme', 'fp16')}"
    if t.get("qnn"):
        name += f"-qnn-{Path(t['qnn']).name}"
    if t.get("opt_level") is not None:
        name += f"-o{t['opt_level']}"
    return name


def _check(models: Sequence[str], targets: Sequence[dict]) -> None:
    if not models or not targets:
        raise ValueError("a build matrix needs at least one model and one target")
    for t in targets:
        if not isinstance(t.get("soc_model"), int):
            raise ValueError(f"target {t}: give soc_model, the SoC's number (such as 60)")
        if t.get("scheme", "fp16") not in SCHEMES:
            raise ValueError(f"target {t}: scheme {t.get('scheme')!r}, one of {', '.join(SCHEMES)}")
    names = [target_name(t) for t in targets]
    if len(set(names)) != len(names):
        raise ValueError(f"two targets have the same name: {names}")


def run_job(job: dict) -> dict:
    """One job, in a process of its own (``python -m qnnx_backend.matrix --job``); returns its
    manifest line. What a Dask worker or the local pool runs."""
    env = dict(os.environ)
    if job["target"].get("qnn"):
        env["QNNX_RUNTIME_DIR"] = job["target"]["qnn"]
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "qnnx_backend.matrix", "--job", json.dumps(job)],
        capture_output=True,
        text=True,
        env=env,
    )
    line = {"model": job["model"], "target": job["target_name"], "output": job["out"], "host": socket.gethostname()}
    line["wall_s"] = round(time.perf_counter() - t0, 2)
    out = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode == 0 and out:
        line.update(json.loads(out[-1]))
    else:
        tail = "\n".join(p.stderr.strip().splitlines()[-12:])
        line.update(status="failed", error=f"exit {p.returncode}: {tail}")
    return line


def _job_main(job: dict) -> dict:
    """The job's process: the cache, else compile and save (and fill the cache)."""
    from . import _native

    t = job["target"]
    onnx = Path(job["model"]).read_bytes()
    out = Path(job["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    build_id = _native.build_id("npu")
    cache = BuildCache(job["cache"]) if job.get("cache") else None
    identity = {"target": {k: v for k, v in t.items() if k != "qnn"}, "qnn_build_id": build_id}
    key = key_of(onnx, {**identity, "qnnx_version": _native.versions().get("qnnx", "?")})
    if cache and (hit := cache.get(key)) is not None:
        place(cache.entry(key), out)
        return {"status": "cached", "qnn_build_id": build_id, "compile_s": hit.get("compile_s")}
    spec = _native.Spec("npu", t["soc_model"], None, t.get("scheme", "fp16") == "fp16", t.get("opt_level"))
    t0 = time.perf_counter()
    compiled = _native.compile(onnx, spec, name=Path(job["model"]).stem)
    compile_s = round(time.perf_counter() - t0, 2)
    del onnx
    stages = {name: round(ms / 1e3, 3) for name, ms in compiled.timings}
    options = {"soc_model": str(t["soc_model"]), "scheme": t.get("scheme", "fp16")}
    tmp = cache.temporary(key) if cache else out.with_name(out.name + f".{os.getpid()}.tmp")
    _native.save(compiled, str(tmp), options, {})
    line = {"status": "built", "qnn_build_id": build_id, "compile_s": compile_s, "stages_s": stages}
    if cache:
        cache.commit(key, tmp, line)
        place(cache.entry(key), out)
    else:
        os.replace(tmp, out)
    return line


def build(
    models: Sequence[os.PathLike | str],
    targets: Sequence[dict],
    output: os.PathLike | str,
    *,
    jobs: Optional[int] = None,
    scheduler: Optional[Any] = None,
    cache_dir: Optional[os.PathLike | str] = None,
) -> dict:
    """Compiles every model (ONNX files) for every target (dicts: ``soc_model``, ``scheme``,
    ``qnn``, ``opt_level``) into ``output`` and returns the manifest it writes there
    (``matrix.json``). ``scheduler``: a Dask distributed scheduler's address, or a
    ``distributed.Client``, runs the jobs on that cluster; else a local pool of ``jobs``
    processes (default: the CPU count). ``cache_dir``: the shared cache (module docstring)."""
    models = [str(Path(m).resolve()) for m in models]
    _check(models, targets)
    out = Path(output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = []
    for m in models:
        for t in targets:
            name = target_name(t)
            work.append({
                "model": m, "target": t, "target_name": name, "out": str(out / Path(m).stem / f"{name}.qnnx"),
                "cache": str(Path(cache_dir).resolve()) if cache_dir else None,
            })  # fmt: skip
    t0 = time.perf_counter()
    if scheduler is None:
        n = jobs or os.cpu_count() or 1
        with ThreadPoolExecutor(max_workers=n) as pool:  # each thread waits for its job's process
            lines = list(pool.map(run_job, work))
        where = f"local pool of {n} processes"
    else:
        lines, where = _on_dask(work, scheduler)
    manifest = {
        "format": "qnnx-matrix/1",
        "scheduler": where,
        "wall_s": round(time.perf_counter() - t0, 2),
        "jobs": lines,
        "built": sum(x["status"] == "built" for x in lines),
        "cached": sum(x["status"] == "cached" for x in lines),
        "failed": sum(x["status"] == "failed" for x in lines),
    }
    write_json(out / "matrix.json", manifest)
    return manifest


def _on_dask(work: list[dict], scheduler: Any) -> tuple[list[dict], str]:
    try:
        import distributed  # only for a cluster: the local pool needs none of Dask
    except ImportError:
        raise ImportError("a cluster scheduler needs Dask distributed: pip install distributed") from None
    client = scheduler if isinstance(scheduler, distributed.Client) else distributed.Client(scheduler)
    try:
        futures = [client.submit(run_job, job, pure=False, key=f"qnnx-{job['target_name']}-{i}") for i, job in enumerate(work)]
        lines = client.gather(futures)
        return lines, f"dask {client.scheduler.address}"
    finally:
        if client is not scheduler:
            client.close()


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qnnx_backend.matrix", description=__doc__.split("\n\n")[0])
    p.add_argument("matrix", nargs="?", help="a JSON file: {\"models\": [...], \"targets\": [...]}")
    p.add_argument("-o", "--output", help="the folder of the outputs and matrix.json")
    p.add_argument("--jobs", type=int, default=None, help="local processes at once (default: the CPU count)")
    p.add_argument("--scheduler", default=None, help="a Dask distributed scheduler's address: run the jobs there")
    p.add_argument("--cache", default=None, help="a cache folder shared by the jobs: outputs already there are taken")
    p.add_argument("--job", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.job:
        print(json.dumps(_job_main(json.loads(a.job))))
        return 0
    if not a.matrix or not a.output:
        p.error("give MATRIX.json and -o OUT")
    spec = json.loads(Path(a.matrix).read_text())
    base = Path(a.matrix).parent
    models = [str(base / m) for m in spec.get("models", [])]
    try:
        m = build(models, spec.get("targets", []), a.output, jobs=a.jobs, scheduler=a.scheduler, cache_dir=a.cache)
    except (ValueError, ImportError, OSError) as e:
        print(f"qnnx matrix: error: {e}", file=sys.stderr)
        return 1
    for line in m["jobs"]:
        err = f": {line['error'].splitlines()[-1]}" if line["status"] == "failed" else ""
        print(f"{line['status']:>7} {Path(line['model']).name} -> {line['target']} ({line['wall_s']:.1f} s){err}")
    print(f"{m['built']} built, {m['cached']} cached, {m['failed']} failed in {m['wall_s']:.1f} s on {m['scheduler']}")
    return 1 if m["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
