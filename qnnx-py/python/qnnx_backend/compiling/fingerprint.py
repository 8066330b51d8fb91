"""The FX-level fingerprint of a graph for warm starts: everything that decides the compiled
binary, computed from the FX graph without exporting it. The native cache maps a fingerprint to
the cache key of its binary (``_native.alias_get`` / ``alias_put``), so a warm start skips the
ONNX export, lowering and finalize."""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any, Optional, Sequence

import torch

from .. import _native
from ..settings import QnnSettings

# Bumped when what goes into a fingerprint changes, so old aliases stop matching.
_FORMAT = b"qnnx-fx-1"


def fingerprint(parts: Sequence[Any]) -> str:
    """sha256 over length-prefixed byte strings (no two part lists collide by concatenation)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def fx_fingerprint(
    gm: torch.fx.GraphModule,
    args: Sequence[Any],
    per_call: Sequence[int],
    signature: tuple,
    device: str,
    settings: QnnSettings,
    calibration: Optional[str] = None,
) -> str:
    """Fingerprint of ``gm`` called with ``args``: the package and torch versions, the graph
    code, the device, target and compile settings (the quantization options among them), the
    per-call inputs' ``signature``, and the dtype, shape and bytes of every other tensor argument
    (the frozen weights). ``per_call`` holds the indices of the arguments that are passed at
    each call. A quantized graph adds the torchao version and ``calibration``, the digest of its
    calibration samples: its encodings are a function of these, the graph and the settings, so
    other calibration data (or a torchao whose observers may differ) misses."""
    s = settings
    parts = [
        _FORMAT,
        _native.versions()["qnnx"].encode(),
        torch.__version__.encode(),
        gm.code.encode(),
        device.encode(),
        repr((s.soc_model, s.htp_arch, sorted(s.compile_settings().items()))).encode(),
        repr(signature).encode(),
    ]
    if s.quantize is not None:
        from importlib import metadata

        parts.append(f"torchao {metadata.version('torchao')}".encode())
        parts.append((calibration or "").encode())
    # The memoryviews below do not own their bytes: a contiguous copy (made only for a
    # non-contiguous weight) must outlive the hashing. Contiguous weights are read in place:
    # keeping a detached alias of every weight alive here made the ONNX export that follows
    # 150-200 ms slower for resnet18 (measured), so none is made.
    copies = []
    for i, a in enumerate(args):
        if i in per_call or not isinstance(a, torch.Tensor):
            continue
        if a.is_contiguous():
            t = a
        else:
            t = a.detach().contiguous()
            copies.append(t)
        parts.append(repr((i, t.dtype, tuple(t.shape))).encode())
        nbytes = t.numel() * t.element_size()
        if nbytes:
            parts.append(memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())).cast("B"))
    return fingerprint(parts)
