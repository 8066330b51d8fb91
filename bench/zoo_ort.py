"""One model of the zoo on ONNX Runtime, in bench/.venv-ort's Python (qnnx never imports ONNX
Runtime): the QNN EP configured by ort_ref_backend.session (SoC 60, HTP v73, fp16, no CPU
fallback, EPContext model written to --ctx), or with --cpu the CPU EP as the float reference of
models that come as ONNX. Inputs are the .npy files of --inputs (named NAME.npy); outputs are
written to --out as out_K.npy in the model's output order. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _cpu_nodes(model: str) -> str:
    """Which nodes ONNX Runtime would put on the CPU EP, and the first reason QNN gave: a session
    with the CPU fallback allowed and a verbose log (which ORT writes to fd 2, so it is read back
    from a file)."""
    import re
    import tempfile

    import onnxruntime as ort

    import ort_ref_backend as ref

    with tempfile.TemporaryFile(mode="w+") as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            so = ort.SessionOptions()
            so.log_severity_level = 0
            so.add_provider_for_devices(ref._ep_devices(), ref.provider_options())
            ort.InferenceSession(model, sess_options=so)
        except Exception:  # noqa: BLE001,S110  (only the log is wanted)
            pass
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read()
    counts: dict = {}
    block = text.split("placed on [CPUExecutionProvider]")
    if len(block) > 1:
        for m in re.finditer(r"VerifyEachNodeIsAssignedToAnEp\]\s+(\w+) \(", block[1]):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    why = re.search(r"backendValidateOpConfig\(\) failed for node `[^`]*` of type `(\w+)` with error code (\d+)", text)
    nodes = ", ".join(f"{n} {op}" for op, n in counts.items()) or "unknown nodes"
    return nodes + (f" (QNN validation of {why.group(1)}: error {why.group(2)})" if why else "")


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

        try:
            sess = ref.session(a.model, ctx_path=a.ctx)
        except Exception as e:  # noqa: BLE001  (ORT raises its own Fail type; reported, not handled)
            msg = str(e)
            if "fallback to CPU EP" in msg:
                msg = "not whole on the QNN EP: " + _cpu_nodes(a.model)
            print(json.dumps({"error": msg}))
            sys.exit(1)
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
