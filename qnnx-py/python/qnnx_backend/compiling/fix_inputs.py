"""``fix_inputs``: which inputs of a dynamo graph (and of each QNN partition of it) the keys
of the setting name, and the values the ONNX export is given for them."""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

import torch

from ..settings import fixed_values

logger = logging.getLogger("qnnx_backend")


def _argument_name(placeholder: str) -> str:
    """The ``forward`` argument a dynamo placeholder stands for: ``L_flag_`` / ``l_flag_`` ->
    ``flag``."""
    name = placeholder
    if name[:2] in ("L_", "l_"):
        name = name[2:]
    return name[:-1] if name.endswith("_") else name


def _fixed_matches(gm: torch.fx.GraphModule, tensor_idx: Sequence[int], fix_inputs: Any) -> list[tuple[int, str, str]]:
    """(j, placeholder name, fix_inputs key) for each per-call tensor input ``input_<j>`` of
    ``gm`` (argument ``tensor_idx[j]``) a key of ``fix_inputs`` names: keys are matched against
    the exported name, dynamo's placeholder name and target, and the ``forward`` argument they
    stand for. Keys that match no input of this graph are left out (with graph breaks they may
    be another graph's)."""
    if not fix_inputs:
        return []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    matched = set()
    for j, i in enumerate(tensor_idx):
        names = {f"input_{j}"}
        p = placeholders[i] if i < len(placeholders) else None
        if p is not None:
            for n in (p.name, str(p.target)):
                names.update((n, _argument_name(n)))
        for key in fix_inputs:
            if key in names:
                out.append((j, p.name if p is not None else f"input_{j}", key))
                matched.add(key)
    if set(fix_inputs) - matched:
        logger.info("qnn: fix_inputs %s name no input of this graph", sorted(set(fix_inputs) - matched))
    return out


def onnx_fix_inputs(gm: torch.fx.GraphModule, tensor_idx: Sequence[int], fix_inputs: Any) -> dict[str, str]:
    """The ``fix_inputs`` setting for the ONNX export of ``gm``, whose input ``input_<j>`` is
    argument ``tensor_idx[j]`` (see ``_fixed_matches`` for how keys name inputs)."""
    values = fixed_values(fix_inputs)
    return {f"input_{j}": values[key] for j, _, key in _fixed_matches(gm, tensor_idx, values)}


def partition_fix_inputs(
    gm: torch.fx.GraphModule, tensor_idx: Sequence[int], fix_inputs: Any, partition: torch.fx.GraphModule
) -> Optional[dict[str, Any]]:
    """The ``fix_inputs`` of one QNN partition of ``gm``: the fixed inputs of ``gm`` that the
    partition reads, keyed by their placeholder name (a partition's placeholders are named after
    the nodes of ``gm`` they receive, so a whole-graph name such as ``input_1``, which would
    name another input of the partition, never reaches it). None when it reads none."""
    matches = _fixed_matches(gm, tensor_idx, fix_inputs)
    reads = {n.name for n in partition.graph.nodes if n.op == "placeholder"}
    out = {name: fix_inputs[key] for _, name, key in matches if name in reads}
    return out or None
