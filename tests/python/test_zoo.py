"""Models with trained weights from the model zoo (bench/zoo_models.py) on the emulated HTP against
their float reference, so that a change in the lowering that breaks real weights shows up here
and not only in bench/zoo.py's table.

The weights come inside PyPI wheels pinned in bench/requirements-zoo.txt (nothing is
downloaded at run time): facenet-pytorch's MTCNN nets through torch.compile(backend="qnn"),
rapidocr's PP-OCR detector, recognizer and direction classifier and silero-vad's voice activity
detector as ONNX. References: eager PyTorch fp32 for MTCNN; for the ONNX models, outputs computed once
with ONNX Runtime 1.32's CPU EP, stored with their inputs in data/NAME_ref.npz by
`python3 bench/zoo.py --write-test-refs` (the system Python that runs the tests has no ONNX
Runtime; onnx's reference evaluator cannot run silero-vad's LSTM and differs from ONNX Runtime
by up to 0.4 on the PP-OCR recognizer). Tolerances are the fp16 HTP's, a few times the errors
bench/zoo.py measures.
"""

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_close_to_eager, compile_strict

from qnnx_backend import _native
from qnnx_backend.runtime import InferenceSession

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import zoo_models  # noqa: E402

pytestmark = pytest.mark.htp
DATA = Path(__file__).resolve().parent / "data"


def _run_onnx(onnx_bytes: bytes, feeds: dict, fix_inputs=None) -> list:
    """Whole graph on the HTP (SoC 60, fp16, as bench/zoo.py), with inputs fixed at compile time;
    through a context binary as `qnnx compile` writes it."""
    compiled = _native.compile(onnx_bytes, _native.Spec("npu", soc_model=60, fp16=True), fix_inputs=fix_inputs)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.bin")
        with open(path, "wb") as f:
            f.write(compiled.binary())
        sess = InferenceSession(path)
        return sess.run(None, {k: v for k, v in feeds.items() if k not in (fix_inputs or {})})


def _static(entry) -> bytes:
    """The model with the zoo entry's static input shapes (the HTP graph is static)."""
    import onnx

    m = onnx.load(str(entry.path()))
    for inp in m.graph.input:
        if inp.name in entry.shapes:
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for v in entry.shapes[inp.name]:
                dims.add().dim_value = v
    del m.graph.value_info[:]
    return m.SerializeToString()


@pytest.mark.parametrize("net", ["pnet", "onet"])
def test_mtcnn_trained_weights_through_torch_compile(net):
    model, inputs = zoo_models.mtcnn(net)
    with torch.no_grad():
        want = model(*inputs)
        got = compile_strict(model, soc_model=60)(*inputs)
    # PNet and RNet return (box regression, face probability), ONet landmarks too: all checked.
    assert len(got) == len(want) == {"pnet": 2, "onet": 3}[net]
    for g, w in zip(got, want):
        assert_close_to_eager(g, w, rel=1e-2)  # measured ~2e-3


def _reference(name: str) -> tuple:
    """(inputs by name, outputs in order): bench/zoo.py --write-test-refs wrote them."""
    z = np.load(DATA / f"{name}_ref.npz")
    feeds = {k[3:]: z[k] for k in z.files if k.startswith("in_")}
    outs = [z[f"out_{k}"] for k in range(len([f for f in z.files if f.startswith("out_")]))]
    return feeds, outs


@pytest.mark.parametrize("name", ["rapidocr_rec", "rapidocr_cls"])
def test_ocr_onnx_against_onnxruntime_cpu(name):
    entry = zoo_models.zoo()[name]
    feeds, want = _reference(name)
    got = _run_onnx(_static(entry), feeds)
    assert len(got) == len(want) == 1
    g, w = got[0].astype(np.float32), want[0]
    assert g.shape == w.shape
    if name == "rapidocr_cls":
        assert_close_to_eager(torch.from_numpy(g), torch.from_numpy(w), rel=3e-2)  # measured 3.8e-3
        return
    # The recognizer: per position (10 of them), softmax over 6625 characters. Where the
    # reference is unsure (top probability 0.87 and 0.72 at two positions of this input), fp16
    # moves the top probability a lot, on ONNX Runtime's QNN EP as on ours (bench/zoo.py: max
    # error 0.46 and 0.43, to 0.26 and 0.29); positions the reference reads with confidence are
    # held to fp16's error, and the character read (the argmax) must be the reference's everywhere.
    per_position = np.abs(g - w).max(-1).ravel()
    confident = w.max(-1).ravel() >= 0.95
    assert confident.sum() >= 7, "the input no longer gives confident positions: the test would check little"
    assert (per_position[confident] <= 3e-2).all(), f"per-position max errors {per_position}"
    agree = (g.argmax(-1) == w.argmax(-1)).mean()
    assert agree == 1.0, f"only {agree:.0%} of the positions read the reference's character"


def test_ocr_detector_probability_map():
    """PP-OCRv4's text detector (PP-LCNet blocks, their written-out HardSwish fused and affine
    maps folded into the Convs): a text probability map that DB post-processing thresholds
    at 0.3."""
    entry = zoo_models.zoo()["rapidocr_det"]
    feeds, (want,) = _reference("rapidocr_det")
    (got,) = _run_onnx(_static(entry), feeds)
    assert got.shape == want.shape
    got = got.astype(np.float32)
    err = np.abs(got - want).max()
    assert err <= 0.1, f"max error {err:.3e}"  # measured 0.042, ONNX Runtime's QNN EP 0.036
    flipped = ((got > 0.3) != (want > 0.3)).sum()
    assert flipped <= want.size // 1000, f"{flipped} of {want.size} pixels change side of 0.3"


def test_silero_vad_with_its_sample_rate_fixed():
    """`sr` feeds an If choosing the 16 kHz or 8 kHz branch: fixed at compile time, the If folds."""
    entry = zoo_models.zoo()["silero_vad_16k"]
    feeds, (want_prob, want_state) = _reference("silero_vad_16k")
    prob, state = _run_onnx(_static(entry), feeds, fix_inputs={"sr": "16000"})
    assert prob.shape == want_prob.shape and state.shape == want_state.shape
    np.testing.assert_allclose(prob, want_prob, atol=2e-3)
    # The LSTM state (values up to 1) carries the signal from chunk to chunk.
    err = np.abs(state.astype(np.float32) - want_state).max()
    assert err <= 2e-2, f"LSTM state max error {err:.3e}"
