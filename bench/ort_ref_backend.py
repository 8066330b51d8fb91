"""Reference torch.compile backend for the benchmark: FX graph -> ONNX -> ONNX Runtime's QNN EP.

This is the approach of the `qnnx-backend` 0.4 package, written from scratch for the benchmark
(it is not that package's code): the FX graph from dynamo is exported to ONNX with parameters
frozen as initializers, and an ONNX Runtime session with the QNN execution provider (the
`onnxruntime-qnn` 2.7.0 plugin, HTP backend, QNN 2.51) runs it, configured like ours: SoC 60,
HTP v73, fp16 precision, no CPU fallback. With a cache folder, sessions are created with ONNX
Runtime's EPContext cache ("ep.context_enable") and a later process loads the `_ctx.onnx` model
for the same FX-level fingerprint (graph code, weights, input signature, options) without
exporting again.

Only the benchmark's reference runner imports this module, in its own process and venv
(bench/.venv-ort); qnnx code never loads ONNX Runtime.
"""

from __future__ import annotations

import collections
import hashlib
import io
import os
import time
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import onnxruntime as ort
import torch
from ort_session import EP_NAME, TIMES, provider_options, session  # noqa: F401  (re-exported)
from ort_session import ep_devices as _ep_devices  # noqa: F401  (bench scripts call it)

#: Counters: exports, sessions, cache_hits, fallbacks.
STATS: collections.Counter = collections.Counter()


def _static(a: Any) -> bool:
    """Parameters and buffers, which dynamo passes to the backend as (static) graph inputs."""
    if isinstance(a, torch.nn.Parameter):
        return True
    return isinstance(a, torch.Tensor) and getattr(a, "_dynamo_static_input_type", None) is not None


class _WithConstants(torch.nn.Module):
    """Calls the FX graph with the static inputs bound as buffers (exported as initializers)."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], runtime_idx: Sequence[int]):
        super().__init__()
        self.gm = gm
        self.slots: list = []  # ("arg", k) | ("buf", name) | ("val", value)
        k = 0
        for i, a in enumerate(example_inputs):
            if i in runtime_idx:
                self.slots.append(("arg", k))
                k += 1
            elif isinstance(a, torch.Tensor):
                name = f"const_{i}"
                self.register_buffer(name, a.detach(), persistent=False)
                self.slots.append(("buf", name))
            else:
                self.slots.append(("val", a))

    def forward(self, *xs):
        full = []
        for kind, v in self.slots:
            full.append(xs[v] if kind == "arg" else getattr(self, v) if kind == "buf" else v)
        return self.gm(*full)


def _export(module: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> bytes:
    """TorchScript exporter (opset 17, like ours), then the dynamo exporter."""
    names = [f"in{i}" for i in range(len(inputs))]
    errors = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            buf = io.BytesIO()
            torch.onnx.export(module, tuple(inputs), buf, dynamo=False, opset_version=17,
                              input_names=names, do_constant_folding=True)
            return buf.getvalue()
        except (RuntimeError, TypeError, ValueError, AttributeError) as e:
            errors.append(f"torchscript: {e}")
        try:
            prog = torch.onnx.export(module, tuple(inputs), dynamo=True, input_names=names, verbose=False)
            return prog.model_proto.SerializeToString()
        except (RuntimeError, TypeError, ValueError, AttributeError, ImportError) as e:
            errors.append(f"dynamo: {e}")
    raise RuntimeError("ONNX export failed: " + " | ".join(e.splitlines()[0] for e in errors))


def _fingerprint(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], runtime_idx: Sequence[int]) -> str:
    h = hashlib.sha256()
    h.update(b"ort-ref-1|" + ort.__version__.encode() + b"|" + torch.__version__.encode())
    h.update(repr(sorted(provider_options("").items())).encode())
    h.update(gm.code.encode())
    for i, a in enumerate(example_inputs):
        if not isinstance(a, torch.Tensor):
            h.update(repr((i, a)).encode())
            continue
        h.update(repr((i, i in runtime_idx, a.dtype, tuple(a.shape))).encode())
        if i not in runtime_idx:
            t = a.detach().contiguous()
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


class OrtCallable:
    """What dynamo calls: builds the session at the first call, then runs it."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: dict):
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.options = options
        self.runtime_idx = [i for i, a in enumerate(example_inputs) if not _static(a)]
        out = next(n for n in gm.graph.nodes if n.op == "output")
        self.tuple_out = isinstance(out.args[0], (tuple, list))
        self.sess = None
        self.input_names: list = []
        self.fallback = False

    def _build(self, args: Sequence[Any]) -> None:
        cache_dir = self.options.get("cache_dir")
        ctx_path = None
        if cache_dir:
            t = time.perf_counter()
            key = _fingerprint(self.gm, args, self.runtime_idx)
            TIMES["fingerprint_ms"] = (time.perf_counter() - t) * 1e3
            ctx_path = str(Path(cache_dir) / f"{key}_ctx.onnx")
            if os.path.exists(ctx_path):
                t = time.perf_counter()
                self.sess = session(ctx_path, htp_lib=self.options.get("htp_lib"))
                TIMES["session_ms"] = (time.perf_counter() - t) * 1e3
                STATS["cache_hits"] += 1
                self.input_names = [i.name for i in self.sess.get_inputs()]
                return
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
        runtime = [args[i] for i in self.runtime_idx]
        t = time.perf_counter()
        onnx_bytes = _export(_WithConstants(self.gm, args, self.runtime_idx), runtime)
        TIMES["export_ms"] = (time.perf_counter() - t) * 1e3
        STATS["exports"] += 1
        t = time.perf_counter()
        self.sess = session(onnx_bytes, ctx_path=ctx_path, htp_lib=self.options.get("htp_lib"))
        TIMES["session_ms"] = (time.perf_counter() - t) * 1e3
        STATS["sessions"] += 1
        self.input_names = [i.name for i in self.sess.get_inputs()]

    def __call__(self, *args):
        first = self.sess is None and not self.fallback
        if first:
            try:
                self._build(args)
            except (RuntimeError, ort.capi.onnxruntime_pybind11_state.Fail) as e:
                # qnnx-backend 0.4 behaviour: silently run the graph eagerly.
                if self.options.get("strict"):
                    raise
                warnings.warn(f"ort reference: running eagerly: {e}", RuntimeWarning, stacklevel=2)
                STATS["fallbacks"] += 1
                self.fallback = True
        if self.fallback:
            return self.gm(*args)
        feeds = {}
        for name, i in zip(self.input_names, self.runtime_idx):
            feeds[name] = args[i].detach().contiguous().numpy()
        if first:
            t = time.perf_counter()
        outs = [torch.from_numpy(np.asarray(o)) for o in self.sess.run(None, feeds)]
        if first:
            TIMES["first_run_ms"] = (time.perf_counter() - t) * 1e3
        return tuple(outs) if self.tuple_out else outs[0]


#: perf_counter() when dynamo first handed a graph to the backend.
EVENTS: dict = {}


def ort_qnn_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Optional[dict] = None):
    EVENTS.setdefault("backend_enter", time.perf_counter())
    return OrtCallable(gm, example_inputs, dict(options or {}))


def register(name: str = "ort_qnn_ref") -> str:
    from torch._dynamo.backends.registry import register_backend

    try:
        register_backend(compiler_fn=ort_qnn_backend, name=name)
    except AssertionError:
        pass
    return name
