"""qnnx_backend.profile on the emulated HTP: per-op cycles mapped to ONNX nodes and module
paths, aggregates, the trace and the compile's stages; and module_path on exporter names."""

import json

import pytest
import torch
import torch.nn as nn

import qnnx_backend
from qnnx_backend import _native
from qnnx_backend._profile import module_path


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return torch.sigmoid(self.head(self.features(x).flatten(1)))


def test_module_paths_from_exporter_names():
    assert module_path("/layer2/layer2.1/conv2/Conv") == "layer2.1.conv2"
    assert module_path("/features/features.0/Conv") == "features.0"
    assert module_path("/fc/Gemm") == "fc"
    assert module_path("/Sigmoid") == ""
    assert module_path("/layer4/layer4.0/downsample/downsample.0/Conv") == "layer4.0.downsample.0"
    assert module_path("/features/features.1/features.1.conv/features.1.conv.0/Conv") == "features.1.conv.0"
    assert module_path("/c.0/Conv") == "c.0"
    # A module's second call is scoped fc_1: the module, when the model's modules are known.
    assert module_path("/fc_1/Gemm", {"", "fc"}) == "fc"
    assert module_path("/layer1/layer1.0/relu_1/Relu", {"layer1", "layer1.0", "layer1.0.relu"}) == "layer1.0.relu"
    assert module_path("/block_1/Relu", {"block_1"}) == "block_1"
    assert module_path("/fc_1/Gemm") == "fc_1"
    assert module_path("node_conv2d") is None
    assert module_path("x_nhwc") is None


@pytest.mark.htp
def test_profile_maps_ops_to_modules():
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(1, 3, 16, 16)
    p = qnnx_backend.profile(net, x)
    assert p.level == "detailed"
    assert p.execute_us > 0 and p.accel_cycles > 0
    modules = {op.module for op in p.ops if op.module is not None}
    assert {"features.0", "features.1", "head"} <= modules, modules
    assert modules <= {name for name, _ in net.named_modules()}, modules
    assert abs(sum(op.share for op in p.ops) - 1.0) < 1e-6
    by_module = p.by_module()
    assert abs(sum(s for _, _, s in by_module) - 1.0) < 1e-6
    assert by_module == sorted(by_module, key=lambda t: -t[1])
    assert any(n.endswith("/Conv") for n, _, _ in p.by_onnx_node())
    stages = [name for name, _ in p.timings]
    assert stages[-2:] == ["QNN graph build", "finalize"], stages
    assert "head" in p.table()
    ops = [e for e in p.trace["traceEvents"] if e.get("cat") == "op"]
    assert len(ops) == len(p.ops)


class FunctionalActivations(nn.Module):
    """Convolutions whose activations are functional calls of the top module (so the HTP's
    fused Conv+Relu kernels report their cycles on ONNX nodes of no submodule), top-level
    reductions, and a Linear called twice (the exporter scopes its second call ``/fc_1/``)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        y = y * torch.sigmoid(y.mean((2, 3), keepdim=True))
        return self.fc(torch.relu(self.fc(y.mean((2, 3)))))


@pytest.mark.htp
def test_by_module_charges_fused_kernels_to_their_module_and_names_every_bucket():
    torch.manual_seed(0)
    net = FunctionalActivations().eval()
    p = qnnx_backend.profile(net, torch.randn(1, 3, 24, 24))
    by_module = dict((m, share) for m, _, share in p.by_module())
    assert "" not in by_module, by_module
    names = {name for name, _ in net.named_modules()} - {""}
    unscoped = {f"(no module: {o.onnx_node})" for o in p.ops if o.qnn_op is not None and o.module is None}
    assert unscoped == {"(no module: input_0_nhwc)"}, unscoped  # the lowering's NCHW -> NHWC input
    assert set(by_module) <= names | {"(top)", "[Input]", "[Output]"} | unscoped, by_module
    # The HTP reports each fused Conv+Relu (Gemm+Relu) kernel's cycles on the Relu, a node of
    # the top module; they are the conv's (the Linear's).
    kernel = dict(zip((o.onnx_node for o in p.ops), p.kernel_modules()))
    assert [kernel[n] for n in ("/Relu", "/Relu_1", "/Relu_2")] == ["c1", "c2", "fc"], kernel
    relus = {o.onnx_node: o.share for o in p.ops if o.qnn_op == "Relu"}
    assert by_module["c1"] == pytest.approx(relus["/Relu"]) and by_module["c1"] > 0, by_module
    # The top module's own ops: the reductions, the sigmoid and the product.
    assert {n for n, k in kernel.items() if k == "(top)"} == {"/ReduceMean", "/Sigmoid", "/Mul", "/ReduceMean_1"}, kernel
    # Both calls of fc are fc's, not a module "fc_1".
    assert [o.module for o in p.ops if o.onnx_node and "Gemm" in o.onnx_node] == ["fc", "fc"], p.ops
    assert abs(sum(by_module.values()) - 1.0) < 1e-6


@pytest.mark.htp
def test_printing_a_profile_prints_its_table():
    p = qnnx_backend.profile(Net().eval(), torch.randn(1, 3, 16, 16))
    assert str(p) == p.table() and "head" in str(p)
    assert repr(p).startswith("<Profile detailed: execute ") and str(len(p.ops)) in repr(p)


@pytest.mark.htp
def test_compiled_modules_are_profiled_as_the_module_they_wrap():
    net = Net().eval()
    x = torch.randn(1, 3, 16, 16)
    want = [o.onnx_node for o in qnnx_backend.profile(net, x).ops]
    for wrapped in (torch.compile(net, backend="qnn"), qnnx_backend.compile(net, dynamic=False)):
        assert [o.onnx_node for o in qnnx_backend.profile(wrapped, x).ops] == want


@pytest.mark.htp
def test_profile_levels_and_inputs(tmp_path):
    net = Net().eval()
    x = torch.randn(1, 3, 16, 16)
    onnx = qnnx_backend._profile._onnx_of(net, [x])
    basic = qnnx_backend.profile(onnx, [x], level="basic")
    assert basic.ops == [] and basic.execute_us > 0
    assert "level='detailed'" in basic.table()
    path = tmp_path / "net.onnx"
    path.write_bytes(onnx)
    native = _native.compile(onnx)
    from_path = qnnx_backend.profile(path, x)
    from_native = qnnx_backend.profile(native, x)
    assert [o.onnx_node for o in from_path.ops] == [o.onnx_node for o in from_native.ops]
    trace = tmp_path / "t.json"
    from_native.save_trace(trace)
    assert json.loads(trace.read_text())["traceEvents"]
    with pytest.raises(ValueError, match="basic' or 'detailed"):
        qnnx_backend.profile(native, x, level="full")
    with pytest.raises(TypeError, match="nn.Module, ONNX bytes"):
        qnnx_backend.profile(42, x)
    with pytest.raises(qnnx_backend.QnnxError, match="shape"):
        qnnx_backend.profile(native, torch.randn(1, 3, 8, 8))


@pytest.mark.htp
def test_torch_compile_logs_the_compile_stages():
    # A handler of our own: scripts/test runs pytest with -p no:logging (no caplog).
    import logging

    class Records(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    logger = logging.getLogger("qnnx_backend")
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        net = Net().eval()
        torch.compile(net, backend="qnn")(torch.randn(1, 3, 16, 16))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = [m for m in handler.messages if "compile stages" in m]
    assert lines and "finalize" in lines[0] and "QNN graph build" in lines[0], handler.messages
