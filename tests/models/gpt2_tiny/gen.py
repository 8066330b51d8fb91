# /// script
# dependencies = ["torch==2.15.0", "transformers==5.23.0", "onnx==1.22.0", "onnxscript==0.7.2", "numpy"]
# ///
"""A tiny GPT-2 (2 layers, 4 heads, 64 wide, vocab 256) from a transformers config with seeded
random weights (nothing downloaded: HF_HUB_OFFLINE=1), eager attention, no KV cache. Input:
token ids 1x16 (int64); output: the logits 1x16x256.

Run: python3 tests/models/gpt2_tiny/gen.py OUT_DIR [--dynamo]
"""
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        # An explicit all-ones mask: without one, transformers looks for packed sequences in the
        # position ids with torch.diff, which the TorchScript exporter cannot export.
        mask = torch.ones_like(input_ids)
        return self.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits


def build():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=256,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        attn_implementation="eager",
    )
    m = GPT2LMHeadModel(cfg)
    ids = torch.randint(0, cfg.vocab_size, (1, 16), dtype=torch.int64)
    return Logits(m), [ids], ["input_ids"]


if __name__ == "__main__":
    export.main(build)
