# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""Phi-3's partial rotary embedding with the whole head rotated: `q[..., :rot]` is rotated and
concatenated with `q[..., rot:]`, which is empty (`[1, 2, 8, 0]`) when rot is the head size;
lowering drops the empty slice instead of refusing it. Batch 1, 2 heads, 8 positions, head 32.

Run: python3 tests/models/rotary/gen.py OUT_DIR [--dynamo]   (see tests/models/common/export.py)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class PartialRotary(torch.nn.Module):
    def __init__(self, head=32, rot=32, positions=8):
        super().__init__()
        self.rot = rot
        inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
        f = torch.outer(torch.arange(positions).float(), inv)
        emb = torch.cat((f, f), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.proj = torch.nn.Linear(head, head)

    def forward(self, q):
        q = self.proj(q)
        q_rot, q_pass = q[..., : self.rot], q[..., self.rot:]
        q_rot = q_rot * self.cos + rotate_half(q_rot) * self.sin
        return torch.cat((q_rot, q_pass), dim=-1)


def build():
    return PartialRotary(), [torch.randn(1, 2, 8, 32)], ["q"]


if __name__ == "__main__":
    export.main(build)
