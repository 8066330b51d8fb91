"""Rewrites of fused PyTorch kernels that no ONNX exporter can express.

In eval mode without grad, ``nn.TransformerEncoderLayer`` takes a "fast path" and dynamo records
one call to ``torch._transformer_encoder_layer_fwd``; both the TorchScript and the dynamo ONNX
exporters reject it. Here such calls are replaced in the FX graph by the same computation written
with standard ops (the semantics of ``transformer_encoder_layer_forward`` in ATen's
native/transformers/transformer.cpp: attention with packed QKV, residual adds, LayerNorms before
or after, and a ReLU/GELU feed-forward).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..exceptions import LoweringError


def _attention(x, embed_dim, num_heads, qkv_w, qkv_b, proj_w, proj_b, mask):
    b, n, _ = x.shape
    head = embed_dim // num_heads
    qkv = F.linear(x, qkv_w, qkv_b)
    q, k, v = qkv.split(embed_dim, dim=-1)

    def heads(t):
        return t.reshape(b, n, num_heads, head).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(mask, float("-inf"))
        else:
            scores = scores + mask
    out = torch.matmul(torch.softmax(scores, dim=-1), v)
    out = out.transpose(1, 2).reshape(b, n, embed_dim)
    return F.linear(out, proj_w, proj_b)


def transformer_encoder_layer(
    src, embed_dim, num_heads, qkv_w, qkv_b, proj_w, proj_b, use_gelu, norm_first, eps,
    norm1_w, norm1_b, norm2_w, norm2_b, ffn1_w, ffn1_b, ffn2_w, ffn2_b, mask=None, mask_type=None,
):
    if mask is not None and mask_type not in (None, 0):
        # mask_type 1 (key padding) and 2 (merged) broadcast differently; not needed so far.
        raise LoweringError("TransformerEncoderLayer fast path with a key-padding mask is not supported")
    x = src
    if norm_first:
        x = F.layer_norm(x, (embed_dim,), norm1_w, norm1_b, eps)
    x = _attention(x, embed_dim, num_heads, qkv_w, qkv_b, proj_w, proj_b, mask) + src
    if not norm_first:
        x = F.layer_norm(x, (embed_dim,), norm1_w, norm1_b, eps)
    residual = x
    if norm_first:
        x = F.layer_norm(x, (embed_dim,), norm2_w, norm2_b, eps)
    h = F.linear(x, ffn1_w, ffn1_b)
    h = F.gelu(h) if use_gelu else F.relu(h)
    x = F.linear(h, ffn2_w, ffn2_b) + residual
    if not norm_first:
        x = F.layer_norm(x, (embed_dim,), norm2_w, norm2_b, eps)
    return x


_REWRITES = {
    torch._transformer_encoder_layer_fwd: transformer_encoder_layer,
    torch.ops.aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer,
}


def decompose(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Replaces fused kernels in place; returns the module (recompiled if anything changed)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _REWRITES:
            node.target = _REWRITES[node.target]
            changed = True
    if changed:
        gm.recompile()
    return gm
