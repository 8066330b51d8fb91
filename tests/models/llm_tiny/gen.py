# /// script
# dependencies = ["torch==2.15.0", "transformers==5.23.0", "tokenizers", "qnnx_backend"]
# ///
"""The tiny LLM artifact of engine/tests/llm_htp.rs, built by the real builder
(``qnnx_backend.llm.build.build_from``: cache 64 positions, one prefill bucket of 16 tokens,
SoC 60) from ``tests/models/common/tiny_llm.py``, and the eager float32 reference.

Run: python3 tests/models/llm_tiny/gen.py OUT_DIR

Writes OUT_DIR/artifact/ and OUT_DIR/expected.json: for two prompts (one and two prefill
chunks) the text, transformers' token ids and eager PyTorch's 16 greedy tokens.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import tiny_llm  # noqa: E402
from qnnx_backend.llm import build  # noqa: E402

NEW_TOKENS = 16

out = sys.argv[1]
model, tok = tiny_llm.model(), tiny_llm.tokenizer()
build.build_from(model, tok, os.path.join(out, "artifact"), soc_model=60, cache_len=64, prefill=[16])
cases = []
for n in (5, 21):
    ids = torch.randint(2, 300, (n,), generator=torch.Generator().manual_seed(n)).tolist()
    text = tok.decode(ids)
    prompt = tok(text)["input_ids"]
    cases.append({"text": text, "prompt": prompt, "greedy": tiny_llm.eager_greedy(model, prompt, NEW_TOKENS)})
    print(f"{len(prompt)} prompt tokens: greedy {cases[-1]['greedy']}")
with open(os.path.join(out, "expected.json"), "w") as f:
    json.dump({"new_tokens": NEW_TOKENS, "cases": cases}, f, indent=1)
