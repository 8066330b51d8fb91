"""Sharded, parallel and resumable LLM artifact builds (``qnnx_backend/llm/shards.py``,
``llm/finalize.py``): the tiny decoder of test_llm_artifact.py built as 2 shards in 2 child
processes generates, through ``qnnx generate``, the greedy tokens of the unsharded artifact and of
eager PyTorch; a build killed with SIGKILL midway leaves no child running, and its rerun
finalizes only the graphs it had not finished, never using a damaged or uncommitted cache entry.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models" / "common"))
import tiny_llm  # noqa: E402
from test_llm_artifact import CACHE_LEN, NEW_TOKENS, PREFILL, generate_json, qnnx  # noqa: E402

from qnnx_backend.llm import shards  # noqa: E402

COMMON = str(Path(__file__).resolve().parents[1] / "models" / "common")


def test_spans_and_sizes():
    assert shards.spans(30, 4) == [(0, 8), (8, 16), (16, 23), (23, 30)]
    assert shards.spans(2, 1) == [(0, 2)]
    with pytest.raises(ValueError, match="give 1 to the model's 2 layers"):
        shards.spans(2, 3)
    assert shards.parse_size("12G") == 12 << 30 and shards.parse_size("1.5M") == 3 << 19
    with pytest.raises(ValueError, match="such as 12G"):
        shards.parse_size("lots")
    assert 0 < shards.default_budget() < shards.available_memory()


def build(out, cache, **kw):
    from qnnx_backend.llm import build as b

    kw = {"shards": 2, "jobs": 2, **kw}
    return b.build_from(tiny_llm.model(), tiny_llm.tokenizer(), out, soc_model=60, cache_len=CACHE_LEN,
                        prefill=[PREFILL], cache_dir=str(cache), **kw)  # fmt: skip


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    base = tmp_path_factory.mktemp("shards")
    return base, build(base / "art", base / "cache")


@pytest.mark.htp
def test_the_manifest_holds_shards(sharded):
    base, m = sharded
    assert m["shards"] == 2
    names = [(g["name"], g["layers"], g["inputs"][0]["name"], g["outputs"][0]["name"]) for g in m["graphs"]]
    assert names == [
        ("decode.shard0", [0, 1], "input_ids", "hidden_out"),
        ("decode.shard1", [1, 2], "hidden_in", "logits"),
        (f"prefill-{PREFILL}.shard0", [0, 1], "input_ids", "hidden_out"),
        (f"prefill-{PREFILL}.shard1", [1, 2], "hidden_in", "logits"),
    ]
    assert [n for n in m["graphs"][0]["inputs"][3:]] and {i["name"] for i in m["graphs"][1]["inputs"][3:]} == {
        "past_key_1",
        "past_value_1",
    }
    assert m["build"]["jobs"] == 2 and len(m["build"]["children"]) == 4
    assert all(c["peak_rss"] > 0 and not c["from_cache"] for c in m["build"]["children"].values())
    r = qnnx("inspect", str(base / "art"))
    assert r.returncode == 0 and "shards: 2 per step" in r.stdout, r.stdout + r.stderr
    assert "graph prefill-16.shard1 (prefill, 16 tokens, layers 1 to 1)" in r.stdout


@pytest.mark.htp
@pytest.mark.parametrize("prompt_len", [5, 21])
def test_sharded_generation_equals_unsharded_and_eager(sharded, tmp_path, prompt_len):
    from qnnx_backend.llm import build as b

    base, _ = sharded
    whole = base / "whole"
    if not whole.exists():
        b.build_from(tiny_llm.model(), tiny_llm.tokenizer(), whole, soc_model=60, cache_len=CACHE_LEN, prefill=[PREFILL])
    tok = tiny_llm.tokenizer()
    ids = torch.randint(2, 300, (prompt_len,), generator=torch.Generator().manual_seed(prompt_len)).tolist()
    text = tok.decode(ids)
    got = generate_json(base / "art", "--prompt", text, "--max-new-tokens", str(NEW_TOKENS))
    want = generate_json(whole, "--prompt", text, "--max-new-tokens", str(NEW_TOKENS))
    assert got["tokens"] == want["tokens"] and got["prefill_chunks"] == want["prefill_chunks"]
    eager = tiny_llm.eager_greedy(tiny_llm.model(), got["prompt_tokens"], NEW_TOKENS)
    assert got["tokens"] == eager[: len(got["tokens"])]


@pytest.mark.htp
def test_the_memory_budget_holds_children_back(tmp_path):
    """Two jobs, but a budget below one child's estimate: one child at a time (one always runs)."""
    m = build(tmp_path / "art", tmp_path / "cache", max_memory=1)
    b = m["build"]
    assert b["max_memory"] == 1 and b["waited_for_memory"] >= 1
    spans = sorted(c["span_s"] for c in b["children"].values())
    assert len(spans) == 4 and all(a[1] <= b_[0] + 0.1 for a, b_ in zip(spans, spans[1:])), spans


def _children_of(marker: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker in (p / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


@pytest.mark.htp
def test_a_killed_build_resumes_from_the_graphs_it_finished(sharded, tmp_path):
    base, first = sharded
    cache, out = tmp_path / "cache", tmp_path / "art"
    script = (
        f"import sys; sys.path.insert(0, {COMMON!r}); sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_llm_shards import build\n"
        f"build({str(out)!r}, {str(cache)!r}, jobs=1)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not list(cache.glob("*/*.json")):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "no graph finished in 300 s"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = sorted(cache.glob("*/*.json"))
    assert 1 <= len(finished) < 4, f"the build was not killed midway: {len(finished)} of 4 graphs finished"
    work = str(out) + ".partial"
    for _ in range(100):  # the children die with their parent
        if not _children_of(work):
            break
        time.sleep(0.05)
    assert not _children_of(work), "a child outlived the killed build"
    # A damaged entry and one whose description never landed (killed between the two renames)
    # are compiled again, never used.
    damaged = finished[0].with_suffix(".qnnx")
    with open(damaged, "r+b") as f:
        f.truncate(damaged.stat().st_size // 2)
    m = build(out, cache, jobs=1)
    reused = {g["name"] for g in m["graphs"] if g["from_cache"]}
    assert len(reused) == len(finished) - 1, f"{reused} reused, {len(finished)} finished, one of them damaged"
    assert len(list(cache.glob("*/*.json"))) == 4
    again = build(out, cache, jobs=1)
    assert all(g["from_cache"] for g in again["graphs"])
    entry = Path(again["build"]["cache"]["decode.shard1"])
    entry.with_suffix(".json").unlink()
    third = build(out, cache, jobs=1)
    assert [g["name"] for g in third["graphs"] if not g["from_cache"]] == ["decode.shard1"]
    assert [f["sha256"] for f in third["files"].values()] == [f["sha256"] for f in first["files"].values()]
    got = generate_json(out, "--prompt", "the lazy dog", "--max-new-tokens", "8")
    want = generate_json(base / "art", "--prompt", "the lazy dog", "--max-new-tokens", "8")
    assert got["tokens"] == want["tokens"]


@pytest.mark.htp
def test_a_failing_child_names_its_graph(tmp_path):
    from qnnx_backend.llm import build as b

    with pytest.raises(b.shards_.ChildFailed, match=r"compiling decode\.shard0.*failed in a child process"):
        build(tmp_path / "art", tmp_path / "cache", opt_level=9)
    assert not (tmp_path / "art").exists()
