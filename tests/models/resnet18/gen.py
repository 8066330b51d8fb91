# /// script
# dependencies = ["torch==2.15.0", "torchvision==0.29.2", "onnx==1.22.0", "numpy"]
# ///
"""torchvision resnet18 with seeded random weights (no download), 1x3x224x224.

BatchNorm running stats are refreshed on random batches (see common/export.py).

Run: python3 tests/models/resnet18/gen.py OUT_DIR [--dynamo]
"""
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


def build():
    m = torchvision.models.resnet18(weights=None)
    m = export.refresh_bn_stats(m, lambda: [torch.randn(4, 3, 224, 224)], batches=2)
    return m, [torch.randn(1, 3, 224, 224)], ["x"]


if __name__ == "__main__":
    export.main(build)
