"""The names ``qnnx-backend`` 0.4 exported at the top level besides the backend itself:
``QNNDevice`` and ``QNNRuntime``, with the same meaning, for code written against 0.4.

In 0.4 (read from its wheel, ``qnnx_backend/compatibility.py`` and ``runtime/qnn.py``)
``QNNDevice`` is the type ``Literal["npu", "gpu"]`` and ``QNNRuntime`` a class of classmethods
over ONNX Runtime: it registers the QNN execution provider library, lists ONNX Runtime's QNN EP
devices, builds ``onnxruntime.SessionOptions`` for the NPU or the GPU (``strict`` disabling the
CPU EP fallback) and answers whether a device is available. qnnx has no ONNX Runtime: the
classmethods answer from the QNN libraries qnnx loads itself, the devices are
``QNNDeviceInfo`` records, and the session options are ``qnnx_backend.runtime.SessionOptions``
for ``qnnx_backend.runtime.InferenceSession`` (which never falls back to a CPU EP, so
``strict`` has nothing to disable and is accepted as given).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Mapping, Optional

from .. import _native
from ..deployment.session import SessionOptions, _from_provider_options

QNNDevice = Literal["npu", "gpu"]
"""A QNN accelerator: ``"npu"`` (the Hexagon HTP) or ``"gpu"`` (Adreno)."""


@dataclasses.dataclass(frozen=True)
class QNNDeviceInfo:
    """One accelerator qnnx can open (0.4 returned ONNX Runtime's ``OrtEpDevice`` objects)."""

    type: str
    """``"npu"`` or ``"gpu"``."""
    ep_name: str
    """``QNNRuntime.EXECUTION_PROVIDER_NAME``, as 0.4's devices carried it."""
    build_id: str
    """The QNN build of the library qnnx opens for it (``v2.51.0...``)."""


class QNNRuntime:
    """0.4's ``QNNRuntime``, answered by qnnx's own QNN runtime."""

    #: The name 0.4 registered ONNX Runtime's QNN EP under; kept for code that reads it.
    EXECUTION_PROVIDER_NAME = "QNNExecutionProvider"

    @classmethod
    def ensure_registered(cls) -> None:
        """Nothing to register: qnnx loads the QNN libraries itself when first used."""

    @classmethod
    def _devices(cls, kind: str) -> list[QNNDeviceInfo]:
        if not _native.is_available(kind):
            return []
        return [QNNDeviceInfo(kind, cls.EXECUTION_PROVIDER_NAME, _native.build_id(kind))]

    @classmethod
    def get_devices(cls) -> list[QNNDeviceInfo]:
        """Every accelerator available here (NPU first)."""
        return cls._devices("npu") + cls._devices("gpu")

    @classmethod
    def get_npu_devices(cls) -> list[QNNDeviceInfo]:
        return cls._devices("npu")

    @classmethod
    def get_gpu_devices(cls) -> list[QNNDeviceInfo]:
        return cls._devices("gpu")

    @classmethod
    def _session_options(cls, kind: str, provider_options: Optional[Mapping[str, Any]]):
        if not _native.is_available(kind):
            name = "NPU" if kind == "npu" else "GPU"
            raise RuntimeError(f"No QNN {name} device available: {_native.unavailable_reason(kind)}")
        return _from_provider_options(SessionOptions(), [dict(provider_options)] if provider_options else None)

    @classmethod
    def create_npu_session_options(
        cls, provider_options: Optional[Mapping[str, Any]] = None, strict: bool = False
    ):
        """``SessionOptions`` for ``qnnx_backend.runtime.InferenceSession`` on the NPU, from QNN
        EP provider options (``soc_model``, ``htp_arch``, ``enable_htp_fp16_precision``).
        RuntimeError when no NPU is available, as in 0.4."""
        del strict  # an InferenceSession never falls back to the CPU
        return cls._session_options("npu", provider_options)

    @classmethod
    def create_gpu_session_options(
        cls, provider_options: Optional[Mapping[str, Any]] = None, strict: bool = False
    ):
        """As ``create_npu_session_options``, for the GPU (not available on x86_64: QNN's GPU
        library needs a device)."""
        del strict
        return cls._session_options("gpu", provider_options)

    @classmethod
    def is_device_available(cls, device: Literal["cpu", "gpu", "npu"]) -> bool:
        """Whether ``device`` can be used here: ``"cpu"`` always; an unknown name is False."""
        if device == "cpu":
            return True
        if device in ("npu", "gpu"):
            return _native.is_available(device)
        return False


__all__ = ["QNNDevice", "QNNDeviceInfo", "QNNRuntime"]
