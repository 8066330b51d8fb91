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
  caller's tensor with them (arguments computed from literals only, such as
  ``torch.tensor([-1])``, are kept as values). The host writes only the new tokens' rows into
  the cache: the whole cache is never copied out of QNN or back per token;
* a full sliding-window cache (Gemma 2/3) is updated through a copy: ``new = keys.roll(-1,
  dims=-2); new[:, :, [-1]] = k; keys.copy_(new)``. When what is copied into an input was
  derived from that input's own current value by ``roll``/``clone`` and then written in place
  (``x[key] = v``, ``index_copy_``), those steps are replayed on the caller's tensor instead of
  the copy: the host rolls its cache and writes the new row, and only the row leaves the graph
  (copying the whole window out would also re-quantize it at every step in a quantized graph);
* tensors created inside the graph and then updated in place (``StaticCache``'s lazily created
  cache on the first call, the rolled copy above, masks) are simply computed by the graph;
* parameters and buffers are frozen into the graph when it is compiled, so a write into one is
  accepted only when it overwrites the whole tensor (``copy_``, ``fill_``, ``zero_``) before the
  graph reads it: the frozen copy is then never read, and the write is replayed on the model's
  tensor like an input's (Phi-3's LongRoPE copies its factors into ``inv_freq`` at every call).

In-place writes through a view (``x[:, 0].add_(v)``) are refused by name: the write would have
to reach the viewed tensor. The functional forms (``compiling/writes.py``) use ops every backend
has (a one-hot MatMul and a Where for ``index_copy`` and ``x[key] = v``): they are exact, since
each written row is one source row times 1 plus zeros and every other row is selected as it is.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Optional, Sequence

import torch
import torch.fx

from ..exceptions import LoweringError
from .writes import MutationPlan, Out, WriteBack, index_copy, parse_key, setitem

# In-place methods made functional: name -> functional callable taking the current value first.
# Elementwise ones keep the destination's shape and, for same-dtype operands, its dtype. Anything
# else that writes into a tensor is refused by name.
_FUNCTIONAL = {
    "add_": torch.add,
    "sub_": torch.sub,
    "mul_": torch.mul,
    "div_": torch.div,
    "masked_fill_": torch.masked_fill,
    "clamp_": torch.clamp,
    "clamp_min_": torch.clamp_min,
    "clamp_max_": torch.clamp_max,
    "neg_": torch.neg,
    "copy_": None,  # broadcast and cast to the destination (_copy)
    "fill_": None,
    "zero_": None,
    "index_copy_": None,
    "setitem": None,  # x[key] = v (writes.setitem)
}

# Methods returning their input itself (for a CPU tensor of that dtype): writes through them reach
# the input.
_ALIASING_METHODS = {"to", "detach", "contiguous", "cpu"}

# Ops a copied-in tensor may be derived from the destination's own value by, and still be
# replayed on the host from this step's rows only: the sliding-window cache's
# ``new = keys.roll(-1, dims=-2); new[:, :, [-1]] = k; keys.copy_(new)``.
_CHAIN_STARTS = {"roll", "clone"}
_CHAIN_STEPS = {"setitem", "index_copy_"}


def _copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return src.to(dst.dtype).expand_as(dst)


def _fill(dst: torch.Tensor, value: Any) -> torch.Tensor:
    return torch.full_like(dst, value) if not isinstance(value, torch.Tensor) else _copy(dst, value)


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


def _view_base(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The tensor ``node`` is a view of (a slice, a reshape...), or None when it is not a view."""
    ex = _example(node)
    if ex is None or not ex._is_view() or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    return node.args[0]


def mutated_inputs(gm: torch.fx.GraphModule) -> list[str]:
    """Names of the graph inputs some node writes into (directly, through an alias or a view)."""
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
        base = _view_base(node)
        if base is not None and base in roots:
            roots[node] = roots[base]
        target = _mutated_target(node)
        if isinstance(target, torch.fx.Node) and target in roots and roots[target].name not in names:
            names.append(roots[target].name)
    return names


def _method(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return node.target
    return "setitem" if node.target is operator.setitem else getattr(node.target, "__name__", str(node.target))


def _constant(node: Any, memo: dict) -> Any:
    """The value of a node computed from literals only (``torch.tensor([-1])``), else None: such
    write-back arguments are kept as values instead of becoming graph outputs."""
    if not isinstance(node, torch.fx.Node):
        return node
    if node not in memo:
        memo[node] = None
        # Not random draws or uninitialized memory, and not writes (which would change memo's values).
        m = _method(node)
        pure = node.op in ("call_function", "call_method") and _mutated_target(node) is None
        deterministic = pure and "rand" not in m and "empty" not in m
        if deterministic and all(_constant(n, memo) is not None for n in node.all_input_nodes):
            args = torch.fx.node.map_arg(node.args, lambda n: memo[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: memo[n])
            fn = getattr(args[0], node.target) if node.op == "call_method" else node.target
            memo[node] = fn(*args[1:], **kwargs) if node.op == "call_method" else fn(*args, **kwargs)
    return memo[node]


@dataclasses.dataclass
class _Chain:
    """A tensor computed from input ``root``'s value after ``version`` writes to it, by steps
    the host can replay on the input itself: (method, args, kwargs) as write-back arguments."""

    root: torch.fx.Node
    version: int
    steps: list


def functionalize(gm: torch.fx.GraphModule, static: Sequence[bool]) -> tuple[torch.fx.GraphModule, MutationPlan]:
    """A copy of ``gm`` without in-place ops, and the plan that replays the input updates on the
    host. ``static[i]`` marks inputs frozen into the graph (weights): writing into one is refused,
    since the graph holds a copy of it."""
    graph = torch.fx.Graph()
    env: dict = {}  # old node -> new node
    roots: dict = {}  # old node -> the old node it aliases (itself for non-aliases)
    current: dict = {}  # old root -> new node holding its latest value
    view_of: dict = {}  # old node that is a view (not an alias) -> old root it views
    stale: dict = {}  # old node whose value a write made unreadable -> why
    inputs: dict = {}  # old placeholder -> input index
    extra: list = []  # new nodes returned after the original outputs
    extra_index: dict = {}
    writebacks: list[WriteBack] = []
    mutated: set = set()
    versions: dict = {}  # old root -> writes into it so far
    chains: dict = {}  # old root of an intermediate -> _Chain
    constants: dict = {}
    frozen_read: set = set()  # old static placeholders whose frozen value some node read

    def lookup(n):
        if not isinstance(n, torch.fx.Node):
            return n
        r = roots.get(n)
        why = stale.get(n, stale.get(r))
        if why is not None:
            raise LoweringError(f"kv_cache: node {n.name} {why}; such graphs cannot be made functional")
        return current[r] if r in current else env[n]

    def map_args(a):
        return torch.fx.node.map_arg(a, lookup)

    def host_arg(a):
        """An old-graph argument as a write-back argument: literals and constants as they are,
        other tensors as extra graph outputs."""

        def one(n):
            value = _constant(n, constants)
            if value is not None:
                return value
            new = lookup(n)
            if new not in extra_index:
                extra_index[new] = len(extra)
                extra.append(new)
            return Out(extra_index[new])

        return torch.fx.node.map_aggregate(a, lambda x: one(x) if isinstance(x, torch.fx.Node) else x)

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
            frozen_read.update(_frozen_reads(node, roots, inputs, versions))
            ex = _example(node)
            if ex is not None and ex._is_view():
                for a in node.all_input_nodes:
                    r = view_of.get(a, roots.get(a))
                    if r is not None and r is not node:
                        view_of[node] = r
                        break
            src = node.args[0] if node.args else None
            r = roots.get(src) if isinstance(src, torch.fx.Node) and src not in view_of else None
            if _method(node) in _CHAIN_STARTS and r is not None and r.op == "placeholder" and node not in view_of:
                if not any(isinstance(a, torch.fx.Node) for a in (*node.args[1:], *node.kwargs.values())):
                    chains[node] = _Chain(r, versions.get(r, 0), [(_method(node), list(node.args[1:]), dict(node.kwargs))])
            continue

        # An in-place node: `target.<op>_(...)` or `target[key] = value`.
        r = roots.get(target)
        method = _method(node)
        base = view_of.get(target)
        if base is not None and base.op == "placeholder":
            raise LoweringError(
                f"kv_cache: in-place {method} (node {node.name}) writes through {target.name}, a view of "
                f"input {base.name}; writes through views of inputs are not made functional: write into "
                f"{base.name} itself (x[key] = v, index_copy_)"
            )
        if r is None or method not in _FUNCTIONAL or (node.op != "call_method" and method != "setitem"):
            raise LoweringError(
                f"kv_cache: in-place {method} on {getattr(r, 'name', target)} (node {node.name}) is not "
                f"supported; supported in-place ops: {', '.join(sorted(_FUNCTIONAL))}"
            )
        if r.op == "placeholder" and static[inputs[r]]:
            # The graph holds a copy of a parameter or buffer frozen at compile time. Overwriting
            # it whole, from values that do not read it, before anything reads it, leaves that copy
            # unread: the graph computes the new value and the host replays the write on the
            # model's tensor (Phi-3's LongRoPE picks its frequencies into inv_freq at every call).
            why = None
            if method not in ("copy_", "fill_", "zero_"):
                why = f"{method} reads the value it updates"
            elif r in frozen_read:
                # (A value computed from it reads it too.)
                why = "the graph reads it before this write"
            if why is not None:
                raise LoweringError(
                    f"kv_cache: node {node.name} writes into {r.name}, a parameter or buffer of the model, and "
                    f"{why}; compiled graphs hold a copy of parameters and buffers frozen when compiled, so "
                    "only whole overwrites from other values are replayed"
                )
        if node.kwargs and any(isinstance(v, torch.fx.Node) for v in node.kwargs.values()):
            raise LoweringError(f"kv_cache: in-place {method} with tensor keyword arguments (node {node.name})")
        if method == "setitem":
            # Refused here, by the key's traced values, rather than mid-export.
            parse_key(_example(target).shape, torch.fx.node.map_arg(node.args[1], lambda n: n.meta.get("example_value")))
        frozen_read.update(_frozen_reads(node, roots, inputs, versions, skip=target))
        cur = lookup(target)
        args = [map_args(a) for a in node.args[1:]]
        kwargs = {k: map_args(v) for k, v in node.kwargs.items()}
        if method == "index_copy_":
            new = graph.call_function(index_copy, (cur, *args), kwargs)
        elif method == "setitem":
            new = graph.call_function(setitem, (cur, *args))
        elif method == "copy_":
            new = graph.call_function(_copy, (cur, args[0]))
        elif method == "fill_":
            new = graph.call_function(_fill, (cur, args[0]))
        elif method == "zero_":
            new = graph.call_function(torch.zeros_like, (cur,))
        else:
            new = graph.call_function(_FUNCTIONAL[method], (cur, *args), kwargs)
        # Views taken of the old value no longer show it after this write.
        stale.update({v: f"reads a view of {r.name} taken before {node.name} wrote into it" for v, vr in view_of.items() if vr is r})
        if base is not None:
            # A write through a view of an intermediate: fine while nothing reads the viewed
            # tensor (or its other views) afterwards, which would need the write to reach it.
            why = f"reads {base.name} after {node.name} wrote into its view {target.name}"
            stale.update({v: why for v, vr in view_of.items() if vr is base and roots.get(v) is not r})
            stale[base] = why
        current[r] = new
        env[node] = new
        roots[node] = r
        mutated.add(r)
        version = versions.get(r, 0)
        versions[r] = version + 1
        if r in chains:
            if method in _CHAIN_STEPS:
                # Its arguments as they are now (a later write must not change them).
                chains[r].steps.append((method, list(host_arg(tuple(node.args[1:]))), host_arg(dict(node.kwargs))))
            else:
                del chains[r]
        if r.op != "placeholder":
            continue
        src = roots.get(node.args[1]) if method == "copy_" and isinstance(node.args[1], torch.fx.Node) else None
        chain = chains.get(src)
        same = chain is not None and _same_layout(_example(node.args[1]), _example(target))
        if same and chain.root is r and chain.version == version:
            # The destination's own value, rolled and overwritten in a few rows: replay those
            # steps on the caller's tensor, so that only the new rows leave the graph.
            writebacks.extend(WriteBack(inputs[r], m, a, k) for m, a, k in chain.steps if m != "clone")
            continue
        writebacks.append(WriteBack(inputs[r], method, list(host_arg(tuple(node.args[1:]))), host_arg(dict(node.kwargs))))
    raise LoweringError("kv_cache: the FX graph has no output node")


def _frozen_reads(node: torch.fx.Node, roots: dict, inputs: dict, versions: dict, skip: Any = None) -> list:
    """The inputs whose value as given (before any write) ``node`` reads; not through an alias it
    makes of them, not ``skip`` (the tensor an in-place node writes into)."""
    rs = (roots.get(a) for a in node.all_input_nodes if a is not skip)
    return [r for r in rs if r in inputs and r is not roots.get(node) and versions.get(r, 0) == 0]


def _same_layout(a: Optional[torch.Tensor], b: Optional[torch.Tensor]) -> bool:
    return a is not None and b is not None and a.shape == b.shape and a.dtype == b.dtype
