"""The "qnn" torch.compile backend."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import torch

from . import _native
from .compiling.qnn_callable import compile_graph
from .settings import parse_options


def qnn_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: Optional[Mapping[str, Any]] = None,
) -> Callable:
    """torch.compile backend: ``torch.compile(model, backend="qnn", options={...})``."""
    settings = parse_options(options)
    if settings.log_level is not None:
        _native.set_log_level(str(settings.log_level))
    return compile_graph(gm, example_inputs, settings)
