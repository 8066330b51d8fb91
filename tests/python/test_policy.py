"""The backend's policy (qnnx_backend.compiling.qnn_callable): which errors fall back or raise, and what they
say; the dry run. End-to-end runs on QNN are in test_backend.py."""

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

import qnnx_backend
from conftest import WithUnsupported, compile_strict

pytestmark = pytest.mark.htp


def test_strict_raises_the_native_error_with_the_device_set():
    compiled = compile_strict(WithUnsupported().eval())
    with pytest.raises(qnnx_backend.UnsupportedOpError) as info, torch.inference_mode():
        compiled(torch.randn(3, 4))
    err = info.value
    # The native module's error as its strict twin (also dynamo's BackendCompilerFailed, see
    # _strict), whose inner_exception is the native module's own; the message is the lowering's.
    assert type(err).__name__ == "StrictUnsupportedOpError" and type(err).__module__ == "qnnx_backend.compat.strict"
    assert type(err.inner_exception) is qnnx_backend.UnsupportedOpError
    assert str(err.inner_exception) == str(err) and err.inner_exception.nodes == err.nodes
    assert err.device == "npu"
    [(node, op, reason)] = err.nodes
    assert op == "Det" and node and str(err) == reason
    assert err.operators == {"Det"}
    assert (err.node, err.code, err.call, err.graph) == (None, None, None, None)
    assert err.__cause__ is None and err.__context__ is None


def test_dry_run_reports_unsupported_nodes_strict():
    compiled = compile_strict(WithUnsupported().eval(), dry_run=True)
    with pytest.raises(qnnx_backend.UnsupportedOpError) as info, torch.inference_mode():
        compiled(torch.randn(3, 4))
    err = info.value
    assert err.device == "npu"
    assert [op for (_, op, _) in err.nodes] == ["Det"] and err.operators == {"Det"}
    assert "1 unsupported node(s)" in str(err) and err.nodes[0][2] in str(err)
    assert qnnx_backend.STATS["compiles"] == 0


def test_dry_run_runs_eagerly_and_compiles_nothing():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    x = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with torch.inference_mode():
            got = compile_strict(m, dry_run=True)(x)
            torch.testing.assert_close(got, m(x))
    assert qnnx_backend.STATS["compiles"] == 0 and qnnx_backend.STATS["exports"] == 1, qnnx_backend.STATS


def test_dry_run_falls_back_with_one_warning_naming_the_device():
    m = WithUnsupported().eval()
    x = torch.randn(3, 4)
    compiled = torch.compile(m, backend="qnn", options={"device": "npu", "dry_run": True})
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        torch.testing.assert_close(compiled(x), m(x))
    ours = [str(w.message) for w in caught if "qnn backend" in str(w.message)]
    assert len(ours) == 1 and "npu: " in ours[0] and "Det" in ours[0], ours
    assert qnnx_backend.STATS["fallbacks"] == 1


class ClampBelow(nn.Module):
    """torch.clamp with a tensor bound: ONNX Clip whose `min` is a graph input, which the HTP
    needs as a constant."""

    def forward(self, x, lo):
        return torch.clamp(x, min=lo) * 2


@pytest.mark.parametrize("key", ["lo", "l_lo_", "input_1"])
def test_fix_inputs_makes_a_graph_input_a_constant_checked_at_each_call(key):
    m = ClampBelow().eval()
    x, lo = torch.randn(2, 3), torch.tensor(0.25)
    with pytest.raises(qnnx_backend.UnsupportedOpError, match="must be a constant"), torch.inference_mode():
        compile_strict(m)(x, lo)
    torch._dynamo.reset()
    compiled = compile_strict(m, fix_inputs={key: 0.25})
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x, lo), m(x, lo), atol=1e-2, rtol=1e-2)
        # Another value is not silently replaced by the fixed one.
        with pytest.raises(qnnx_backend.exceptions.InputError, match=r"is 0\.5 but the compiled graph assumes 0\.25"):
            compiled(x, torch.tensor(0.5))


def test_fix_inputs_with_a_name_of_no_input_changes_nothing():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    x = torch.randn(2, 4)
    with torch.inference_mode():
        torch.testing.assert_close(compile_strict(m, fix_inputs={"nope": 1})(x), m(x), atol=1e-2, rtol=1e-2)


class SmallConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.conv(x)).mean((2, 3))


def test_a_float_model_for_a_v68_target_is_refused_naming_the_quantize_option():
    compiled = compile_strict(SmallConv().eval(), soc_model="QCS6490")
    with pytest.raises(qnnx_backend.LoweringError) as info, torch.inference_mode():
        compiled(torch.randn(1, 3, 8, 8))
    msg = str(info.value)
    assert "QCS6490" in msg and "cannot run float models" in msg
    assert 'options={"quantize": "8a8w", "calibration":' in msg


def test_auto_on_a_v68_target_falls_back_with_that_reason():
    model = SmallConv().eval()
    compiled = torch.compile(model, backend="qnn", options={"soc_model": "QCS6490"})
    x = torch.randn(1, 3, 8, 8)
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        torch.testing.assert_close(compiled(x), model(x))
    [w] = [w for w in caught if "qnn backend" in str(w.message)]
    assert "cannot run float models" in str(w.message) and '{"quantize": "8a8w"' in str(w.message)
    assert qnnx_backend.STATS["fallbacks"] == 1


def test_quantize_calibrates_and_exports_once_per_signature():
    pytest.importorskip("torchao")
    model = SmallConv().eval()
    samples = [torch.randn(1, 3, 8, 8) for _ in range(3)]
    compiled = torch.compile(
        model, backend="qnn", options={"device": "npu", "quantize": "8a8w", "calibration": samples, "dry_run": True}
    )
    x = torch.randn(1, 3, 8, 8)
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        for _ in range(2):
            torch.testing.assert_close(compiled(x), model(x))
    assert (qnnx_backend.STATS["calibrations"], qnnx_backend.STATS["quantizations"]) == (1, 1)
    assert qnnx_backend.STATS["exports"] == 1 and qnnx_backend.STATS["compiles"] == 0


def test_bad_calibration_data_raises_whatever_strict_says():
    pytest.importorskip("torchao")
    model = SmallConv().eval()
    compiled = torch.compile(
        model, backend="qnn", options={"quantize": "8a8w", "calibration": [torch.randn(2, 3, 8, 8)]}
    )
    with pytest.raises(ValueError, match=r"sample 0: x is \(2, 3, 8, 8\).*compiled for \(1, 3, 8, 8\)"):
        with torch.inference_mode():
            compiled(torch.randn(1, 3, 8, 8))
    assert qnnx_backend.STATS["quantizations"] == 0


def test_fallback_warning_points_at_the_callers_line():
    # The warning is raised inside dynamo's compile of the first call; a fixed stacklevel showed
    # torch's eval_frame.py. It must name the line that called the compiled model.
    compiled = torch.compile(
        WithUnsupported().eval(), backend="qnn", options={"device": "npu", "soc_model": 60, "min_partition_size": 99}
    )
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        compiled(torch.randn(3, 4))
    mine = [w for w in caught if "qnn backend" in str(w.message)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    assert (mine[0].filename, mine[0].lineno) == (__file__, line)


def test_auto_names_each_device_once_and_an_unusable_gpu_in_one_line():
    compiled = torch.compile(WithUnsupported().eval(), backend="qnn", options={"soc_model": 60, "min_partition_size": 99})
    with pytest.warns(RuntimeWarning, match="qnn backend") as caught, torch.inference_mode():
        compiled(torch.randn(3, 4))
    text = "\n".join(str(w.message) for w in caught)
    assert "npu: npu:" not in text and "gpu: gpu:" not in text, text
    assert "npu: " in text and "Det" in text
    if not qnnx_backend.is_available("gpu"):
        # x86_64: no GPU library can execute; one line says so after the NPU's reasons.
        [gpu] = [l for l in text.splitlines() if l.startswith("gpu:")]
        assert gpu.startswith("gpu: not available here (") and "TuningMode" not in gpu, gpu


NO_LIBRARY = textwrap.dedent(
    """
    import torch, qnnx_backend
    m = torch.nn.Linear(4, 4).eval()
    compiled = torch.compile(m, backend="qnn", options={"device": "npu"})
    compiled(torch.randn(1, 4))
    """
)


def test_a_missing_library_is_named_once_at_the_users_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("QNN") and k != "VIRTUAL_ENV"}
    env.update(XDG_DATA_HOME=str(tmp_path), QNNX_ONNXRUNTIME_QNN_DIR=str(tmp_path / "none"), PYTHONWARNINGS="always")
    out = subprocess.run([sys.executable, "-c", NO_LIBRARY], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "<string>:5: RuntimeWarning: qnn backend" in out.stderr, out.stderr[-3000:]
    assert "npu: QNN library libQnnHtp.so not found" in out.stderr and "npu: npu:" not in out.stderr


def _threads(n, fn):
    """Runs fn(i) in n threads started together; returns (results, errors) by thread."""
    import threading

    barrier = threading.Barrier(n)
    results, errors = [None] * n, [None] * n

    def work(i):
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors[i] = e

    ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=600)
    return results, errors


def _small_cnn(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1)).eval()


def test_first_calls_from_four_threads_compile_once():
    # A threaded app's first requests: before, 3 of 4 threads raised "GLOBALS.in_onnx_export
    # must be False" (two ONNX exports at once); now one compiles and the others wait for it.
    m = _small_cnn(0)
    compiled = torch.compile(m, backend="qnn", options={"device": "npu", "soc_model": 60, "strict": True})
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        want = m(x)
    results, errors = _threads(4, lambda i: compiled(x))
    assert errors == [None] * 4, errors
    assert qnnx_backend.STATS["compiles"] == 1 and qnnx_backend.STATS["fallbacks"] == 0, qnnx_backend.STATS
    for r in results:
        assert torch.equal(r, results[0])
        assert (r - want).abs().max().item() < 1e-2 * want.abs().max().item()


def test_first_calls_of_different_models_in_threads_do_not_collide():
    models = [_small_cnn(s) for s in range(2)]
    compiled = [torch.compile(m, backend="qnn", options={"device": "npu", "soc_model": 60, "strict": True}) for m in models]
    x = torch.randn(1, 3, 16, 16)
    results, errors = _threads(2, lambda i: compiled[i](x))
    assert errors == [None, None], errors
    assert qnnx_backend.STATS["compiles"] == 2, qnnx_backend.STATS
    with torch.no_grad():
        for m, r in zip(models, results):
            want = m(x)
            assert (r - want).abs().max().item() < 1e-2 * want.abs().max().item()


def test_steady_calls_from_threads_agree_with_one_thread():
    m = _small_cnn(1)
    compiled = torch.compile(m, backend="qnn", options={"device": "npu", "soc_model": 60, "strict": True})
    inputs = [torch.randn(1, 3, 16, 16) for _ in range(8)]
    with torch.no_grad():
        alone = [compiled(x) for x in inputs]
        results, errors = _threads(4, lambda i: [compiled(inputs[k % 8]) for k in range(i, i + 200)])
    assert errors == [None] * 4, errors
    for i, outs in enumerate(results):
        for k, out in zip(range(i, i + 200), outs):
            assert torch.equal(out, alone[k % 8]), (i, k)


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
def test_a_3000_call_soak_keeps_rss_flat():
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).eval()
    compiled = torch.compile(m, backend="qnn", options={"device": "npu", "soc_model": 60, "strict": True})
    x = torch.randn(4, 64)
    with torch.no_grad():
        for _ in range(300):  # warm: allocator pools and the emulator's buffers settle
            compiled(x)
        before = _rss_mb()
        for _ in range(3000):
            compiled(x)
        after = _rss_mb()
    # A leak of one 1 KiB output per call would be 3 MB; the emulator's own noise is below 1 MB.
    assert after - before < 2.0, f"RSS grew {after - before:.1f} MB over 3000 calls ({before:.0f} -> {after:.0f} MB)"
