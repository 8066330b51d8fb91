"""Post-training quantization end to end on the emulated HTP: ``torch.compile(model,
backend="qnn", options={"quantize": ..., "calibration": ...})`` on SoC 60 (v73) and on the
QCS6490 (v68, which has no float path), against fp32 eager; per-module overrides; what a target
refuses; the quantization options and the calibration data in the cache keys.

The emulator computes the HTP's fixed-point arithmetic, so these cosines are the device's.
Models have random weights with BatchNorm statistics refreshed on structured images; calibration
and test data are structured synthetic images and token sequences made here (no downloads).
"""

import pytest
import torch
import torch.nn as nn

import qnnx_backend
from conftest import compile_strict, refresh_batchnorm_on, structured_images, structured_tokens

pytest.importorskip("torchao")
pytestmark = pytest.mark.htp

TARGETS = {"v73": 60, "v68": "QCS6490"}
# The floors against fp32 eager, for random-weight CNNs and transformer layers.
FLOORS = {"8a8w": 0.99, "16a8w": 0.999}


def cosine(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / a.norm() / b.norm())


def sqnr_db(got, want):
    want = want.double()
    return float(10 * torch.log10(want.pow(2).sum() / (got.double() - want).pow(2).sum()))


def run_quantized(model, samples, inputs, soc, scheme, **options):
    """Compiles ``model`` quantized for ``soc`` (strict: nothing may fall back), checks it ran as
    one compiled graph, and returns the minimum cosine and SQNR over ``inputs``."""
    opts = {"soc_model": soc, "quantize": scheme, "calibration": samples, **options}
    compiled = compile_strict(model, **opts)
    cosines, sqnrs = [], []
    with torch.inference_mode():
        for x in inputs:
            got, want = compiled(x), model(x)
            assert got.shape == want.shape and got.dtype == want.dtype
            cosines.append(cosine(got, want))
            sqnrs.append(sqnr_db(got, want))
    stats = qnnx_backend.STATS
    assert (stats["quantizations"], stats["compiles"], stats["fallbacks"]) == (1, 1, 0), stats
    print(f"\n{type(model).__name__} {scheme} SoC {soc}: cosine {min(cosines):.5f}, SQNR {min(sqnrs):.1f} dB")
    return min(cosines), min(sqnrs)


def random_vision(name: str, size: int):
    """A torchvision model with random weights, BatchNorm statistics from 32 structured
    ``size`` x ``size`` images; 16 calibration images and 2 test images of the same kind."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)()
    images = structured_images(32 + 16 + 2, size)
    refresh_batchnorm_on(model, images[:32])
    return model, images[32:48], images[48:]


@pytest.fixture(scope="module")
def resnet18():
    # 16 calibration images at 128x128: at 64x64 or with 8 images, 16a8w stayed at 0.9988
    # (emulator).
    return random_vision("resnet18", 128)


@pytest.fixture(scope="module")
def encoder_layer():
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True, dropout=0.0).eval()
    tokens = structured_tokens(10, 16, 64)
    return model, tokens[:8], tokens[8:]


@pytest.mark.parametrize("scheme", list(FLOORS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_resnet18(resnet18, target, scheme):
    model, samples, inputs = resnet18
    cos, _ = run_quantized(model, samples, inputs, TARGETS[target], scheme)
    assert cos >= FLOORS[scheme]


@pytest.mark.parametrize("scheme", list(FLOORS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_transformer_encoder_layer(encoder_layer, target, scheme):
    model, samples, inputs = encoder_layer
    cos, _ = run_quantized(model, samples, inputs, TARGETS[target], scheme)
    assert cos >= FLOORS[scheme]


@pytest.fixture(scope="module")
def small_bert():
    """A Hugging Face BERT from a small config (2 layers, hidden 64, 4 heads; random weights),
    its last hidden state; 8 calibration and 2 test sequences of 16 token ids. Its attention is
    torch's scaled_dot_product_attention, which the quantizer writes as MatMul/Softmax (see
    quantization.pt2e._sdpa_math): without that, 22 nodes stayed float and QCS6490 refused the model."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=64,
    )  # fmt: skip

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = transformers.BertModel(cfg, add_pooling_layer=False).eval()

        def forward(self, ids):
            return self.bert(input_ids=ids).last_hidden_state

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(5, 512, (1, 16), generator=g) for _ in range(10)]
    return Bert().eval(), ids[:8], ids[8:]


@pytest.mark.parametrize("scheme", list(FLOORS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_small_bert(small_bert, target, scheme):
    # QNN 2.51 emulator: 8a8w 0.99959 (SoC 60 and QCS6490), 16a8w 0.99987 (on QCS6490 the
    # attention MatMuls run at 8 bits: v68 has no 16-bit MatMul of two activations).
    model, samples, inputs = small_bert
    cos, _ = run_quantized(model, samples, inputs, TARGETS[target], scheme)
    assert cos >= FLOORS[scheme]


@pytest.fixture(scope="module")
def mtcnn_onet():
    """Trained weights shipped inside a PyPI wheel (facenet-pytorch's MTCNN output network; no
    download), its three outputs concatenated, on 48x48 structured images (no faces at hand)."""
    facenet = pytest.importorskip("facenet_pytorch")

    class ONet(nn.Module):
        def __init__(self):
            super().__init__()
            self.onet = facenet.ONet().eval()

        def forward(self, x):
            return torch.cat(self.onet(x), 1)

    images = structured_images(18, 48, seed=3)
    return ONet().eval(), images[:16], images[16:]


@pytest.mark.parametrize("scheme", list(FLOORS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_trained_mtcnn_onet(mtcnn_onet, target, scheme):
    model, samples, inputs = mtcnn_onet
    cos, _ = run_quantized(model, samples, inputs, TARGETS[target], scheme)
    assert cos >= FLOORS[scheme]


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.relu(self.conv2(y) + y)
        return self.fc(y.mean((2, 3)))


def small_net():
    """SmallNet, 32 calibration images, 4 test images. With 8 calibration images one test
    image's logits left the calibrated range: cosine 0.9985 at 16a16w, the emulator's output
    equal to PyTorch's PT2E model's to 1e-6 (the range, not the arithmetic)."""
    torch.manual_seed(0)
    images = structured_images(36, 32)
    return refresh_batchnorm_on(SmallNet(), images[:32]), images[:32], images[32:]


def test_per_tensor_weights_and_the_histogram_observer_run():
    model, samples, inputs = small_net()
    cos, _ = run_quantized(model, samples, inputs, "QCS6490", "8a8w", per_channel=False, observer="histogram")
    assert cos >= 0.99


def test_a_module_kept_at_16_bit_in_an_8_bit_graph_runs_on_v68():
    model, samples, inputs = small_net()
    cos, _ = run_quantized(model, samples, inputs, "QCS6490", "8a8w", quantize_modules={"fc": "16a8w"})
    assert cos >= 0.99


def test_a_module_kept_float_runs_where_the_htp_has_fp16_and_is_refused_on_v68():
    model, samples, inputs = small_net()
    cos, _ = run_quantized(model, samples, inputs, 60, "8a8w", quantize_modules={"fc": "float"})
    assert cos >= 0.99
    torch._dynamo.reset()
    compiled = compile_strict(
        model, soc_model="QCS6490", quantize="8a8w", calibration=samples, quantize_modules={"fc": "float"}
    )
    with pytest.raises(qnnx_backend.LoweringError, match=r"QCS6490.*no float path.*compute in float"):
        with torch.inference_mode():
            compiled(inputs[0])


def test_16a16w_conv_on_v68_is_refused_naming_the_node():
    # QNN's validator: 16-bit weights on Conv need HTP v73+; refused before finalize.
    model, samples, inputs = small_net()
    compiled = compile_strict(model, soc_model="QCS6490", quantize="16a16w", calibration=samples)
    with pytest.raises(qnnx_backend.QnnApiError, match=r"(?s)node \"node_conv2d.*expected >= 73"):
        with torch.inference_mode():
            compiled(inputs[0])


def test_16a16w_runs_on_v73():
    model, samples, inputs = small_net()
    cos, _ = run_quantized(model, samples, inputs, 60, "16a16w")
    assert cos >= 0.999


# --- Cache keys -------------------------------------------------------------------------------


def compile_cached(model, cache_dir, x, **options):
    """One fresh torch.compile of ``model`` (quantized for v68, cached in ``cache_dir``) called
    on ``x``; returns the output and what it cost (STATS)."""
    torch._dynamo.reset()
    qnnx_backend.STATS.clear()
    opts = {"soc_model": "QCS6490", "quantize": "8a8w", "cache": True, "cache_dir": str(cache_dir), **options}
    with torch.inference_mode():
        out = compile_strict(model, **opts)(x)
    return out, dict(qnnx_backend.STATS)


def test_a_warm_start_skips_quantization_and_other_options_or_data_miss(tmp_path):
    model, samples, inputs = small_net()
    x = inputs[0]
    first, stats = compile_cached(model, tmp_path, x, calibration=samples)
    assert stats.get("compiles") == 1 and stats.get("quantizations") == 1
    # Same graph, options and calibration data: the cached binary, no quantization or compile.
    again, stats = compile_cached(model, tmp_path, x, calibration=list(samples))
    assert stats.get("cache_hits") == 1 and not stats.get("quantizations") and not stats.get("compiles")
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    # Anything that changes the encodings compiles anew.
    for options in (
        {"calibration": samples[:4]},
        {"calibration": samples, "quantize": "16a8w"},
        {"calibration": samples, "per_channel": False},
        {"calibration": samples, "observer": "histogram"},
        {"calibration": samples, "quantize_modules": {"fc": "16a8w"}},
    ):
        _, stats = compile_cached(model, tmp_path, x, **options)
        assert stats.get("quantizations") == 1 and stats.get("compiles") == 1, (options, stats)



def test_an_explicit_16_bit_matmul_on_v68_is_left_to_the_validator(encoder_layer):
    # A 16-bit scheme runs activation MatMuls at 8 bits below v73 (what test_transformer_encoder_layer
    # [v68-16a8w] measures); asking for 16 bits there is refused by QNN, naming the node.
    model, samples, inputs = encoder_layer
    compiled = compile_strict(
        model, soc_model="QCS6490", quantize="16a8w", calibration=samples, quantize_ops={"matmul": "16a8w"}
    )
    with pytest.raises(qnnx_backend.QnnApiError, match=r"(?s)node \"node_matmul.*expected >= 73"):
        with torch.inference_mode():
            compiled(inputs[0])


@pytest.mark.parametrize(
    "bits, accepted",
    [((16, 8, 16), True), ((8, 8, 8), True), ((8, 16, 16), False), ((16, 8, 8), False)],
)
def test_the_matmul_widths_a_v68_takes(bits, accepted):
    # What quantization.config.matmul_16x8 rests on: of a MatMul of two activations, v68 takes
    # (16, 8) -> 16 and (8, 8) -> 8, and refuses the other mixes; 16 x 16 ("expected >= 73") is
    # test_quant_ops.py's REFUSED. The first input, the second and the output are quantized at
    # ``bits`` (test_quant_ops.Qdq, its width changed between the edges).
    import numpy as np

    from qnnx_backend.runtime import InferenceSession
    from test_quant_ops import Qdq, rng

    q = Qdq(bits[0])
    a = q.input("a", rng(0).uniform(-3.9, 3.9, (1, 3, 8, 64)).astype(np.float32))
    q.bits = bits[1]
    b = q.input("b", rng(1).uniform(-3.9, 3.9, (1, 3, 64, 16)).astype(np.float32))
    q.bits = bits[2]
    model = q.model("MatMul", [a, b], 17).SerializeToString()
    if not accepted:
        with pytest.raises(qnnx_backend.QnnApiError, match="MatMul"):
            InferenceSession(model, soc_model="QCS6490", cache=False)
        return
    got = InferenceSession(model, soc_model="QCS6490", cache=False).run(None, q.feeds)[0]
    want = q.feeds["a"] @ q.feeds["b"]
    db = 10 * np.log10((want**2).sum() / ((got - want) ** 2).sum())
    print(f"\nMatMul {bits} on QCS6490: {db:.1f} dB")
    # Measured (QNN 2.51): 16 x 8 -> 16 at 61.2 dB against float, 8 x 8 -> 8 at 43.3 dB.
    assert db >= (44.0 if bits[0] == 16 else 38.0), db


def test_qnnx_backend_compile_takes_the_same_options():
    model, samples, inputs = small_net()
    compiled = qnnx_backend.compile(model, soc_model="QCS6490", quantize="8a8w", calibration=samples, strict=True)
    with torch.inference_mode():
        assert cosine(compiled(inputs[0]), model(inputs[0])) >= 0.99
    assert qnnx_backend.STATS["quantizations"] == 1 and qnnx_backend.STATS["fallbacks"] == 0


def test_chunk_and_unbind_run_on_v68():
    # They reach the HTP as Slice/Gather (the exporter's SplitToSequence has no HTP op).
    from test_quantize import Splits

    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(2, 3, 8, generator=g) for _ in range(10)]
    cos, _ = run_quantized(Splits().eval(), xs[:8], xs[8:], "QCS6490", "8a8w")
    assert cos >= 0.99  # 0.99403 measured: a product of two 8-bit values


# 16a4w (int4 weights) has no floor in the issue: 4 bits per weight cost accuracy that no
# lowering recovers (the HTP matches the same QDQ model within the steps of test_quant_ops).
# These are the measured cosines against fp32 eager (QNN 2.51 emulator, both targets), less a
# margin; a change that loses more fails here.
# Measured: resnet18 0.93731 / 0.93763 (SoC 60 / QCS6490), TransformerEncoderLayer 0.99951 /
# 0.99952, the small BERT 0.99985 on both, MTCNN's ONet (trained) 0.99381 / 0.99032.
FLOORS_4BIT = {"resnet18": 0.93, "encoder_layer": 0.999, "small_bert": 0.9995, "mtcnn_onet": 0.985}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("fixture", list(FLOORS_4BIT))
def test_16a4w(fixture, target, request):
    model, samples, inputs = request.getfixturevalue(fixture)
    cos, _ = run_quantized(model, samples, inputs, TARGETS[target], "16a4w")
    assert cos >= FLOORS_4BIT[fixture]


@pytest.fixture(scope="module")
def mobilenet_v2():
    return random_vision("mobilenet_v2", 96)


@pytest.fixture(scope="module")
def mobilenet_v2_pt2e(mobilenet_v2):
    """The minimum cosine of PyTorch's own quantized (converted PT2E) mobilenet_v2 against fp32
    eager over the test inputs, per scheme: computed once, shared by both targets."""
    from test_quantize import qdq

    model, samples, inputs = mobilenet_v2
    cosines = {}

    def pt2e(scheme: str) -> float:
        if scheme not in cosines:
            q, _ = qdq(model.eval(), (inputs[0],), scheme, samples=[(x,) for x in samples])
            with torch.no_grad():
                cosines[scheme] = min(cosine(q.converted(x)[0], model(x)) for x in inputs)
        return cosines[scheme]

    return pt2e


@pytest.mark.parametrize("scheme", list(FLOORS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_mobilenet_v2_is_as_good_as_pytorchs_own_quantized_model(mobilenet_v2, mobilenet_v2_pt2e, target, scheme):
    # Random-weight mobilenet_v2 misses the floors in PyTorch already: its converted PT2E model
    # (the same arithmetic, no QNN) has cosine 0.887 at 8a8w and 0.959 at 16a8w. Its 8-bit
    # weights cost it (weights alone, rounded per channel in float: 0.959; its first conv alone:
    # 0.985), not the lowering. So the HTP is held to PyTorch's own quantized model, not to the
    # floor. Measured on the emulator: 0.89925 / 0.89865 (8a8w, SoC 60 / QCS6490), 0.95926 /
    # 0.95915 (16a8w).
    model, samples, inputs = mobilenet_v2
    pt2e = mobilenet_v2_pt2e(scheme)
    cos, _ = run_quantized(model, samples, inputs, TARGETS[target], scheme)
    print(f"mobilenet_v2 {scheme}: PT2E's own model {pt2e:.5f}")
    assert cos >= pt2e - 0.005


# weight_rounding="gptq" (qnnx_backend.quantization.gptq) against the nearest rounding measured above:
# the same encodings with other integers. Measured on the emulator (QNN 2.51, SoC 60 /
# QCS6490): see the README's Quantization section. Each floor is above what nearest rounding
# reaches (resnet18 16a4w 0.93731, mobilenet_v2 16a8w 0.95926), so a rounding that did
# nothing fails here.
FLOORS_GPTQ = {("resnet18", "16a4w"): 0.955, ("mobilenet_v2", "16a8w"): 0.965}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("fixture, scheme", list(FLOORS_GPTQ))
def test_gptq_weight_rounding(fixture, scheme, target, request):
    model, samples, inputs = request.getfixturevalue(fixture)
    cos, db = run_quantized(model, samples, inputs, TARGETS[target], scheme, weight_rounding="gptq")
    print(f"{fixture} {scheme} gptq on {target}: cosine {cos:.5f}, {db:.1f} dB")
    assert cos >= FLOORS_GPTQ[(fixture, scheme)]


def test_block_wise_4bit_linear_is_its_qdq_arithmetic_and_beats_per_channel():
    """``weight_block_size``: QNN's block expansion (LPBQ) on SoC 60 computes what the converted
    PT2E model (the same block-wise fake quantization in PyTorch) computes, a Gemm's bias
    included, and keeps the small blocks a per-channel 4-bit scale rounds away
    (test_quantize.TwoLinears: one block of each output channel 8x the rest)."""
    from test_quantize import TwoLinears, qdq

    torch.manual_seed(1)
    samples = [torch.randn(4, 3, 128) for _ in range(8)]
    x = torch.randn(4, 3, 128)
    err = {}
    for second in (True, False):
        model = TwoLinears(second).eval()
        with torch.inference_mode():
            want = model(x)
        for block in (None, 32):
            torch._dynamo.reset()
            compiled = compile_strict(
                model, soc_model=60, quantize="16a4w", calibration=samples, weight_block_size=block
            )
            with torch.inference_mode():
                got = compiled(x)
            assert qnnx_backend.STATS["fallbacks"] == 0
            err[second, block] = float((got - want).pow(2).mean() / want.pow(2).mean())
            if block:
                q, _ = qdq(model, (x,), "16a4w", samples=[(s,) for s in samples], weight_block_size=block)
                with torch.no_grad():
                    fake = q.converted(x)[0]
                # The HTP's 16-bit outputs against PyTorch's float arithmetic on the same integers.
                worst = float((got - fake).abs().max() / fake.abs().max())
                assert worst <= 2e-3, worst
    print(f"\nrelative MSE against fp32 (per channel, blocks of 32): {err}")
    # Measured 3.44e-2 and 9.88e-3 with the second Linear (its 32 inputs are one block, so it is
    # per channel either way); the first alone gains more.
    assert err[True, 32] < err[True, None] / 3, err
    assert err[False, 32] < err[False, None] / 4, err


def test_block_wise_4bit_weights_on_v68_are_refused_naming_why():
    from test_quantize import TwoLinears

    model = TwoLinears().eval()
    samples = [torch.randn(4, 3, 128) for _ in range(2)]
    compiled = compile_strict(model, soc_model="QCS6490", quantize="16a4w", calibration=samples, weight_block_size=32)
    with pytest.raises(qnnx_backend.LoweringError, match=r"QCS6490.*block-wise 4-bit weights.*v69 or newer"):
        with torch.inference_mode():
            compiled(samples[0])
