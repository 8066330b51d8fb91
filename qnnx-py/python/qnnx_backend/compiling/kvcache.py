"""In-place updates of graph inputs (KV caches) made functional for QNN, and replayed on the host.

A decoder step compiled by dynamo with a Hugging Face ``StaticCache`` mutates its inputs: each
layer runs ``keys.index_copy_(2, cache_position, k)`` and ``values.index_copy_(...)`` on the
caller's cache tensors, and ``cumulative_length.add_(n)`` on the cache's position counter. A QNN
graph cannot write into its inputs, and exporting such a graph to ONNX silently drops the writes.

So, for ``kv_cache=True``, the FX graph is rewritten before export:

* every in-place op on a graph input (or on an alias of one, such as ``x.to("cpu")``) becomes
  its functional form, and later reads of that input inside the graph see the new value, so
  attention reads the cache with this step's keys already in place, at the exact positions;
* the tensors each in-place op needs (this step's keys and values, and the positions) become
  extra graph outputs, and after the QNN graph has run the same in-place op is replayed on the
  caller's tensor with them. The host writes only the new tokens' rows into the cache: the whole
  cache is never copied out of QNN or back per token;
* tensors created inside the graph and then updated in place (``StaticCache``'s lazily created
  cache on the first call) are simply computed by the graph and returned.

``index_copy`` itself is written with ops every backend has (a one-hot matmul and a select): it
is exact, since each output row is one input row times 1 plus zeros.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Optional, Sequence

import torch
import torch.fx

from ..exceptions import LoweringError

# In-place methods we know how to make functional: name -> functional torch callable taking the
# current value first. Anything else that writes into a graph input is refused.
_FUNCTIONAL = {
    "add_": torch.add,
    "sub_": torch.sub,
    "mul_": torch.mul,
    "div_": torch.div,
    "copy_": None,  # special-cased: broadcast and cast to the destination
    "fill_": None,
    "zero_": None,
    "index_copy_": None,
}

# Methods returning their input itself (for a CPU tensor of that dtype): writes through them reach
# the input.
_ALIASING_METHODS = {"to", "detach", "contiguous", "cpu"}


def index_copy(buf: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``buf.index_copy(dim, index, src)`` from MatMul, Equal and Where, which QNN backends run
    (ONNX's ScatterND is not in every backend's op set). Row ``j`` of ``src`` lands at
    ``index[j]``: ``onehot[i, j] = (i == index[j])``, and ``onehot @ src`` picks it exactly."""
    dim = dim % buf.dim()
    n = buf.shape[dim]
    onehot = (torch.arange(n, dtype=index.dtype)[:, None] == index.reshape(1, -1)).to(buf.dtype)
    hit = onehot.sum(dim=1) > 0
    if dim == buf.dim() - 2:
        # [.., L, X] -> [.., n, X] without transposes: the KV-cache layout [B, H, S, D], dim 2.
        return torch.where(hit.reshape(n, 1), torch.matmul(onehot, src.to(buf.dtype)), buf)
    moved = torch.matmul(src.to(buf.dtype).movedim(dim, -1), onehot.transpose(0, 1))
    return torch.where(hit, moved, buf.movedim(dim, -1)).movedim(-1, dim)


def _copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return src.to(dst.dtype).expand_as(dst)


def _fill(dst: torch.Tensor, value: Any) -> torch.Tensor:
    return torch.full_like(dst, value) if not isinstance(value, torch.Tensor) else _copy(dst, value)


@dataclasses.dataclass
class WriteBack:
    """Replays one in-place op on the caller's tensor ``inputs[input_index]`` after the graph ran:
    ``inputs[input_index].<method>(*args)`` where an int in ``tensor_args`` positions is replaced
    by the QNN output with that index (counted among the extra outputs)."""

    input_index: int
    method: str
    args: list
    tensor_args: dict  # arg position -> extra output index
    kwargs: dict

    def apply(self, inputs: Sequence[Any], extra: Sequence[torch.Tensor]) -> None:
        args = list(self.args)
        for pos, k in self.tensor_args.items():
            args[pos] = extra[k]
        getattr(inputs[self.input_index], self.method)(*args, **self.kwargs)


@dataclasses.dataclass
class MutationPlan:
    """How the outputs of the rewritten graph map back to the original graph's outputs."""

    n_outputs: int
    """Outputs of the original graph."""
    alias_outputs: dict
    """Original output position -> input index: outputs that are a mutated input itself are the
    caller's tensor (after the write-back), not a graph output."""
    n_extra: int
    """Extra graph outputs (after the kept original outputs) holding write-back arguments."""
    writebacks: list

    def finish(self, inputs: Sequence[Any], outs: Sequence[torch.Tensor]) -> list:
        """The original graph's outputs, after applying the write-backs to ``inputs``."""
        kept = len(outs) - self.n_extra
        extra = outs[kept:]
        for wb in self.writebacks:
            wb.apply(inputs, extra)
        result = []
        it = iter(outs[:kept])
        for i in range(self.n_outputs):
            j = self.alias_outputs.get(i)
            result.append(inputs[j] if j is not None else next(it))
        return result


def _example(node: Any) -> Optional[torch.Tensor]:
    v = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _is_alias_of(node: torch.fx.Node, src: torch.fx.Node) -> bool:
    """``node`` returns ``src`` itself (no copy), so writes through it reach ``src``."""
    if node.op != "call_method" or node.target not in _ALIASING_METHODS or node.args[0] is not src:
        return False
    if node.target in ("detach", "contiguous", "cpu"):
        return True
    a, b = _example(node), _example(src)
    # .to() returns self when neither dtype nor device changes.
    return a is not None and b is not None and a.dtype == b.dtype and a.device == b.device


# In-place by name but not writes of tensor data.
_NOT_DATA_WRITES = {"requires_grad_", "share_memory_"}


def _mutated_target(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The tensor an in-place node writes into, or None for a pure node."""
    if node.op == "call_method" and isinstance(node.target, str) and node.target.endswith("_"):
        if not node.target.endswith("__") and node.target not in _NOT_DATA_WRITES:
            return node.args[0]
    if node.op == "call_function":
        if node.target is operator.setitem:
            return node.args[0]
        name = getattr(node.target, "__name__", "")
        if name.endswith("_") and not name.endswith("__") and node.args and isinstance(node.args[0], torch.fx.Node):
            overload = getattr(node.target, "_schema", None)
            if overload is None or overload.is_mutable:
                return node.args[0]
    return None


def mutated_inputs(gm: torch.fx.GraphModule) -> list[str]:
    """Names of the graph inputs some node writes into (directly or through an alias)."""
    roots: dict[torch.fx.Node, torch.fx.Node] = {}
    names = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            roots[node] = node
            continue
        if node.op == "call_method" and node.args and isinstance(node.args[0], torch.fx.Node):
            src = node.args[0]
            if src in roots and _is_alias_of(node, src):
                roots[node] = roots[src]
        target = _mutated_target(node)
        if isinstance(target, torch.fx.Node) and target in roots and roots[target].name not in names:
            names.append(roots[target].name)
    return names


def functionalize(gm: torch.fx.GraphModule, static: Sequence[bool]) -> tuple[torch.fx.GraphModule, MutationPlan]:
    """A copy of ``gm`` without in-place ops, and the plan that replays the input updates on the
    host. ``static[i]`` marks inputs frozen into the graph (weights): writing into one is refused,
    since the graph holds a copy of it."""
    graph = torch.fx.Graph()
    env: dict = {}  # old node -> new node
    roots: dict = {}  # old node -> the old node it aliases (itself for non-aliases)
    current: dict = {}  # old root -> new node holding its latest value
    view_of: dict = {}  # old node that is a view (not an alias) -> old root it views
    stale: set = set()  # old views taken before their root was written
    inputs: dict = {}  # old placeholder -> input index
    extra: list = []  # new nodes returned after the original outputs
    extra_index: dict = {}
    writebacks: list[WriteBack] = []
    mutated: set = set()

    def lookup(n):
        if not isinstance(n, torch.fx.Node):
            return n
        if n in stale:
            raise LoweringError(
                f"kv_cache: node {n.name} reads a view of input {view_of[n].name} taken before that input "
                "was updated in place; such graphs cannot be made functional"
            )
        r = roots.get(n)
        return current[r] if r in current else env[n]

    def map_args(a):
        return torch.fx.node.map_arg(a, lookup)

    def as_extra(n):
        if n not in extra_index:
            extra_index[n] = len(extra)
            extra.append(n)
        return extra_index[n]

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node)
            roots[node] = node
            inputs[node] = len(inputs)
            continue
        if node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
            kept, alias_outputs = [], {}
            for i, o in enumerate(outs):
                r = roots.get(o) if isinstance(o, torch.fx.Node) else None
                if r is not None and r in mutated and r.op == "placeholder":
                    alias_outputs[i] = inputs[r]
                else:
                    kept.append(lookup(o))
            graph.output(tuple(kept) + tuple(extra))
            plan = MutationPlan(len(outs), alias_outputs, len(extra), writebacks)
            new = torch.fx.GraphModule(gm, graph)
            return new, plan

        target = _mutated_target(node)
        if target is None:
            if node.op == "call_method" and isinstance(node.args[0], torch.fx.Node) and _is_alias_of(node, node.args[0]):
                if node.args[0] in roots:
                    roots[node] = roots[node.args[0]]
            new = graph.node_copy(node, lookup)
            env[node] = new
            roots.setdefault(node, node)
            ex = _example(node)
            if ex is not None and ex._is_view():
                for a in node.all_input_nodes:
                    r = view_of.get(a, roots.get(a))
                    if r is not None and r is not node:
                        view_of[node] = r
                        break
            continue

        # An in-place node: `target.<op>_(...)`.
        r = roots.get(target)
        method = node.target if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))
        if r is None or node.op != "call_method" or method not in _FUNCTIONAL:
            what = view_of.get(target, r)
            raise LoweringError(
                f"kv_cache: in-place {method} on {getattr(what, 'name', target)} (node {node.name}) is not "
                f"supported; supported in-place ops on inputs: {', '.join(sorted(_FUNCTIONAL))}"
            )
        if r.op == "placeholder" and static[inputs[r]]:
            raise LoweringError(
                f"kv_cache: node {node.name} writes into {r.name}, a parameter or buffer of the model; "
                "compiled graphs hold a copy of those"
            )
        if node.kwargs and any(isinstance(v, torch.fx.Node) for v in node.kwargs.values()):
            raise LoweringError(f"kv_cache: in-place {method} with tensor keyword arguments (node {node.name})")
        cur = lookup(target)
        args = [map_args(a) for a in node.args[1:]]
        kwargs = {k: map_args(v) for k, v in node.kwargs.items()}
        if method == "index_copy_":
            new = graph.call_function(index_copy, (cur, *args), kwargs)
        elif method == "copy_":
            new = graph.call_function(_copy, (cur, args[0]))
        elif method == "fill_":
            new = graph.call_function(_fill, (cur, args[0]))
        elif method == "zero_":
            new = graph.call_function(torch.zeros_like, (cur,))
        else:
            new = graph.call_function(_FUNCTIONAL[method], (cur, *args), kwargs)
        # Views taken of the old value no longer show it after this write.
        stale.update(v for v, vr in view_of.items() if vr is r)
        current[r] = new
        env[node] = new
        roots[node] = r
        mutated.add(r)
        if r.op == "placeholder":
            consts, tensor_args = [], {}
            for pos, a in enumerate(args):
                if isinstance(a, torch.fx.Node):
                    tensor_args[pos] = as_extra(a)
                    consts.append(None)
                else:
                    consts.append(a)
            writebacks.append(WriteBack(inputs[r], method, consts, tensor_args, dict(node.kwargs)))
    raise LoweringError("kv_cache: the FX graph has no output node")
