"""qnnx_backend: run PyTorch models on Qualcomm NPUs through ``torch.compile(backend="qnn")``.

A drop-in for the ``qnnx-backend`` package (same module, options and behaviour) that drives
Qualcomm's QNN libraries directly instead of going through ONNX Runtime.

Importing the package does not import torch: deployed apps use ``qnnx_backend.load`` and
``qnnx_backend.runtime.InferenceSession`` with numpy alone. The torch-facing names (``compile``,
``export``, ``qnn_backend``, ``STATS``, ...) import torch on first use. The ``"qnn"`` backend is
registered on import when torch is already imported, and otherwise by torch itself through the
``torch_dynamo_backends`` entry point when a backend is looked up.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Optional


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


def _other_distribution() -> Optional[str]:
    """The ``qnnx-backend`` distribution (0.4, someone else's name on PyPI) installed beside this
    one: both install the import package ``qnnx_backend``, so installing one over the other mixes
    their files in one folder. Its metadata folder sits beside the package (one listdir, no
    importlib.metadata scan of every path entry)."""
    site = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        names = os.listdir(site)
    except OSError:
        return None
    for name in names:
        if name.lower().startswith("qnnx_backend-") and name.endswith(".dist-info"):
            return name
    return None


def _warn_other_distribution() -> None:
    other = _other_distribution()
    if other is not None:
        import warnings

        warnings.warn(
            f"qnnx_backend: {other} (the qnnx-backend 0.4 package) is installed in the same place as qnnx; "
            "both install the import package qnnx_backend, so their files are now mixed. Keep one: "
            "pip uninstall -y qnnx-backend qnnx && pip install --force-reinstall qnnx "
            "(docs/migrating.md)",
            RuntimeWarning,
            stacklevel=3,
        )


_warn_other_distribution()

from . import _native, exceptions
from ._native import versions
from .compat.devices import QNNDevice, QNNRuntime
from .exceptions import (
    CacheError,
    LibraryLoadError,
    LoweringError,
    QnnApiError,
    QnnxError,
    SavedModelError,
    UnsupportedOpError,
)
from .deployment.session import load
from .settings import QnnSettings, parse_options
from ._structure import batch_metrics, embedding_structure

# 0.4's public modules are attributes after `import qnnx_backend` (qnnx_backend.runtime.InferenceSession
# in the docs and in 0.4 code), as they were before the package moved into subpackages. Both are
# numpy-only re-exports.
from . import compatibility, runtime  # noqa: E402

# Names whose modules import torch, imported when first used (PEP 562).
_LAZY = {
    "STATS": ".compiling.stats",
    "qnn_backend": ".backend",
    "export": ".deployment.save",
    "profile": "._profile",
    "Profile": "._profile",
    "accuracy_report": "._accuracy",
    "AccuracyReport": "._accuracy",
    "LayerError": "._accuracy",
    "mixed_precision": ".quantization.mixed",
    "MixedPrecision": ".quantization.mixed",
    "decoder_recipe": ".quantization.recipe",
    "DecoderRecipe": ".quantization.recipe",
    "rotate_decoder": ".quantization.rotation",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'qnnx_backend' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value

__version__ = versions()["qnnx"]

__all__ = [
    "accuracy_report",
    "batch_metrics",
    "embedding_structure",
    "AccuracyReport",
    "LayerError",
    "mixed_precision",
    "MixedPrecision",
    "decoder_recipe",
    "rotate_decoder",
    "DecoderRecipe",
    "compile",
    "explain",
    "export",
    "load",
    "is_available",
    "qnn_backend",
    "parse_options",
    "profile",
    "Profile",
    "QnnSettings",
    "STATS",
    "exceptions",
    "QNNDevice",
    "QNNRuntime",
    "QnnxError",
    "LibraryLoadError",
    "QnnApiError",
    "UnsupportedOpError",
    "LoweringError",
    "CacheError",
    "SavedModelError",
]


def is_available(device: Optional[str] = None) -> bool:
    """Whether a QNN accelerator can be used here: ``"npu"``, ``"gpu"``, ``"cpu"`` (always), or
    with no argument or ``"auto"`` (the ``device`` option's default) either accelerator."""
    if device is None or device == "auto":
        return _native.is_available("npu") or _native.is_available("gpu")
    if device == "cpu":
        return True
    if device not in ("npu", "gpu"):
        raise ValueError(f"device={device!r}: use 'auto', 'npu', 'gpu' or 'cpu'")
    return _native.is_available(device)


def compile(model: Any, *, dynamic: bool = True, **options: Any) -> Any:
    """``torch.compile(model, backend="qnn", options=options)`` with the ``dynamic`` routing of
    qnnx-backend 0.4.

    ``dynamic=True``: cache-free prefill calls of decoders (integer ``input_ids`` of shape
    ``[batch, sequence]``, optional ``attention_mask``) are padded on the right to static buckets
    of 64, 128, then multiples of 256 tokens, so a new length reuses a compiled graph; the
    returned logits cover the real tokens only. Other calls compile one graph per input shape.
    ``dynamic=False`` fixes the input signature at the first call; later calls with another one
    raise ``QnnxError``. The full input contract is in ``qnnx_backend.compiling.buckets``.
    """
    from .compiling.buckets import QnnCompiledModule  # imports torch: on first use only

    if not isinstance(dynamic, bool):
        raise ValueError(f"dynamic={dynamic!r}: must be True or False")
    parse_options(options)
    return QnnCompiledModule(model, options, dynamic)


def _register() -> None:
    from torch._dynamo.backends import registry

    # torch's own lookup of "qnn" (torch.compile(m, backend="qnn") with no import of this
    # package) loads the torch_dynamo_backends entry point, which imports this package, and then
    # registers what it loaded: registering here too would make torch's registration fail with
    # "duplicate name: qnn". Torch has discovered the entry point by then (its registry maps the
    # name to it), so leave the registration to torch.
    if registry._BACKENDS.get("qnn") is not None or "qnn" in registry._COMPILER_FNS:
        return
    from .backend import qnn_backend

    registry.register_backend(compiler_fn=qnn_backend, name="qnn")


# Only when torch is already loaded: importing it here would cost a numpy-only app seconds.
if sys.modules.get("torch") is not None:
    _register()


def explain(model: Any, example_inputs: Any, options: Optional[dict] = None) -> list[dict]:
    """What would run where, without compiling anything for QNN: ``model(*example_inputs)`` is
    captured by torch.compile with ``dry_run=True`` and each FX graph's support is checked by
    the lowering. One dict per graph: ``device`` (the one checked, None when none could be),
    ``whole`` (every node runs on it), ``partitions`` (the FX node names of each QNN partition
    of a partly supported graph), ``param_shares`` (each partition's share of the graph's
    parameter elements), ``partition_eager_us`` (each partition's median eager time on the
    host), ``call_cost_us`` (the QNN call cost the islands were weighed against, None when the
    ``partition_cost`` rule is off), ``eager`` (FX node -> why it stays on the CPU) and
    ``reasons`` (why a graph falls back whole). The model runs eagerly once."""
    import warnings

    # torch, here and below, on first use only: importing the package must not import it.
    import torch

    from .compiling.qnn_callable import QnnCallable, compile_graph

    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    settings = parse_options({**(options or {}), "dry_run": True})
    made: list = []

    def capture(gm, inputs):
        c = compile_graph(gm, inputs, settings)
        made.append(c)
        return c

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(model, backend=capture)(*example_inputs)
    out = []
    for c in made:
        if not isinstance(c, QnnCallable):
            continue
        o = c.outcome
        plan = o.get("plan")
        report = plan.report() if plan is not None else {"partitions": [], "eager": {}, "total_nodes": None}
        out.append(
            {
                "device": o.get("device"),
                "whole": bool(o.get("whole")),
                "partitions": [p["nodes"] for p in report["partitions"]],
                "param_shares": [p["param_share"] for p in report["partitions"]],
                "partition_eager_us": [p["eager_us"] for p in report["partitions"]],
                "call_cost_us": report.get("call_cost_us"),
                "eager": report["eager"],
                "reasons": list(o.get("reasons", [])),
            }
        )
    return out
