"""The run-time adapter (qnnx_backend.compiling.call). On QNN: odd call-time inputs give a correct
result or a clear error, never a crash or a silently wrong answer, and several threads run
different compiled graphs at once. Without QNN (a stand-in native graph): the dtype table,
int64 narrowing, output allocation and conversion, and the inference-only guard."""

import ctypes
import io
import threading

import pytest
import torch
import torch.nn as nn

import qnnx_backend
from qnnx_backend import _native
from qnnx_backend.compiling.call import TORCH_DTYPES, CompiledGraph, guard_autograd, out_meta, returns_sequence, torch_dtype
from conftest import assert_close_to_eager, compile_strict



def mlp(seed=0, width=16):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4)).eval()


@pytest.mark.htp
def test_non_contiguous_input_gives_the_eager_result():
    m = mlp()
    x = torch.randn(8, 3).t()  # shape (3, 8), not contiguous
    assert not x.is_contiguous()
    with torch.inference_mode():
        assert_close_to_eager(compile_strict(m)(x), m(x), 1e-2)


@pytest.mark.htp
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


@pytest.mark.htp
def test_check_nan_false_skips_the_scan():
    """check_nan=False hands NaN inputs to QNN as they are (the HTP's saturating fp16 then gives
    a finite number: what the option's documentation warns about)."""
    m = nn.Sequential(nn.ReLU()).eval()
    compiled = compile_strict(m, check_nan=False)
    with torch.inference_mode():
        y = compiled(torch.tensor([[1.0, float("nan"), 3.0, -4.0, 5.0]]))
    assert y.shape == (1, 5) and abs(y[0, 0].item() - 1.0) < 1e-2 and torch.isfinite(y[0, 1])


@pytest.mark.htp
def test_float64_input_is_a_clear_error_in_strict_mode():
    m = mlp().double()
    with pytest.raises(qnnx_backend.QnnxError), torch.inference_mode():
        compile_strict(m)(torch.randn(2, 8, dtype=torch.float64))


@pytest.mark.htp
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
    native = _native.compile(buf.getvalue(), _native.Spec("npu"))
    return CompiledGraph(native, "npu", [None])


@pytest.mark.htp
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


@pytest.mark.htp
def test_bad_inputs_are_input_errors_on_the_torch_and_the_numpy_path():
    """The same bad input is ``InputError`` (a ``QnnxError``) whether the graph is called with
    torch tensors (a torch.compile'd model) or numpy arrays (``InferenceSession``)."""
    import numpy as np

    from qnnx_backend.runtime import InferenceSession

    m = mlp()
    x = torch.randn(2, 8)
    buf = io.BytesIO()
    torch.onnx.export(m, (x,), buf, dynamo=False, opset_version=17, input_names=["x"])
    graph = CompiledGraph(_native.compile(buf.getvalue(), _native.Spec("npu")), "npu", [None])
    session = InferenceSession(buf.getvalue())
    bad = {
        "shape": torch.randn(3, 8),
        "float64": torch.randn(2, 8, dtype=torch.float64),
        "NaN": torch.full((2, 8), float("nan")),
    }
    with torch.inference_mode():
        for what, t in bad.items():
            with pytest.raises(qnnx_backend.exceptions.InputError, match=what):
                graph([t])
            with pytest.raises(qnnx_backend.exceptions.InputError, match=what):
                session.run(None, {"x": t.numpy()})
        with pytest.raises(qnnx_backend.exceptions.InputError, match="expected a tensor"):
            graph([x.numpy()])
        with pytest.raises(qnnx_backend.exceptions.InputError, match="expected a numpy array"):
            session.run(None, {"x": [[0.0] * 8] * 2})
    assert issubclass(qnnx_backend.exceptions.InputError, qnnx_backend.QnnxError)
    assert np.isfinite(session.run(None, {"x": x.numpy()})[0]).all()


@pytest.mark.htp
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


class FakeNative:
    """Stands in for a native graph: I/O descriptions like the real one's, and a run that reads
    the input buffers and writes each output from them."""

    def __init__(self, inputs, outputs, compute):
        self.inputs = inputs
        self.outputs = outputs
        self.compute = compute
        self.seen = []

    def run(self, ins, outs, check_nan=True):
        got = []
        for (ptr, nbytes), (_, gdtype, shape, _) in zip(ins, self.inputs):
            t = torch.empty(tuple(shape), dtype=torch_dtype(gdtype))
            assert t.numel() * t.element_size() == nbytes
            ctypes.memmove(t.data_ptr(), ptr, nbytes)
            got.append(t)
        self.seen.append(got)
        for (ptr, nbytes), value in zip(outs, self.compute(*got)):
            assert value.is_contiguous() and value.numel() * value.element_size() == nbytes
            ctypes.memmove(ptr, value.data_ptr(), nbytes)


def test_every_qnnx_dtype_has_a_torch_dtype():
    assert set(TORCH_DTYPES) == set(_native.dtype_names())
    assert torch_dtype("f16") is torch.float16 and torch_dtype("i64") is torch.int64
    # A quantized tensor is held as its integers (raw quantized I/O).
    assert torch_dtype("qu8") is torch.uint8 and torch_dtype("qi16") is torch.int16
    with pytest.raises(qnnx_backend.QnnxError, match="qf7"):
        torch_dtype("qf7")


def test_int64_inputs_are_narrowed_to_the_graph_int32():
    native = FakeNative([("ids", "i32", [2, 3], "i64")], [("y", "i32", [2, 3], "i32")], lambda ids: [ids * 2])
    graph = CompiledGraph(native, "npu", [None])
    ids = torch.tensor([[1, -2, 3], [2**31 - 1, -(2**31), 0]])
    [y] = graph([ids])
    assert native.seen[-1][0].dtype == torch.int32
    torch.testing.assert_close(native.seen[-1][0], ids.to(torch.int32))
    assert y.dtype == torch.int32
    with pytest.raises(qnnx_backend.exceptions.InputError, match=r"ids: int64 values in \[0, 2147483648\]"):
        graph([torch.tensor([[0, 1, 2], [3, 4, 2**31]])])


def test_outputs_are_converted_to_the_model_dtype_and_shaped():
    native = FakeNative(
        [("x", "f32", [2, 3], "f32")],
        [("i", "i32", [6], "i64"), ("f", "f32", [6], "f32")],
        lambda x: [torch.arange(6, dtype=torch.int32), x.reshape(6) + 1],
    )
    graph = CompiledGraph(native, "npu", [torch.Size([3, 2]), torch.Size([2, 3])])
    x = torch.randn(2, 3)
    i, f = graph([x])
    assert i.dtype == torch.int64 and i.shape == (3, 2)
    torch.testing.assert_close(i, torch.arange(6).reshape(3, 2))
    assert f.shape == (2, 3)
    torch.testing.assert_close(f, x + 1)


def graph_shape(graph):
    return tuple(graph([torch.arange(4.0)])[0].shape)


def test_an_output_of_unknown_or_other_size_keeps_the_graph_shape():
    native = FakeNative([("x", "f32", [4], "f32")], [("y", "f32", [4], "f32")], lambda x: [x])
    assert graph_shape(CompiledGraph(native, "npu", [None])) == (4,)
    assert graph_shape(CompiledGraph(native, "npu", [torch.Size([5])])) == (4,)
    assert graph_shape(CompiledGraph(native, "npu", [])) == (4,)


def test_inputs_are_checked_before_the_graph_runs():
    native = FakeNative([("x", "f32", [2, 2], "f32")], [("y", "f32", [2, 2], "f32")], lambda x: [x])
    graph = CompiledGraph(native, "npu", [None])
    for bad, match in (
        ([[1.0, 2.0], [3.0, 4.0]], "expected a tensor"),
        (torch.zeros(2, 2, dtype=torch.float64), "float64"),
        (torch.zeros(3, 2), "shape"),
    ):
        with pytest.raises(qnnx_backend.QnnxError, match=match):
            graph([bad])
    assert native.seen == []
    x = torch.arange(4.0).reshape(2, 2).t()
    torch.testing.assert_close(graph([x])[0], x.contiguous())


def test_the_autograd_guard():
    outs = [torch.ones(2)]
    w = torch.nn.Parameter(torch.ones(2))
    with torch.no_grad():
        assert guard_autograd(outs, [w]) is outs
    assert guard_autograd(outs, [torch.ones(2), 3]) is outs
    [y] = guard_autograd(outs, [torch.ones(2), w])
    assert y.requires_grad
    with pytest.raises(qnnx_backend.QnnxError, match="inference-only"):
        y.sum().backward()


def test_output_structure_of_a_graph():
    def one(x):
        return x + 1

    def two(x):
        return x + 1, x * 2

    assert returns_sequence(torch.fx.symbolic_trace(one)) is False
    assert returns_sequence(torch.fx.symbolic_trace(two)) is True
    # No dynamo metadata: shapes unknown.
    assert out_meta(torch.fx.symbolic_trace(two)) == [None, None]


class _MeanSquare(nn.Module):
    def forward(self, x):
        return (x * x).mean()


@pytest.mark.htp
def test_rank0_outputs_come_back_as_rank0():
    """A scalar output is a [1] tensor inside the QNN graph; the caller gets shape (), as eager."""
    m = _MeanSquare().eval()
    x = torch.randn(2, 3)
    with torch.inference_mode():
        got = compile_strict(m)(x)
        want = m(x)
    assert got.shape == want.shape == ()
    assert abs(got.item() - want.item()) <= 1e-2 * abs(want.item())
