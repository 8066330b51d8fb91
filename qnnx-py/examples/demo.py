"""A torchvision model through torch.compile(backend="qnn") on the HTP (the emulator on x86_64,
configured as SoC 60 / HTP v73, which computes in fp16 like the NPU).

Prints the compile time, the latency next to eager PyTorch on the CPU, and the max error
against eager. Random weights (no downloads); BatchNorm statistics are refreshed on random
batches so the outputs are not ~1e-9, which fp16 would flush to zero.

    python3 qnnx-py/examples/demo.py [--model mobilenet_v3_small|resnet18] [--size 224] [--runs 5]
"""

import argparse
import statistics
import time

import torch
import torchvision

import qnnx_backend


def refresh_batchnorm(model, size, batches=4):
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(4, 3, size, size))
    return model.eval()


def timed(fn, x, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        y = fn(x)
        times.append(time.perf_counter() - t)
    return y, statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mobilenet_v3_small", choices=["mobilenet_v3_small", "resnet18"])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    if not qnnx_backend.is_available("npu"):
        from qnnx_backend import _native

        raise SystemExit(f"QNN HTP unavailable: {_native.unavailable_reason('npu')}\nrun scripts/setup-runtime")
    torch.manual_seed(0)
    model = refresh_batchnorm(getattr(torchvision.models, args.model)(weights=None), min(args.size, 96))
    x = torch.randn(1, 3, args.size, args.size)
    compiled = torch.compile(model, backend="qnn", options={"device": "npu", "strict": True})

    with torch.inference_mode():
        t = time.perf_counter()
        y = compiled(x)
        first = time.perf_counter() - t
        y, qnn_ms = timed(compiled, x, args.runs)
        ref, eager_ms = timed(model, x, args.runs)

    err = (y - ref).abs().max().item()
    scale = ref.abs().max().item()
    same_top1 = bool((y.argmax(-1) == ref.argmax(-1)).all())
    from qnnx_backend import _native

    print(f"{args.model} 1x3x{args.size}x{args.size} on QNN HTP (build {_native.build_id('npu')}, SoC 60 emulated)")
    print(f"  first call (export + lower + finalize + run): {first:.2f} s")
    print(f"  latency, median of {args.runs}: QNN {qnn_ms:.1f} ms | eager PyTorch CPU {eager_ms:.1f} ms")
    print(f"  max |error| vs eager: {err:.3e} (max |output| {scale:.3e}, relative {err / scale:.2e}); same top-1: {same_top1}")
    print("  note: on x86_64 the HTP is an emulator; its latency says nothing about a real NPU")
    if err > 0.05 * scale:
        raise SystemExit("error above 5% of the output scale")


if __name__ == "__main__":
    main()
