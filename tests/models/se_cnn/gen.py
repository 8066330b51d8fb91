# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""CNN of the reductions and concats the layout pass keeps channel-last (issue 22):
squeeze-and-excitation blocks as timm writes them (`x.mean((2, 3), keepdim=True)` into two 1x1
convs, and a `amax` variant), a channel max into a conv (CBAM-style spatial attention), a
DenseNet-style concat of conv outputs on channels, and a classifier head `x.mean((2, 3))`
without keepdim into a Linear; 1x3x32x32.

Run: python3 tests/models/se_cnn/gen.py OUT_DIR [--dynamo]
"""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


class SE(nn.Module):
    def __init__(self, c, use_max=False):
        super().__init__()
        self.reduce = nn.Conv2d(c, c // 4, 1)
        self.expand = nn.Conv2d(c // 4, c, 1)
        self.use_max = use_max

    def forward(self, x):
        s = x.amax((2, 3), keepdim=True) if self.use_max else x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(torch.relu(self.reduce(s))))


class SeCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.se1 = SE(16)
        self.grow = nn.Sequential(nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 8, 3, padding=1))
        self.se2 = SE(24, use_max=True)
        self.attn = nn.Conv2d(1, 1, 3, padding=1)
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        x = self.se1(self.stem(x))
        x = torch.cat([x, self.grow(x)], 1)
        x = self.se2(x)
        x = x * torch.sigmoid(self.attn(x.amax(1, keepdim=True)))
        return self.fc(x.mean((2, 3)))


def build():
    m = export.refresh_bn_stats(SeCnn(), lambda: [torch.randn(8, 3, 32, 32)])
    return m, [torch.randn(1, 3, 32, 32)], ["x"]


if __name__ == "__main__":
    export.main(build)
