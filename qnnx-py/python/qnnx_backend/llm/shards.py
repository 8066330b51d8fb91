"""The per-graph build of an LLM artifact in shards and child processes (``build_from(...,
shards=N, jobs=J)``, docs/llm.md "Sharded, parallel and resumable builds").

* **Shards**: each graph (decode, each prefill bucket) is split into ``shards`` graphs of
  consecutive layers (``spans``); the hidden states pass from one to the next
  (``export.DecoderStep(span=...)``); every kind is split at the same layers, so each shard's
  cache serves its decode and prefill graphs alike.
* **Children**: this process exports one graph at a time (it holds the model once and one
  graph's ONNX at a time) and writes it to a file; ``llm/finalize.py`` compiles it in a child
  process holding that graph's weights only. Up to ``jobs`` children run at once, and a child
  starts only while the estimated peak memory of those running plus its own fits ``max_memory``
  (``default_budget``: 80% of the machine's available memory); one always runs, however large.
  Exporting the next graph overlaps the children's finalizing.
* **Resumable** (``buildcache.BuildCache``): each graph's saved model is stored as soon as its child
  finishes, under a key of its ONNX bytes and what it is compiled with (name, SoC, opt_level,
  QNN build, qnnx version), written to a temporary file and renamed, then its description with
  its sha256 (the commit mark); a build killed midway and run again exports every graph, finds
  the finished ones by key, checks their size and sha256, and finalizes only the others; an
  entry that fails the check is rebuilt. A child dies with this process (Linux's parent-death
  signal), so a killed build leaves no child writing into the next one's folder.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from ..buildcache import BuildCache, key_of, place
from . import export

#: A child's peak RSS is estimated as this times its ONNX size, plus ``CHILD_BASE``, until a
#: finished child gives a measured ratio (docs/building.md: 1.1 to 1.2 GB for SmolLM2-135M's
#: quarter graphs of 100 to 150 MB of ONNX, about 5x plus the base).
CHILD_RATIO = 5.0
#: The native module, the QNN library and the emulator's own allocations (0.50 GB measured for
#: the tiny test decoder's graphs).
CHILD_BASE = 512 << 20


def spans(layers: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` consecutive spans of ``layers`` layers, the first ones one layer longer when
    they do not divide evenly."""
    if not 1 <= shards <= layers:
        raise ValueError(f"shards {shards}: give 1 to the model's {layers} layers")
    q, r = divmod(layers, shards)
    out, a = [], 0
    for i in range(shards):
        b = a + q + (1 if i < r else 0)
        out.append((a, b))
        a = b
    return out


def available_memory() -> int:
    """Bytes of memory available to new processes (``MemAvailable`` of /proc/meminfo, else the
    physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_budget() -> int:
    """The children's memory budget when none is given: 80% of the available memory."""
    return int(available_memory() * 0.8)


def parse_size(text: str) -> int:
    """``"12G"``, ``"800M"``, ``"1.5G"`` or bytes as an int."""
    t = text.strip().upper().removesuffix("B")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise ValueError(f"memory size {text!r}: give bytes or a number with K, M, G or T (such as 12G)") from None


def default_cache_dir() -> Optional[str]:
    """``qnnx-llm-graphs`` beside qnnx's context-binary cache folder (which holds binaries only,
    with its own eviction)."""
    from .. import _native

    d = _native.default_cache_dir()
    return str(Path(d).parent / "qnnx-llm-graphs") if d else None


def graph_identity(soc_model: int, opt_level: Optional[int], options: dict) -> dict:
    """What a graph's key covers besides its ONNX bytes and name."""
    from .. import _native

    return {
        "soc_model": soc_model, "opt_level": opt_level, "options": options,
        "qnn_build_id": _native.build_id("npu"), "qnnx_version": _native.versions().get("qnnx", "?"),
    }  # fmt: skip


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG = 1: the child gets SIGKILL when this process dies (SIGKILL included).
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


@dataclass
class Job:
    name: str
    onnx: Path
    out: Path
    onnx_bytes: int
    entry: dict
    cached: Optional[Path] = None
    key: Optional[str] = None
    proc: Optional[subprocess.Popen] = None
    started: float = 0.0
    estimate: int = 0
    log: Optional[Path] = None
    result: dict = field(default_factory=dict)


class ChildFailed(RuntimeError):
    """A graph's child process failed; the message names the graph and ends with its stderr."""


class Pool:
    """Child processes (``llm/finalize.py``), up to ``jobs`` at once within ``budget`` bytes of
    estimated peak memory."""

    def __init__(
        self,
        jobs: int,
        budget: int,
        job_options: dict,
        work: Path,
        progress: Callable[[str], None],
        total: int,
        cache_dir: Optional[str],
    ):
        if jobs < 1:
            raise ValueError(f"jobs {jobs}: give 1 or more")
        self.jobs, self.budget, self.options, self.work, self.say = jobs, budget, job_options, work, progress
        self.total, self.cache_dir = total, cache_dir
        self.running: list[Job] = []
        self.done: list[Job] = []
        self.failed: list[Job] = []
        self.ratio = CHILD_RATIO
        self.measured = False
        self.t0 = time.perf_counter()
        self.hits: list[Job] = []
        self.waited_for_memory = 0

    def estimate(self, job: Job) -> int:
        return int(job.onnx_bytes * self.ratio) + CHILD_BASE

    def _fits(self, est: int) -> bool:
        if not self.running:
            return True
        return len(self.running) < self.jobs and sum(j.estimate for j in self.running) + est <= self.budget

    def submit(self, job: Job) -> None:
        job.estimate = self.estimate(job)
        waited = False
        while not self._fits(job.estimate) and not self.failed:
            waited |= len(self.running) < self.jobs
            self._reap(block=True)
        self.waited_for_memory += waited
        if self.failed:
            return
        spec = {**self.options, "name": job.name, "onnx": str(job.onnx), "out": str(job.out)}
        spec["cache"] = {"dir": str(self.cache_dir), "key": job.key} if job.key else None
        spec["result"] = str(self.work / f"{job.name}.result.json")
        spec_path = self.work / f"{job.name}.job.json"
        spec_path.write_text(json.dumps(spec))
        job.log = self.work / f"{job.name}.log"
        with open(job.log, "wb") as log:
            job.proc = subprocess.Popen(
                [sys.executable, "-m", "qnnx_backend.llm.finalize", str(spec_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        job.started = time.perf_counter()
        self.running.append(job)
        self.say(f"finalizing {job.name} in a child process ({len(self.running)} running)")

    def _reap(self, block: bool) -> None:
        while True:
            for job in list(self.running):
                assert job.proc is not None
                if job.proc.poll() is None:
                    continue
                self.running.remove(job)
                wall = time.perf_counter() - job.started
                result = Path(self.work / f"{job.name}.result.json")
                if job.proc.returncode != 0 or not result.exists():
                    job.result = {"error": _tail(job.log), "returncode": job.proc.returncode}
                    self.failed.append(job)
                    continue
                job.result = json.loads(result.read_text())
                job.result["wall_s"] = round(wall, 2)
                job.result["from_cache"] = False
                job.result["span_s"] = [round(job.started - self.t0, 2), round(time.perf_counter() - self.t0, 2)]
                if job.cached:
                    place(job.cached, job.out)
                rss = job.result["peak_rss"]
                measured = (rss - CHILD_BASE) / max(job.onnx_bytes, 1)
                self.ratio = max(self.ratio, measured) if self.measured else measured
                self.measured = True
                self.done.append(job)
                self.say(f"[{len(self.done) + len(self.hits)}/{self.total}] {job.name}: finalized in {wall:.1f} s, peak RSS {rss / 1e9:.2f} GB")
                if job.onnx.parent == self.work:  # not a --keep-onnx graph
                    job.onnx.unlink(missing_ok=True)
                return
            if not block or not self.running:
                return
            time.sleep(0.05)

    def wait(self) -> None:
        while self.running:
            self._reap(block=True)
        if self.failed:
            first = self.failed[0]
            resume = (
                "graphs finished before it are in the cache, and building again resumes from them"
                if self.cache_dir
                else "with a cache (--cache) a build resumes from the graphs it finished"
            )
            raise ChildFailed(
                f"compiling {', '.join(j.name for j in self.failed)} failed in a child process "
                f"(exit {first.result.get('returncode')}); {resume}. {first.name}'s output:\n{first.result['error']}"
            )


def _tail(path: Optional[Path], lines: int = 30) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def build_graphs(
    model: torch.nn.Module,
    folder: Path,
    kinds: Sequence[tuple[str, int]],
    cache_len: int,
    *,
    soc_model: int,
    options: dict,
    shards: int = 1,
    jobs: int = 1,
    max_memory: Optional[int] = None,
    cache_dir: Optional[str] = None,
    opt_level: Optional[int] = None,
    keep_onnx: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[list[dict], dict, dict]:
    """Exports and compiles the graphs ``kinds`` (``("decode", 1)``, ``("prefill", N)``) of
    ``model``, each in ``shards`` shards, into saved models in ``folder``; returns the manifest's
    graph entries, the last saved model's description (QNN build, qnnx version) and the build's
    figures (wall time of each stage, peak RSS of this process and of the largest child)."""
    sp = spans(export.Shape.of(model).layers, shards)
    budget = max_memory or default_budget()
    work = folder / ".work"
    work.mkdir(exist_ok=True)
    child = {"soc_model": soc_model, "opt_level": opt_level, "options": options}
    pool = Pool(jobs, budget, child, work, progress, total=len(kinds) * len(sp), cache_dir=cache_dir)
    cache = BuildCache(cache_dir) if cache_dir else None
    identity = graph_identity(soc_model, opt_level, options) if cache else {}
    started = time.perf_counter()
    export_s = 0.0
    entries: list[dict] = []
    for kind, tokens in kinds:
        base = "decode" if kind == "decode" else f"prefill-{tokens}"
        for i, span in enumerate(sp):
            name = base if shards == 1 else f"{base}.shard{i}"
            progress(f"exporting {name}" + (f" (layers {span[0]} to {span[1] - 1})" if shards > 1 else ""))
            t0 = time.perf_counter()
            onnx = export.onnx_bytes(export.DecoderStep(model, cache_len, tokens, span))
            entry: dict[str, Any] = {"name": name, "kind": kind, "tokens": tokens}
            if shards > 1:
                entry.update(shard=i, layers=list(span))
            entry["export_s"] = round(time.perf_counter() - t0, 2)
            export_s += entry["export_s"]
            path = (folder if keep_onnx else work) / f"{name}.onnx"
            if keep_onnx:
                path.write_bytes(onnx)
            job = Job(name, path, folder / f"{name}.qnnx", len(onnx), entry)
            entries.append(entry)
            if cache:
                key = key_of(onnx, {"graph_name": name, **identity})
                job.cached = cache.entry(key)
                job.key = key
                hit = cache.get(key, progress)
                if hit is not None:
                    place(job.cached, job.out)
                    job.result = {**hit, "from_cache": True, "wall_s": 0.0, "cache_key": key}
                    pool.hits.append(job)
                    progress(f"[{len(pool.done) + len(pool.hits)}/{pool.total}] {name}: in the cache ({job.cached})")
                    del onnx
                    continue
            if not keep_onnx:
                path.write_bytes(onnx)
            del onnx
            pool.submit(job)
            if pool.failed:
                break
        if pool.failed:
            break
    pool.wait()
    saved: dict = {}
    children = {j.name: j for j in pool.done + pool.hits}
    for entry in entries:
        j = children[entry["name"]]
        saved = j.result["saved"]
        g = saved["graphs"][0]
        side = lambda ts: [{k: t[k] for k in ("name", "dtype", "dims", "encoding")} for t in ts]  # noqa: E731
        entry.update(
            file=j.out.name,
            compile_s=j.result["compile_s"],
            from_cache=j.result["from_cache"],
            inputs=side(g["inputs"]),
            outputs=side(g["outputs"]),
        )
    for p in work.iterdir():
        p.unlink()
    work.rmdir()
    figures = {
        "shards": shards,
        "jobs": jobs,
        "max_memory": budget,
        "export_s": round(export_s, 2),
        "graphs_s": round(time.perf_counter() - started, 2),
        "children": {
            j.name: {k: j.result.get(k) for k in ("wall_s", "span_s", "compile_s", "from_cache", "peak_rss", "stages_ms")}
            for j in pool.done + pool.hits
        },
        "cache": {j.name: str(j.cached) for j in pool.done + pool.hits if j.cached},
        "peak_rss_parent": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_rss_child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
        "waited_for_memory": pool.waited_for_memory,
    }
    return entries, saved, figures
