# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""nn.LSTM (2 layers, bidirectional, batch_first, given initial states) feeding nn.GRU
(batch_first, zero initial state): both exporters write ONNX LSTM and GRU nodes
(linear_before_reset 1), which lowering unrolls over the 7 time steps; batch 2.

Run: python3 tests/models/rnn/gen.py OUT_DIR [--dynamo]   (see tests/models/common/export.py)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(3, 8, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = torch.nn.GRU(16, 5, batch_first=True)

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        z, hz = self.gru(y)
        return y, h, c, z, hz


def build():
    inputs = [torch.randn(2, 7, 3), torch.randn(4, 2, 8), torch.randn(4, 2, 8)]
    return Recurrent(), inputs, ["x", "h0", "c0"]


if __name__ == "__main__":
    export.main(build)
