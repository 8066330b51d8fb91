# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""F.normalize and a vector norm, as embedding heads use them: Linear(32, 64) → F.normalize(dim=-1)
(both exporters write ReduceL2 → Clip → Expand → Div, fused into QNN L2Norm), and the L2 norm of
the features scaled past fp16's sum-of-squares range (ReduceL2 alone, expanded), batch 4.

Run: python3 tests/models/normalize/gen.py OUT_DIR [--dynamo]   (see tests/models/common/export.py)
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 64)

    def forward(self, x):
        h = self.proj(x)
        return F.normalize(h, dim=-1), torch.linalg.vector_norm(h * 100.0, dim=-1)


def build():
    return Head(), [torch.randn(4, 32)], ["x"]


if __name__ == "__main__":
    export.main(build)
