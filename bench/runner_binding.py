"""Calibration of the native binding: `.run` of a one-node graph (Relu on [1, 4]) from Python,
many times, and the graph's context binary for the Rust graphExecute timer. The difference
of the two medians is what the PyO3 call and its checks add to graphExecute (the graph is so
small that the emulator's noise stays in the microseconds). Writes JSON to --out."""

from __future__ import annotations

import common  # noqa: I001

import argparse
import io
import warnings

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out", required=True)
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    from qnnx_backend import _native

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.nn.ReLU(), (torch.randn(1, 4),), buf, dynamo=False, opset_version=17)
    native = _native.compile(buf.getvalue(), _native.Spec("npu", soc_model=60, htp_arch=73), name="relu")
    with open(args.binary, "wb") as f:
        f.write(native.binary())
    x = torch.randn(1, 4)
    y = torch.empty(1, 4)
    ins, outs = [(x.data_ptr(), 16)], [(y.data_ptr(), 16)]
    samples = common.time_calls(lambda: native.run(ins, outs), (), args.calls, 200)
    common.write(args.out, {"path": "qnnx-binding", "run": common.summarize(samples)})


if __name__ == "__main__":
    main()
