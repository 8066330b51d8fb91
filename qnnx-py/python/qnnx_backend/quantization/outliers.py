"""How well each value of a float graph would use a per-tensor encoding: the spread of its
channels' ranges over the calibration samples, measured on the host.

A per-tensor encoding spends its steps on the widest channel. When one channel is 1000x wider
than the rest (a functional ``x * scale``, an LLM's outlier feature), the typical channel spans
a fraction of one 8-bit step and rounds to zero, while the value's own SQNR stays high (the
wide channel dominates its power): the error shows only where a reader weighs the narrow
channels (a Linear that ignores the wide one). The mixed-precision search (``mixed``) looks at
the values a jump in the per-layer report reads and promotes the one whose typical channel has
the fewest steps.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import torch


@dataclasses.dataclass(frozen=True)
class RangeUse:
    """One value's channel ranges against its per-tensor range."""

    spread: float
    """The per-tensor range (zero included, as the encoding is) over the median channel's
    largest magnitude: about 2 for a well-spread value, 1000 for one 1000x channel."""
    axis: int
    """The axis whose channels spread most (the last, or 1 for NCHW-like values)."""

    def bits(self, act_bits: int) -> float:
        """The steps of an ``act_bits`` encoding the median channel spans, in bits."""
        return act_bits - math.log2(max(self.spread, 1.0))


class _Recorder(torch.fx.Interpreter):
    """Runs the graph, keeping each float value's running per-channel minimum and maximum along
    the last axis and, for rank >= 3, axis 1."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm)
        self.ranges: dict[str, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}

    def run_node(self, n: torch.fx.Node):
        out = super().run_node(n)
        if n.op == "call_function" and isinstance(out, torch.Tensor) and out.is_floating_point() and out.dim() >= 1:
            t = out.detach().float()
            axes = {t.dim() - 1} | ({1} if t.dim() >= 3 else set())
            kept = self.ranges.setdefault(n.name, {})
            for axis in axes:
                flat = t.movedim(axis, 0).reshape(t.shape[axis], -1)
                lo, hi = flat.amin(dim=1), flat.amax(dim=1)
                if axis in kept and kept[axis][0].shape == lo.shape:
                    lo, hi = torch.minimum(kept[axis][0], lo), torch.maximum(kept[axis][1], hi)
                kept[axis] = (lo, hi)
        return out


def range_use(gm: torch.fx.GraphModule, samples: Sequence[Sequence[torch.Tensor]]) -> dict[str, RangeUse]:
    """{FX node name: RangeUse} of the float values ``gm`` computes on ``samples``. Values with
    a single channel, or all zero, are left out (no spread to measure)."""
    rec = _Recorder(gm)
    with torch.no_grad():
        for sample in samples:
            rec.run(*sample)
    out: dict[str, RangeUse] = {}
    for name, by_axis in rec.ranges.items():
        best = None
        for axis, (lo, hi) in by_axis.items():
            if lo.numel() < 2:
                continue
            span = float(hi.max().clamp(min=0) - lo.min().clamp(max=0))
            magnitude = torch.maximum(lo.abs(), hi.abs())
            # Channels that are always zero (dead ReLU units) are exact in any encoding.
            magnitude = magnitude[magnitude > 0]
            if span <= 0 or magnitude.numel() == 0:
                continue
            spread = span / float(magnitude.median())
            if best is None or spread > best.spread:
                best = RangeUse(spread, axis)
        if best is not None:
            out[name] = best
    return out
