# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""MLP: Linear(32, 64) → ReLU → Linear(64, 64) → GELU → Linear(64, 10), batch 4.

Run: python3 tests/models/mlp/gen.py OUT_DIR [--dynamo]   (see tests/models/common/export.py)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


def build():
    m = torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.GELU(),
        torch.nn.Linear(64, 10),
    )
    return m, [torch.randn(4, 32)], ["x"]


if __name__ == "__main__":
    export.main(build)
