# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""Small CNN: two Conv+BatchNorm+ReLU+MaxPool stages, global average pool, Linear; 1x3x32x32.

BatchNorm running stats are refreshed on random batches (see common/export.py).

Run: python3 tests/models/small_cnn/gen.py OUT_DIR [--dynamo]
"""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, stride=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AvgPool2d(2),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def build():
    m = export.refresh_bn_stats(SmallCnn(), lambda: [torch.randn(8, 3, 32, 32)])
    return m, [torch.randn(1, 3, 32, 32)], ["x"]


if __name__ == "__main__":
    export.main(build)
