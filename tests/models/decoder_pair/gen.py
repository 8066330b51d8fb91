# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""A decoder-like stack of Linear layers exported twice with the same weights: a prefill graph
(x [1, 32, 256]) and a decode graph (x [1, 1, 256]), for weight sharing between graphs of one
QNN context (engine/tests/multi_htp.rs).

Two residual blocks (Linear 256 -> 512, ReLU, Linear 512 -> 256, add) and a final Linear
256 -> 256: 590k parameters, 1.2 MB as fp16.

Run: python3 tests/models/decoder_pair/gen.py OUT_DIR

Writes OUT_DIR/<case>/model.onnx, input_0.npy and output_0.npy (eager float32 PyTorch) for the
cases `prefill` and `decode`, and prints each reference's max |value|.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402

D, H = 256, 512
CASES = {"prefill": 32, "decode": 1}


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(D, H)
        self.down = torch.nn.Linear(H, D)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(D, D)

    def forward(self, x):
        return self.head(self.blocks(x))


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    out = sys.argv[1]
    export.seed_all()
    torch.use_deterministic_algorithms(True)
    model = Decoder().eval()
    for case, seq in CASES.items():
        d = os.path.join(out, case)
        os.makedirs(d, exist_ok=True)
        x = torch.randn(1, seq, D)
        with torch.no_grad():
            ref = model(x)
            torch.onnx.export(
                model, (x,), os.path.join(d, "model.onnx"), dynamo=False, input_names=["x"],
                output_names=["y"], opset_version=17, do_constant_folding=True,
            )
        np.save(os.path.join(d, "input_0.npy"), x.numpy())
        np.save(os.path.join(d, "output_0.npy"), ref.numpy())
        print(f"{case}: output shape {list(ref.shape)}, max |ref| {ref.abs().max().item():.4g}")


if __name__ == "__main__":
    main()
