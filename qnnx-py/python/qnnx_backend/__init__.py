"""qnnx_backend: run PyTorch models on Qualcomm NPUs through ``torch.compile(backend="qnn")``.

A drop-in for the ``qnnx-backend`` package (same module, options and behaviour) that drives
Qualcomm's QNN libraries directly instead of going through ONNX Runtime.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Optional

import torch


def _name_onnxruntime_qnn() -> None:
    """Tells the native loader where an installed ``onnxruntime_qnn`` package (which carries
    QNN libraries) is, found without importing it: otherwise the loader would ask a ``python3``
    subprocess (100 ms) when no earlier place in its search order has the library. A value the
    user or a parent process set wins."""
    if "QNNX_ONNXRUNTIME_QNN_DIR" in os.environ:
        return
    try:
        spec = importlib.util.find_spec("onnxruntime_qnn")
    except (ImportError, ValueError):
        return
    locations = spec.submodule_search_locations if spec is not None else None
    if locations:
        os.environ["QNNX_ONNXRUNTIME_QNN_DIR"] = list(locations)[0]


_name_onnxruntime_qnn()

from . import exceptions
from ._policy import STATS
from ._native import versions
from .backend import qnn_backend
from .exceptions import (
    CacheError,
    LibraryLoadError,
    LoweringError,
    QnnApiError,
    QnnxError,
    UnsupportedOpError,
)
from .settings import QnnSettings, parse_options
from ._profile import Profile, profile
from ._accuracy import AccuracyReport, LayerError, accuracy_report

__version__ = versions()["qnnx"]

__all__ = [
    "accuracy_report",
    "AccuracyReport",
    "LayerError",
    "compile",
    "is_available",
    "qnn_backend",
    "parse_options",
    "profile",
    "Profile",
    "QnnSettings",
    "STATS",
    "exceptions",
    "QnnxError",
    "LibraryLoadError",
    "QnnApiError",
    "UnsupportedOpError",
    "LoweringError",
    "CacheError",
]


def is_available(device: Optional[str] = None) -> bool:
    """Whether a QNN accelerator can be used here: ``"npu"``, ``"gpu"``, ``"cpu"`` (always), or
    with no argument either accelerator."""
    from . import _native

    if device is None:
        return _native.is_available("npu") or _native.is_available("gpu")
    if device == "cpu":
        return True
    if device not in ("npu", "gpu"):
        raise ValueError(f"device={device!r}: use 'npu', 'gpu' or 'cpu'")
    return _native.is_available(device)


def compile(model: torch.nn.Module, *, dynamic: bool = True, **options: Any) -> torch.nn.Module:
    """``torch.compile(model, backend="qnn", options=options)`` with the ``dynamic`` routing of
    qnnx-backend 0.4.

    ``dynamic=True``: cache-free prefill calls of decoders (integer ``input_ids`` of shape
    ``[batch, sequence]``, optional ``attention_mask``) are padded on the right to static buckets
    of 64, 128, then multiples of 256 tokens, so a new length reuses a compiled graph; the
    returned logits cover the real tokens only. Other calls compile one graph per input shape.
    ``dynamic=False`` fixes the input signature at the first call; later calls with another one
    raise ``QnnxError``. The full input contract is in ``qnnx_backend._buckets``.
    """
    from ._buckets import QnnCompiledModule

    if not isinstance(dynamic, bool):
        raise ValueError(f"dynamic={dynamic!r}: must be True or False")
    parse_options(options)
    return QnnCompiledModule(model, options, dynamic)


def _register() -> None:
    from torch._dynamo.backends.registry import register_backend

    try:
        register_backend(compiler_fn=qnn_backend, name="qnn")
    except AssertionError:
        # Already registered (through the torch_dynamo_backends entry point).
        pass


_register()
