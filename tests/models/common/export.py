# /// script
# dependencies = ["torch==2.15.0", "onnx==1.22.0", "onnxscript==0.7.2", "numpy"]
# ///
"""Shared by the model generators in tests/models/<name>/gen.py (engine/tests/models_htp.rs).

`main(build)` parses `OUT_DIR [--dynamo]`, seeds everything, calls `build()` for
`(module, inputs, input_names)`, runs the module eagerly in float32, exports it to ONNX
(TorchScript exporter by default, `torch.onnx.export(dynamo=True)` with `--dynamo`) and writes:

- OUT_DIR/model.onnx (weights inline)
- OUT_DIR/input_<i>.npy: the inputs, in graph-input order
- OUT_DIR/output_<i>.npy: the eager PyTorch outputs (the reference)

and prints the reference's max |value| per output.
"""
import os
import random
import sys

import numpy as np
import torch

SEED = 0


def seed_all(seed=SEED):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def refresh_bn_stats(module, make_batch, batches=4):
    """Fresh BatchNorm running stats from a few random batches in train mode, then eval mode.

    A freshly initialised or pretrained-then-reinitialised network whose running stats do not
    match its activations produces outputs around 1e-9, which fp16 flushes to zero; with stats
    measured on data the output scale is ~1.
    """
    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the batches below
    module.train()
    with torch.no_grad():
        for _ in range(batches):
            module(*make_batch())
    module.eval()
    return module


def main(build, opset=17):
    args = sys.argv[1:]
    dynamo = "--dynamo" in args
    args = [a for a in args if a != "--dynamo"]
    if len(args) != 1:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR [--dynamo]")
    out = args[0]
    os.makedirs(out, exist_ok=True)
    seed_all()
    torch.use_deterministic_algorithms(True)
    module, inputs, names = build()
    module.eval()
    with torch.no_grad():
        ref = module(*inputs)
    refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    path = os.path.join(out, "model.onnx")
    with torch.no_grad():
        if dynamo:
            prog = torch.onnx.export(
                module, tuple(inputs), dynamo=True, input_names=names, opset_version=18,
                optimize=True, external_data=False,
            )
            prog.save(path)
        else:
            torch.onnx.export(
                module, tuple(inputs), path, dynamo=False, input_names=names,
                opset_version=opset, do_constant_folding=True,
            )
    for i, x in enumerate(inputs):
        np.save(os.path.join(out, f"input_{i}.npy"), x.detach().numpy())
    for i, r in enumerate(refs):
        r = r.detach().float().numpy()
        np.save(os.path.join(out, f"output_{i}.npy"), r)
        print(f"output {i}: shape {list(r.shape)}, max |ref| {np.abs(r).max():.4g}")
