"""Quantized graphs against the float one, and against ONNX Runtime's QNN EP on the same models.

For each model: the float ONNX (compiled fp16), and the QDQ models `qnnx quantize` writes from it
(8a8w, 16a8w, 16a4w by default), each compiled by `qnnx compile` for SoC 60 (v73) and, quantized
only, for the QCS6490 (v68, no float path); per build the context binary's size, `qnnx run`'s
median execute time over --runs and the output's cosine and SQNR against fp32 eager PyTorch.
Then, per ONNX file, qnnx's session API against ONNX Runtime 1.x with its QNN EP (same QNN
release, SoC 60, CPU fallback off) in fresh processes: cold start (import to first output),
steady-state run time and peak RSS (SESSION_SCRIPT says what each one counts), with the goals
of the float benchmark (cold <= 0.5x, steady <= 0.95x, RSS <= 0.7x).

The emulator's times say nothing about a device (its fixed-point arithmetic is the device's, its
speed is the host's); the sizes and the error are what a device gets.

    python3 bench/quant.py [--model resnet18|mobilenet_v2] [--runs 5] [--schemes 8a8w,16a8w,16a4w]
                           [--reps 3] [--calls 10]

Needs a release `qnnx` (cargo build --release -p qnnx-cli), torchvision, and bench/.venv-ort
(bench/run makes it) for the ONNX Runtime columns, and qnnx_backend importable by this Python (the wheel, or
PYTHONPATH). Writes bench/results/quant.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import common  # noqa: E402  (bench/common.py)

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


# One fresh process per measurement, the same for both engines: each one's ONNX-level session
# API on the same QDQ (or float) ONNX file, as an app that ships that file would use it. Only
# numpy and the engine are imported (no torch, asserted): "cold" is the wall time from just before
# the engine's import to the first output (import, session creation, which compiles the model
# for the HTP, and the first run; qnnx with its cache off, ONNX Runtime without an EPContext
# file); "steady" the median of `calls` runs after 3 warm-up runs; "peak RSS" the process's
# VmHWM at the end, and above the baseline of interpreter + numpy + input.
SESSION_SCRIPT = r"""
import json, sys, time
import numpy as np
def peak_mb():
    # VmHWM, this process's own peak: ru_maxrss would still hold the peak of the parent this
    # process was forked from (Linux carries it across exec), and the parent has torch loaded.
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
engine, model, x_path, calls, out_path, bench = sys.argv[1:7]
sys.path.insert(0, bench)
import htp_target
x = np.load(x_path)
base_mb = peak_mb()
t0 = time.perf_counter()
if engine == "ort":
    import ort_session
    t_import = time.perf_counter()
    s = ort_session.session(model)
else:
    from qnnx_backend.runtime import InferenceSession
    t_import = time.perf_counter()
    # The provider options bench/ort_session.py gives ONNX Runtime (SoC 60, v73, fp16 precision).
    s = InferenceSession(model, provider_options=[dict(htp_target.PROVIDER_OPTIONS)], cache=False)
t_session = time.perf_counter()
feed = {s.get_inputs()[0].name: x}
y = s.run(None, feed)[0]
t_first = time.perf_counter()
for _ in range(3):
    s.run(None, feed)
ts = []
for _ in range(int(calls)):
    t = time.perf_counter(); s.run(None, feed); ts.append((time.perf_counter() - t) * 1e3)
assert "torch" not in sys.modules, "the session runner must not import torch"
np.save(out_path, y)
print(json.dumps({
    "import_ms": (t_import - t0) * 1e3, "session_ms": (t_session - t_import) * 1e3,
    "first_run_ms": (t_first - t_session) * 1e3, "cold_s": t_first - t0,
    "steady_ms": sorted(ts)[len(ts) // 2], "steady_min_ms": min(ts),
    "peak_rss_mb": peak_mb(), "baseline_rss_mb": base_mb, "output_dtype": str(y.dtype), "output_shape": list(y.shape),
}))
"""


def run_session(engine: str, model: Path, x_path: Path, calls: int, out: Path) -> dict:
    """One fresh process of SESSION_SCRIPT: qnnx under this Python (qnnx_backend importable, the
    wheel or PYTHONPATH), ONNX Runtime under bench/.venv-ort's."""
    if engine == "ort" and not ORT_PY.exists():
        return {"error": "bench/.venv-ort missing (bench/run creates it)"}
    py = str(ORT_PY) if engine == "ort" else sys.executable
    p = subprocess.run(
        [py, "-c", SESSION_SCRIPT, engine, str(model), str(x_path), str(calls), str(out), str(ROOT / "bench")],
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
    ap.add_argument("--reps", type=int, default=3, help="fresh session processes per engine and build")
    ap.add_argument("--calls", type=int, default=10, help="timed session runs per process")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "quant"))
    args = ap.parse_args()
    if not QNNX.exists():
        sys.exit(f"{QNNX} missing: cargo build --release -p qnnx-cli")
    env_dir = os.environ.get("QNNX_RUNTIME_DIR")
    if not env_dir:
        os.environ["QNNX_RUNTIME_DIR"] = str(ROOT / "runtime")

    load_start = os.getloadavg()[0]
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

    # Session against session, fresh processes, the engines alternating (first one, then the
    # other) so that a change in the machine's load falls on both.
    sessions = []
    for variant, path in files.items():
        runs: dict = {"qnnx": [], "ort": []}
        for rep in range(args.reps):
            for engine in ("qnnx", "ort") if rep % 2 == 0 else ("ort", "qnnx"):
                o = run_session(engine, path, work / "x.npy", args.calls, work / f"session-{engine}-{variant}.npy")
                print(json.dumps({"variant": variant, "engine": engine, "rep": rep, **o}), flush=True)
                runs[engine].append(o)
        row: dict = {"model": args.model, "variant": variant}
        for engine, rs in runs.items():
            errors = [r["error"] for r in rs if "error" in r]
            if errors:
                row[engine] = {"error": errors[0]}
                continue
            agg = {k: statistics.median(r[k] for r in rs) for k in ("cold_s", "import_ms", "session_ms", "first_run_ms",
                                                                  "steady_ms", "peak_rss_mb", "baseline_rss_mb")}
            agg["output"] = {"dtype": rs[0]["output_dtype"], "shape": rs[0]["output_shape"]}
            agg.update(metrics(np.load(work / f"session-{engine}-{variant}.npy"), want))
            row[engine] = agg
        if "error" not in row["qnnx"] and "error" not in row["ort"]:
            q, o = row["qnnx"], row["ort"]
            row["same_output_kind"] = q["output"] == o["output"]
            row["ratio"] = {
                "cold": q["cold_s"] / o["cold_s"],
                "steady": q["steady_ms"] / o["steady_ms"],
                "rss": q["peak_rss_mb"] / o["peak_rss_mb"],
                "rss_above_baseline": (q["peak_rss_mb"] - q["baseline_rss_mb"]) / (o["peak_rss_mb"] - o["baseline_rss_mb"]),
            }
        sessions.append(row)
        print(json.dumps(row), flush=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = common.commit()
    load = (load_start, os.getloadavg()[0])
    out.with_suffix(".json").write_text(json.dumps({
        "commit": commit, "size": args.size, "runs": args.runs, "reps": args.reps, "calls": args.calls,
        "loadavg_start_end": load, "rows": rows, "sessions": sessions,
    }, indent=1))
    command = (f"python3 bench/quant.py --model {args.model} --size {args.size} --runs {args.runs} --schemes {args.schemes}"
               f" --reps {args.reps} --calls {args.calls}")
    lines = [
        f"{args.model} {args.size}x{args.size}, at {commit}: `{command}`; 1-min load average {load[0]:.2f} at the start,"
        f" {load[1]:.2f} at the end",
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
    lines += [
        "",
        "Each engine's session API on the same ONNX file, in fresh processes (median of"
        f" {args.reps}; steady: median of {args.calls} runs): qnnx_backend.runtime.InferenceSession"
        " (cache off) and onnxruntime.InferenceSession with the QNN EP, both SoC 60 / v73 / fp16"
        " precision, CPU fallback off; numpy and the engine only, no torch.",
        "",
        "| build | cold: import to first output, ours / ORT (ratio) | steady run ms, ours / ORT (ratio) |"
        " peak RSS MB, ours / ORT (ratio); above interpreter + numpy | cosine ours / ORT |",
        "|---|---|---|---|---|",
    ]
    for r in sessions:
        q, o = r["qnnx"], r["ort"]
        if "ratio" not in r:
            lines.append(f"| {r['variant']} | {q.get('error', '')} {o.get('error', '')} | | | |")
            continue
        x = r["ratio"]
        lines.append(
            f"| {r['variant']} | {q['cold_s']:.2f} s / {o['cold_s']:.2f} s (**{x['cold']:.2f}x**) "
            f"| {q['steady_ms']:.0f} / {o['steady_ms']:.0f} (**{x['steady']:.2f}x**) "
            f"| {q['peak_rss_mb']:.0f} / {o['peak_rss_mb']:.0f} (**{x['rss']:.2f}x**); "
            f"{q['peak_rss_mb'] - q['baseline_rss_mb']:.0f} / {o['peak_rss_mb'] - o['baseline_rss_mb']:.0f}"
            f" ({x['rss_above_baseline']:.2f}x) | {q['cosine']:.5f} / {o['cosine']:.5f} |"
        )
    goals = {"cold": 0.5, "steady": 0.95, "rss": 0.7}
    timed = [r for r in sessions if "ratio" in r]
    verdicts = []
    for k, g in goals.items():
        missed = [r["variant"] for r in timed if r["ratio"][k] > g]
        verdicts.append(f"{k} <= {g}x " + (f"missed by {', '.join(missed)}" if missed else "met"))
    lines += ["", "Goals: " + "; ".join(verdicts) + "."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
