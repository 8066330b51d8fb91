"""Rotating a decoder's residual stream before it is quantized (QuaRot, Ashkboos et al., 2024;
SpinQuant, Liu et al., 2024, whose fixed-rotation variant Qualcomm's published Llama recipes use).

Why: a trained decoder writes a few massive values into its residual stream (the attention sink:
23,318 in one channel of SmolLM2's layer 11, docs/llm.md), so one per-tensor 16-bit encoding of
a residual sum spans that value and every other token's activations get a coarse step. An
orthogonal matrix ``Q`` applied to the residual stream leaves the float model's function
unchanged (RmsNorm divides by the norm, which ``Q`` keeps) and spreads one channel's value over
all of them: with a randomized Hadamard matrix of size ``d`` a single-channel outlier shrinks by
``sqrt(d)`` (24 for SmolLM2's 576). Weights that read the stream get ``W Q``, those that write
it ``Q^T W``, and their per-channel grids see fewer outliers too.

Done offline, in place, on the float model, before ``torch.compile``:

* each RmsNorm's scale is folded into the Linears that read its output (and set to 1), since a
  per-channel scale does not commute with ``Q``; the final norm's into the LM head, which is
  untied from the embedding table when the two share a tensor;
* the embedding table becomes ``E Q``, the readers (``q/k/v_proj`` or ``qkv_proj``,
  ``gate/up_proj`` or ``gate_up_proj``, the LM head) ``W Q``, the writers (``o_proj``,
  ``down_proj``) ``Q^T W``;
* with ``heads=True`` each value head is rotated too (QuaRot's R2: ``v_proj``'s rows per KV
  head and ``o_proj``'s columns per query head), which spreads the value cache's outliers
  before it is held at 8 bits.

Hadamard matrices are built by Sylvester's doubling from Paley's construction (order ``p + 1``
for a prime ``p = 3 mod 4``: 576 = 72 x 8, 960 = 60 x 16, any power of two); a size with no such
matrix gets a seeded random orthogonal one, which spreads an outlier less (``rotation.kind``
says which). Supported: the Llama-style families (Llama/SmolLM, Mistral, Qwen2, Qwen3, Phi-3).
Gemma's norms scale by ``1 + w`` and normalize the attention output before the residual add,
and LayerNorm subtracts a mean: neither commutes with ``Q``, so those models are refused.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch


#: ``config.model_type`` values whose layers have the shape this module rewrites.
FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3")


@dataclasses.dataclass(frozen=True)
class Rotation:
    """What :func:`rotate_decoder` did: the residual size and the kind of matrix used for it
    (``"hadamard"`` or ``"random orthogonal"``), and the same for the value heads (None when
    ``heads=False``)."""

    hidden: int
    kind: str
    head_dim: Optional[int]
    head_kind: Optional[str]
    untied: bool


def _prime(n: int) -> bool:
    return n >= 2 and all(n % k for k in range(2, math.isqrt(n) + 1))


def hadamard(n: int) -> Optional[torch.Tensor]:
    """A Hadamard matrix of order ``n`` (entries +-1, ``H H^T = n I``) from Sylvester's doubling
    and Paley's first construction, or None when neither reaches ``n``."""
    if n == 1:
        return torch.ones(1, 1, dtype=torch.float64)
    if n % 2 == 0:
        h = hadamard(n // 2)
        if h is not None:
            return torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    p = n - 1
    if _prime(p) and p % 4 == 3:
        residues = {(k * k) % p for k in range(1, p)}
        chi = torch.tensor([0.0] + [1.0 if k in residues else -1.0 for k in range(1, p)],
                           dtype=torch.float64)
        idx = torch.arange(p)
        jacobsthal = chi[(idx[None, :] - idx[:, None]) % p]
        s = torch.zeros(n, n, dtype=torch.float64)
        s[0, 1:] = 1.0
        s[1:, 0] = -1.0
        s[1:, 1:] = jacobsthal
        return s + torch.eye(n, dtype=torch.float64)
    return None


def orthogonal(n: int, generator: torch.Generator) -> tuple[torch.Tensor, str]:
    """A seeded orthogonal matrix of order ``n``: a Hadamard matrix with random signs on its
    rows, scaled to be orthogonal, or a random orthogonal one when no Hadamard is built."""
    signs = torch.randint(0, 2, (n,), generator=generator, dtype=torch.int64).to(torch.float64) * 2 - 1
    h = hadamard(n)
    if h is not None:
        return signs[:, None] * h / math.sqrt(n), "hadamard"
    g = torch.randn(n, n, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(g)
    return q * torch.sign(torch.diagonal(r))[None, :], "random orthogonal"


def _parts(layer, names: tuple[str, ...]):
    return [getattr(layer, n) for n in names if isinstance(getattr(layer, n, None), torch.nn.Linear)]


def _readers(layer) -> tuple[list, list]:
    return (_parts(layer.self_attn, ("q_proj", "k_proj", "v_proj", "qkv_proj")),
            _parts(layer.mlp, ("gate_proj", "up_proj", "gate_up_proj")))


def _check(model) -> tuple:
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        raise ValueError(
            f"rotate_decoder: model_type {kind!r} is not supported (supported: {', '.join(FAMILIES)}); "
            "Gemma's (1 + w) norms and post-attention norms, and LayerNorm's mean, do not commute "
            "with a rotation of the residual stream. Quantize this model without rotating it.")
    body = getattr(model, "model", None)
    head = getattr(model, "lm_head", None)
    if body is None or head is None or not hasattr(body, "layers") or not hasattr(body, "embed_tokens"):
        raise ValueError("rotate_decoder: expected a Hugging Face causal LM (model.model.layers, "
                         "model.model.embed_tokens, model.lm_head)")
    for i, layer in enumerate(body.layers):
        readers, mreaders = _readers(layer)
        if not readers or not mreaders or not hasattr(layer.self_attn, "o_proj") or not hasattr(layer.mlp, "down_proj"):
            raise ValueError(f"rotate_decoder: layer {i} does not have the Llama-style projections")
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            if isinstance(norm, torch.nn.LayerNorm) or getattr(norm, "bias", None) is not None:
                raise ValueError(f"rotate_decoder: layer {i}'s norm subtracts a mean or adds a bias; "
                                 "only RmsNorm commutes with a rotation")
    return config, body, head


def _fold_norm(norm, linears) -> None:
    gamma = norm.weight.data.to(torch.float64)
    for lin in linears:
        lin.weight.data = (lin.weight.data.to(torch.float64) * gamma[None, :]).to(lin.weight.dtype)
    norm.weight.data = torch.ones_like(norm.weight.data)


def _read(lin, q) -> None:
    lin.weight.data = (lin.weight.data.to(torch.float64) @ q).to(lin.weight.dtype)


def _write(lin, q) -> None:
    lin.weight.data = (q.T @ lin.weight.data.to(torch.float64)).to(lin.weight.dtype)
    if lin.bias is not None:
        lin.bias.data = (q.T @ lin.bias.data.to(torch.float64)).to(lin.bias.dtype)


def _value_rows(attn, config, head_dim: int):
    """(Linear, first row) of the value projection: ``v_proj`` from row 0, or ``qkv_proj`` after
    the query and key rows."""
    if isinstance(getattr(attn, "v_proj", None), torch.nn.Linear):
        return attn.v_proj, 0
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    return attn.qkv_proj, (heads + kv) * head_dim


def _rotate_heads(attn, config, r2, head_dim: int) -> None:
    lin, start = _value_rows(attn, config, head_dim)
    kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    w = lin.weight.data.to(torch.float64)
    v = w[start:start + kv * head_dim].reshape(kv, head_dim, -1)
    w[start:start + kv * head_dim] = (r2.T @ v).reshape(kv * head_dim, -1)
    lin.weight.data = w.to(lin.weight.dtype)
    if lin.bias is not None:
        b = lin.bias.data.to(torch.float64)
        b[start:start + kv * head_dim] = (b[start:start + kv * head_dim].reshape(kv, head_dim) @ r2).reshape(-1)
        lin.bias.data = b.to(lin.bias.dtype)
    o = attn.o_proj.weight.data.to(torch.float64)
    d = o.shape[0]
    attn.o_proj.weight.data = (o.reshape(d, -1, head_dim) @ r2).reshape(d, -1).to(attn.o_proj.weight.dtype)


@torch.no_grad()
def fold_norms(model) -> bool:
    """Fold each RmsNorm's scale into the Linears that read its output, in place (the first step
    of :func:`rotate_decoder`, and the whole of it with ``Q = I``), untying a tied LM head;
    returns whether the head was untied. The float function is unchanged."""
    config, body, head = _check(model)
    untied = head.weight is body.embed_tokens.weight or head.weight.data_ptr() == body.embed_tokens.weight.data_ptr()
    if untied:
        head.weight = torch.nn.Parameter(head.weight.data.clone(), requires_grad=False)
        config.tie_word_embeddings = False
    for layer in body.layers:
        attn, mlp = _readers(layer)
        _fold_norm(layer.input_layernorm, attn)
        _fold_norm(layer.post_attention_layernorm, mlp)
    _fold_norm(body.norm, [head])
    return untied


@torch.no_grad()
def rotate_decoder(model, *, seed: int = 0, heads: bool = True) -> Rotation:
    """Rotate a Hugging Face decoder's residual stream (and, with ``heads``, each value head) in
    place, leaving its float function unchanged up to rounding; call it on the float model
    before compiling it with ``quantize``. ``seed`` picks the random signs. Returns what was
    done. Raises ValueError for a family whose norms do not commute with a rotation (Gemma,
    LayerNorm models), before changing anything."""
    config, body, head = _check(model)
    hidden = body.embed_tokens.weight.shape[1]
    gen = torch.Generator().manual_seed(seed)
    q, kind = orthogonal(hidden, gen)
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    r2, head_kind = orthogonal(head_dim, gen) if heads else (None, None)

    untied = fold_norms(model)
    emb = body.embed_tokens.weight
    emb.data = (emb.data.to(torch.float64) @ q).to(emb.dtype)
    for layer in body.layers:
        attn, mlp = _readers(layer)
        for lin in attn + mlp:
            _read(lin, q)
        if r2 is not None:
            _rotate_heads(layer.self_attn, config, r2, head_dim)
        _write(layer.self_attn.o_proj, q)
        _write(layer.mlp.down_proj, q)
    _read(head, q)
    return Rotation(hidden=hidden, kind=kind, head_dim=head_dim if heads else None, head_kind=head_kind,
                    untied=untied)
