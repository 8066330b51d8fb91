"""``qnnx_backend.export``: a PyTorch model compiled once and written as a saved model (one file:
context binary, manifest, I/O binding), which ``qnnx_backend.load`` and
``qnnx_backend.runtime.InferenceSession`` run without torch.compile, dynamo, ONNX or lowering."""

from __future__ import annotations

import inspect
import json
import os
from typing import Any, Mapping, Optional, Sequence, Union

import torch

from . import _export, _native
from .exceptions import LoweringError
from .settings import parse_options

# Options that describe run-time behaviour of torch.compile, not the compiled binary.
_IGNORED = {"strict", "cache", "cache_dir", "dry_run", "check_nan", "log_level"}


def _input_names(model: torch.nn.Module, n: int) -> list[str]:
    """The forward's positional parameter names when there are exactly ``n`` of them (so a
    session's ``get_inputs()`` shows ``x``, not ``input_0``), else ``input_<i>``."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return positional if len(positional) == n else [f"input_{i}" for i in range(n)]


def _structure(out: Any) -> tuple[str, int]:
    if isinstance(out, torch.Tensor):
        return "tensor", 1
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return ("list" if isinstance(out, list) else "tuple"), len(out)
    raise LoweringError(
        f"the model returns {type(out).__name__}; a saved model returns a tensor or a tuple or list of "
        "tensors (wrap the model to return those)"
    )


def export(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    path: Union[str, os.PathLike],
    options: Optional[Mapping[str, Any]] = None,
) -> dict:
    """Compiles ``model`` for the input shapes and dtypes of ``example_inputs`` and writes it to
    ``path`` as one file (atomically); returns its manifest.

    ``options`` are torch.compile's ``options`` for the ``"qnn"`` backend: ``soc_model``,
    ``htp_arch``, ``fp16``, ``opt_level``, ``exporter``, ``device`` (``npu``, the default for
    ``auto``, or ``gpu``). Options about run-time behaviour (``strict``, ``cache``, ...) do not
    apply. ``kv_cache`` graphs (which replay cache writes on the host) are refused, as is a
    model with nodes the device cannot run (``UnsupportedOpError``): a saved model has no eager
    fallback.

    The file holds the context binary, a manifest (QNN build id, SoC and HTP arch, graph I/O
    names, shapes, dtypes and encodings, the options) and the model I/O binding; it runs only
    with the QNN release that made it, on that SoC.
    """
    s = parse_options(options)
    if s.kv_cache:
        raise LoweringError(
            "kv_cache=True graphs need the host-side replay of their cache writes, which saved "
            "models do not carry yet: export the model without a KV cache"
        )
    if s.device == "cpu":
        raise ValueError("device='cpu' runs eager PyTorch: there is nothing to save")
    device = "npu" if s.device == "auto" else s.device
    inputs = tuple(example_inputs)
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"example_inputs[{i}] is {type(t).__name__}; a saved model takes tensors")
    model = model.eval()
    with torch.no_grad():
        kind, n_out = _structure(model(*inputs))
    names = _input_names(model, len(inputs))
    outputs = ["output"] if n_out == 1 else [f"output_{i}" for i in range(n_out)]
    onnx = _export.export(model, inputs, s, names=names, output_names=outputs)
    native = _native.compile(
        onnx,
        device=device,
        soc_model=s.soc_model,
        htp_arch=s.htp_arch,
        fp16=s.fp16,
        opt_level=s.opt_level,
    )
    if len(native.outputs) != n_out:
        raise LoweringError(f"the model returns {n_out} tensors but its ONNX export has {len(native.outputs)} outputs")
    given = dict(options or {})
    recorded = {k: repr(v) for k, v in sorted(given.items()) if k not in _IGNORED}
    recorded["device"] = device
    extra = {"outputs": json.dumps(kind), "torch": torch.__version__}
    return json.loads(_native.save(native, os.fspath(path), recorded, extra))
