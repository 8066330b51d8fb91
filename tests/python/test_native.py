"""The native module: its type stubs (qnnx_backend/_native.pyi) against the installed module
(the same names, and mypy's stubtest on every signature, property and class; no QNN needed),
and compiling ONNX models with it directly (marked htp)."""

import ast
import os
import warnings
import pathlib
import subprocess
import sys

import pytest
import torch

import qnnx_backend
from qnnx_backend import _native

STUB = pathlib.Path(qnnx_backend.__file__).with_name("_native.pyi")


def test_stubs_declare_the_native_module_names():
    tree = ast.parse(STUB.read_text())
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    public = {n for n in dir(_native) if not n.startswith("_")}
    assert declared == public, f"stub only: {declared - public}; module only: {public - declared}"
    assert set(_native.__all__) == public


def test_stubtest_finds_no_mismatch(tmp_path):
    try:
        import mypy.stubtest  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI is set but mypy is missing: requirements-test.txt pins it")
        pytest.skip("mypy is not installed (pip install -r requirements-test.txt)")
    # Run outside the checkout, so the installed package (the built module and its stub) is the
    # one checked, with mypy's cache in a temporary folder. The stub imports only `typing`:
    # following the package's own imports would have mypy analyse torch (15 s more).
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nfollow_imports = skip\n")
    out = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "qnnx_backend._native", "--mypy-config-file", str(config)],
        cwd=tmp_path,
        env={**os.environ, "MYPY_CACHE_DIR": str(tmp_path / "mypy-cache")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
    assert "Success" in out.stdout, out.stdout


@pytest.mark.htp
def test_compile_takes_input_shapes_and_fix_inputs():
    """Dims written as -1 (Paddle, older exporters) are symbolic: input_shapes gives them; an
    input fixed with fix_inputs leaves the graph but is still listed, in the model's dtype."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    x.type.tensor_type.shape.dim[0].dim_value = -1
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "g", [x, s], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    data = m.SerializeToString()
    with pytest.raises(qnnx_backend.LoweringError, match=r"symbolic dims \[\?, 4\]"):
        _native.compile(data)
    c = _native.compile(data, input_shapes={"x": [3, 4]}, fix_inputs={"s": "2"})
    assert c.inputs == [("x", "f32", [3, 4], "f32"), ("s", "f32", [], "f32")]
    assert _native.check(data, "npu") and not _native.check(data, "npu", input_shapes={"x": [3, 4]})
    xs = np.arange(12, dtype=np.float32).reshape(3, 4)
    two = np.array(2.0, dtype=np.float32)
    out = np.zeros((3, 4), dtype=np.float32)
    c.run([(xs.ctypes.data, xs.nbytes), (two.ctypes.data, two.nbytes)], [(out.ctypes.data, out.nbytes)])
    np.testing.assert_allclose(out, xs * 2, rtol=1e-2)
    three = np.array(3.0, dtype=np.float32)
    with pytest.raises(qnnx_backend.exceptions.InputError, match="assumes 2"):
        c.run([(xs.ctypes.data, xs.nbytes), (three.ctypes.data, three.nbytes)], [(out.ctypes.data, out.nbytes)])



def _run(compiled, *arrays):
    """Runs a native Compiled on numpy arrays (inputs in ONNX order); returns the outputs."""
    import numpy as np

    outs = [np.zeros(shape, dtype=np.float32) for (_, _, shape, _) in compiled.outputs]
    compiled.run([(a.ctypes.data, a.nbytes) for a in arrays], [(o.ctypes.data, o.nbytes) for o in outs])
    return outs


class _FlagBranch(torch.nn.Module):
    """Branches on a flag input and on a dim of x: scripted, the TorchScript exporter writes an
    ONNX If for each (for the dim only when it is dynamic)."""

    def forward(self, x, flag):
        if bool(flag):
            y = x * 2
        else:
            y = x - 1
        if x.size(1) > 3:
            y = y + 10
        return y


def _export_scripted(dynamic_dim: bool) -> bytes:
    import io

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            torch.jit.script(_FlagBranch()),
            (torch.randn(2, 4), torch.tensor(True)),
            buf,
            dynamo=False,
            opset_version=17,
            input_names=["x", "flag"],
            output_names=["y"],
            dynamic_axes={"x": {1: "width"}} if dynamic_dim else None,
        )
    return buf.getvalue()


@pytest.mark.htp
def test_if_on_a_fixed_flag_or_a_static_shape_takes_its_branch():
    import numpy as np
    import onnx

    data = _export_scripted(dynamic_dim=True)
    assert [n.op_type for n in onnx.load_from_string(data).graph.node].count("If") == 2
    # A flag known only at run time: control flow, refused as such.
    with pytest.raises(qnnx_backend.UnsupportedOpError, match=r"If is not supported on HTP \(control flow"):
        _native.compile(data, input_shapes={"x": [2, 4]})
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for flag, width, want in [
        (True, 4, lambda v: v * 2 + 10),
        (False, 4, lambda v: v - 1 + 10),
        (True, 3, lambda v: v * 2),
    ]:
        xs = np.ascontiguousarray(x[:, :width])
        c = _native.compile(data, input_shapes={"x": [2, width]}, fix_inputs={"flag": str(flag).lower()})
        assert [i[0] for i in c.inputs] == ["x", "flag"]
        (y,) = _run(c, xs, np.array(flag))
        np.testing.assert_allclose(y, want(xs), rtol=1e-2, atol=1e-2)
        with pytest.raises(qnnx_backend.exceptions.InputError, match="flag"):
            _run(c, xs, np.array(not flag))


@pytest.mark.htp
def test_if_of_torch_cond_exported_by_dynamo_takes_its_branch():
    import numpy as np

    class Cond(torch.nn.Module):
        def forward(self, x, flag):
            return torch.cond(flag, lambda x: x * 2, lambda x: x - 1, (x,))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(Cond(), (torch.randn(2, 4), torch.tensor(True)), dynamo=True, verbose=False)
    data = program.model_proto.SerializeToString()
    names = [i.name for i in program.model_proto.graph.input]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for flag, want in [(True, x * 2), (False, x - 1)]:
        c = _native.compile(data, fix_inputs={names[1]: str(flag).lower()})
        (y,) = _run(c, x, np.array(flag))
        np.testing.assert_allclose(y, want, rtol=1e-2, atol=1e-2)
