"""FX graph -> ONNX (qnnx_backend.compiling.to_onnx): static inputs frozen into the graph, integer inputs
fixed, inputs named input_<i>, and the exporter order. No QNN needed."""

import onnx
import pytest
import torch
from onnx.reference import ReferenceEvaluator

from qnnx_backend import LoweringError
from qnnx_backend.compiling import to_onnx
from qnnx_backend.settings import parse_options


def traced():
    def f(x, w, n, b):
        return torch.relu(x @ w + b) * n

    return torch.fx.symbolic_trace(f)


def args():
    torch.manual_seed(0)
    return [torch.randn(2, 3), torch.nn.Parameter(torch.randn(3, 4)), 3, torch.randn(4)]


def test_static_inputs():
    assert to_onnx.is_static(torch.nn.Parameter(torch.ones(1)))
    assert not to_onnx.is_static(torch.ones(1))
    assert not to_onnx.is_static(3)
    tagged = torch.ones(1)
    tagged._dynamo_static_input_type = "unguarded"
    assert to_onnx.is_static(tagged)


def test_frozen_takes_only_the_runtime_tensors():
    gm, a = traced(), args()
    frozen = to_onnx.Frozen(gm, a, [0, 3])
    assert dict(frozen.named_buffers()).keys() == {"c1"} and frozen.fixed == {2: 3}
    x, b = torch.randn(2, 3), torch.randn(4)
    torch.testing.assert_close(frozen(x, b), gm(x, a[1], 3, b))


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_export_takes_the_runtime_inputs_and_holds_the_weights(exporter):
    gm, a = traced(), args()
    data = to_onnx.onnx_bytes(to_onnx.Frozen(gm, a, [0]), [a[0]], parse_options({"exporter": exporter}))
    m = onnx.load_from_string(data)
    assert [i.name for i in m.graph.input] == ["input_0"]
    x = torch.randn(2, 3)
    [got] = ReferenceEvaluator(m).run(None, {"input_0": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), gm(x, *a[1:]).detach())


def fail(names, calls):
    def export_with(exporter, frozen, runtime_args, input_names, output_names):
        calls.append(exporter)
        if exporter in names:
            raise RuntimeError(f"{exporter} cannot")
        return exporter.encode()

    return export_with


def run(monkeypatch, exporter, failing):
    calls = []
    monkeypatch.setattr(to_onnx, "_export_with", fail(failing, calls))
    data = to_onnx.onnx_bytes(to_onnx.Frozen(traced(), args(), [0]), [torch.randn(2, 3)], parse_options({"exporter": exporter}))
    return data, calls


def test_torchscript_first_then_dynamo(monkeypatch):
    assert run(monkeypatch, "torchscript", ()) == (b"torchscript", ["torchscript"])
    assert run(monkeypatch, "torchscript", ("torchscript",)) == (b"dynamo", ["torchscript", "dynamo"])
    assert run(monkeypatch, "dynamo", ()) == (b"dynamo", ["dynamo"])


def test_every_exporter_failing_is_a_lowering_error_naming_each(monkeypatch):
    with pytest.raises(LoweringError) as info:
        run(monkeypatch, "torchscript", ("torchscript", "dynamo"))
    assert str(info.value) == "ONNX export failed: torchscript: torchscript cannot; dynamo: dynamo cannot"
    with pytest.raises(LoweringError, match="^ONNX export failed: dynamo: dynamo cannot$"):
        run(monkeypatch, "dynamo", ("dynamo",))
