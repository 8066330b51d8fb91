"""ONNX Runtime's QNN EP as every benchmark configures it, without torch: the provider options
(HTP backend of the onnxruntime-qnn wheel, SoC 60, HTP v73, fp16 precision) and a session with
CPU fallback off. bench/ort_ref_backend.py (the torch.compile reference) builds on it; runners
that compare ONNX-level sessions (bench/quant.py) import only this, so torch's memory and import
time are not counted against ONNX Runtime.

Run with bench/.venv-ort's Python; qnnx code never loads ONNX Runtime.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import onnxruntime as ort
import onnxruntime_qnn

from htp_target import PROVIDER_OPTIONS

EP_NAME = "QNNExecutionProvider"

#: Stage timings in this process, in ms (the runners report them).
TIMES: dict = {}

_EP_DEVICES: Optional[list] = None


def provider_options(htp_lib: Optional[str] = None) -> dict:
    return {"backend_path": htp_lib or onnxruntime_qnn.get_qnn_htp_path(), **PROVIDER_OPTIONS}


def ep_devices() -> list:
    """Registers the QNN EP plugin library once per process; its devices."""
    global _EP_DEVICES
    if _EP_DEVICES is None:
        t = time.perf_counter()
        ort.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
        _EP_DEVICES = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
        TIMES["ep_register_ms"] = (time.perf_counter() - t) * 1e3
        if not _EP_DEVICES:
            raise RuntimeError("onnxruntime-qnn registered no QNN EP device")
    return _EP_DEVICES


def session(model: Any, ctx_path: Optional[str] = None, htp_lib: Optional[str] = None) -> ort.InferenceSession:
    """An ORT session on the QNN EP (HTP) for `model` (a path or ONNX bytes). With `ctx_path`
    (and a model that is not already an EPContext model) ORT also writes the EPContext model
    there during session creation."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if ctx_path is not None:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", ctx_path)
    so.add_provider_for_devices(ep_devices(), provider_options(htp_lib))
    return ort.InferenceSession(model, sess_options=so)
