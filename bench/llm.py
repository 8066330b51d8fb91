"""Tiny decoders on the emulated HTP: time to first token and tokens per second.

    python3 bench/llm.py                      # gpt2, llama, qwen2; 3 runs each
    python3 bench/llm.py --models llama --runs 5 --new-tokens 32

For each random-weight decoder (the configs of tests/python/test_llm.py, larger: 4 layers,
hidden 128) it runs greedy ``generate`` with a static cache three ways: eager PyTorch on the
CPU, and ``torch.compile(model.forward, backend="qnn", options={"kv_cache": True})`` cold (the
first generation: compiles the prefill and decode graphs) and warm (the same process again:
graphs compiled). Time to first token is from the ``generate`` call to the first token's
logits; tokens per second counts the tokens after the first over the time after the first.
Results: bench/results/llm.json and llm.md. The emulator runs the HTP on the CPU: these numbers
measure our overhead and the graphs' shape, not a phone's NPU. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings

import torch
import transformers

import qnnx_backend

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models", "common"))
import decoders  # noqa: E402

VOCAB = 2048


def build(kind: str) -> torch.nn.Module:
    return decoders.build(kind, hidden=128, layers=4, vocab=VOCAB, max_positions=512)


class _Clock(transformers.LogitsProcessor):
    """Records when each step's logits reach generate's processors (one per new token)."""

    def __init__(self):
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def generate(model, ids, new_tokens: int) -> tuple[torch.Tensor, dict]:
    clock = _Clock()
    t0 = time.perf_counter()
    out = model.generate(
        ids,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        cache_implementation="static",
        disable_compile=True,
        logits_processor=transformers.LogitsProcessorList([clock]),
    )
    t = clock.times
    return out, {
        "ttft_ms": (t[0] - t0) * 1e3,
        "tokens_per_s": (len(t) - 1) / (t[-1] - t[0]) if len(t) > 1 else None,
        "total_s": time.perf_counter() - t0,
    }


def median(runs: list[dict], key: str):
    v = [r[key] for r in runs if r[key] is not None]
    return statistics.median(v) if v else None


def bench(kind: str, prompt: int, new_tokens: int, runs: int) -> dict:
    model = build(kind)
    ids = torch.randint(2, VOCAB, (1, prompt), generator=torch.Generator().manual_seed(1))
    res: dict = {"model": kind, "prompt": prompt, "new_tokens": new_tokens, "params": sum(p.numel() for p in model.parameters())}
    with torch.no_grad():
        eager = [generate(model, ids, new_tokens) for _ in range(runs)]
        want = eager[0][0]
        res["eager"] = {k: median([r for _, r in eager], k) for k in ("ttft_ms", "tokens_per_s")}
        torch._dynamo.reset()
        qnnx_backend.STATS.clear()
        model.forward = torch.compile(
            model.forward,
            backend="qnn",
            options={"kv_cache": True, "strict": True, "device": "npu", "soc_model": 60},
        )
        got, cold = generate(model, ids, new_tokens)
        warm = [generate(model, ids, new_tokens)[1] for _ in range(runs)]
    res["qnn_cold"] = {k: cold[k] for k in ("ttft_ms", "tokens_per_s")}
    res["qnn_warm"] = {k: median(warm, k) for k in ("ttft_ms", "tokens_per_s")}
    res["graphs_compiled"] = qnnx_backend.STATS["compiles"]
    res["same_tokens_as_eager"] = bool(torch.equal(got, want))
    new_got, new_want = got[0, prompt:].tolist(), want[0, prompt:].tolist()
    # How many generated tokens agree before the first difference (fp16 drift can flip a close
    # argmax, after which the sequences differ).
    res["tokens_matching_eager"] = next((i for i, (a, b) in enumerate(zip(new_got, new_want)) if a != b), len(new_want))
    return res


def markdown(results: list[dict], meta: dict) -> str:
    lines = [
        f"Run {meta['date']} on {meta['cpus']} CPUs; QNN emulator (libQnnHtp x86_64), SoC 60 / v73; "
        f"torch {meta['torch']}, transformers {meta['transformers']}. Greedy, static cache, batch 1; "
        "medians of the warm runs.",
        "",
        "| model (params) | prompt + new | TTFT ms: qnn cold / qnn warm / eager | tokens/s: qnn warm / eager | graphs | tokens equal to eager |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['model']} ({r['params'] / 1e6:.2f} M) | {r['prompt']} + {r['new_tokens']} | "
            f"{r['qnn_cold']['ttft_ms']:.0f} / {r['qnn_warm']['ttft_ms']:.1f} / {r['eager']['ttft_ms']:.1f} | "
            f"{r['qnn_warm']['tokens_per_s']:.1f} / {r['eager']['tokens_per_s']:.1f} | {r['graphs_compiled']} | "
            f"{'yes' if r['same_tokens_as_eager'] else 'first ' + str(r['tokens_matching_eager']) + ' of ' + str(r['new_tokens'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,llama,qwen2")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--name", default="llm")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    results = []
    for kind in a.models.split(","):
        r = bench(kind, a.prompt, a.new_tokens, a.runs)
        print(json.dumps(r), flush=True)
        results.append(r)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "qnnx": qnnx_backend.__version__,
    }
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{a.name}.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    md = markdown(results, meta)
    with open(os.path.join(out, f"{a.name}.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
