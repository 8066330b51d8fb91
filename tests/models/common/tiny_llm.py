"""The tiny LLM of the artifact tests (tests/python/test_llm_artifact.py,
tests/models/llm_tiny/gen.py for engine/tests/llm_htp.rs): a random-weight 2-layer Llama-style
decoder from ``decoders`` (vocabulary 512, ids 0 and 1 BOS and EOS) and a byte-level BPE
tokenizer trained here on two sentences (300 tokens, ``<s>`` 0 and ``</s>`` 1) with a small
chat template. Nothing is downloaded."""

from __future__ import annotations

import decoders
import tokenizers
import torch
import transformers

TEXT = ["the quick brown fox jumps over the lazy dog", "hello world, this is a tiny tokenizer for tests"]
TEMPLATE = (
    "{% for m in messages %}{{ bos_token }}{{ m['role'] }}: {{ m['content'] | trim }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def model() -> torch.nn.Module:
    return decoders.build("llama", hidden=64, layers=2, vocab=512, max_positions=256)


def tokenizer() -> transformers.PreTrainedTokenizerFast:
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXT * 20, vocab_size=300, min_frequency=1, special_tokens=["<s>", "</s>"], show_progress=False)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>")
    fast.chat_template = TEMPLATE
    return fast


def eager_greedy(m: torch.nn.Module, ids: list[int], n: int) -> list[int]:
    """``n`` greedy tokens of eager float32 PyTorch after ``ids`` (EOS does not stop them)."""
    with torch.no_grad():
        out = m.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(ids) :].tolist()
