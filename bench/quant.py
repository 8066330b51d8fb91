"""Quantized graphs against the float one, and against ONNX Runtime's QNN EP on the same models.

For each model: the float ONNX (compiled fp16), and the QDQ models `qnnx quantize` writes from it
(8a8w, 16a8w, 16a4w by default), each compiled by `qnnx compile` for SoC 60 (v73) and, quantized only, for the
QCS6490 (v68, no float path); per build the context binary's size, `qnnx run`'s median execute time
over --runs and the output's cosine and SQNR against fp32 eager PyTorch. ONNX Runtime 1.x with its
QNN EP (CPU fallback off, same library, SoC 60) runs the same ONNX files on the same input.

The emulator's times say nothing about a device (its fixed-point arithmetic is the device's, its
speed is the host's); the sizes and the error are what a device gets.

    python3 bench/quant.py [--model resnet18|mobilenet_v2] [--runs 5] [--schemes 8a8w,16a8w,16a4w]

Needs a release `qnnx` (cargo build --release -p qnnx-cli), torchvision, and bench/.venv-ort
(bench/run makes it) for the ONNX Runtime column. Writes bench/results/quant.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
QNNX = ROOT / "target" / "release" / "qnnx"
ORT_PY = ROOT / "bench" / ".venv-ort" / "bin" / "python"


def structured_images(n: int, size: int, seed: int) -> np.ndarray:
    """Smooth gradients, stripes and blobs: activations with image-like ranges, nothing downloaded."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    out = []
    for _ in range(n):
        f = torch.rand(3, 3, generator=g) * 6
        ph = torch.rand(3, generator=g) * 6.28
        img = torch.stack([torch.sin(f[c, 0] * xx + f[c, 1] * yy + ph[c]) for c in range(3)])
        cx, cy = (torch.rand(2, generator=g) * 2 - 1).tolist()
        img = img + 1.5 * torch.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) * 8)
        out.append(img)
    x = torch.stack(out)
    return ((x - x.mean()) / x.std()).numpy().astype(np.float32)


def build(name: str, size: int):
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    # Random-init BatchNorm statistics give outputs near 1e-9 that fp16 flushes to zero:
    # refresh them on a few batches first (docs/qnn-notes.md).
    model.train()
    with torch.no_grad():
        for k in range(4):
            model(torch.from_numpy(structured_images(8, size, 100 + k)))
    return model.eval()


def metrics(got: np.ndarray, want: np.ndarray) -> dict:
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    cos = float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w) + 1e-30))
    sqnr = float(10 * np.log10((w @ w) / max(((g - w) ** 2).sum(), 1e-30)))
    return {"cosine": cos, "sqnr_db": sqnr, "max_abs": float(np.abs(g - w).max())}


def qnnx(*args: str) -> dict:
    p = subprocess.run([str(QNNX), *args, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"qnnx {' '.join(args)} failed ({p.returncode}): {p.stdout}{p.stderr}")
    return json.loads(p.stdout)


ORT_SCRIPT = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import ort_ref_backend as ref
model, x_path, runs = sys.argv[2], sys.argv[3], int(sys.argv[4])
s = ref.session(model)
x = np.load(x_path)
name = s.get_inputs()[0].name
y = s.run(None, {name: x})[0]
ts = []
for _ in range(runs):
    t = time.perf_counter(); s.run(None, {name: x}); ts.append((time.perf_counter() - t) * 1e3)
np.save(sys.argv[5], y)
print(json.dumps({"median_ms": sorted(ts)[len(ts) // 2], "min_ms": min(ts)}))
"""


def run_ort(model: Path, x_path: Path, runs: int, out: Path) -> dict:
    if not ORT_PY.exists():
        return {"error": "bench/.venv-ort missing (bench/run creates it)"}
    p = subprocess.run(
        [str(ORT_PY), "-c", ORT_SCRIPT, str(ROOT / "bench"), str(model), str(x_path), str(runs), str(out)],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--schemes", default="8a8w,16a8w,16a4w", help="comma-separated quantization schemes")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "quant"))
    args = ap.parse_args()
    if not QNNX.exists():
        sys.exit(f"{QNNX} missing: cargo build --release -p qnnx-cli")
    env_dir = os.environ.get("QNNX_RUNTIME_DIR")
    if not env_dir:
        os.environ["QNNX_RUNTIME_DIR"] = str(ROOT / "runtime")

    model = build(args.model, args.size)
    work = Path(tempfile.mkdtemp(prefix="qnnx-bench-quant-"))
    x = structured_images(1, args.size, 7)
    np.save(work / "x.npy", x)
    with torch.inference_mode():
        want = model(torch.from_numpy(x)).numpy()
    f32 = work / "float.onnx"
    torch.onnx.export(model, (torch.from_numpy(x),), str(f32), input_names=["x"], output_names=["y"],
                      dynamo=False, opset_version=17)
    np.savez(work / "calib.npz", x=structured_images(16, args.size, 1)[:, None])  # 16 samples of [1, 3, H, W]
    files = {"fp16": f32}
    for scheme in args.schemes.split(","):
        files[scheme] = work / f"{scheme}.onnx"
        qnnx("quantize", str(f32), "--calib", str(work / "calib.npz"), "--scheme", scheme, "-o", str(files[scheme]))

    rows = []
    for variant, path in files.items():
        for soc in ("60", "QCS6490"):
            if variant == "fp16" and soc == "QCS6490":
                continue  # no float path on v68
            binary = work / f"{variant}-{soc}.bin"
            flags = ["--precision", "fp16"] if variant == "fp16" else []
            qnnx("compile", str(path), "--soc", soc, "-o", str(binary), *flags)
            outdir = work / f"out-{variant}-{soc}"
            r = qnnx("run", str(binary), "--input", f"x={work / 'x.npy'}", "--runs", str(args.runs), "-o", str(outdir))
            got = np.load(outdir / "y.npy")
            row = {
                "model": args.model, "variant": variant, "soc": soc, "engine": "qnnx",
                "binary_mb": binary.stat().st_size / 1e6,
                "median_ms": r["median_ms"],
                **metrics(got, want),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        o = run_ort(path, work / "x.npy", args.runs, work / f"ort-{variant}.npy")
        row = {"model": args.model, "variant": variant, "soc": "60", "engine": "onnxruntime-qnn", **o}
        if "error" not in o:
            row.update(metrics(np.load(work / f"ort-{variant}.npy"), want))
        rows.append(row)
        print(json.dumps(row), flush=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out.with_suffix(".json").write_text(json.dumps({"commit": commit, "size": args.size, "runs": args.runs, "rows": rows}, indent=1))
    lines = [
        f"{args.model} {args.size}x{args.size}, at {commit}: `python3 bench/quant.py --model {args.model} --runs {args.runs} --schemes {args.schemes}`",
        "",
        "| build | SoC | engine | binary MB | median execute ms (emulator) | cosine | SQNR dB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | {r['soc']} | {r['engine']} | | {r['error']} | | |")
            continue
        mb = f"{r['binary_mb']:.1f}" if "binary_mb" in r else ""
        lines.append(
            f"| {r['variant']} | {r['soc']} | {r['engine']} | {mb} | {r['median_ms']:.0f} | {r['cosine']:.5f} | {r['sqnr_db']:.1f} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
