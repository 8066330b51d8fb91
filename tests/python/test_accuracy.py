"""qnnx_backend.accuracy_report on the emulated HTP: an fp16 overflow inside one module is the
first jump and is named by its module path; the report's output agrees with an end-to-end
comparison of the fp16 graph; a QDQ model without its float reference and bad inputs are clear
errors. (The quantized case, which opens a v68 backend, is tested in Rust:
engine/tests/compare_htp.rs and qnnx-cli/tests/compare.rs.)"""

import math

import pytest
import torch
import torch.nn as nn

import qnnx_backend
from qnnx_backend import _native


class Scale(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.amp = Scale(1e5)  # beyond fp16's 65504
        self.att = Scale(1e-5)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.att(self.amp(self.fc1(x)))))


def test_bad_arguments_are_clear_errors():
    with pytest.raises(TypeError, match="nn.Module, ONNX bytes or a path"):
        qnnx_backend.accuracy_report(42, torch.zeros(1))
    with pytest.raises(TypeError, match="not a tensor"):
        qnnx_backend.accuracy_report(b"", [[1.0]])
    with pytest.raises(ValueError, match="jump_db"):
        _native.compare(b"", [], jump_db=-1.0)
    with pytest.raises(ValueError, match="bytes do not make"):
        _native.compare(b"", [("f32", [2], b"abc")])


@pytest.mark.htp
def test_an_fp16_overflow_is_named_by_its_module():
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(1, 16)
    r = qnnx_backend.accuracy_report(net, x, soc_model=60)
    assert r.first_jump is not None, r.table()
    assert r.first_jump.module == "amp", r.table()
    assert r.first_jump.sqnr_db == -math.inf and r.first_jump.nonfinite > 0
    fc1 = next(l for l in r.layers if l.module == "fc1")
    assert fc1.sqnr_db > 40.0, r.table()
    assert r.layers[0].sqnr_db <= r.layers[-1].sqnr_db
    assert "<- first jump" in r.table() and "amp" in r.table()
    assert r.to_csv().splitlines()[0].startswith("value,onnx_node,op_type,module,sqnr_db")


@pytest.mark.htp
def test_the_output_agrees_with_an_end_to_end_comparison():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8)).eval()
    x = torch.randn(4, 16)
    r = qnnx_backend.accuracy_report(net, x, soc_model=60)
    out = [l for l in r.layers if l.is_output]
    assert len(out) == 1, r.table()
    with torch.no_grad():
        want = net(x).double()
    g = qnnx_backend.compile(net, soc_model=60, fp16=True, strict=True)
    with torch.no_grad():
        got = g(x).double()
    e2e = 10 * math.log10(float((want**2).sum() / ((got - want) ** 2).sum()))
    assert 30.0 < e2e < 90.0, e2e
    assert abs(out[0].sqnr_db - e2e) <= 0.5, (out[0], e2e, r.table())


@pytest.mark.htp
def test_a_qdq_reference_is_refused():
    # A QuantizeLinear/DequantizeLinear pair is enough to make a model quantized.
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]), helper.make_tensor("z", TensorProto.UINT8, [], [128])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    qdq = m.SerializeToString()
    with pytest.raises(qnnx_backend.QnnxError, match="float model it was quantized from"):
        qnnx_backend.accuracy_report(qdq, torch.zeros(1, 4))
