"""What QNN's graph optimization level (`--opt-level 1/2/3`) costs at build time and gives at
run time on the emulated HTP (SoC 60, fp16): finalize time from `qnnx --json compile` and the
median execute time of `qnnx --json run --runs N`, for each model and level, levels alternated
over --reps rounds (medians).

    python3 bench/opt_level.py [--reps 2] [--runs 10]

Models (random weights, exported with the TorchScript exporter into bench/work/opt_level/):
torchvision resnet18 and mobilenet_v2 at 112x112, and the decode step of a 4-layer Llama-style
decoder of SmolLM2-135M's shape (hidden 576, 9 heads, 3 KV heads, MLP 1536, vocabulary 49152)
with a 256-position cache (`qnnx_backend/llm/export.py`). Writes bench/results/opt_level.json.
The emulator's execute times say nothing about a device's; what they compare is the graphs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import common  # noqa: E402  (bench/common.py)

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / "work" / "opt_level"
QNNX = Path(os.environ.get("QNNX_BIN", ROOT / "target" / "release" / "qnnx"))


def models() -> dict[str, Path]:
    import torch
    import torchvision
    import transformers

    WORK.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in ("resnet18", "mobilenet_v2"):
        p = out[name] = WORK / f"{name}.onnx"
        if not p.exists():
            torch.manual_seed(0)
            m = getattr(torchvision.models, name)(weights=None).eval()
            torch.onnx.export(m, (torch.randn(1, 3, 112, 112),), str(p), dynamo=False, opset_version=17)
    p = out["llama4_decode"] = WORK / "llama4_decode.onnx"
    if not p.exists():
        sys.path.insert(0, str(ROOT / "qnnx-py" / "python"))
        from qnnx_backend.llm import export

        cfg = transformers.LlamaConfig(
            hidden_size=576, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=9,
            num_key_value_heads=3, head_dim=64, vocab_size=49152, max_position_embeddings=2048,
        )  # fmt: skip
        torch.manual_seed(0)
        m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
        m.config._attn_implementation = "eager"
        p.write_bytes(export.onnx_bytes(export.DecoderStep(m, 256, 1)))
    return out


def qnnx(*args: str) -> dict:
    r = subprocess.run([str(QNNX), "--json", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"qnnx {' '.join(args)}: {r.stdout}{r.stderr}")
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    results: dict = {}
    for name, path in models().items():
        for rep in range(a.reps):
            for level in (1, 2, 3):
                binary = WORK / f"{name}-o{level}.bin"
                c = qnnx("compile", str(path), "-o", str(binary), "--opt-level", str(level), "--precision", "fp16", "--soc-model", "60")
                r = qnnx("run", str(binary), "--runs", str(a.runs))
                row = results.setdefault(name, {}).setdefault(str(level), {"finalize_ms": [], "compile_ms": [], "execute_ms": [], "size": 0})
                row["finalize_ms"].append(c["finalize_ms"])
                row["compile_ms"].append(c["total_ms"])
                row["execute_ms"].append(r["median_ms"])
                row["size"] = c["size"]
                print(f"{name} opt {level} rep {rep}: finalize {c['finalize_ms']:.0f} ms, execute median {r['median_ms']:.2f} ms", flush=True)
    table = {
        n: {lv: {k: (round(statistics.median(v), 2) if isinstance(v, list) else v) for k, v in row.items()} for lv, row in levels.items()}
        for n, levels in results.items()
    }
    commit = common.commit()
    dest = ROOT / "bench" / "results" / "opt_level.json"
    dest.write_text(json.dumps({"commit": commit, "load": os.getloadavg(), "reps": a.reps, "runs": a.runs, "medians": table, "all": results}, indent=1) + "\n")
    for n, levels in table.items():
        for lv, row in levels.items():
            print(f"{n:<14} opt {lv}: finalize {row['finalize_ms']:8.0f} ms, compile {row['compile_ms']:8.0f} ms, execute {row['execute_ms']:8.2f} ms, {row['size']} bytes")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
