#!/usr/bin/env python3
"""timm models whose MLPs are 1x1 Convs around an exact GELU (ConvNeXt, FastViT,
EfficientFormerV2), whole graph on the emulated HTP: qnnx's error against ONNX Runtime's QNN EP's
on the same ONNX file.

Each model is built with random weights (seed 0, BatchNorm statistics refreshed as
bench/zoo_models.py does), exported with the TorchScript exporter at opset 17 on a 1x3x224x224
input, and run by `qnnx compile` + `qnnx run` (SoC 60, v73, fp16, as bench/zoo.py does) and by
bench/zoo_ort.py in bench/.venv-ort (ORT's QNN EP, SoC 60, v73, fp16, no CPU fallback). Errors
are the max |out - eager fp32| over max |eager fp32| (zoo.py's `rel`). Needs `pip install timm`
in the system Python (not a test dependency); prints one line per model.

    python3 bench/timm_families.py [--models convnext_atto,fastvit_t8,efficientformerv2_s0]
                                   [--qnnx target/release/qnnx]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import zoo  # noqa: E402
import zoo_models  # noqa: E402

MODELS = ("convnext_atto", "fastvit_t8", "efficientformerv2_s0")


def prepare(name: str, d: Path) -> None:
    import timm
    import torch

    torch.manual_seed(0)
    m = timm.create_model(name, pretrained=False).eval()
    m = zoo_models.refresh_batchnorm(m, (2, 3, 224, 224))
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        want = m(x)
        torch.onnx.export(m, (x,), str(d / "model.onnx"), dynamo=False, opset_version=17,
                          input_names=["in0"], output_names=["out0"])
    (d / "inputs").mkdir()
    (d / "ref").mkdir()
    np.save(d / "inputs" / "in0.npy", x.numpy())
    np.save(d / "ref" / "out_0.npy", want.numpy())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--qnnx", default=str(zoo.ROOT / "target" / "release" / "qnnx"))
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    env = dict(zoo.os.environ)
    env.setdefault("QNNX_RUNTIME_DIR", str(zoo.ROOT / "runtime"))
    for name in a.models.split(","):
        d = zoo.WORK.parent / "timm" / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        prepare(name, d)
        want = zoo._load_outs(d / "ref")
        rc, out, err = zoo._run([a.qnnx, "--json", "compile", str(d / "model.onnx"), "-o", str(d / "ours.bin"),
                                 *zoo.QNNX_TARGET], a.timeout, env)
        if rc == 0:
            rc, out, err = zoo._run([a.qnnx, "--json", "run", str(d / "ours.bin"), "--runs", "1", "-o",
                                     str(d / "ours-out"), "--input", f"in0={d / 'inputs' / 'in0.npy'}"],
                                    a.timeout, env)
        j = zoo._last_json(out) if rc == 0 else None
        ours = zoo._errors([np.load(o["file"]) for o in j["outputs"]], want) if j else {
            "error": zoo._reason(rc, out, err)}
        (d / "ort-ctx").mkdir()
        rc, out, err = zoo._run([str(zoo.ORT_PY), str(HERE / "zoo_ort.py"), str(d / "model.onnx"), "--inputs",
                                 str(d / "inputs"), "--out", str(d / "ort-out"), "--ctx",
                                 str(d / "ort-ctx" / "model_ctx.onnx")], a.timeout, env)
        ort = zoo._errors(zoo._load_outs(d / "ort-out"), want) if rc == 0 else {"error": zoo._reason(rc, out, err)}
        print(f"{name:24s} ours {zoo._err_cell(ours):>10s}  ort {zoo._err_cell(ort):>10s}"
              + (f"  [ours: {ours['error'][:200]}]" if "error" in ours else "")
              + (f"  [ort: {ort['error'][:200]}]" if "error" in ort else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
