# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""nn.GroupNorm on conv features (4-D) and on a sequence (3-D), and nn.InstanceNorm1d: both
exporters write GroupNorm as Reshape → rank-3 InstanceNormalization (unit scale, zero bias) →
Reshape → Mul → Add, which lowers to one QNN LayerNorm and the affine; batch 2.

Run: python3 tests/models/group_norm/gen.py OUT_DIR [--dynamo]   (see tests/models/common/export.py)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


class Norms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.gn4 = torch.nn.GroupNorm(4, 8)
        self.gn3 = torch.nn.GroupNorm(2, 6)
        self.in1d = torch.nn.InstanceNorm1d(6, affine=True)
        for m in (self.gn4, self.gn3, self.in1d):
            torch.nn.init.normal_(m.weight)
            torch.nn.init.normal_(m.bias)

    def forward(self, img, seq):
        return self.gn4(self.conv(img)), self.gn3(seq), self.in1d(seq)


def build():
    return Norms(), [torch.randn(2, 3, 8, 8), torch.randn(2, 6, 16)], ["img", "seq"]


if __name__ == "__main__":
    export.main(build)
