"""Saved models (qnnx_backend.export / load): values against eager, a fresh process that cannot
import torch runs the file (so no dynamo, ONNX export or lowering can happen), and bad files
(not one, truncated, corrupt, another QNN release or SoC, a manifest that does not match its
binary) give SavedModelError naming what differs."""

import json
import os
import pathlib
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn as nn

import qnnx_backend
from qnnx_backend.exceptions import InputError, SavedModelError

from conftest import assert_close_to_eager

pytestmark = pytest.mark.htp


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 5)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        return self.fc(h.flatten(1)), h.mean(dim=(2, 3))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    m = TwoHeads().eval()
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path_factory.mktemp("saved") / "two_heads.qnnx"
    manifest = qnnx_backend.export(m, (x,), path, options={"soc_model": 60})
    return m, x, path, manifest


def test_round_trip_matches_eager(saved):
    m, x, path, manifest = saved
    loaded = qnnx_backend.load(path)
    with torch.no_grad():
        want = m(x)
    got = loaded(x)
    assert isinstance(got, tuple) and len(got) == 2
    assert all(isinstance(g, torch.Tensor) for g in got)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert_close_to_eager(g, w, rel=2e-2)
    # numpy in, numpy out, same values.
    got_np = loaded(x.numpy())
    assert all(isinstance(g, np.ndarray) for g in got_np)
    for a, b in zip(got_np, got):
        np.testing.assert_array_equal(a, b.numpy())
    assert [i.name for i in loaded.get_inputs()] == ["x"]
    assert [o.name for o in loaded.get_outputs()] == ["output_0", "output_1"]


def test_manifest_describes_the_binary(saved):
    _, _, path, manifest = saved
    assert manifest["backend"] == "htp"
    assert manifest["soc_model"] == 60 and manifest["htp_arch"] == 73
    assert manifest["qnn_build_id"] == qnnx_backend._native.build_id("npu")
    (g,) = manifest["graphs"]
    assert [t["dims"] for t in g["inputs"]] == [[1, 3, 8, 8]]
    assert sorted(t["dims"] for t in g["outputs"]) == [[1, 5], [1, 8]]
    assert all(t["encoding"] is None for t in g["inputs"] + g["outputs"])
    assert manifest["options"] == {"device": "npu", "soc_model": "60"}
    assert json.loads(qnnx_backend._native.read_manifest(path)) == manifest
    # The binary starts on a page boundary of the file and is what the manifest hashes.
    data = path.read_bytes()
    off, length = struct.unpack_from("<QQ", data, 32)
    assert off % 4096 == 0 and off + length == len(data) == off + manifest["binary_size"]


def test_wrong_inputs_name_the_input_and_its_shape(saved):
    _, _, path, _ = saved
    loaded = qnnx_backend.load(path)
    with pytest.raises(InputError, match=r"input x has shape \[1, 3, 4, 4\]; the model takes \[1, 3, 8, 8\]"):
        loaded(np.zeros((1, 3, 4, 4), np.float32))
    with pytest.raises(InputError, match=r"input x is float64; the model takes float32"):
        loaded(np.zeros((1, 3, 8, 8)))
    with pytest.raises(InputError, match="takes 1 inputs"):
        loaded()


NO_TORCH = textwrap.dedent(
    """
    import json, sys
    sys.modules["torch"] = None          # any `import torch` now raises ImportError
    import numpy as np
    import qnnx_backend
    m = qnnx_backend.load(sys.argv[1])
    x = np.load(sys.argv[2])
    outs = m(x)
    assert "torch" not in sys.modules or sys.modules["torch"] is None
    print("RESULT " + json.dumps([o.tolist() for o in outs]))
    """
)


def test_load_runs_in_a_process_without_torch(saved, tmp_path):
    m, x, path, _ = saved
    np.save(tmp_path / "x.npy", x.numpy())
    out = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(path), str(tmp_path / "x.npy")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    got = [np.array(o, np.float32) for o in json.loads(line[len("RESULT "):])]
    same_process = qnnx_backend.load(path)(x.numpy())
    for a, b in zip(got, same_process):
        np.testing.assert_array_equal(a, b)


def rewrite(src: pathlib.Path, dst: pathlib.Path, edit) -> pathlib.Path:
    """A copy of saved model ``src`` whose manifest is ``edit(manifest)``, laid out again (the
    binary, and so its sha256, unchanged)."""
    data = src.read_bytes()
    m_off, m_len, b_off, b_len = struct.unpack_from("<QQQQ", data, 16)
    manifest = json.loads(data[m_off : m_off + m_len])
    edit(manifest)
    text = json.dumps(manifest).encode()
    new_off = -(-(48 + len(text)) // 4096) * 4096
    out = bytearray(data[:16]) + struct.pack("<QQQQ", 48, len(text), new_off, b_len) + text
    out += b"\0" * (new_off - len(out)) + data[b_off : b_off + b_len]
    dst.write_bytes(bytes(out))
    return dst


def test_not_a_saved_model(tmp_path):
    p = tmp_path / "x.qnnx"
    p.write_bytes(b"\x08\x07 an onnx model, maybe")
    with pytest.raises(SavedModelError, match="not a qnnx saved model"):
        qnnx_backend.load(p)
    p.write_bytes(b"")
    with pytest.raises(SavedModelError, match="empty"):
        qnnx_backend.load(p)


def test_truncated(saved, tmp_path):
    _, _, path, _ = saved
    data = path.read_bytes()
    for cut in (len(data) - 1, 5000, 100, 20):
        p = tmp_path / f"cut{cut}.qnnx"
        p.write_bytes(data[:cut])
        with pytest.raises(SavedModelError, match="truncated") as e:
            qnnx_backend.load(p)
        assert str(p) in str(e.value)


def test_corrupt_binary(saved, tmp_path):
    _, _, path, _ = saved
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x40
    p = tmp_path / "flipped.qnnx"
    p.write_bytes(bytes(data))
    with pytest.raises(SavedModelError, match="sha256 .* the file is corrupt"):
        qnnx_backend.load(p)


def test_other_qnn_release(saved, tmp_path):
    _, _, path, _ = saved
    p = rewrite(path, tmp_path / "old.qnnx", lambda m: m.update(qnn_build_id="v2.47.0.250101000000"))
    with pytest.raises(SavedModelError, match=r"compiled by QNN v2.47.0.250101000000 but this QNN library is v2\.51"):
        qnnx_backend.load(p)


def test_other_soc(saved, tmp_path):
    _, _, path, _ = saved
    # The manifest says SM8650; the binary inside was compiled for SoC 60: on the emulator the
    # backend is opened for the manifest's SoC, and QNN's binary info then disagrees.
    p = rewrite(path, tmp_path / "soc.qnnx", lambda m: m.update(soc_model=57))
    with pytest.raises(SavedModelError, match=r"57 \(SM8650\)") as e:
        qnnx_backend.load(p)
    assert "60" in str(e.value)


def test_manifest_that_does_not_match_its_binary(saved, tmp_path):
    _, _, path, _ = saved

    def edit(m):
        m["graphs"][0]["inputs"][0]["dims"] = [1, 3, 16, 16]

    p = rewrite(path, tmp_path / "dims.qnnx", edit)
    with pytest.raises(SavedModelError, match=r"manifest does not match its context binary: .*\[1, 3, 16, 16\]"):
        qnnx_backend.load(p)

    def rename(m):
        m["graphs"][0]["name"] = "other"

    p = rewrite(path, tmp_path / "name.qnnx", rename)
    with pytest.raises(SavedModelError, match=r'graphs \["other"\] in the manifest, \["qnnx"\] in the binary'):
        qnnx_backend.load(p)


def test_export_refuses_what_it_cannot_save(tmp_path):
    m = nn.Linear(4, 4)
    with pytest.raises(qnnx_backend.LoweringError, match="kv_cache"):
        qnnx_backend.export(m, (torch.randn(1, 4),), tmp_path / "a", options={"kv_cache": True})
    with pytest.raises(ValueError, match="device='cpu'"):
        qnnx_backend.export(m, (torch.randn(1, 4),), tmp_path / "a", options={"device": "cpu"})

    class Dict(nn.Module):
        def forward(self, x):
            return {"y": x + 1}

    with pytest.raises(qnnx_backend.LoweringError, match="returns dict"):
        qnnx_backend.export(Dict(), (torch.randn(1, 4),), tmp_path / "a")
    assert not os.path.exists(tmp_path / "a")


AOT = textwrap.dedent(
    """
    import json, sys
    import torch
    import qnnx_backend

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    x = torch.randn(2, 16)


    def f(mod, x):
        return mod(x)


    if sys.argv[1] == "save":
        c = torch.compile(f, backend="qnn", fullgraph=True, options={"strict": True, "device": "npu"})
        c.aot_compile(((m, x), {})).save_compiled_function(sys.argv[2], external_data={"m": m})
        y = None
    else:
        with open(sys.argv[2], "rb") as fh:
            g = torch.compiler.load_compiled_function(fh, external_data={"m": m})
        y = g(m, x).detach().flatten().tolist()
    with torch.no_grad():
        want = m(x).flatten().tolist()
    print("RESULT " + json.dumps({"stats": dict(qnnx_backend.STATS), "y": y, "want": want}))
    """
)


def test_torch_aot_compile_and_load_compiled_function(tmp_path):
    """torch's own AOT path: aot_compile compiles the QNN graph and stores it as a saved model
    inside torch's artifact; load_compiled_function in a fresh process loads it with no ONNX
    export and no compile (STATS counts only the load)."""
    script = tmp_path / "aot_script.py"  # aot_compile reads the function's source file
    script.write_text(AOT)
    art = tmp_path / "f.aot"

    def run(*args):
        out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
        return json.loads(line[len("RESULT "):])

    saved = run("save", str(art))
    assert saved["stats"] == {"exports": 1, "compiles": 1}, saved["stats"]
    assert b"QNNXSAVE" in art.read_bytes()
    loaded = run("load", str(art))
    assert loaded["stats"] == {"aot_loads": 1}, loaded["stats"]
    got, want = torch.tensor(loaded["y"]), torch.tensor(loaded["want"])
    assert_close_to_eager(got, want, rel=2e-2)


def test_aot_artifact_of_another_kind_is_refused():
    from qnnx_backend.compiling.aot import AotGraph

    with pytest.raises(qnnx_backend.LoweringError, match="not a qnnx AOT artifact"):
        AotGraph(b"\x80\x04 something else")


QUANTIZED_FOR_V68 = textwrap.dedent(
    """
    import json, sys
    import torch, torch.nn as nn
    import qnnx_backend

    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval()
    samples = [torch.rand(1, 3, 16, 16) for _ in range(8)]
    path = sys.argv[1]
    manifest = qnnx_backend.export(m, (samples[0],), path, options={
        "soc_model": "QCS6490", "quantize": "8a8w", "calibration": samples})
    loaded = qnnx_backend.load(path)
    x = torch.rand(1, 3, 16, 16)
    with torch.no_grad():
        want = m(x)
    got = loaded(x)
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0).item()
    print("RESULT", json.dumps({"cos": cos, "shape": list(got.shape), "dtype": str(got.dtype),
                                "manifest": manifest}))
    """
)


def test_export_quantized_for_a_v68_board(tmp_path):
    # quantize/calibration reach the saved model (before: ignored, then a float graph refused on
    # v68 with a hint to pass the options just passed). In a child process: once a v68 backend
    # has opened, the emulator refuses the SoC-less float graphs other tests compile.
    path = tmp_path / "q.qnnx"
    out = subprocess.run([sys.executable, "-c", QUANTIZED_FOR_V68, str(path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    assert r["shape"] == [1, 4] and r["dtype"] == "torch.float32"
    assert r["cos"] > 0.99, r
    text = json.dumps(r["manifest"])
    assert "QCS6490" in text or '"htp_arch": 68' in text or "v68" in text, text
    assert "8a8w" in text
    # Named as the float export names them: the forward's parameter (nn.Sequential's `input`)
    # and `output`, not the QDQ export's input_0 / dequantize_per_tensor_<n>.
    [g] = r["manifest"]["graphs"]
    assert [i["name"] for i in g["inputs"]] == ["input"] and [o["name"] for o in g["outputs"]] == ["output"]
    assert "register_constant" not in out.stderr
