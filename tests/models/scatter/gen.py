# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "numpy"]
# ///
"""torch.scatter, scatter_add, index_put (plain and accumulating) and advanced indexing with two
index tensors, all with runtime indices: ScatterElements (none, add), ScatterND (none, add) and,
from the dynamo exporter, GatherND.

Run: python3 tests/models/scatter/gen.py OUT_DIR [--dynamo]   (see tests/models/common/export.py)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import export  # noqa: E402


class Scatter(torch.nn.Module):
    def forward(self, x, idx, src, rows, vals, r, c):
        return (
            x.scatter(1, idx, src),
            x.scatter_add(1, idx, src),
            x.index_put((rows,), vals),
            x.index_put((rows,), vals, accumulate=True),
            x[r, c],
        )


def build():
    x = torch.randn(4, 6)
    idx = torch.tensor([[0, 5, 2], [1, 1, 3], [5, 4, 0], [2, 2, 2]])
    rows = torch.tensor([3, 0])
    r = torch.tensor([0, 3, 1])
    c = torch.tensor([5, 4, 2])
    inputs = [x, idx, torch.randn(4, 3), rows, torch.randn(2, 6), r, c]
    return Scatter(), inputs, ["x", "idx", "src", "rows", "vals", "r", "c"]


if __name__ == "__main__":
    export.main(build)
