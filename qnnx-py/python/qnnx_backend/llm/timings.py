"""Where an LLM artifact build's time went and how it is shown: ``timings`` (the figures of
``--timings`` and ``--json``: loading, each graph's export and compile with its child's stages,
packing, peak RSS) and ``Progress`` (one line rewritten in place on a terminal, a line per stage
otherwise, nothing with ``--json``). Used by ``llm/__main__.py``."""

from __future__ import annotations

import resource
import shutil
import time
from typing import Any


def timings(manifest: dict, load_s: float, wall_s: float) -> dict:
    """Where a build's time went (``--timings``, ``--json``): loading the model, each graph's
    export and compile (with the child's stages: lowering, finalize, ...), and the rest
    (tokenizer, hashing and writing the artifact), with peak RSS when children built it."""
    graphs = []
    b = manifest.get("build") or {}
    for g in manifest["graphs"]:
        c = b.get("children", {}).get(g["name"], {})
        graphs.append({
            "name": g["name"], "export_s": g.get("export_s"), "compile_s": g.get("compile_s"),
            "from_cache": g.get("from_cache", False), "child_peak_rss": c.get("peak_rss"),
            "stages_s": {k: round(v / 1e3, 3) for k, v in c.get("stages_ms", {}).items()},
        })  # fmt: skip
    graphs_s = b.get("graphs_s") or sum((g["export_s"] or 0) + (g["compile_s"] or 0) for g in graphs)
    return {
        "wall_s": round(wall_s, 2),
        "load_s": round(load_s, 2),
        "graphs_s": round(graphs_s, 2),
        "pack_s": round(max(manifest.get("build_s", 0) - graphs_s, 0), 2),
        "graphs": graphs,
        "shards": manifest.get("shards", 1),
        "jobs": b.get("jobs", 1),
        "peak_rss": b.get("peak_rss_parent", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
        "peak_rss_child": b.get("peak_rss_child"),
    }


def timings_text(t: dict) -> str:
    """``timings`` as lines."""
    lines = [f"  load the model {t['load_s']:8.2f} s"]
    for g in t["graphs"]:
        how = " (from the cache)" if g["from_cache"] else ""
        stages = ", ".join(f"{k} {v:.2f} s" for k, v in g["stages_s"].items() if v >= 0.005)
        rss = f", child peak RSS {g['child_peak_rss'] / 1e9:.2f} GB" if g["child_peak_rss"] else ""
        lines.append(f"  {g['name']:<22} export {g['export_s'] or 0:7.2f} s, compile {g['compile_s'] or 0:7.2f} s{how}{rss}")
        if stages:
            lines.append(f"  {'':<22} {stages}")
    lines.append(f"  graphs {t['graphs_s']:.2f} s wall ({t['shards']} shards, {t['jobs']} jobs); pack {t['pack_s']:.2f} s")
    child = f", largest child {t['peak_rss_child'] / 1e9:.2f} GB" if t["peak_rss_child"] else ""
    lines.append(f"  total {t['wall_s']:.2f} s; peak RSS {t['peak_rss'] / 1e9:.2f} GB{child}")
    return "timings:\n" + "\n".join(lines)


class Progress:
    """The build's progress on ``stream``: on a terminal one line rewritten in place (elapsed
    time, graphs finished of all, the current stage), else a line per stage; nothing when
    ``quiet`` (``--json``)."""

    def __init__(self, stream: Any, quiet: bool = False):
        self.stream, self.quiet = stream, quiet
        self.tty = not quiet and hasattr(stream, "isatty") and stream.isatty()
        self.start = time.perf_counter()
        self.count = ""

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        if message.startswith("[") and "]" in message:
            self.count, message = message[1:].split("] ", 1)
        if not self.tty:
            print(f"qnnx llm: {message}", file=self.stream, flush=True)
            return
        bar = ""
        if self.count:
            done, total = (int(x) for x in self.count.split("/"))
            filled = 20 * done // max(total, 1)
            bar = f"[{'#' * filled}{'.' * (20 - filled)}] {self.count} "
        line = f"{time.perf_counter() - self.start:7.1f} s {bar}{message}"
        self.stream.write("\r\x1b[K" + line[: shutil.get_terminal_size().columns - 1])
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
