"""Python numbers a graph returns beside its tensors, computed on the host.

dynamo returns a Python int (a SymInt) from a graph when the model updates an int it keeps on an
object: transformers' sliding-window cache layers (Gemma 2/3) keep ``cumulative_length_int`` and
bump it at every step, so the decode graph takes that int as an input and returns it plus the
step's length. ONNX graphs return tensors only (both exporters refuse such an output), and an int
input that changes at every step would make every step a new signature to compile. Such outputs
are taken out of the graph QNN runs and computed on the host at each call by the small FX graph
that produces them (a few integer additions); per-call ints that only they read leave the
compiled signature.
"""

from __future__ import annotations

import copy
from typing import Any, Optional, Sequence

import torch

from ..exceptions import LoweringError


_NUMBERS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


def _is_number(a: Any) -> bool:
    """An output that is a Python number: a literal, or a node dynamo traced to one. Nodes with
    no traced value (the write-back outputs compiling.kvcache adds) are tensors."""
    if isinstance(a, torch.fx.Node):
        return isinstance(a.meta.get("example_value"), _NUMBERS)
    return isinstance(a, _NUMBERS)


class HostScalars:
    """The non-tensor outputs of a graph (``positions`` in its output tuple) and the FX graph
    that computes them from the call's arguments; refused (LoweringError) when that graph would
    compute tensors, which would be running the model on the host."""

    def __init__(self, gm: torch.fx.GraphModule, positions: Sequence[int]):
        self.positions = list(positions)
        graph = copy.deepcopy(gm.graph)
        out = _output_of(graph)
        values = out.args[0]
        out.args = (tuple(values[i] for i in self.positions),)
        graph.eliminate_dead_code()
        for n in graph.nodes:
            if n.op in ("call_function", "call_method", "call_module") and isinstance(
                n.meta.get("example_value"), torch.Tensor
            ):
                raise LoweringError(
                    f"the graph returns Python numbers computed from tensor values (node {n.name}); "
                    "only numbers computed from sizes and Python ints can be returned beside a QNN graph's tensors"
                )
        self.module = torch.fx.GraphModule(gm, graph)

    def __call__(self, args: Sequence[Any]) -> tuple:
        return tuple(self.module(*args))

    def insert(self, outs: Sequence[Any], values: Sequence[Any]) -> list:
        """``outs`` (the tensors) with ``values`` put back at their positions."""
        result = list(outs)
        for p, v in zip(self.positions, values):
            result.insert(p, v)
        return result


def _output_of(graph: torch.fx.Graph) -> torch.fx.Node:
    return next(n for n in graph.nodes if n.op == "output")


def split(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, Optional[HostScalars]]:
    """``gm`` without its non-tensor outputs, and what computes them (None when it has none)."""
    values = _output_of(gm.graph).args[0]
    if not isinstance(values, (tuple, list)):
        return gm, None
    positions = [i for i, a in enumerate(values) if _is_number(a)]
    if not positions:
        return gm, None
    host = HostScalars(gm, positions)
    graph = copy.deepcopy(gm.graph)
    out = _output_of(graph)
    out.args = (tuple(a for i, a in enumerate(out.args[0]) if i not in host.positions),)
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph), host


def unread(gm: torch.fx.GraphModule) -> set[int]:
    """Indices of ``gm``'s placeholders no node reads."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {i for i, p in enumerate(placeholders) if not p.users}
