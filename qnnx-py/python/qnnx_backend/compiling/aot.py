"""torch's AOT path (``torch.compile(fn).aot_compile(...)``, ``torch.compiler.load_compiled_function``):
a ``QnnCallable`` serializes as the graph compiled for the example inputs, stored as a saved
model; ``AotGraph`` loads it with no export or compile."""

from __future__ import annotations

import json
from typing import Any

import torch

from .. import _native
from ..exceptions import LoweringError
from . import call
from .call import CompiledGraph
from .stats import STATS

try:
    # torch's AOT path (torch.compile(fn).aot_compile(...), torch.compiler.load_compiled_function)
    # takes backends whose result implements this ABC; experimental in torch 2.13 to 2.15.
    from torch._dynamo.aot_compile_types import SerializableCallable as _Serializable
except ImportError:  # older torch: no AOT path
    _Serializable = object  # type: ignore[assignment,misc]

# Prefix of what serialize_compile_artifacts returns: then a u64 length, a JSON header and the
# bytes of a saved model (the file qnnx_backend.export writes).
_AOT_MAGIC = b"qnnx-aot-1\0"


class AotArtifacts(_Serializable):
    """``QnnCallable``'s side of torch's AOT path (the ``SerializableCallable`` ABC)."""


    @classmethod
    def serialize_compile_artifacts(cls, fn: Any) -> bytes:
        """The graph compiled for the example call (compiled now if it has not run yet) as a
        saved model, with what a call needs around it. Raises what compiling raises, and
        LoweringError for graphs that cannot be saved (eager fallback, KV-cache replay)."""
        if fn.kv_plan is not None:
            raise LoweringError("kv_cache graphs replay their cache writes on the host; the AOT path cannot save them yet")
        args: list[Any] = []
        for i in range(len(fn.example) + len(fn.example_statics)):
            if i in fn.example_statics:
                args.append(fn.example_statics[i])
                continue
            shape, value = fn.example[i]
            if shape == "const":
                args.append(value)
            else:
                # Export traces the graph, whose values do not steer it (dynamo graphs have no
                # data-dependent control flow): zeros of the example's shape and dtype do.
                args.append(torch.zeros(shape, dtype=value))
        sig = fn.signature(args)
        if sig not in fn.graphs:
            fn.graphs[sig] = fn.compile(args)
        graph = fn.graphs[sig]
        if graph is None:
            raise LoweringError("the graph cannot run on QNN (it falls back to eager PyTorch), so there is no binary to save")
        if not isinstance(graph, CompiledGraph):
            raise LoweringError(
                "the graph is split into QNN partitions and eager nodes; the AOT path saves whole QNN graphs only"
            )
        header = {
            # The key keeps its first name: artifacts written before the rename load.
            "runtime": fn.per_call,
            "returns_tuple": fn.returns_tuple,
            "out_meta": [None if m is None else list(m) for m in fn.out_meta],
            "device": graph.device,
            "check_nan": fn.settings.check_nan,
        }
        saved = _native.saved_bytes(
            graph.native,
            {k: repr(v) for k, v in sorted(fn.settings.compile_settings().items())},
            {"outputs": json.dumps("tuple" if fn.returns_tuple else "tensor"), "torch": torch.__version__},
        )
        text = json.dumps(header).encode()
        return _AOT_MAGIC + len(text).to_bytes(8, "little") + text + saved

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "AotGraph":
        return AotGraph(data)


class AotGraph:
    """A graph of torch's AOT path, loaded from what ``QnnCallable.serialize_compile_artifacts``
    wrote: the saved model's binary is loaded (no export, lowering or finalize) and called with
    dynamo's arguments (parameters are frozen in the graph; only the per-call tensors are
    passed to QNN)."""

    def __init__(self, data: bytes):
        if not data.startswith(_AOT_MAGIC):
            raise LoweringError("not a qnnx AOT artifact (it does not start with qnnx-aot-1)")
        n = int.from_bytes(data[len(_AOT_MAGIC) : len(_AOT_MAGIC) + 8], "little")
        start = len(_AOT_MAGIC) + 8
        header = json.loads(data[start : start + n])
        graphs, _ = _native.load_saved_bytes("the AOT-compiled function's qnnx graph", data[start + n :])
        out_meta = [None if m is None else torch.Size(m) for m in header["out_meta"]]
        self.graph = CompiledGraph(graphs[0], header["device"], out_meta, header["check_nan"])
        self.per_call = list(header["runtime"])
        self.returns_tuple = bool(header["returns_tuple"])
        STATS["aot_loads"] += 1

    def __call__(self, *args):
        outs = self.graph([args[i] for i in self.per_call if isinstance(args[i], torch.Tensor)])
        outs = call.guard_autograd(outs, args)
        return tuple(outs) if self.returns_tuple else outs[0]
