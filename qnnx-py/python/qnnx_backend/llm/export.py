"""A Hugging Face decoder as graphs with explicit I/O: ``DecoderStep`` runs ``tokens`` tokens at
once (1 for the decode graph, a prompt bucket for prefill) against a KV cache given as graph
inputs, and returns the logits and this step's new key and value rows; the host owns the cache
and writes the new rows itself (``qnnx_engine::llm`` in Rust).

Graph inputs, in this order (``io_names``):

* ``input_ids`` int32 ``[1, T]``;
* ``position_ids`` int32 ``[1, T]``: each token's position, which picks its rotary angles from
  a table of ``cache_len`` rows computed here in float32 by the model's own rotary module
  (angles of positions in the hundreds computed in fp16 on the HTP would be off by tenths of a
  radian);
* ``attention_mask`` float32 ``[1, 1, T, cache_len + T]``, additive: 0 where a query may look,
  ``MASKED`` elsewhere; columns ``0..cache_len`` are the cache slots, the last ``T`` this step's
  tokens;
* ``past_key_<l>``, ``past_value_<l>`` float32 ``[1, kv_heads, cache_len, head_dim]`` per layer
  (keys after the rotary embedding), slot ``p`` holding position ``p``.

Outputs: ``logits`` ``[1, T, vocab]``, then ``new_key_<l>``, ``new_value_<l>``
``[1, kv_heads, T, head_dim]`` per layer.

A shard (``DecoderStep(..., span=(a, b))``) runs layers ``a..b`` only: a shard after the first
takes ``hidden_in`` float32 ``[1, T, hidden]`` instead of ``input_ids``, one before the last
returns ``hidden_out`` (the residual stream after layer ``b - 1``) instead of ``logits``, and the
cache inputs and outputs are those of its layers (numbered as in the whole model). The shards of
a graph run one after another, each holding its own layers' weights only.

Supported families: Llama-style decoders (``llama``, ``mistral`` without a sliding window,
``qwen2``, ``qwen3``; Qwen3's per-head q/k norms included). Others are refused by name."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any

import torch

#: The attention mask's value where a query must not look: far below any attention score, and
#: finite in fp16 (a row of -inf would be NaN after the softmax's max subtraction).
MASKED = -10000.0
#: ``config.model_type`` values ``DecoderStep`` implements.
FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


@dataclass(frozen=True)
class Shape:
    """What the artifact's manifest and the host loop need to know of the model."""

    family: str
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    max_positions: int

    @staticmethod
    def of(model: torch.nn.Module) -> "Shape":
        cfg = model.config
        family = getattr(cfg, "model_type", "?")
        if family not in FAMILIES:
            raise ValueError(
                f"model type {family!r} is not supported by the LLM artifact builder yet; supported: "
                f"{', '.join(FAMILIES)} (Llama-style decoders)"
            )
        if family == "mistral" and getattr(cfg, "sliding_window", None):
            raise ValueError("Mistral with a sliding window is not supported yet: its layers mask differently")
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        return Shape(
            family=family,
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.hidden_size,
            layers=cfg.num_hidden_layers,
            heads=heads,
            kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            max_positions=getattr(cfg, "max_position_embeddings", 0) or 0,
        )


def io_names(layers: int, span: tuple[int, int] | None = None) -> tuple[list[str], list[str]]:
    """The graphs' input and output names in order (the Rust side checks them); of the shard
    holding layers ``span[0]..span[1]`` when given."""
    first, last = span or (0, layers)
    inputs = ["input_ids" if first == 0 else "hidden_in", "position_ids", "attention_mask"]
    outputs = ["logits" if last == layers else "hidden_out"]
    for i in range(first, last):
        inputs += [f"past_key_{i}", f"past_value_{i}"]
        outputs += [f"new_key_{i}", f"new_value_{i}"]
    return inputs, outputs


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecoderStep(torch.nn.Module):
    """``tokens`` tokens through the decoder against an explicit cache of ``cache_len`` slots
    (module docstring). Uses the model's own modules (embedding, norms, projections, MLP, LM
    head), so its float32 outputs are the model's."""

    def __init__(
        self, model: torch.nn.Module, cache_len: int, tokens: int, span: tuple[int, int] | None = None
    ) -> None:
        super().__init__()
        self.shape = Shape.of(model)
        self.cache_len, self.tokens = cache_len, tokens
        self.span = span or (0, self.shape.layers)
        a, b = self.span
        if not 0 <= a < b <= self.shape.layers:
            raise ValueError(f"layers {a}..{b}: not a span of the model's {self.shape.layers} layers")
        inner = model.model
        # Only the span's modules are attributes, so a shard's export holds only their weights.
        self.layers = inner.layers[a:b]
        self.embed = inner.embed_tokens if a == 0 else None
        self.norm, self.lm_head = (inner.norm, model.lm_head) if b == self.shape.layers else (None, None)
        first = self.layers[0].self_attn
        self.scaling = float(getattr(first, "scaling", self.shape.head_dim**-0.5))
        with torch.no_grad():
            probe = torch.zeros(1, dtype=torch.float32)
            cos, sin = inner.rotary_emb(probe, torch.arange(cache_len)[None])
        self.register_buffer("cos", cos[0].float().clone(), persistent=False)
        self.register_buffer("sin", sin[0].float().clone(), persistent=False)

    def forward(self, x, position_ids, attention_mask, *past):  # type: ignore[no-untyped-def]
        s = self.shape
        t = self.tokens
        groups = s.heads // s.kv_heads
        if self.embed is not None:
            x = self.embed(x)
        cos = torch.nn.functional.embedding(position_ids, self.cos).unsqueeze(1)
        sin = torch.nn.functional.embedding(position_ids, self.sin).unsqueeze(1)
        new = []
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_proj(h).view(1, t, s.heads, s.head_dim)
            k = a.k_proj(h).view(1, t, s.kv_heads, s.head_dim)
            v = a.v_proj(h).view(1, t, s.kv_heads, s.head_dim).transpose(1, 2)
            if hasattr(a, "q_norm"):
                q, k = a.q_norm(q), a.k_norm(k)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys = torch.cat([past[2 * i], k], dim=2)
            values = torch.cat([past[2 * i + 1], v], dim=2)
            if groups > 1:
                n = self.cache_len + t
                keys = keys[:, :, None].expand(1, s.kv_heads, groups, n, s.head_dim).reshape(1, s.heads, n, s.head_dim)
                values = values[:, :, None].expand(1, s.kv_heads, groups, n, s.head_dim).reshape(1, s.heads, n, s.head_dim)
            scores = torch.matmul(q, keys.transpose(2, 3)) * self.scaling + attention_mask
            probs = torch.softmax(scores, dim=-1)
            o = torch.matmul(probs, values).transpose(1, 2).reshape(1, t, s.heads * s.head_dim)
            x = x + a.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            new += [k, v]
        if self.lm_head is None:
            return (x, *new)
        return (self.lm_head(self.norm(x)), *new)

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """Inputs of the graph's shapes: the first ``tokens`` positions of an empty cache."""
        s, t, c = self.shape, self.tokens, self.cache_len
        ids = torch.zeros(1, t, dtype=torch.int32) if self.embed is not None else torch.zeros(1, t, s.hidden_size)
        pos = torch.arange(t, dtype=torch.int32)[None]
        mask = torch.full((1, 1, t, c + t), MASKED)
        mask[0, 0, :, c:] = torch.triu(torch.full((t, t), MASKED), diagonal=1)
        past = [torch.zeros(1, s.kv_heads, c, s.head_dim) for _ in range(2 * len(self.layers))]
        return (ids, pos, mask, *past)


def onnx_bytes(step: DecoderStep) -> bytes:
    """``step`` as ONNX (opset 17, the TorchScript exporter: about ten times faster than
    dynamo's on these graphs), weights inside (a 135M-parameter model is 0.54 GB)."""
    names, outs = io_names(step.shape.layers, step.span)
    # The TorchScript export as compiling/to_onnx.py's torchscript_bytes spells it, written out
    # here: this module imports nothing from the package, so that the engine's Rust tests load it
    # from its file without an installed qnnx_backend (tests/models/llm_tiny/gen.py).
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            step.eval(),
            step.example_inputs(),
            buf,
            dynamo=False,
            opset_version=17,
            input_names=names,
            output_names=outs,
            do_constant_folding=True,
        )
    return buf.getvalue()


def run_eager(step: DecoderStep, *inputs: Any) -> tuple[torch.Tensor, ...]:
    """``step`` in float32 PyTorch, for checks against the compiled graph."""
    with torch.no_grad():
        return step(*inputs)
