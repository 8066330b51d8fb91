"""Where an FX node sits in the model: dynamo's ``nn_module_stack`` spelled as
``model.named_modules()`` spells module paths. Kept apart from ``quantization.annotate`` (which imports
torchao, seconds and a warning) so that float compiles, which need the paths for mixed precision
and reports, never import the quantization machinery."""

from __future__ import annotations

import re

from torch.fx import Node

_FRAME_ROOT = re.compile(r"^L\['[^']*'\]\.?")


def module_path(raw: str) -> str:
    """dynamo's spelling of a module (``L['self'].layer1[0]._modules['conv']``) as
    ``model.named_modules()`` spells it (``layer1.0.conv``)."""
    p = _FRAME_ROOT.sub("", raw)
    p = re.sub(r"\._modules\['([^']+)'\]", r".\1", p)
    p = re.sub(r"\[(\d+)\]", r".\1", p)
    p = re.sub(r"\['([^']+)'\]", r".\1", p)
    return p.strip(".")


def module_paths(node: Node) -> list[str]:
    """The paths of the modules ``node`` was called in, outermost first."""
    out: list[str] = []
    for value in (node.meta.get("nn_module_stack") or {}).values():
        raw = value[0] if isinstance(value, (tuple, list)) else value
        p = module_path(str(raw))
        if p and p not in out:
            out.append(p)
    return out
