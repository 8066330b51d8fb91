# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""The MLPs of timm's ConvNeXt, FastViT and EfficientFormerV2 in plain torch: 1x1 Convs around
an exact `nn.GELU()` (whose erf chain must fuse into one Gelu, passes/fuse_gelu.rs, before
fold_conv takes its trailing `* 0.5` into the next Conv), on NCHW data the layout pass makes
channel-last; 1x3x16x16.

- ConvNeXt (`conv_mlp=True`, convnext_atto..nano): 7x7 depthwise Conv, LayerNorm over channels
  (permute, LN, permute back), Conv1x1 -> GELU -> Conv1x1, a per-channel layer scale and the
  residual; and ConvNeXt's default block (convnext_tiny and up), the same MLP as Linear ->
  GELU -> Linear on channel-last data between the permutes;
- FastViT's ConvMlp: depthwise Conv + BatchNorm, Conv1x1 -> GELU -> Conv1x1, residual;
- EfficientFormerV2's Mlp: Conv1x1 + BN -> GELU -> depthwise 3x3 + BN -> GELU -> Conv1x1 + BN.

Run: python3 tests/models/convnext_block/gen.py OUT_DIR [--dynamo]
"""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


class ConvNeXtBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.fc1 = nn.Conv2d(c, 4 * c, 1)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(4 * c, c, 1)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.norm(self.dw(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        y = self.fc2(self.act(self.fc1(y)))
        return x + y * self.gamma.reshape(1, -1, 1, 1)


class ConvNeXtLinearBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.fc1 = nn.Linear(c, 4 * c)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.fc2(self.act(self.fc1(self.norm(self.dw(x).permute(0, 2, 3, 1)))))
        return x + (y * self.gamma).permute(0, 3, 1, 2)


class FastVitConvMlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(c, c, 7, padding=3, groups=c, bias=False), nn.BatchNorm2d(c))
        self.fc1 = nn.Conv2d(c, 3 * c, 1)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(3 * c, c, 1)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.conv(x))))


class EfficientFormerV2Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = 4 * c
        self.fc1 = nn.Conv2d(c, h, 1)
        self.norm1 = nn.BatchNorm2d(h)
        self.act = nn.GELU()
        self.mid = nn.Conv2d(h, h, 3, padding=1, groups=h)
        self.mid_norm = nn.BatchNorm2d(h)
        self.fc2 = nn.Conv2d(h, c, 1)
        self.norm2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.act(self.norm1(self.fc1(x)))
        y = self.act(self.mid_norm(self.mid(y)))
        return x + self.norm2(self.fc2(y))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 2, stride=2)
        self.blocks = nn.Sequential(ConvNeXtBlock(16), ConvNeXtLinearBlock(16), FastVitConvMlp(16), EfficientFormerV2Mlp(16))
        self.head = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def build():
    m = export.refresh_bn_stats(Net(), lambda: [torch.randn(8, 3, 16, 16)])
    return m, [torch.randn(1, 3, 16, 16)], ["x"]


if __name__ == "__main__":
    export.main(build)
