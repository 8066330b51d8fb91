"""What a device can run: the place of the partitioner.

For now it holds the support queries the backend asks the native module, as structured
records: the lowering's own per-node decision for a model (``unsupported_nodes``, the
``qnnx check`` answer) and the backend's op table (``op_support``, ``op-tables/<backend>.toml``).
Neither opens QNN.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, NamedTuple, Optional

from . import _native
from .exceptions import QnnxError, UnsupportedOpError


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
    """One entry of a backend's op table: the fields of ``op-tables/<backend>.toml``, plus ``runs``."""

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
    """sensitive | agnostic | framework"""
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
