"""``qnnx_backend.export``: a PyTorch model compiled once and written as a saved model (one file:
context binary, manifest, I/O binding), which ``qnnx_backend.load`` and
``qnnx_backend.runtime.InferenceSession`` run without torch.compile, dynamo, ONNX or lowering."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from typing import Any, Mapping, Optional, Sequence, Union

import torch

from .. import _native
from ..compiling import to_onnx
from ..compiling.qnn_callable import QnnCallable
from ..exceptions import LoweringError
from ..settings import parse_options

# Options that describe run-time behaviour of torch.compile, not the compiled binary; the
# calibration data are recorded by their digest instead.
_IGNORED = {"strict", "cache", "cache_dir", "dry_run", "check_nan", "log_level", "calibration"}


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
    ``auto``, or ``gpu``), and ``quantize`` with ``calibration`` (samples of the model's
    arguments, as for torch.compile) and the other quantization options: the way to a saved model
    for a v68 board (``soc_model="QCS6490"``), which runs quantized graphs only. Options about
    run-time behaviour (``strict``, ``cache``, ...) do not apply. ``kv_cache`` graphs (which replay cache writes on the host) are refused, as is a
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
    calibration_digest = None
    if s.quantize is not None:
        if device != "npu":
            raise ValueError(f"quantize={s.quantize!r} compiles for the HTP: use device='npu'")
        native, calibration_digest = _quantized(model, inputs, s, (names, outputs))
    else:
        onnx = to_onnx.onnx_bytes(model, inputs, s, names=names, output_names=outputs)
        if device != "npu" and (s.soc_model is not None or s.htp_arch is not None):
            raise ValueError(f"soc_model and htp_arch configure the HTP (device='npu'), not device={device!r}")
        native = _native.compile(onnx, s.spec(device, cached=False))
    if len(native.outputs) != n_out:
        raise LoweringError(f"the model returns {n_out} tensors but its ONNX export has {len(native.outputs)} outputs")
    given = dict(options or {})
    recorded = {k: repr(v) for k, v in sorted(given.items()) if k not in _IGNORED}
    recorded["device"] = device
    if calibration_digest is not None:
        recorded["calibration"] = calibration_digest
    extra = {"outputs": json.dumps(kind), "torch": torch.__version__}
    return json.loads(_native.save(native, os.fspath(path), recorded, extra))


def _quantized(
    model: torch.nn.Module, inputs: tuple, s: Any, io_names: tuple[list[str], list[str]]
) -> tuple[Any, Optional[str]]:
    """The model quantized and compiled by the backend's own path (the one torch.compile takes
    with ``quantize``): the graph dynamo captures, calibrated on ``s.calibration`` mapped onto
    its inputs, PT2E-quantized and compiled for the HTP. One graph (``fullgraph``): a saved
    model has no eager part to run a graph break. Returns (the compiled graph, the calibration
    data's digest)."""

    settings = dataclasses.replace(s, device="npu", strict=True, cache=False)
    made: list = []
    calls: list = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        # Built here, while dynamo calls the backend: calibration maps samples through the
        # compiled frame's signature, which QnnCallable reads now (quantization.calibrate.Frame).
        made.append(QnnCallable(gm, example_inputs, settings, may_partition=False))

        def record(*args: Any) -> Any:
            calls.append(args)
            return gm(*args)

        return record

    try:
        with torch.no_grad():
            torch.compile(model, backend=capture, fullgraph=True, dynamic=False)(*inputs)
    except torch._dynamo.exc.Unsupported as e:
        raise LoweringError(
            f"the model does not capture as one graph ({str(e).splitlines()[0]}); a saved model has no eager "
            "part to run a graph break in: remove the break (torch._dynamo.explain(model)(*inputs) names it)"
        ) from None
    finally:
        torch._dynamo.reset()
    if len(made) != 1 or len(calls) != 1:
        raise LoweringError(f"the model captured as {len(made)} graphs; a saved model holds one")
    callable_ = made[0]
    callable_.io_names = io_names
    graph = callable_.compile(calls[0])
    if graph is None:
        raise LoweringError("the quantized graph did not compile (the log says why)")
    return graph.native, callable_.calibration_digest
