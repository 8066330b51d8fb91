# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""Rank-6 transposes, which QNN's HTP refuses ("incorrect Rank 6"): nn.PixelUnshuffle(2) (both
exporters write Reshape → Transpose(rank 6) → Reshape) on [2, 3, 8, 12], and Swin's window
partition and reverse (view → permute(0, 1, 3, 2, 4, 5) → view, window 4) on [2, 8, 12, 5];
lowering merges the axes each permutation keeps together (passes/rank6.rs).

Run: python3 tests/models/rank6/gen.py OUT_DIR [--dynamo]   (see tests/models/common/export.py)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402

WS = 4


class Rank6(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.unshuffle = torch.nn.PixelUnshuffle(2)

    def forward(self, img, feat):
        b, h, w, c = feat.shape
        win = feat.view(b, h // WS, WS, w // WS, WS, c).permute(0, 1, 3, 2, 4, 5)
        win = win.contiguous().view(-1, WS, WS, c) * 2.0
        back = win.view(b, h // WS, w // WS, WS, WS, c).permute(0, 1, 3, 2, 4, 5)
        return self.unshuffle(img), win, back.contiguous().view(b, h, w, c)


def build():
    return Rank6(), [torch.randn(2, 3, 8, 12), torch.randn(2, 8, 12, 5)], ["img", "feat"]


if __name__ == "__main__":
    export.main(build)
