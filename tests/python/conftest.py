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
