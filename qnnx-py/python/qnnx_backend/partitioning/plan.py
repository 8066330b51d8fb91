"""What a device can run, and the partitioner.

The support queries the backend asks the native module, as structured records: the lowering's
own per-node decision for a model (``unsupported_nodes``, the ``qnnx check`` answer) and the
backend's op table (``op_support``, ``lowering/op-tables/<backend>.toml``). Neither opens QNN.

The partitioner (``scoped``, ``map_unsupported``, ``plan``, ``weigh``, ``split``) maps the ONNX
nodes the lowering refuses back to the FX nodes they come from and splits the FX graph into QNN
partitions and eager nodes, leaving eager the islands whose eager time is below a QNN call's
cost (measured by partitioning.callcost); compiling.qnn_callable compiles each partition like a whole graph.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from .. import _native
from ..exceptions import QnnxError, UnsupportedOpError


class UnsupportedNode(NamedTuple):
    """One ONNX node the device cannot run."""

    node: str
    op_type: str
    reason: str
    """The whole message, naming the node, its op type and (where one is at fault) the attribute."""


def parse_unsupported(rows: Iterable[Any]) -> list[UnsupportedNode]:
    """Records from the native module's ``(node, op_type, reason)`` triples."""
    out = []
    for row in rows:
        node, op_type, reason = row
        out.append(UnsupportedNode(str(node), str(op_type), str(reason)))
    return out


def unsupported_nodes(onnx: bytes, device: str, fix_inputs: Optional[dict[str, str]] = None) -> list[UnsupportedNode]:
    """Every node of the ONNX model ``onnx`` that ``device`` ("npu" or "gpu") cannot run, in
    graph order; empty when the whole model can run there. ``fix_inputs`` as for compiling (ONNX
    input name to value text)."""
    return parse_unsupported(_native.check(onnx, device, fix_inputs=fix_inputs or None))


def unsupported_error(nodes: Iterable[Any], device: str) -> UnsupportedOpError:
    """The UnsupportedOpError a compile would raise for ``nodes`` (records or triples), for an
    answer of ``unsupported_nodes`` (the dry run): the native module's message for a list of
    nodes and the same attributes, with ``device`` set."""
    nodes = parse_unsupported(nodes)
    err = UnsupportedOpError(
        f"{len(nodes)} unsupported node(s):\n" + "\n".join(f"  {n.reason}" for n in nodes)
    )
    err.nodes = [tuple(n) for n in nodes]
    err.operators = {n.op_type for n in nodes}
    err.device = device
    return err


@dataclasses.dataclass(frozen=True)
class OpSupport:
    """One entry of a backend's op table: the fields of ``lowering/op-tables/<backend>.toml``, plus ``runs``."""

    op_type: str
    status: str
    """supported | decomposed | fallback | planned"""
    runs: bool
    """Whether the backend runs the op (supported or decomposed), within ``constraints``."""
    family: str
    opset: tuple[int, int]
    """The ONNX opset range (first, last) the lowering implements."""
    dtypes: tuple[str, ...]
    qnn: tuple[str, ...]
    """The QNN ops it lowers to."""
    layout: str
    """sensitive | agnostic | axes | framework"""
    constraints: tuple[str, ...]


_OP_FIELDS = frozenset(f.name for f in dataclasses.fields(OpSupport)) - {"op_type"}


def parse_op_table(table: Mapping[str, Mapping[str, Any]]) -> dict[str, OpSupport]:
    """Records from the native module's op table (op type -> dict of fields). A field this
    module does not know, or one missing, is a QnnxError: the two sides must change together."""
    out = {}
    for op, entry in table.items():
        if set(entry) != _OP_FIELDS:
            raise QnnxError(
                f"op table entry {op}: fields {sorted(entry)}, expected {sorted(_OP_FIELDS)}"
            )
        first, last = entry["opset"]
        out[op] = OpSupport(
            op_type=op,
            status=str(entry["status"]),
            runs=bool(entry["runs"]),
            family=str(entry["family"]),
            opset=(int(first), int(last)),
            dtypes=tuple(entry["dtypes"]),
            qnn=tuple(entry["qnn"]),
            layout=str(entry["layout"]),
            constraints=tuple(entry["constraints"]),
        )
    return out


def op_support(device: str) -> dict[str, OpSupport]:
    """The op table of ``device``'s backend, by ONNX op type."""
    return parse_op_table(_native.op_table(device))


# ---------------------------------------------------------------------------------------------
# FX-level partitioning: the nodes the lowering refuses, mapped back to FX nodes, and the graph
# split into QNN partitions and eager nodes with torch.fx's own partitioner.

#: Prefix of the scope modules ``scoped`` wraps each FX node in; the ONNX node names of the
#: TorchScript exporter are ``/gm/<prefix><fx node>/<OpType>[_n]`` (``gm`` is
#: ``to_onnx.Frozen``'s attribute).
SCOPE_PREFIX = "qnnx_scope_"

_CALLS = ("call_function", "call_method", "call_module")


class _Scope(torch.nn.Module):
    """One FX node as a module of its own: the TorchScript exporter names the ONNX nodes it
    traces inside after the module path, which ties each ONNX node to the FX node it comes
    from. (The exporter keeps no other provenance: the node names of an unscoped dynamo graph
    are ``/Conv_3`` style, and ``doc_string`` holds the TorchScript source line.)"""

    def __init__(self, op: str, target: Any, module: Optional[torch.nn.Module] = None):
        super().__init__()
        self.op = op
        self.fn = target
        if module is not None:
            self.m = module

    def forward(self, *args, **kwargs):
        if self.op == "call_function":
            return self.fn(*args, **kwargs)
        if self.op == "call_method":
            return getattr(args[0], self.fn)(*args[1:], **kwargs)
        return self.m(*args, **kwargs)


def scoped(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, dict[str, str]]:
    """A copy of ``gm`` whose every call node runs inside a ``_Scope``, and the map from scope
    name to FX node name."""
    out = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    names = {}
    for node in list(out.graph.nodes):
        if node.op not in _CALLS:
            continue
        scope = f"{SCOPE_PREFIX}{node.name}"
        module = out.get_submodule(node.target) if node.op == "call_module" else None
        out.add_submodule(scope, _Scope(node.op, node.target, module))
        node.op, node.target = "call_module", scope
        names[scope] = node.name
    out.recompile()
    return out, names


def fx_node_of(onnx_node: str, names: Mapping[str, str]) -> Optional[str]:
    """The FX node an ONNX node of a ``scoped`` export comes from, or None."""
    parts = onnx_node.split("/")
    if len(parts) >= 3 and parts[0] == "" and parts[1] == "gm":
        return names.get(parts[2])
    return None


def map_unsupported(
    unsupported: Iterable[UnsupportedNode], names: Mapping[str, str]
) -> tuple[dict[str, list[UnsupportedNode]], list[UnsupportedNode]]:
    """(FX node name -> the unsupported ONNX nodes it exported to, the ONNX nodes no FX node
    claims)."""
    by_fx: dict[str, list[UnsupportedNode]] = {}
    orphans = []
    for n in unsupported:
        fx = fx_node_of(n.node, names)
        if fx is None:
            orphans.append(n)
        else:
            by_fx.setdefault(fx, []).append(n)
    return by_fx, orphans


class _Supported(OperatorSupportBase):
    def __init__(self, refused: Iterable[str]):
        self.refused = set(refused)

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:  # noqa: ARG002
        return node.op in _CALLS and node.name not in self.refused and not computes_scalar(node)


_SCALARS = (bool, int, float, torch.SymBool, torch.SymInt, torch.SymFloat)


def computes_scalar(node: torch.fx.Node) -> bool:
    """Whether dynamo recorded a Python scalar as the node's value (shape arithmetic such as
    ``x.size(0) * 2``): a QNN graph returns tensors only, so such nodes stay eager."""
    return isinstance(node.meta.get("example_value"), _SCALARS)


@dataclasses.dataclass
class Plan:
    """How one FX graph is split."""

    partitions: list[list[str]]
    """The FX node names of each QNN partition, in graph order."""
    eager: dict[str, str]
    """Each FX call node that stays eager -> why."""
    total: int
    """The number of FX call nodes in the graph."""
    param_shares: list[Optional[float]] = dataclasses.field(default_factory=list)
    """Per partition, the share of the graph's parameter and buffer elements its nodes use
    (None where unknown)."""
    call_cost_us: Optional[float] = None
    """The per-call cost of a QNN graph the islands were weighed against (``weigh``); None when
    the cost rule is off (``partition_cost=0``) or was not reached."""
    cost_source: Optional[str] = None
    """Where ``call_cost_us`` comes from: "measured" (the probe graph on the backend, in this
    process or in the one that cached the split) or "partition_cost" (the option's number)."""
    eager_us: list[Optional[float]] = dataclasses.field(default_factory=list)
    """Per partition, its median eager time on the host in us (None where not measured)."""
    islands: dict[str, float] = dataclasses.field(default_factory=dict)
    """Every island weighed, kept or not: its first FX node -> its eager time in us (what a
    split alias stores, so that a warm start takes the same decision without measuring)."""

    def report(self) -> dict:
        """The plan as a dict for programs."""
        return {
            "partitions": [
                {"nodes": list(p), "size": len(p), "param_share": self.share(i), "eager_us": self.time(i)}
                for i, p in enumerate(self.partitions)
            ],
            "eager": dict(self.eager),
            "total_nodes": self.total,
            "call_cost_us": self.call_cost_us,
            "cost_source": self.cost_source,
        }

    def share(self, i: int) -> Optional[float]:
        return self.param_shares[i] if i < len(self.param_shares) else None

    def time(self, i: int) -> Optional[float]:
        return self.eager_us[i] if i < len(self.eager_us) else None

    def text(self) -> str:
        """The plan as the warning and the dry run print it."""
        on_qnn = sum(len(p) for p in self.partitions)
        lines = [f"{len(self.partitions)} QNN partition(s) with {on_qnn} of {self.total} FX nodes:"]
        for i, p in enumerate(self.partitions):
            share = self.share(i)
            params = f", {share:.0%} of the parameters" if share is not None else ""
            t = self.time(i)
            timed = f", eager {t:.0f} us" if t is not None else ""
            lines.append(
                f"  partition {i}: {len(p)} nodes{params}{timed} ({', '.join(p[:6])}{', ...' if len(p) > 6 else ''})"
            )
        if self.call_cost_us is not None:
            lines.append(
                f"QNN call cost {self.call_cost_us:.0f} us ({self.cost_source}): an island whose eager time "
                "is below it stays eager (partition_cost)"
            )
        lines.append(f"{len(self.eager)} FX node(s) on the CPU (eager PyTorch):")
        lines.extend(f"  {name}: {why}" for name, why in self.eager.items())
        return "\n".join(lines)


def _op_name(node: torch.fx.Node) -> str:
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        return f".{node.target}()"
    return str(node.target)


def plan(
    gm: torch.fx.GraphModule,
    refused: Mapping[str, list[UnsupportedNode]],
    min_size: int,
    param_sizes: Optional[Mapping[str, int]] = None,
) -> Plan:
    """The QNN partitions of ``gm``: the largest acyclic groups of supported call nodes
    (CapabilityBasedPartitioner, which merges across independent branches too), each kept
    only with at least ``min_size`` nodes. ``param_sizes`` (placeholder name -> element count
    of the parameter or buffer it receives) gives each partition's share of them."""
    calls = [n for n in gm.graph.nodes if n.op in _CALLS]
    proposed = CapabilityBasedPartitioner(
        gm, _Supported(refused), allows_single_node_partition=True
    ).propose_partitions()
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    by_name = {n.name: n for n in calls}
    eager: dict[str, str] = {}
    for name, nodes in refused.items():
        # The scoped ONNX names mean nothing to a user: the reason names the FX node's op.
        scope = f"/gm/{SCOPE_PREFIX}{name}/"
        why = "; ".join(n.reason.replace(scope, "") for n in nodes)
        eager[name] = f"{_op_name(by_name[name]) if name in by_name else name}: {why}"
    for n in calls:
        if n.name not in eager and computes_scalar(n):
            eager[n.name] = f"{_op_name(n)}: computes a Python scalar, and QNN graphs return tensors only"
    partitions = []
    for p in proposed:
        nodes = sorted(p.nodes, key=order.__getitem__)
        if len(nodes) < min_size:
            for n in nodes:
                eager[n.name] = f"in a run of {len(nodes)} supported node(s), fewer than min_partition_size={min_size}"
            continue
        partitions.append([n.name for n in nodes])
    partitions.sort(key=lambda p: order[by_name[p[0]]])
    in_graph = {n.name: i for i, n in enumerate(calls)}
    eager = dict(sorted(eager.items(), key=lambda kv: in_graph.get(kv[0], len(in_graph))))
    shares: list[Optional[float]] = []
    total_params = sum((param_sizes or {}).values())
    for names in partitions:
        if not total_params:
            shares.append(None)
            continue
        used = {i.name for name in names for i in by_name[name].all_input_nodes if i.name in param_sizes}
        shares.append(sum(param_sizes[u] for u in used) / total_params)
    return Plan(partitions, eager, len(calls), shares)


def weigh(
    gm: torch.fx.GraphModule, p: Plan, times: Sequence[Optional[float]], cost_us: float, source: str
) -> Plan:
    """``p`` with each partition whose eager time (``times``, per partition, in us) is not
    above ``cost_us`` moved to the eager nodes, with the two numbers as the reason (see
    partitioning.callcost for why the criterion is this one). A partition with no time (one the eager run
    does not reach) is kept: nothing says it is cheap."""
    label = "measured QNN call cost" if source == "measured" else "partition_cost"
    # Whole nanoseconds: what a split alias stores (as integers, which JSON carries exactly),
    # so that a warm start's plan equals this one to the last bit.
    cost_us = round(cost_us * 1000) / 1000
    times = [None if t is None else round(t * 1000) / 1000 for t in times]
    kept, shares, kept_times = [], [], []
    eager = dict(p.eager)
    islands = {}
    for i, (names, t) in enumerate(zip(p.partitions, times)):
        if t is not None:
            islands[names[0]] = float(t)
        if t is None or t > cost_us:
            kept.append(names)
            shares.append(p.share(i))
            kept_times.append(t)
            continue
        for name in names:
            eager[name] = (
                f"in an island of {len(names)} node(s): island eager time {t:.1f} us < {label} {cost_us:.1f} us"
            )
    in_graph = {n.name: i for i, n in enumerate(n for n in gm.graph.nodes if n.op in _CALLS)}
    eager = dict(sorted(eager.items(), key=lambda kv: in_graph.get(kv[0], len(in_graph))))
    return Plan(kept, eager, p.total, shares, float(cost_us), source, kept_times, islands)


def split(gm: torch.fx.GraphModule, p: Plan) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose partitions are submodules ``qnn_partition_<i>`` (GraphModules
    returning tuples), the eager nodes left in place."""
    out = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    by_name = {n.name: n for n in out.graph.nodes}
    groups = [{by_name[name]: None for name in names} for names in p.partitions]
    return fuse_by_partitions(out, groups, prefix="qnn_partition_", always_return_tuple=True)
