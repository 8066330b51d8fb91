"""Does per-channel scale migration (SmoothQuant, AWQ) pay for SmolLM2-135M-Instruct's weights?

Scale migration multiplies input channel ``j`` of a Linear's weight by ``s[j]`` and divides the
activation it reads by the same ``s[j]``, folded into the op that makes that activation, so the
float model computes the same thing (checked: the migrated fp32 model against the original) while
the rounding grid of the weights sees other values. Folded, per decoder layer, into:

* the input RmsNorm's weight, for ``q_proj``, ``k_proj``, ``v_proj`` (one ``s`` for the three);
* the post-attention RmsNorm's weight, for ``gate_proj`` and ``up_proj``;
* ``up_proj``'s output rows, for ``down_proj`` (the SiLU product is linear in ``up_proj``);
* ``v_proj``'s output rows, for ``o_proj`` (one ``s`` per KV head's channel: every query head
  of a group reads the same value rows).

``s`` per group of a layer, with ``X`` the activation over the calibration texts (the float
model's, not propagated through rounded layers) and ``W`` the weights that read it:

* ``smoothquant``: ``s[j] = max|X[:, j]|^a / max|W[:, j]|^(1 - a)`` (Xiao et al., 2022);
* ``awq``: ``s[j] = mean|X[:, j]|^a`` (Lin et al., 2023);

with ``a`` searched in 0, 0.1, ..., 1 per group for the smallest squared error of the rounded
layer's output on ``X`` (``a = 0`` is no migration for ``awq``). Then every projection is rounded
(the LM head stays fp32, as in bench/llm_weights.py) and the model is run teacher-forced over the
Zen of Python against the unrounded model: bench/llm_weights.py's metrics, for 8-bit per-channel
weights (16a8w's) and LPBQ with blocks of 64 (16a4w with ``weight_block_size``). Host only,
weights only (fp32 activations, no QNN): whether migration makes the weights' rounding cheaper.

    python3 bench/llm_scale_migration.py          # about 15 minutes on two cores

Results: bench/results/llm_scale_migration.json and .md.
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

ALPHAS = [i / 10 for i in range(11)]
#: Calibration: bench/llm_quant.py's texts, each cut to this many tokens.
CALIB_TOKENS = 512


def scales(x: torch.Tensor, weights: list[torch.Tensor], rnd, method: str, tie=None) -> tuple[float, torch.Tensor]:
    """(a, s): the migration of activation ``x`` [n, in] read by ``weights`` (each [out, in]) whose
    rounded output is closest to the float output; ``tie`` maps ``s`` to one that the fold can hold."""
    xa = (x.abs().amax(0) if method == "smoothquant" else x.abs().mean(0)).clamp_min(1e-5)
    wa = torch.cat(weights).abs().amax(0).clamp_min(1e-5)
    want = [x @ w.T for w in weights]
    best = None
    for a in ALPHAS:
        s = xa.pow(a) / wa.pow(1 - a) if method == "smoothquant" else xa.pow(a)
        if tie is not None:
            s = tie(s)
        s = s / (s.max() * s.min()).sqrt()  # centred on 1: the fold's own range stays put
        err = sum(((x / s) @ rnd(w * s).T - y).pow(2).sum().item() for w, y in zip(weights, want))
        if best is None or err < best[0]:
            best = (err, a, s)
    return best[1], best[2]


def migrate(model, acts: dict, rnd, method: str) -> dict:
    """Folds the searched scales into ``model`` in place; {group: a}."""
    cfg = model.config
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = cfg.hidden_size // heads
    g = heads // kv

    def per_kv_head(s):  # o_proj's input channel (head h, dim i) reads v channel (h // g, i)
        return s.reshape(kv, g, d).amax(1, keepdim=True).expand(kv, g, d).reshape(-1)

    chosen = {}
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            at, mlp = layer.self_attn, layer.mlp
            a, s = scales(acts[i, "qkv"], [at.q_proj.weight, at.k_proj.weight, at.v_proj.weight], rnd, method)
            layer.input_layernorm.weight.div_(s)
            for p in (at.q_proj, at.k_proj, at.v_proj):
                p.weight.mul_(s)
            chosen[f"{i}.qkv"] = a
            a, s = scales(acts[i, "gate_up"], [mlp.gate_proj.weight, mlp.up_proj.weight], rnd, method)
            layer.post_attention_layernorm.weight.div_(s)
            for p in (mlp.gate_proj, mlp.up_proj):
                p.weight.mul_(s)
            chosen[f"{i}.gate_up"] = a
            a, s = scales(acts[i, "down"], [mlp.down_proj.weight], rnd, method)
            mlp.up_proj.weight.div_(s[:, None])
            mlp.down_proj.weight.mul_(s)
            chosen[f"{i}.down"] = a
            a, s = scales(acts[i, "o"], [at.o_proj.weight], rnd, method, tie=per_kv_head)
            at.v_proj.weight.div_(s.reshape(kv, g, d)[:, 0].reshape(-1)[:, None])
            at.o_proj.weight.mul_(s)
            chosen[f"{i}.o"] = a
    return chosen


def activations(model, seqs) -> dict:
    """{(layer, group): [n, in]}: what each group's projections read, every other token of ``seqs``."""
    got: dict = {}

    def hook(key):
        return lambda m, inp, out: got.setdefault(key, []).append(inp[0].detach().reshape(-1, inp[0].shape[-1]))

    handles = []
    for i, layer in enumerate(model.model.layers):
        for mod, key in ((layer.self_attn.q_proj, "qkv"), (layer.self_attn.o_proj, "o"),
                         (layer.mlp.gate_proj, "gate_up"), (layer.mlp.down_proj, "down")):
            handles.append(mod.register_forward_hook(hook((i, key))))
    with torch.no_grad():
        for s in seqs:
            model(s[None])
    for h in handles:
        h.remove()
    return {k: torch.cat(v)[::2] for k, v in got.items()}


def main():
    import smollm2
    from llm_quant import calibration_texts, evaluation_text
    from llm_weights import WINDOW, per_channel, row_metrics

    from qnnx_backend.quantization import blockwise

    commit = common.commit()
    model, tok = smollm2.load()
    ids = tok(evaluation_text(), return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ref = model(ids).logits[0]
    seqs = [tok(t, return_tensors="pt")["input_ids"][0, :CALIB_TOKENS] for t in calibration_texts(16)]
    acts = activations(model, seqs)
    original = {k: v.detach().clone() for k, v in model.state_dict().items()}
    grids = {"8bit": lambda w: per_channel(w, 8), "lpbq-64": lambda w: blockwise.quantize(w, 64).dequantized()}
    rows = []
    for grid, rnd in grids.items():
        for method in ("none", "smoothquant", "awq"):
            model.load_state_dict(original)
            chosen = migrate(model, acts, rnd, method) if method != "none" else {}
            with torch.no_grad():
                exact = row_metrics(ref, model(ids).logits[0], ids)["logits_sqnr_db"]
                for n, m in model.named_modules():
                    if isinstance(m, torch.nn.Linear) and n != "lm_head":
                        m.weight.data = rnd(m.weight.data)
                got = model(ids).logits[0]
            alphas = sorted(chosen.values())
            rows.append({"weights": grid, "migration": method, "float_model_sqnr_db": exact,
                         "alpha_median": alphas[len(alphas) // 2] if alphas else None, **row_metrics(ref, got, ids)})
            print(json.dumps(rows[-1]), flush=True)
    out = os.path.join(HERE, "results", "llm_scale_migration")
    with open(out + ".json", "w") as f:
        json.dump({"commit": commit, "tokens": int(ids.shape[1]), "window": WINDOW, "calibration_texts": len(seqs),
                   "rows": rows}, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write(f"SmolLM2-135M-Instruct, weights only (fp32 activations, no QNN), teacher-forced over the "
                f"{ids.shape[1]} tokens of the Zen of Python against the unrounded model; migration calibrated "
                f"on {len(seqs)} standard-library docstrings; commit {commit}; `python3 bench/llm_scale_migration.py`\n\n"
                "| weights | migration | median a | logits SQNR dB | centered dB | log-prob dB | top-1 agreement | "
                "ppl ratio | top-1, window |\n|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['weights']} | {r['migration']} | {r['alpha_median']} | {r['logits_sqnr_db']} | "
                    f"{r['logits_sqnr_centered_db']} | {r['logprob_sqnr_db']} | {100 * r['top1_agreement']:.1f}% | "
                    f"{r['ppl_ratio']} | {100 * r['top1_window']:.1f}% |\n")


if __name__ == "__main__":
    main()
