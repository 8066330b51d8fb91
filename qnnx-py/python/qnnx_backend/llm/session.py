"""``LlmSession``: an LLM artifact from Python without torch (nor numpy): the artifact checks,
tokenizer, chat template, KV cache, sampling and timings are the Rust ones ``qnnx generate``
uses (``qnnx_engine::llm`` through ``_native.LlmArtifact``), so the same options give the same
tokens.

    from qnnx_backend.llm.session import LlmSession
    s = LlmSession("smollm2")
    out = s.generate(messages=[{"role": "user", "content": "Hi"}], max_new_tokens=32, on_text=print)
    out["text"], out["tokens"], out["first_token_ms"]
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from .. import _native


class LlmSession:
    """An opened artifact (``python -m qnnx_backend.llm build``). ``soc_model``, when given, is
    this device's SoC: an artifact built for another is refused (``SavedModelError``, as every
    damaged, foreign or incomplete artifact is)."""

    def __init__(self, path: Union[str, os.PathLike], soc_model: Optional[int] = None) -> None:
        self._art = _native.LlmArtifact(os.fspath(path), soc_model)
        self.manifest: dict = json.loads(self._art.manifest)
        self.open_ms: float = self._art.open_ms

    def encode(self, text: str, special: bool = True) -> list[int]:
        """Token ids of ``text``; ``special`` adds the tokenizer's own special tokens (as
        transformers' ``tokenizer(text)``)."""
        return self._art.encode(text, special)

    def decode(self, ids: Sequence[int]) -> str:
        return self._art.decode(list(ids))

    def chat_prompt(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The prompt text of ``messages`` through the artifact's chat template, the assistant's
        turn opened (as ``apply_chat_template(..., add_generation_prompt=True)``)."""
        return self._art.chat_prompt([(m["role"], m["content"]) for m in messages])

    def generate(
        self,
        prompt: Union[str, Sequence[int], None] = None,
        *,
        messages: Optional[Sequence[Mapping[str, str]]] = None,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop: Sequence[str] = (),
        on_text: Optional[Callable[[str], Any]] = None,
    ) -> dict:
        """Generates from a raw ``prompt`` (text, or token ids) or chat ``messages``; greedy
        unless ``temperature`` is above 0. ``on_text(piece)`` gets the text as it becomes final
        (returning False stops). Returns ``prompt_tokens``, ``tokens``, ``text``, ``stop``
        (``stop_token``, ``stop_string``, ``max_tokens`` or ``cancelled``) and the timings
        (``first_token_ms``, ``prefill_ms``, ``decode_ms``, ``decode_steps``, ``execute_ms``,
        ``host_share``)."""
        if (prompt is None) == (messages is None):
            raise ValueError("pass a prompt or messages, one of them")
        if messages is not None:
            ids = self.encode(self.chat_prompt(messages), special=False)
        elif isinstance(prompt, str):
            ids = self.encode(prompt, special=True)
        else:
            ids = [int(i) for i in prompt]
        out = self._art.generate(ids, max_new_tokens, temperature, top_k, top_p, seed, list(stop), on_text)
        return json.loads(out)
