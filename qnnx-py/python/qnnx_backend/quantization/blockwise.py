"""Block-wise 4-bit weights (``weight_block_size``): QNN's block expansion ("LPBQ", HTP v69+).

A weight ``[out, in]`` gets one float scale per output channel and, per block of
``weight_block_size`` input features, an integer scale of 1..16 (4 bits) that multiplies it:
block ``b`` of channel ``c`` has the scale ``channel[c] * k[c, b]``. ``channel[c]`` is the
largest of the channel's block scales (each block's largest magnitude over 7) divided by 16, and
``k`` that block scale rounded up to a multiple of it, so no weight saturates: as AIMET and
ExecuTorch's QNN quantizer derive them, with 4-bit integers because QNN expands 4-bit weights
to 8 bits with them. A block of small weights keeps its own resolution where a per-channel scale
would round it to zero.

PT2E has no block granularity, so the weights are computed here, from the float weight each
4-bit Linear's observer saw (``float_weights``, on the prepared model), after conversion
(``plan``). The converted model is exported with its per-channel weights (their
DequantizeLinear -> Gemm is what the exporter and the rewrites expect), and ``qdq.tidy_onnx``
rewrites those DequantizeLinear nodes as ONNX Runtime's QNN EP and the lowering read LPBQ:
``DequantizeLinear(int4 [out, in], scale, axis=1, block_size)`` whose scale is
``DequantizeLinear(uint8 k [out, blocks], channel, axis=0)``. Then the converted model reads the
block-wise fake-quantized weights as float constants (``fake_quantize``): the QDQ model's
arithmetic in PyTorch.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import torch

from .kinds import aten, constant

logger = logging.getLogger("qnnx_backend")

#: Integer block scales are 4 bits: QNN expands 4-bit weights to 8 with them (1..=16).
MAX_INT = 16


@dataclasses.dataclass
class Blocked:
    """One block-wise weight: what the QDQ model stores for it."""

    q: torch.Tensor
    """int8 in -8..7, ``[out, in]``."""
    channel: torch.Tensor
    """float32 ``[out]``."""
    k: torch.Tensor
    """uint8 in 1..16, ``[out, in / block]``."""
    block: int

    def scales(self) -> torch.Tensor:
        """The float scale of each block, ``[out, in / block]``."""
        return self.channel[:, None] * self.k.to(torch.float32)

    def dequantized(self) -> torch.Tensor:
        return self.q.to(torch.float32) * self.scales().repeat_interleave(self.block, dim=1)


def fits(w: torch.Tensor, block: int) -> bool:
    """Whether a Linear weight ``w`` can be block-wise: ``[out, in]`` with ``in`` a multiple of
    ``block`` (otherwise it stays per channel)."""
    return w.dim() == 2 and w.shape[1] % block == 0


def quantize(w: torch.Tensor, block: int) -> Blocked:
    """``w`` ``[out, in]`` quantized block-wise (``in`` a multiple of ``block``)."""
    w = w.detach().to(torch.float32)
    out, inp = w.shape
    amax = w.abs().reshape(out, inp // block, block).amax(dim=2)
    s = amax / 7.0
    top = s.amax(dim=1)
    # An all-zero channel: any positive scale stores it exactly.
    channel = torch.where(top > 0, top / MAX_INT, torch.full_like(top, 1.0 / MAX_INT))
    k = torch.ceil(s / channel[:, None] * (1 - 1e-6)).clamp(1, MAX_INT)
    eff = (channel[:, None] * k).repeat_interleave(block, dim=1)
    q = torch.round(w / eff).clamp(-8, 7)
    return Blocked(q.to(torch.int8), channel, k.to(torch.uint8), block)


def _is_4bit(dq: torch.fx.Node) -> bool:
    return (
        dq.op == "call_function"
        and "dequantize_per_channel" in str(dq.target)
        and len(dq.args) >= 6
        and dq.args[4] >= -8
        and dq.args[5] <= 7
    )


def float_weights(prepared: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    """The float weight of each linear of the prepared (observed) model, by the linear's node
    name: the input of its weight observer."""
    out = {}
    for n in prepared.graph.nodes:
        if n.target is not aten.linear.default or len(n.args) < 2:
            continue
        obs = n.args[1]
        if not (isinstance(obs, torch.fx.Node) and obs.op == "call_module" and obs.args):
            continue
        src = obs.args[0]
        if isinstance(src, torch.fx.Node) and src.op == "get_attr":
            out[n.name] = constant(prepared, src.target).detach().clone()
    return out


def plan(
    converted: torch.fx.GraphModule,
    floats: dict[str, torch.Tensor],
    block: int,
    rounded: Optional[dict[str, Blocked]] = None,
) -> dict[str, Blocked]:
    """The block-wise weight of each linear of ``converted`` found in ``floats`` whose 4-bit
    per-channel weight has an input size ``block`` divides, by the name of its integer weight
    constant (the QDQ model's initializer name, which ``qdq.tidy_onnx`` replaces): the one GPTQ
    chose when ``rounded`` (by the linear's node name) has it, else its float weight rounded to
    nearest."""
    done: dict[str, Blocked] = {}
    skipped = 0
    for n in converted.graph.nodes:
        if n.target is not aten.linear.default or n.name not in floats:
            continue
        dq = n.args[1]
        if not (isinstance(dq, torch.fx.Node) and _is_4bit(dq)):
            continue
        src = dq.args[0]
        w = floats[n.name]
        if not (isinstance(src, torch.fx.Node) and src.op == "get_attr") or w.dim() != 2:
            continue
        if not fits(w, block):
            skipped += 1
            continue
        done[src.target] = rounded[n.name] if rounded and n.name in rounded else quantize(w, block)
    logger.info(
        "qnn quantize: %d weight(s) block-wise (blocks of %d)%s",
        len(done),
        block,
        f", {skipped} per channel (input size not a multiple of the block)" if skipped else "",
    )
    return done


def fake_quantize(converted: torch.fx.GraphModule, blocked: dict[str, Blocked]) -> None:
    """Makes ``converted`` compute with the block-wise weights: each dequantization of a
    planned integer weight is replaced by its block-wise fake-quantized float weight, so that
    the model is the QDQ model's arithmetic in PyTorch."""
    for n in list(converted.graph.nodes):
        if n.op != "call_function" or "dequantize_per_channel" not in str(n.target):
            continue
        src = n.args[0]
        if not (isinstance(src, torch.fx.Node) and src.op == "get_attr" and src.target in blocked):
            continue
        # A module's attribute name: a torch.export'ed module keeps dotted targets.
        name = f"{src.target.replace('.', '_')}_lpbq"
        converted.register_buffer(name, blocked[src.target].dequantized())
        with converted.graph.inserting_before(n):
            const = converted.graph.get_attr(name)
        n.replace_all_uses_with(const)
        inputs = [a for a in n.args if isinstance(a, torch.fx.Node)]
        converted.graph.erase_node(n)
        for a in inputs:
            if a.op == "get_attr" and not a.users:
                converted.graph.erase_node(a)
    converted.recompile()
