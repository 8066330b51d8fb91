"""The run-time side of a compiled graph: per-call input checks, int64 narrowing, output
allocation, torch dtypes by qnnx's names for them, and the inference-only autograd guard.

Everything here runs on every call (or is worked out once so that the call does not have to):
nothing decides whether or how a graph is compiled.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from ..exceptions import InputError, QnnxError

# torch's dtype for each element type, by qnnx's names for them (_native.dtype_names()).
TORCH_DTYPES = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f64": torch.float64,
    "i8": torch.int8,
    "u8": torch.uint8,
    "i16": torch.int16,
    "u16": getattr(torch, "uint16", None),
    "i32": torch.int32,
    "u32": getattr(torch, "uint32", None),
    "i64": torch.int64,
    "u64": getattr(torch, "uint64", None),
    "bool": torch.bool,
    # 4-bit types are only constant weights inside a graph, never a graph's input or output.
    "i4": None,
    "u4": None,
}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a tensor type name: a quantized tensor (``qu8``) is held as its
    integers (``u8``)."""
    d = TORCH_DTYPES.get(name[1:] if name.startswith("q") else name)
    if d is None:
        raise QnnxError(f"tensor dtype {name} has no torch equivalent in this torch version")
    return d


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class CompiledGraph:
    """One QNN graph for one input signature.

    Everything a call needs that does not depend on the call's tensors (torch dtypes, element
    counts, byte sizes, output shapes) is worked out once here: the per-call path only checks
    the inputs, allocates the outputs and hands both to QNN.
    """

    def __init__(
        self, native: Any, device: str, out_meta: Sequence[Optional[torch.Size]], check_nan: bool = True
    ):
        self.native = native
        self.check_nan = check_nan
        self.device = device
        self.inputs = native.inputs
        self.outputs = native.outputs
        self.out_meta = list(out_meta)
        # (name, model dtype, graph dtype, element count, graph shape, bytes per element)
        self._in_plan = []
        for name, gdtype, gshape, hdtype in self.inputs:
            g = torch_dtype(gdtype)
            self._in_plan.append((name, torch_dtype(hdtype), g, _numel(gshape), tuple(gshape), g.itemsize))
        # (allocation shape, graph dtype, byte size, model dtype or None, final shape or None):
        # an output whose dtype needs no conversion is allocated directly in its final shape
        # (same element count, contiguous: the same bytes).
        self._out_plan = []
        for i, (_, gdtype, shape, hdtype) in enumerate(self.outputs):
            g, h = torch_dtype(gdtype), torch_dtype(hdtype)
            meta = self.out_meta[i] if i < len(self.out_meta) else None
            n = _numel(shape)
            final = tuple(meta) if meta is not None and _numel(meta) == n else None
            if g == h:
                alloc = final if final is not None else tuple(shape)
                self._out_plan.append((alloc, g, n * g.itemsize, None, None))
            else:
                self._out_plan.append((tuple(shape), g, n * g.itemsize, h, final))

    def __call__(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        ins, outs, keep = self._buffers(tensors)
        self.native.run(ins, [(o.data_ptr(), p[2]) for o, p in zip(outs, self._out_plan)], self.check_nan)
        del keep
        return self._finish(outs)

    def profiled(self, tensors: Sequence[torch.Tensor], level: str) -> tuple[list[torch.Tensor], str, str]:
        """One call recorded by QNN's profiler: the outputs, and the profile and Chrome trace as
        JSON text (see ``qnnx_backend.profile``)."""
        ins, outs, keep = self._buffers(tensors)
        profile, trace = self.native.run_profiled(
            ins, [(o.data_ptr(), p[2]) for o, p in zip(outs, self._out_plan)], level, self.check_nan
        )
        del keep
        return self._finish(outs), profile, trace

    def _buffers(self, tensors: Sequence[torch.Tensor]) -> tuple[list, list[torch.Tensor], list]:
        """(input address and size pairs, output tensors, copies to keep alive during the call)."""
        # Bad inputs are InputError, as on the numpy path (deployment/session.py's _Graph).
        keep = []  # converted or made-contiguous copies stay alive until QNN has run
        ins = []
        for t, (name, want, g, numel, gshape, size) in zip(tensors, self._in_plan):
            if not isinstance(t, torch.Tensor):
                raise InputError(f"input {name}: expected a tensor, got {type(t).__name__}")
            if not t.is_cpu:
                raise InputError(f"input {name} is on {t.device}; QNN graphs take CPU tensors")
            if t.dtype != want:
                raise InputError(f"input {name} is {t.dtype}; the compiled graph takes {want}")
            if t.numel() != numel:
                raise InputError(
                    f"input {name} has shape {tuple(t.shape)}; the compiled graph takes {gshape}"
                )
            if g != want:
                t = t.detach()
                if t.dtype == torch.int64 and g == torch.int32 and numel:
                    lo, hi = (int(v) for v in torch.aminmax(t))
                    if lo < -(2**31) or hi >= 2**31:
                        raise InputError(
                            f"input {name}: int64 values in [{lo}, {hi}] do not fit the int32 the HTP computes in"
                        )
                t = t.to(g)
                keep.append(t)
            if not t.is_contiguous():
                t = t.contiguous()
                keep.append(t)
            ins.append((t.data_ptr(), numel * size))
        outs = [torch.empty(alloc, dtype=g) for (alloc, g, _, _, _) in self._out_plan]
        return ins, outs, keep

    def _finish(self, outs: list[torch.Tensor]) -> list[torch.Tensor]:
        for i, (_, _, _, h, final) in enumerate(self._out_plan):
            if h is not None:
                o = outs[i].to(h)
                outs[i] = o.reshape(final) if final is not None else o
        return outs


def out_meta(gm: torch.fx.GraphModule) -> list[Optional[torch.Size]]:
    """Static output shapes from dynamo's fake-tensor metadata (None where unknown/symbolic)."""
    out = []
    for node in gm.graph.nodes:
        if node.op != "output":
            continue
        args = node.args[0]
        args = args if isinstance(args, (tuple, list)) else [args]
        for a in args:
            v = getattr(a, "meta", {}).get("example_value") if isinstance(a, torch.fx.Node) else None
            try:
                out.append(torch.Size([int(d) for d in v.shape]) if isinstance(v, torch.Tensor) else None)
            except (TypeError, ValueError, RuntimeError):
                out.append(None)
    return out


def returns_sequence(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph returns a tuple or list (else one tensor)."""
    for node in gm.graph.nodes:
        if node.op == "output":
            return isinstance(node.args[0], (tuple, list))
    return True


class _InferenceOnly(torch.autograd.Function):
    """Attaches outputs to the autograd graph only to fail clearly on backward."""

    @staticmethod
    def forward(ctx, anchor, *outs):  # noqa: ARG004
        return tuple(o.clone() for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        raise QnnxError(
            "backward through a graph compiled by the qnn backend is not supported: qnnx_backend "
            "is inference-only. Use model.eval() and run under torch.inference_mode() or torch.no_grad()."
        )


def guard_autograd(outs: list[torch.Tensor], tensors: Sequence[Any]) -> list[torch.Tensor]:
    """``outs`` unchanged, unless grad mode is on and one of ``tensors`` (the call's arguments,
    parameters and buffers) requires grad: then attached to autograd through a node whose
    backward raises a clear QnnxError instead of silently returning no gradient."""
    if not torch.is_grad_enabled():
        return outs
    anchor = next((a for a in tensors if isinstance(a, torch.Tensor) and a.requires_grad), None)
    if anchor is None:
        return outs
    # Python numbers among the outputs (compiling.scalars) stay as they are.
    at = [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor)]
    guarded = list(outs)
    for i, o in zip(at, _InferenceOnly.apply(anchor, *(outs[i] for i in at))):
        guarded[i] = o
    return guarded
