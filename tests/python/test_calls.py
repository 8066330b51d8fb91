"""Call-time inputs: odd tensors give a correct result or a clear error, never a crash or a
silently wrong answer; several threads run different compiled graphs at once."""

import io
import threading

import pytest
import torch
import torch.nn as nn

import qnnx_backend
from qnnx_backend import _native
from qnnx_backend._runtime import CompiledGraph
from conftest import assert_close_to_eager, compile_strict

pytestmark = pytest.mark.htp


def mlp(seed=0, width=16):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4)).eval()


def test_non_contiguous_input_gives_the_eager_result():
    m = mlp()
    x = torch.randn(8, 3).t()  # shape (3, 8), not contiguous
    assert not x.is_contiguous()
    with torch.inference_mode():
        assert_close_to_eager(compile_strict(m)(x), m(x), 1e-2)


def test_nan_inputs_are_refused_and_infinities_saturate():
    """The HTP computes in saturating fp16: a NaN would come back as a finite number (65536 on
    the emulator), so NaN inputs are a clear error; infinities saturate like any value beyond
    the fp16 range, which is what -inf attention masks rely on."""
    m = nn.Sequential(nn.ReLU()).eval()
    compiled = compile_strict(m)
    with torch.inference_mode():
        ok = torch.tensor([[1.0, -2.0, 3.0, -4.0, 5.0]])
        torch.testing.assert_close(compiled(ok), m(ok))
        with pytest.raises(qnnx_backend.QnnxError, match="NaN"):
            compiled(torch.tensor([[1.0, float("nan"), 3.0, -4.0, 5.0]]))
        inf = compiled(torch.tensor([[1.0, -2.0, float("inf"), -float("inf"), 5.0]]))
    assert torch.isfinite(inf).all() and inf[0, 2] > 6e4 and inf[0, 3] == 0


def test_float64_input_is_a_clear_error_in_strict_mode():
    m = mlp().double()
    with pytest.raises(qnnx_backend.QnnxError), torch.inference_mode():
        compile_strict(m)(torch.randn(2, 8, dtype=torch.float64))


def test_zero_size_batch_is_a_correct_result_or_a_clear_error():
    m = mlp()
    x = torch.randn(0, 8)
    with torch.inference_mode():
        try:
            got = compile_strict(m)(x)
        except qnnx_backend.QnnxError as e:
            assert str(e)
            return
        assert got.shape == m(x).shape


def compiled_native(m, x):
    buf = io.BytesIO()
    torch.onnx.export(m, (x,), buf, dynamo=False, opset_version=17)
    native = _native.compile(buf.getvalue(), device="npu")
    return CompiledGraph(native, "npu", [None])


def test_runtime_checks_of_a_compiled_graph():
    m = mlp()
    x = torch.randn(2, 8)
    graph = compiled_native(m, x)
    with torch.inference_mode():
        assert_close_to_eager(graph([x])[0], m(x), 1e-2)
        with pytest.raises(qnnx_backend.QnnxError, match="CPU"):
            graph([torch.empty(2, 8, device="meta")])
        with pytest.raises(qnnx_backend.QnnxError, match="shape"):
            graph([torch.randn(3, 8)])
        with pytest.raises(qnnx_backend.QnnxError, match="float64"):
            graph([torch.randn(2, 8, dtype=torch.float64)])
    # The native layer checks byte counts itself, whatever Python passes.
    out = torch.empty(2, 4)
    with pytest.raises(qnnx_backend.QnnxError, match="bytes"):
        graph.native.run([(x.data_ptr(), 8)], [(out.data_ptr(), out.numel() * 4)])


def test_threads_running_different_graphs_get_correct_results():
    models = [mlp(seed, width) for seed, width in ((1, 8), (2, 16), (3, 32))]
    xs = [torch.randn(2, 8) for _ in models]
    graphs = [compiled_native(m, x) for m, x in zip(models, xs)]
    with torch.inference_mode():
        wants = [m(x) for m, x in zip(models, xs)]
    errors = []

    def worker(k):
        try:
            for _ in range(25):
                got = graphs[k % 3]([xs[k % 3]])[0]
                err = (got - wants[k % 3]).abs().max().item()
                if err > 1e-2 * wants[k % 3].abs().max().item():
                    errors.append(f"thread {k}: error {err}")
        except qnnx_backend.QnnxError as e:
            errors.append(f"thread {k}: {e}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
