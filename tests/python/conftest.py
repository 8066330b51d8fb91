"""Shared fixtures of the Python tests: they run the real HTP library (the emulator on x86_64).

Without the library the tests that need it skip with the reason; with QNNX_REQUIRE_HTP=1 (CI)
they fail instead, so CI cannot pass by skipping.
"""

import os

import pytest
import torch
import torch.nn as nn

import qnnx_backend
from qnnx_backend import _native


def pytest_configure(config):
    config.addinivalue_line("markers", "htp: needs the QNN HTP library")
    config.addinivalue_line(
        "markers",
        "alone: times itself under a load it makes; scripts/test runs these after the parallel "
        "suite, in one process, so no other test's load is added to theirs",
    )


@pytest.fixture(autouse=True)
def _htp_required(request):
    if request.node.get_closest_marker("htp") is None:
        return
    if not _native.is_available("npu"):
        reason = _native.unavailable_reason("npu")
        if os.environ.get("QNNX_REQUIRE_HTP"):
            pytest.fail(f"QNNX_REQUIRE_HTP is set but the HTP library is unavailable: {reason}")
        pytest.skip(f"HTP library unavailable: {reason}")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    qnnx_backend.STATS.clear()
    yield
    torch._dynamo.reset()


def refresh_batchnorm(model, shape, batches=4):
    """Random-init BatchNorm statistics make outputs ~1e-9, which fp16 flushes to zero; a few
    random batches in train mode give realistic statistics. The running statistics are reset
    and averaged exactly (momentum None): with the default momentum, 4 batches would move them
    only a third of the way from their initial values."""
    for mod in model.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.reset_running_stats()
            mod.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(*shape))
    return model.eval()


class WithUnsupported(nn.Module):
    """Linear, then a matrix determinant: ONNX `Det`, which no QNN backend runs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.linalg.det(self.fc(x).reshape(-1, 2, 2))


def compile_strict(model, **options):
    opts = {"strict": True, "device": "npu"}
    opts.update(options)
    return torch.compile(model, backend="qnn", options=opts)


def assert_close_to_eager(got, want, rel):
    """Max abs error bounded relative to the output scale (the HTP computes in fp16)."""
    err = (got - want).abs().max().item()
    scale = want.abs().max().item()
    assert scale > 1e-3, f"reference outputs are ~0 ({scale}): the comparison would mean nothing"
    assert err <= rel * scale, f"max error {err:.3e} > {rel} x max|ref| {scale:.3e}"
    return err, scale


def structured_images(n, size=64, seed=0):
    """``n`` images [1, 3, size, size] with structure (smooth gradients, rectangles, discs,
    stripes, a little noise), normalized like ImageNet inputs: calibration and test data of the
    kind vision models see, made here (no downloads)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    mean = np.array([0.485, 0.456, 0.406])[:, None, None]
    std = np.array([0.229, 0.224, 0.225])[:, None, None]
    out = []
    for _ in range(n):
        img = np.empty((3, size, size))
        for c in range(3):
            a, b, d = rng.uniform(-1, 1, 3)
            img[c] = 0.5 + 0.3 * (a * xx + b * yy) + 0.1 * d
        for _ in range(rng.integers(3, 8)):
            color = rng.uniform(0, 1, 3)[:, None, None]
            kind = rng.integers(3)
            if kind == 0:
                x0, y0 = rng.uniform(0, 1, 2)
                w, h = rng.uniform(0.1, 0.5, 2)
                mask = (xx >= x0) & (xx < x0 + w) & (yy >= y0) & (yy < y0 + h)
            elif kind == 1:
                cx, cy = rng.uniform(0, 1, 2)
                mask = (xx - cx) ** 2 + (yy - cy) ** 2 < rng.uniform(0.05, 0.3) ** 2
            else:
                f, th = rng.uniform(4, 16), rng.uniform(0, np.pi)
                mask = np.sin(2 * np.pi * f * (np.cos(th) * xx + np.sin(th) * yy)) > 0.3
            img = np.where(mask[None], color, img)
        img = np.clip(img + rng.normal(0, 0.02, img.shape), 0, 1)
        out.append(torch.tensor((img - mean) / std, dtype=torch.float32)[None])
    return out


def structured_tokens(n, seq, dim, seed=0):
    """``n`` token-embedding sequences [1, seq, dim] with structure (each token a soft mixture
    of 8 fixed directions, plus noise), as text embeddings have: data for transformer layers."""
    basis = torch.randn(8, dim, generator=torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed + 1)
    out = []
    for _ in range(n):
        w = torch.softmax(torch.randn(1, seq, 8, generator=g) * 3, -1)
        out.append(w @ basis + 0.1 * torch.randn(1, seq, dim, generator=g))
    return out


def refresh_batchnorm_on(model, images, batch=8):
    """BatchNorm statistics of ``model`` averaged exactly over ``images`` (a list of [1, ...]
    tensors, in batches of ``batch``); ``model`` is left in eval mode."""
    for mod in model.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            mod.reset_running_stats()
            mod.momentum = None
    model.train()
    with torch.no_grad():
        for i in range(0, len(images), batch):
            model(torch.cat(images[i : i + batch]))
    return model.eval()


def capture(model, *args, **kwargs):
    """What torch.compile hands the qnn backend for ``model(*args, **kwargs)``: the FX graph,
    its example inputs and the frame (``calibrate.Frame``), read while dynamo calls the backend.
    One entry per graph."""
    from qnnx_backend.quantization import calibrate

    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs), calibrate.Frame.capture(gm)))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(*args, **kwargs)
    return graphs
