"""Random-weight Hugging Face decoders built from configs (no downloads), shared by
tests/python/test_llm.py, bench/llm.py and scripts/crash-hunt: GPT-2, Llama-style (RMSNorm,
rotary positions, SiLU MLP, grouped-query attention), Qwen2-style (the same with QKV biases) and
Gemma-style (GeGLU MLP, scaled embeddings), eager attention. ``kv_heads`` picks the attention
variant: as many as the query heads (multi-head), fewer (grouped-query) or 1 (multi-query)."""

from __future__ import annotations

import torch
import transformers

KINDS = ("gpt2", "llama", "qwen2", "gemma")


def build(
    kind: str,
    *,
    hidden: int,
    layers: int,
    vocab: int,
    max_positions: int,
    seed: int = 0,
    heads: int = 4,
    kv_heads: int = 2,
) -> torch.nn.Module:
    """The model in eval mode; token ids 0 and 1 are BOS/pad and EOS. GPT-2 has no KV-head
    setting (multi-head attention, one head per 32 channels)."""
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, bos_token_id=0, eos_token_id=1, pad_token_id=0)
    if kind == "gpt2":
        # initializer_range 0.3: with GPT-2's default 0.02 a random model repeats one token.
        cfg = transformers.GPT2Config(
            n_embd=hidden, n_layer=layers, n_head=hidden // 32, n_positions=max_positions, initializer_range=0.3, **common
        )
    elif kind in ("llama", "qwen2", "gemma"):
        cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config, "gemma": transformers.GemmaConfig}[kind]
        cfg = cls(
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=hidden // heads,
            max_position_embeddings=max_positions,
            **common,
        )
    else:
        raise ValueError(f"unknown decoder kind {kind!r}; known: {KINDS}")
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.config._attn_implementation = "eager"
    return model.eval()
