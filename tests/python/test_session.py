"""qnnx_backend.runtime.InferenceSession (the ONNX Runtime-shaped API of runtime.py): an ONNX
model against ONNX's reference evaluator, compiled once and then loaded from the cache, a saved
model, the ORT-style knobs and errors, and importing the module where torch cannot be imported."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import qnnx_backend
from qnnx_backend.exceptions import InputError, QnnApiError, SavedModelError, UnsupportedOpError
from qnnx_backend.runtime import InferenceSession, NodeArg, SessionOptions

pytestmark = pytest.mark.htp


def mlp_onnx(seed=0) -> bytes:
    """x [2, 16] float -> MatMul, Add, Relu, MatMul -> y [2, 4]; plus an int64 input ids [2, 3]
    (widened back from the HTP's int32) gathered from a table -> e [2, 3, 4]."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 4)).astype(np.float32), "w2")
    table = numpy_helper.from_array(rng.standard_normal((10, 4)).astype(np.float32), "table")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["y"]),
        helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3, 4]),
        ],
        [w1, b1, w2, table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def feed():
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((2, 16)).astype(np.float32), "ids": rng.integers(0, 10, (2, 3)).astype(np.int64)}


@pytest.fixture
def model_path(tmp_path):
    p = tmp_path / "mlp.onnx"
    p.write_bytes(mlp_onnx())
    return p


def test_onnx_model_matches_the_reference_evaluator(model_path, tmp_path):
    sess = InferenceSession(str(model_path), providers=["QNNExecutionProvider"], cache_dir=str(tmp_path / "cache"))
    assert not sess.from_cache
    assert sess.get_inputs() == [NodeArg("x", [2, 16], "tensor(float)"), NodeArg("ids", [2, 3], "tensor(int64)")]
    assert [(o.name, o.shape, o.type) for o in sess.get_outputs()] == [
        ("y", [2, 4], "tensor(float)"),
        ("e", [2, 3, 4], "tensor(float)"),
    ]
    f = feed()
    want = ReferenceEvaluator(str(model_path)).run(None, f)
    y, e = sess.run(None, f)
    assert y.dtype == np.float32 and y.shape == (2, 4)
    scale = np.abs(want[0]).max()
    assert scale > 1e-3 and np.abs(y - want[0]).max() <= 2e-2 * scale
    np.testing.assert_allclose(e, want[1], rtol=1e-2, atol=1e-2)
    (only_e,) = sess.run(["e"], f)
    np.testing.assert_array_equal(only_e, e)
    # A second session compiles nothing: the binary comes from the cache.
    again = InferenceSession(model_path, cache_dir=str(tmp_path / "cache"))
    assert again.from_cache
    np.testing.assert_array_equal(again.run(None, f)[0], y)


def test_bytes_fp16_and_provider_options(tmp_path):
    f = feed()
    want = ReferenceEvaluator(mlp_onnx()).run(None, f)
    sess = InferenceSession(
        mlp_onnx(),
        providers=[("QNNExecutionProvider", {})],
        provider_options=[{"soc_model": "60", "enable_htp_fp16_precision": "1"}],
        cache=False,
    )
    assert sess.options.precision == "fp16" and sess.options.soc_model == 60
    y, _ = sess.run(None, f)
    assert np.abs(y - want[0]).max() <= 2e-2 * np.abs(want[0]).max()
    with pytest.raises(ValueError, match="CUDAExecutionProvider"):
        InferenceSession(mlp_onnx(), providers=["CUDAExecutionProvider"])
    with pytest.raises(ValueError, match="no qnnx meaning"):
        InferenceSession(mlp_onnx(), provider_options=[{"qnn_context_priority": "high"}])
    with pytest.raises(ValueError, match="precision"):
        InferenceSession(mlp_onnx(), sess_options=SessionOptions(precision="int8"))


def test_htp_performance_mode_reaches_the_htp():
    """ONNX Runtime's ``htp_performance_mode`` is voted through QNN's HTP perf infrastructure
    for as long as the session lives. The x86_64 emulator accepts every mode (so no warning);
    what a vote does to clocks and voltages cannot be measured there."""
    f = feed()
    plain = InferenceSession(mlp_onnx(), cache=False)
    assert plain.performance_mode is None
    # A handler of our own: scripts/test runs pytest with -p no:logging (no caplog fixture).
    import logging

    records: list = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    log = logging.getLogger("qnnx_backend")
    log.addHandler(handler)
    try:
        sess = InferenceSession(mlp_onnx(), provider_options=[{"htp_performance_mode": "burst"}], cache=False)
    finally:
        log.removeHandler(handler)
    assert sess.options.performance_mode == "burst"
    assert sess.performance_mode == "burst"  # what the native graph voted
    assert not [r for r in records if "performance mode" in r.getMessage()]
    np.testing.assert_array_equal(sess.run(None, f)[0], plain.run(None, f)[0])
    saver = InferenceSession(mlp_onnx(), sess_options=SessionOptions(performance_mode="power_saver"), cache=False)
    assert saver.performance_mode == "power_saver"
    with pytest.raises(ValueError, match="turbo.*burst.*sustained_high_performance"):
        InferenceSession(mlp_onnx(), provider_options=[{"htp_performance_mode": "turbo"}])
    with pytest.raises(ValueError, match="turbo.*extreme_power_saver"):
        InferenceSession(mlp_onnx(), sess_options=SessionOptions(performance_mode="turbo"))


def test_ort_settings_without_effect_are_said_once():
    # 0.4 / ONNX Runtime users pass these; they used to be accepted silently. Naming the HTP
    # library or backend is what qnnx does anyway (no warning); the rest is said once, at the
    # user's line.
    import warnings

    from qnnx_backend import _warn

    _warn._ONCE.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        InferenceSession(mlp_onnx(), provider_options=[{"backend_path": "libQnnHtp.so", "backend_type": "htp"}], cache=False)
        assert caught == [], [str(w.message) for w in caught]
        for _ in range(2):
            line = sys._getframe().f_lineno + 1
            InferenceSession(mlp_onnx(), providers=["CPUExecutionProvider"], provider_options=[{"backend_path": "/opt/qnn/libQnnCpu.so", "backend_type": "cpu"}], cache=False)
    texts = [str(w.message) for w in caught]
    assert len(texts) == 3, texts
    assert any("no CPU execution provider" in t for t in texts)
    assert any("backend_path='/opt/qnn/libQnnCpu.so' has no effect" in t and "QNN_HTP_LIB" in t for t in texts)
    assert any("backend_type='cpu' has no effect" in t for t in texts)
    assert {(w.filename, w.lineno) for w in caught} == {(__file__, line)}


def test_run_errors_name_the_input(model_path, tmp_path):
    sess = InferenceSession(model_path, cache=False)
    f = feed()
    with pytest.raises(InputError, match=r"input x has shape \[2, 8\]; the model takes \[2, 16\]"):
        sess.run(None, {**f, "x": np.zeros((2, 8), np.float32)})
    with pytest.raises(InputError, match=r"input ids is int32; the model takes int64"):
        sess.run(None, {**f, "ids": f["ids"].astype(np.int32)})
    with pytest.raises(InputError, match=r"missing: \['ids'\]"):
        sess.run(None, {"x": f["x"]})
    with pytest.raises(InputError, match="no output 'z'"):
        sess.run(["z"], f)
    with pytest.raises(InputError, match="do not fit the int32"):
        sess.run(None, {**f, "ids": np.full((2, 3), 2**40, np.int64)})


def test_context_binary_session(model_path, tmp_path):
    """A plain context binary (what `qnnx compile` writes) runs with its graph's own I/O: the
    same tensor names, float outputs equal to the ONNX session's, int64 ids as the graph's
    int32."""
    onnx_sess = InferenceSession(model_path, cache=False)
    binary = tmp_path / "mlp.bin"
    binary.write_bytes(qnnx_backend._native.compile(mlp_onnx()).binary())
    sess = InferenceSession(binary)
    assert sess.manifest is None
    assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == [
        ("x", [2, 16], "tensor(float)"),
        ("ids", [2, 3], "tensor(int32)"),
    ]
    f = feed()
    y, e = sess.run(None, {"x": f["x"], "ids": f["ids"].astype(np.int32)})
    want = onnx_sess.run(None, f)
    np.testing.assert_array_equal(y, want[0])
    np.testing.assert_array_equal(e, want[1])
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\0" * 100)
    with pytest.raises(QnnApiError, match="not a saved model, an ONNX model or a QNN context binary") as err:
        InferenceSession(junk)
    assert err.value.code in (30001, 30010)


def test_symbolic_dims_take_input_shapes():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(qnnx_backend.LoweringError, match="symbolic dims"):
        InferenceSession(data, cache=False)
    sess = InferenceSession(data, cache=False, input_shapes={"x": [3, 4]})
    assert sess.get_inputs()[0].shape == [3, 4]
    x = np.array([[-1, 2, -3, 4]] * 3, np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x, 0), rtol=1e-3)


def test_unsupported_model_lists_its_nodes(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"])],
        "det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(UnsupportedOpError) as e:
        InferenceSession(data, cache=False)
    assert e.value.operators == {"Det"}


def test_qnn_errors_carry_the_code(tmp_path):
    """A saved file whose manifest is consistent but whose binary is not a context binary gets
    past our checks to QNN, which refuses it: QnnApiError with QNN's code and call."""
    import hashlib
    import struct

    import torch

    path = tmp_path / "m.qnnx"
    qnnx_backend.export(torch.nn.Linear(4, 4).eval(), (torch.randn(1, 4),), path)
    data = path.read_bytes()
    m_off, m_len = struct.unpack_from("<QQ", data, 16)
    manifest = json.loads(data[m_off : m_off + m_len])
    junk = np.random.default_rng(0).integers(0, 256, 8192, dtype=np.uint8).tobytes()
    manifest.update(binary_size=len(junk), binary_sha256=hashlib.sha256(junk).hexdigest())
    text = json.dumps(manifest).encode()
    off = -(-(48 + len(text)) // 4096) * 4096
    out = data[:16] + struct.pack("<QQQQ", 48, len(text), off, len(junk)) + text
    (tmp_path / "junk.qnnx").write_bytes(out + b"\0" * (off - len(out)) + junk)
    with pytest.raises(QnnApiError) as e:
        InferenceSession(tmp_path / "junk.qnnx")
    assert (e.value.code, e.value.call) == (30010, "systemContextGetBinaryInfo")
    assert "MALFORMED_BINARY" in str(e.value)


def test_saved_model_session(tmp_path):
    import torch

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
    x = torch.randn(2, 16)
    path = tmp_path / "m.qnnx"
    qnnx_backend.export(m, (x,), path)
    sess = InferenceSession(path)
    assert sess.manifest["soc_model"] == 60
    (inp,) = sess.get_inputs()
    assert (inp.shape, inp.type) == ([2, 16], "tensor(float)")
    (y,) = sess.run(None, {inp.name: x.numpy()})
    with torch.no_grad():
        want = m(x).numpy()
    assert np.abs(y - want).max() <= 2e-2 * np.abs(want).max()
    (tmp_path / "bad.qnnx").write_bytes(path.read_bytes()[:4000])
    with pytest.raises(SavedModelError, match="truncated"):
        InferenceSession(tmp_path / "bad.qnnx")


NO_TORCH = textwrap.dedent(
    """
    import json, sys
    sys.modules["torch"] = None          # any `import torch` now raises ImportError
    import numpy as np
    from qnnx_backend.runtime import InferenceSession
    sess = InferenceSession(sys.argv[1], cache_dir=sys.argv[2])
    x = np.ones((2, 16), np.float32)
    ids = np.zeros((2, 3), np.int64)
    y, e = sess.run(None, {"x": x, "ids": ids})
    assert sys.modules["torch"] is None
    print("RESULT " + json.dumps({"y": y.tolist(), "from_cache": sess.from_cache,
                                  "modules": sorted(m for m in sys.modules if m.startswith("torch"))}))
    """
)


def test_session_imports_and_runs_without_torch(model_path, tmp_path):
    cache = tmp_path / "cache"
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", NO_TORCH, str(model_path), str(cache)], capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-3000:]
        line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
        runs.append(json.loads(line[len("RESULT "):]))
    assert [r["from_cache"] for r in runs] == [False, True]
    assert runs[0]["y"] == runs[1]["y"]
    # Only the blocked entry itself: nothing under torch was imported.
    assert runs[0]["modules"] == ["torch"]


# Every order in which a program can reach backend="qnn": the package imported before torch
# (torch finds it through the torch_dynamo_backends entry point); no import at all (torch's lookup
# loads the entry point, which imports the package while torch is loaded: the package must not
# register "qnn" itself then, or torch's own registration fails with "duplicate name: qnn"); the
# package imported after torch (it registers "qnn" itself); after torch discovered the entry
# points (list_backends).
IMPORT_ORDERS = textwrap.dedent(
    """
    import sys
    order = sys.argv[1]
    if order == "package_first":
        import qnnx_backend
        assert "torch" not in sys.modules, "import qnnx_backend imported torch"
    import torch
    if order == "listed":
        assert "qnn" in torch._dynamo.list_backends()
    if order in ("imported", "listed"):
        import qnnx_backend
    c = torch.compile(torch.nn.Linear(4, 4).eval(), backend="qnn", options={"strict": True, "device": "npu"})
    with torch.no_grad():
        c(torch.randn(1, 4))
    import qnnx_backend
    print("RESULT", dict(qnnx_backend.STATS))
    """
)


@pytest.mark.parametrize("order", ["package_first", "entry_point_only", "imported", "listed"])
def test_backend_found_and_registered_once_in_any_import_order(order):
    out = subprocess.run([sys.executable, "-c", IMPORT_ORDERS, order], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RESULT {'exports': 1, 'compiles': 1}" in out.stdout


FLOAT_COMPILE = textwrap.dedent(
    """
    import sys, torch, qnnx_backend
    c = torch.compile(torch.nn.Linear(4, 4).eval(), backend="qnn", options={"strict": True, "device": "npu"})
    with torch.no_grad():
        c(torch.randn(1, 4))
    print("RESULT", sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("torchao", "onnxscript")}))
    """
)


def test_float_compile_imports_no_quantization_machinery():
    # torchao (0.6 s and a deprecation warning from torch's pytree in every process) is for
    # quantized graphs only; a float compile must neither import it nor print its warning.
    out = subprocess.run([sys.executable, "-c", FLOAT_COMPILE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RESULT []" in out.stdout, out.stdout
    assert "register_constant" not in out.stderr, out.stderr[-2000:]


def test_onnx_file_with_external_data(tmp_path):
    # torch's exporter writes large weights to model.onnx.data beside model.onnx; a session given
    # the path reads them from the model's folder, as ONNX Runtime does (before: "uses external
    # data but the model was loaded from bytes without a base directory").
    model = onnx.load_from_string(mlp_onnx(seed=3))
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    assert (tmp_path / "model.onnx.data").stat().st_size > 16 * 32 * 4
    sess = InferenceSession(str(path), soc_model=60, cache=False)
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((2, 16)).astype(np.float32), "ids": rng.integers(0, 10, (2, 3))}
    got = sess.run(None, feed)
    # (save_model made `model`'s tensors external: the reference runs the in-memory original.)
    want = ReferenceEvaluator(onnx.load_from_string(mlp_onnx(seed=3))).run(None, feed)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=2e-2, atol=2e-2 * float(np.abs(w).max()))


def test_public_modules_are_attributes_after_importing_the_package():
    # `import qnnx_backend` then `qnnx_backend.runtime.InferenceSession`, as the docs and 0.4 code
    # write it (the move into subpackages had left `runtime` and `compatibility` unimported).
    code = (
        "import sys, qnnx_backend; "
        "print(qnnx_backend.runtime.InferenceSession.__name__, qnnx_backend.compatibility.QNNRuntime.__name__, "
        "'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["InferenceSession", "QNNRuntime", "False"]


def test_mixed_install_with_qnnx_backend_0_4_is_detected(tmp_path):
    # qnnx and qnnx-backend 0.4 both install the import package qnnx_backend: installed over
    # 0.4, the folder holds 0.4's metadata beside our files. Simulated with the package linked
    # into a folder that also holds a qnnx_backend-0.4.2.dist-info.
    import os
    import pathlib

    site = tmp_path / "site"
    site.mkdir()
    (site / "qnnx_backend").symlink_to(pathlib.Path(qnnx_backend.__file__).parent, target_is_directory=True)
    code = "import warnings; warnings.simplefilter('always'); import qnnx_backend"
    env = {**os.environ, "PYTHONPATH": str(site)}
    clean = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0 and "qnnx-backend 0.4" not in clean.stderr, clean.stderr[-2000:]
    meta = site / "qnnx_backend-0.4.2.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: qnnx-backend\nVersion: 0.4.2\n")
    mixed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert mixed.returncode == 0, mixed.stderr[-2000:]
    assert "<string>:1: RuntimeWarning: qnnx_backend: qnnx_backend-0.4.2.dist-info" in mixed.stderr, mixed.stderr
    assert "pip uninstall -y qnnx-backend qnnx" in mixed.stderr


def test_qnnx_backend_0_4_device_and_runtime_names(tmp_path):
    # qnnx-backend 0.4 exported QNNDevice (Literal["npu", "gpu"]) and QNNRuntime (classmethods
    # over ONNX Runtime's QNN EP) at the top level; code written against it keeps working.
    import typing

    from qnnx_backend import QNNDevice, QNNRuntime

    assert typing.get_args(QNNDevice) == ("npu", "gpu")
    assert QNNRuntime.ensure_registered() is None
    assert QNNRuntime.EXECUTION_PROVIDER_NAME == "QNNExecutionProvider"
    for d in ("npu", "gpu", "cpu"):
        assert QNNRuntime.is_device_available(d) == qnnx_backend.is_available(d), d
    assert QNNRuntime.is_device_available("tpu") is False
    [npu] = QNNRuntime.get_npu_devices()
    assert npu.type == "npu" and npu.build_id.startswith("v2."), npu
    assert QNNRuntime.get_devices()[0] == npu
    # The x86_64 GPU library needs a device: no GPU here, and 0.4's error for it.
    assert QNNRuntime.get_gpu_devices() == []
    with pytest.raises(RuntimeError, match="No QNN GPU device available"):
        QNNRuntime.create_gpu_session_options()
    # 0.4 made onnxruntime.SessionOptions from QNN EP provider options; here they are the
    # session options of qnnx's own InferenceSession.
    opts = QNNRuntime.create_npu_session_options({"soc_model": "60", "enable_htp_fp16_precision": "1"}, strict=True)
    assert isinstance(opts, SessionOptions) and (opts.soc_model, opts.precision) == (60, "fp16")
    sess = InferenceSession(mlp_onnx(), sess_options=opts, cache=False)
    want = ReferenceEvaluator(mlp_onnx()).run(None, feed())
    y, _ = sess.run(None, feed())
    assert np.abs(y - want[0]).max() <= 3e-2 * np.abs(want[0]).max()
