"""The op kinds of ``config.OP_KINDS`` as the ATen ops torch.export makes of them: what the
annotation (``annotate``) and the mixed-precision search match nodes against."""

from __future__ import annotations

import operator
from typing import Any

import torch

from . import config

aten = torch.ops.aten

ATEN_OPS: dict[str, frozenset] = {
    "conv": frozenset({aten.conv1d.default, aten.conv2d.default, aten.conv3d.default,
                       aten.conv1d.padding, aten.conv2d.padding, aten.conv3d.padding}),
    "conv_transpose": frozenset({aten.conv_transpose1d.default, aten.conv_transpose2d.input,
                                 aten.conv_transpose3d.input}),
    "linear": frozenset({aten.linear.default}),
    "matmul": frozenset({aten.matmul.default, aten.bmm.default, aten.mm.default}),
    "add": frozenset({aten.add.Tensor, aten.add_.Tensor}),
    "sub": frozenset({aten.sub.Tensor, aten.sub_.Tensor}),
    "mul": frozenset({aten.mul.Tensor, aten.mul_.Tensor}),
    "div": frozenset({aten.div.Tensor, aten.div_.Tensor}),
    "relu": frozenset({aten.relu.default, aten.relu_.default}),
    "clamp": frozenset({aten.hardtanh.default, aten.hardtanh_.default, aten.relu6.default,
                        aten.clamp.default, aten.clamp_.default}),
    "gelu": frozenset({aten.gelu.default, aten.gelu_.default}),
    "sigmoid": frozenset({aten.sigmoid.default, aten.sigmoid_.default}),
    "tanh": frozenset({aten.tanh.default, aten.tanh_.default}),
    "hardsigmoid": frozenset({aten.hardsigmoid.default, aten.hardsigmoid_.default}),
    "hardswish": frozenset({aten.hardswish.default, aten.hardswish_.default}),
    "silu": frozenset({aten.silu.default, aten.silu_.default}),
    "leaky_relu": frozenset({aten.leaky_relu.default, aten.leaky_relu_.default}),
    "prelu": frozenset({aten.prelu.default}),
    "softmax": frozenset({aten.softmax.int, aten._softmax.default}),
    "layer_norm": frozenset({aten.layer_norm.default}),
    "max_pool": frozenset({aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default}),
    "avg_pool": frozenset({aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default,
                           aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default}),
    "mean": frozenset({aten.mean.dim, aten.mean.default}),
    "cat": frozenset({aten.cat.default, aten.concat.default, aten.concatenate.default}),
    "embedding": frozenset({aten.embedding.default}),
}  # fmt: skip
assert tuple(ATEN_OPS) == config.OP_KINDS, "config.OP_KINDS and ATEN_OPS name the same kinds"
OP_KINDS = ATEN_OPS
KIND_OF = {t: k for k, ts in ATEN_OPS.items() for t in ts}

# Several outputs (read through getitem), each with the input's encoding.
SPLITS = frozenset({aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default, aten.unbind.int})
# Meta key of a clamp whose producer's output is not quantized: rewrites.absorb_clamps removes it.
ABSORB_KEY = "qnnx_absorb_clamp"


def constant(model: torch.nn.Module, target: str) -> Any:
    """What a get_attr node's (dotted) target names in ``model``."""
    return operator.attrgetter(target)(model)
