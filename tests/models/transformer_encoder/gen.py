# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True), eval
mode, input 1x16x64.

Run: python3 tests/models/transformer_encoder/gen.py OUT_DIR [--dynamo]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


class Encoder(torch.nn.Module):
    # Wrapped so that the exporter traces only `x`: tracing the layer itself turns its
    # `is_causal=False` default into a tensor, which scaled_dot_product_attention rejects.
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)


def build():
    # The eval-mode fast path is one fused aten op that no ONNX exporter knows; the reference
    # and the export both take the composite path.
    torch.backends.mha.set_fastpath_enabled(False)
    m = Encoder(
        torch.nn.TransformerEncoderLayer(
            d_model=64, nhead=4, dim_feedforward=128, dropout=0.1, batch_first=True
        )
    )
    return m, [torch.randn(1, 16, 64)], ["x"]


if __name__ == "__main__":
    export.main(build)
