"""One model of the zoo on ONNX Runtime, in bench/.venv-ort's Python (qnnx never imports ONNX
Runtime): the QNN EP configured by ort_ref_backend.session (SoC 60, HTP v73, fp16, no CPU
fallback, EPContext model written to --ctx), or with --cpu the CPU EP as the float reference of
models that come as ONNX. Inputs are the .npy files of --inputs (named NAME.npy); outputs are
written to --out as out_K.npy in the model's output order. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--inputs", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ctx", help="where the QNN EP writes its EPContext model")
    ap.add_argument("--cpu", action="store_true", help="the CPU EP (float reference)")
    a = ap.parse_args()

    import onnxruntime as ort

    t = time.perf_counter()
    if a.cpu:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(a.model, sess_options=so, providers=["CPUExecutionProvider"])
    else:
        import ort_ref_backend as ref

        sess = ref.session(a.model, ctx_path=a.ctx)
    session_ms = (time.perf_counter() - t) * 1e3
    feeds = {i.name: np.load(a.inputs / f"{i.name}.npy") for i in sess.get_inputs()}
    t = time.perf_counter()
    outs = sess.run(None, feeds)
    first_ms = (time.perf_counter() - t) * 1e3
    a.out.mkdir(parents=True, exist_ok=True)
    for k, o in enumerate(outs):
        np.save(a.out / f"out_{k}.npy", np.asarray(o))
    print(json.dumps({"session_ms": session_ms, "first_run_ms": first_ms, "outputs": len(outs),
                      "onnxruntime": ort.__version__}))


if __name__ == "__main__":
    main()
