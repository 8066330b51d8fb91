"""What rotating SmolLM2-135M-Instruct's residual stream (``rotate_decoder``, quantization/rotation.py)
does on the host, before any QNN: the float model's function, the residual stream's largest
value per layer, and what rounding the weights alone then costs.

Rows, each against the unrotated fp32 model, teacher-forced over the Zen of Python as
bench/llm_weights.py (its metrics; the LM head fp32 as there, untied):

* ``none``: the model as loaded;
* ``norms folded``: each RmsNorm's scale folded into the Linears that read it (``fold_norms``,
  the first step of the rotation; ``Q = I``);
* ``rotated, residual only``: ``rotate_decoder(heads=False)``;
* ``rotated``: ``rotate_decoder()``, the residual stream and the value heads;

at 8-bit per channel (16a8w's weights) and LPBQ with blocks of 64. What the rotated model gives on
the HTP: ``python3 bench/llm_quant.py --schemes 16a8w/rot,16a16w/rot ...`` (docs/llm.md).

    python3 bench/llm_rotation.py      # host only, about 3 minutes

Results: bench/results/llm_rotation.json and .md.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch

import common  # noqa: E402  (bench/common.py)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models", "common"))
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "results", "llm_rotation")


def main():
    warnings.simplefilter("ignore")
    import smollm2
    from llm_quant import evaluation_text
    from llm_weights import cells, per_channel, row_metrics

    from qnnx_backend.quantization import blockwise, rotation

    commit = common.commit()
    model, tok = smollm2.load()
    ids = tok(evaluation_text(), return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ref = model(ids).logits[0]
    variants = {"none": lambda m: None, "norms folded": rotation.fold_norms,
                "rotated, residual only": lambda m: rotation.rotate_decoder(m, heads=False),
                "rotated": rotation.rotate_decoder}
    grids = {"8bit": lambda w: per_channel(w, 8), "lpbq-64": lambda w: blockwise.quantize(w, 64).dequantized()}
    rows, float_db, absmax = [], {}, {}
    for name, apply in variants.items():
        m, _ = smollm2.load()
        apply(m)
        m.lm_head.weight = torch.nn.Parameter(m.lm_head.weight.detach().clone())
        linears = {n: x for n, x in m.named_modules() if isinstance(x, torch.nn.Linear) and n != "lm_head"}
        floats = {n: x.weight.detach().clone() for n, x in linears.items()}
        with torch.no_grad():
            out = m(ids, output_hidden_states=True)
        float_db[name] = row_metrics(ref, out.logits[0], ids)["logits_sqnr_db"]
        # Hidden states before the final norm: the residual stream after each layer.
        absmax[name] = [round(float(h.abs().max()), 1) for h in out.hidden_states[:-1]]
        for grid, rounded in grids.items():
            for n, x in linears.items():
                x.weight.data = rounded(floats[n])
            with torch.no_grad():
                got = m(ids).logits[0]
            rows.append({"variant": name, "grid": grid, **row_metrics(ref, got, ids)})
            print(json.dumps(rows[-1]), flush=True)
    with open(OUT + ".json", "w") as f:
        json.dump({"commit": commit, "float_logits_sqnr_db": float_db, "residual_absmax": absmax, "rows": rows}, f, indent=1)
    with open(OUT + ".md", "w") as f:
        f.write(f"SmolLM2-135M-Instruct, weights only (host, fp32 activations, the LM head fp32), the Zen of Python "
                f"teacher-forced; commit {commit}; `python3 bench/llm_rotation.py`.\n\n"
                f"Float model after each transform against the original, logits SQNR dB: {json.dumps(float_db)}.\n\n"
                "| variant | grid | logits SQNR dB | centered dB | log-prob dB | top-1 agreement | ppl ratio | top-1, window |\n"
                "|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['variant']} | {r['grid']} | {cells(r)} |\n")
        f.write("\nLargest residual value: the embedding, then after each layer but the last (returned normed):\n\n")
        for name, v in absmax.items():
            f.write(f"- {name}: {v}\n")


if __name__ == "__main__":
    main()
