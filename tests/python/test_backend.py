"""torch.compile(backend="qnn") end to end on the emulated HTP: whole graphs on QNN (strict,
and the STATS counters prove a QNN compile happened, not a silent fallback)."""

import time
import warnings

import pytest
import torch
import torch.nn as nn

import qnnx_backend
from conftest import WithUnsupported, assert_close_to_eager, compile_strict, refresh_batchnorm

pytestmark = pytest.mark.htp


def run(model, *inputs, rel, **options):
    compiled = compile_strict(model, **options)
    with torch.inference_mode():
        t = time.perf_counter()
        got = compiled(*inputs)
        first = time.perf_counter() - t
        want = model(*inputs)
    assert qnnx_backend.STATS["compiles"] >= 1 and qnnx_backend.STATS["fallbacks"] == 0, qnnx_backend.STATS
    err, scale = assert_close_to_eager(got, want, rel)
    print(f"max error {err:.3e} (max |ref| {scale:.3e}), first call {first:.2f} s")
    return compiled


def test_mlp():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).eval()
    run(m, torch.randn(4, 32), rel=1e-2)


def test_small_cnn():
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )
    refresh_batchnorm(m, (8, 3, 32, 32))
    run(m, torch.randn(2, 3, 32, 32), rel=2e-2)


def test_fp16_option():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 4)).eval()
    run(m, torch.randn(2, 16), rel=2e-2, fp16=True)


def test_transformer_encoder_layer():
    torch.manual_seed(0)
    m = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True).eval()
    run(m, torch.randn(1, 8, 32), rel=3e-2)


def test_resnet18():
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = refresh_batchnorm(tv.models.resnet18(weights=None), (2, 3, 64, 64))
    run(m, torch.randn(1, 3, 64, 64), rel=5e-2)


def test_mobilenet_v3_small():
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = refresh_batchnorm(tv.models.mobilenet_v3_small(weights=None), (2, 3, 64, 64))
    run(m, torch.randn(1, 3, 64, 64), rel=5e-2)


def test_auto_fallback_gives_eager_result_and_one_warning():
    torch.manual_seed(0)
    m = WithUnsupported().eval()
    x = torch.randn(3, 4)
    compiled = torch.compile(m, backend="qnn")
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        got = compiled(x)
        got2 = compiled(x)
    ours = [w for w in caught if "qnn backend" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "Det" in str(ours[0].message)
    with torch.inference_mode():
        torch.testing.assert_close(got, m(x))
        torch.testing.assert_close(got2, m(x))
    assert qnnx_backend.STATS["fallbacks"] == 1


def test_strict_raises_with_node_names():
    m = WithUnsupported().eval()
    compiled = compile_strict(m)
    with pytest.raises(qnnx_backend.UnsupportedOpError) as info, torch.inference_mode():
        compiled(torch.randn(3, 4))
    err = info.value
    assert "Det" in err.operators
    assert any(op == "Det" and node for (node, op, _) in err.nodes), err.nodes
    assert "Det" in str(err)
    # The 0.4 package's exception name still catches it.
    from qnnx_backend.error import QNNCompilationError, QNNUnsupportedOperatorError

    assert isinstance(err, QNNUnsupportedOperatorError) and isinstance(err, QNNCompilationError)


def test_strict_errors_are_caught_as_0_4_users_catch_them():
    # 0.4 raised strict failures inside dynamo's backend call, which wraps them in
    # BackendCompilerFailed; code written for it catches that class.
    import pickle

    from torch._dynamo.exc import BackendCompilerFailed

    compiled = compile_strict(WithUnsupported().eval())
    try:
        with torch.inference_mode():
            compiled(torch.randn(3, 4))
    except BackendCompilerFailed as e:
        err = e
    else:
        pytest.fail("strict compile of an unsupported op did not raise")
    assert isinstance(err, qnnx_backend.UnsupportedOpError)
    assert err.backend_name == "qnn" and type(err.inner_exception) is qnnx_backend.UnsupportedOpError
    assert str(err) == str(err.inner_exception) and "Det" in err.operators and err.device == "npu"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and back.nodes == err.nodes
    # Without strict nothing is raised: the graph falls back or is partitioned.
    m = WithUnsupported().eval()
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        x = torch.randn(3, 4)
        torch.testing.assert_close(torch.compile(m, backend="qnn")(x), m(x), atol=1e-2, rtol=1e-2)


def test_device_cpu_runs_eager():
    m = nn.Linear(4, 2).eval()
    compiled = torch.compile(m, backend="qnn", options={"device": "cpu"})
    with torch.inference_mode():
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x), m(x))
    assert qnnx_backend.STATS["compiles"] == 0


def test_new_input_shape_compiles_a_new_graph():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    compiled = compile_strict(m)
    with torch.inference_mode():
        for batch in (2, 5, 2):
            x = torch.randn(batch, 8)
            assert_close_to_eager(compiled(x), m(x), 1e-2)
    assert qnnx_backend.STATS["compiles"] == 2, qnnx_backend.STATS


def test_int64_inputs_are_narrowed_and_checked():
    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 8)

        def forward(self, ids):
            return self.emb(ids).sum(dim=1)

    torch.manual_seed(0)
    m = Embed().eval()
    ids = torch.tensor([[1, 2, 3], [4, 5, 49]])
    compiled = compile_strict(m)
    with torch.inference_mode():
        assert_close_to_eager(compiled(ids), m(ids), 1e-2)


def test_backward_raises_a_clear_error():
    m = nn.Linear(4, 2).eval()
    compiled = compile_strict(m)
    y = compiled(torch.randn(3, 4))
    with pytest.raises(qnnx_backend.QnnxError, match="inference-only"):
        y.sum().backward()


def test_kv_cache_on_a_graph_without_cache_updates_changes_nothing():
    # kv_cache=True only matters for graphs that write into their inputs (tests/python/test_llm.py).
    m = nn.Linear(4, 2).eval()
    x = torch.randn(1, 4)
    with torch.inference_mode():
        y = compile_strict(m, kv_cache=True)(x)
        torch.testing.assert_close(y, m(x), atol=2e-3, rtol=2e-3)
    assert qnnx_backend.STATS["compiles"] == 1
