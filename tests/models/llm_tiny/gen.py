# /// script
# dependencies = ["torch==2.15.0", "transformers==5.23.0", "tokenizers"]
# ///
"""The tiny LLM of engine/tests/llm_htp.rs as the parts of an artifact before compiling: the
decode and prefill (16 tokens) graphs of ``qnnx_backend/llm/export.py`` (loaded from its file,
so that the package and its native module need not be installed: cargo's tests run before the
wheel is built) over a cache of 64 positions, the tokenizer, chat template and special tokens,
and the eager float32 reference. The model and tokenizer are ``tests/models/common/tiny_llm.py``.

Run: python3 tests/models/llm_tiny/gen.py OUT_DIR

Writes OUT_DIR/decode.onnx, prefill-16.onnx, the same as two shards of one layer each
(decode.shard0.onnx, decode.shard1.onnx, prefill-16.shard0.onnx, prefill-16.shard1.onnx), tokenizer.json, chat_template.jinja, parts.json
(model shape, cache length, mask value, tokens: what the builder's manifest says of them) and
expected.json (for two prompts, one and two prefill chunks: the text, transformers' token ids
and eager PyTorch's 16 greedy tokens).
"""
import dataclasses
import importlib.util
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import tiny_llm  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "llm_export", os.path.join(HERE, "..", "..", "..", "qnnx-py", "python", "qnnx_backend", "llm", "export.py")
)
export = importlib.util.module_from_spec(spec)
sys.modules["llm_export"] = export  # dataclasses look their module up
spec.loader.exec_module(export)

NEW_TOKENS, CACHE_LEN, PREFILL = 16, 64, 16

out = sys.argv[1]
model, tok = tiny_llm.model(), tiny_llm.tokenizer()
for name, tokens in (("decode", 1), (f"prefill-{PREFILL}", PREFILL)):
    with open(os.path.join(out, f"{name}.onnx"), "wb") as f:
        f.write(export.onnx_bytes(export.DecoderStep(model, CACHE_LEN, tokens)))
    for i, span in enumerate([(0, 1), (1, 2)]):
        with open(os.path.join(out, f"{name}.shard{i}.onnx"), "wb") as f:
            f.write(export.onnx_bytes(export.DecoderStep(model, CACHE_LEN, tokens, span)))
tok.backend_tokenizer.save(os.path.join(out, "tokenizer.json"))
with open(os.path.join(out, "chat_template.jinja"), "w") as f:
    f.write(tok.chat_template)
parts = {
    "model": dataclasses.asdict(export.Shape.of(model)),
    "cache_len": CACHE_LEN,
    "prefill": PREFILL,
    "masked": export.MASKED,
    "tokens": {"bos": tok.bos_token_id, "eos": 1, "stop": [1], "pad": 0},
}
with open(os.path.join(out, "parts.json"), "w") as f:
    json.dump(parts, f, indent=1)
cases = []
for n in (5, 21):
    ids = torch.randint(2, 300, (n,), generator=torch.Generator().manual_seed(n)).tolist()
    text = tok.decode(ids)
    prompt = tok(text)["input_ids"]
    cases.append({"text": text, "prompt": prompt, "greedy": tiny_llm.eager_greedy(model, prompt, NEW_TOKENS)})
    print(f"{len(prompt)} prompt tokens: greedy {cases[-1]['greedy']}")
with open(os.path.join(out, "expected.json"), "w") as f:
    json.dump({"new_tokens": NEW_TOKENS, "cases": cases}, f, indent=1)
