"""Random-weight Hugging Face decoders built from configs (no downloads), shared by
tests/python/test_llm.py and bench/llm.py: GPT-2, Llama-style (RMSNorm, rotary positions,
SiLU MLP, grouped-query attention) and Qwen2-style (the same with QKV biases), eager attention."""

from __future__ import annotations

import torch
import transformers

KINDS = ("gpt2", "llama", "qwen2")


def build(kind: str, *, hidden: int, layers: int, vocab: int, max_positions: int, seed: int = 0) -> torch.nn.Module:
    """The model in eval mode; token ids 0 and 1 are BOS/pad and EOS."""
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, bos_token_id=0, eos_token_id=1, pad_token_id=0)
    if kind == "gpt2":
        # initializer_range 0.3: with GPT-2's default 0.02 a random model repeats one token.
        cfg = transformers.GPT2Config(
            n_embd=hidden, n_layer=layers, n_head=hidden // 32, n_positions=max_positions, initializer_range=0.3, **common
        )
    elif kind in ("llama", "qwen2"):
        cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[kind]
        cfg = cls(
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=max_positions,
            **common,
        )
    else:
        raise ValueError(f"unknown decoder kind {kind!r}; known: {KINDS}")
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.config._attn_implementation = "eager"
    return model.eval()
