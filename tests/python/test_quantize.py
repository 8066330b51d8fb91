"""Post-training quantization (qnnx_backend.quantization): what the QDQ ONNX model
holds per scheme (dtypes, ranges, per-channel axes, derived int32 bias, QNN's
fixed Sigmoid/Tanh encodings, absorbed clamps, shared encodings), the overrides, and its accuracy
on the host with onnx's reference evaluator against the PT2E model and fp32 eager. No QNN
needed."""

import math

import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from conftest import capture, refresh_batchnorm_on, structured_images, structured_tokens
from qnnx_backend.compiling import to_onnx as _export
from qnnx_backend.compiling.decompose import decompose
from qnnx_backend.quantization import config as quant_config, pt2e

pytest.importorskip("torchao")


def qdq(model, args, scheme, samples=None, **options):
    """Quantizes ``model`` as the backend does; returns the Quantized result and its ONNX model."""
    model = model.eval()
    [(gm, ex, _)] = capture(model, *args)
    gm = decompose(gm)
    runtime = [i for i, a in enumerate(ex) if not _export.is_static(a)]
    traced = _export.Interpreted(gm, ex, runtime)
    if samples is None:
        g = torch.Generator().manual_seed(1)
        samples = [tuple(torch.randn(a.shape, generator=g) for a in args) for _ in range(4)]
    q = pt2e.quantize(traced, [ex[i] for i in runtime], samples, quant_config.config(scheme, **options))
    return q, onnx.load_from_string(q.onnx)


class Onnx:
    """Lookups over a QDQ model."""

    def __init__(self, m):
        self.m = m
        self.inits = {t.name: t for t in m.graph.initializer}
        self.producer = {o: n for n in m.graph.node for o in n.output}
        self.users = {}
        for n in m.graph.node:
            for i in n.input:
                self.users.setdefault(i, []).append(n)

    def ops(self, op_type):
        return [n for n in self.m.graph.node if n.op_type == op_type]

    def array(self, name):
        return numpy_helper.to_array(self.inits[name])

    def dtype(self, name):
        return onnx.TensorProto.DataType.Name(self.inits[name].data_type)

    def encoding(self, n):
        """(scale, zero point, zero-point dtype name, axis) of a Q/DQ node."""
        axis = next((onnx.helper.get_attribute_value(a) for a in n.attribute if a.name == "axis"), None)
        return self.array(n.input[1]), self.array(n.input[2]), self.dtype(n.input[2]), axis

    def dq_input(self, n, i):
        """The DequantizeLinear feeding input ``i`` of ``n`` (None when it is float)."""
        p = self.producer.get(n.input[i])
        return p if p is not None and p.op_type == "DequantizeLinear" else None

    def quantized_output(self, n):
        """The QuantizeLinear reading ``n``'s output, if any."""
        return next((u for u in self.users.get(n.output[0], []) if u.op_type == "QuantizeLinear"), None)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


WEIGHT = {
    "8a8w": ("INT8", 127),
    "16a8w": ("INT8", 127),
    "16a16w": ("INT16", 32767),
    "16a4w": ("INT4", 7),
}


@pytest.mark.parametrize("scheme", list(quant_config.SCHEMES))
def test_scheme_dtypes_ranges_and_axes(scheme):
    torch.manual_seed(0)
    _, m = qdq(ConvNet(), (torch.randn(1, 3, 8, 8),), scheme)
    o = Onnx(m)
    assert [(d.domain, d.version) for d in m.opset_import] == [("", 21)]
    act = "UINT8" if scheme.startswith("8a") else "UINT16"
    quantizes = o.ops("QuantizeLinear")
    assert quantizes and {o.encoding(q)[2] for q in quantizes} == {act}
    w_type, w_max = WEIGHT[scheme]
    [conv] = o.ops("Conv")
    [gemm] = o.ops("Gemm")
    for node, out_channels in ((conv, 8), (gemm, 5)):
        act_dq, w_dq, b_dq = (o.dq_input(node, i) for i in range(3))
        assert act_dq is not None and o.encoding(act_dq)[2] == act
        # Weights: a constant of the weight type behind DequantizeLinear, symmetric, per output
        # channel on axis 0, each channel's largest magnitude on the type's last level.
        assert o.dtype(w_dq.input[0]) == w_type
        w = o.array(w_dq.input[0]).astype(np.int32)
        w_scale, w_zp, _, axis = o.encoding(w_dq)
        assert axis == 0 and w_scale.shape == (out_channels,) and not w_zp.any()
        assert w.min() >= -w_max and w.max() <= w_max
        if scheme != "16a16w":
            assert (np.abs(w).reshape(out_channels, -1).max(1) >= w_max).all()
        # (16a16w: scales raised where the int32 bias would not fit, see below.)
        # Bias: int32, scale = input scale x weight scale, zero point 0.
        assert o.dtype(b_dq.input[0]) == "INT32"
        b_scale, b_zp, _, b_axis = o.encoding(b_dq)
        np.testing.assert_allclose(b_scale, o.encoding(act_dq)[0] * w_scale, rtol=1e-6)
        assert b_axis == 0 and not b_zp.any()
    # The ReLU is absorbed: Conv feeds its QuantizeLinear, whose zero point is the minimum.
    assert not o.ops("Relu")
    q = o.quantized_output(conv)
    assert q is not None and int(o.encoding(q)[1]) == 0


@pytest.mark.parametrize(
    "scheme, options, factor",
    [("16a8w", {}, 1.0), ("16a8w", {"headroom": 2.0}, 2.0), ("16a16w", {"headroom": 4}, 4.0), ("8a8w", {"headroom": 4}, 1.0)],
)
def test_16_bit_activation_encodings_have_headroom_and_8_bit_ones_none(scheme, options, factor):
    """A 16-bit activation encoding covers its calibrated range times the headroom (default 1;
    KV-cache graphs 2: test_settings), so that values the calibration did not reach are not
    clipped; 8 bits have none to spare."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8)
    _, m = qdq(ConvNet(), (x,), scheme, samples=[(x,)], **options)
    o = Onnx(m)
    [q] = [n for n in o.ops("QuantizeLinear") if n.input[0] == m.graph.input[0].name]
    scale, zp, _, _ = o.encoding(q)
    top = 255 if scheme.startswith("8a") else 65535
    step = float(scale)
    assert step * (0 - int(zp)) == pytest.approx(float(x.min()) * factor, abs=step)
    assert step * (top - int(zp)) == pytest.approx(float(x.max()) * factor, abs=step)


@pytest.mark.parametrize("headroom", [0.5, 17, True, "2"])
def test_a_headroom_below_1_or_not_a_number_is_refused(headroom):
    with pytest.raises(ValueError, match="activation_headroom"):
        quant_config.config("16a8w", headroom=headroom)


def test_the_qdq_model_runs_where_pytorch_runs_it():
    # onnx's reference evaluator on the QDQ model against the PT2E model (the same arithmetic
    # in PyTorch) and fp32 eager.
    torch.manual_seed(0)
    model = ConvNet().eval()
    x = torch.randn(1, 3, 8, 8)
    for scheme in quant_config.SCHEMES:
        q, m = qdq(model, (x,), scheme)
        [got] = ReferenceEvaluator(m).run(None, {"input_0": x.numpy()})
        with torch.no_grad():
            pt2e = q.converted(x)[0].numpy()
            eager = model(x).numpy()
        out_scale = float(Onnx(m).encoding(Onnx(m).ops("DequantizeLinear")[-1])[0])
        assert np.abs(got - pt2e).max() <= 1.01 * out_scale, scheme
        assert np.abs(got - eager).max() < 0.1 * np.abs(eager).max(), scheme


def test_per_tensor_weights():
    _, m = qdq(ConvNet(), (torch.randn(1, 3, 8, 8),), "8a8w", per_channel=False)
    o = Onnx(m)
    for node in o.ops("Conv") + o.ops("Gemm"):
        scale, zp, _, axis = o.encoding(o.dq_input(node, 1))
        assert scale.shape == () and zp.shape == () and axis is None
        assert o.encoding(o.dq_input(node, 2))[0].shape == ()


def test_conv_transpose_weights_are_per_channel_on_axis_1():
    model = nn.Sequential(nn.ConvTranspose2d(4, 6, 3, stride=2), nn.Sigmoid())
    _, m = qdq(model, (torch.randn(1, 4, 5, 5),), "8a8w")
    o = Onnx(m)
    [conv] = o.ops("ConvTranspose")
    scale, _, _, axis = o.encoding(o.dq_input(conv, 1))
    assert axis == 1 and scale.shape == (6,)


class Activations(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x * 3), torch.tanh(x - 1)


def test_16_bit_sigmoid_and_tanh_have_qnn_fixed_encodings():
    _, m = qdq(Activations(), (torch.randn(2, 16),), "16a8w")
    o = Onnx(m)
    [sig] = o.ops("Sigmoid")
    [tanh] = o.ops("Tanh")
    s, zp, t, _ = o.encoding(o.quantized_output(sig))
    assert (float(s), int(zp), t) == (1 / 65536, 0, "UINT16")
    s, zp, t, _ = o.encoding(o.quantized_output(tanh))
    assert (float(s), int(zp), t) == (1 / 32768, 32768, "UINT16")
    # At 8 bits the outputs are calibrated like any other.
    _, m8 = qdq(Activations(), (torch.randn(2, 16),), "8a8w")
    o8 = Onnx(m8)
    s8, _, t8, _ = o8.encoding(o8.quantized_output(o8.ops("Tanh")[0]))
    assert t8 == "UINT8" and float(s8) != 1 / 128


def test_scalar_operands_are_quantized_constants():
    _, m = qdq(Activations(), (torch.randn(2, 16),), "8a8w")
    o = Onnx(m)
    [mul] = o.ops("Mul")
    dqs = [o.dq_input(mul, i) for i in range(2)]
    assert all(d is not None for d in dqs)
    const = next(d for d in dqs if d.input[0] in o.inits)
    value = (o.array(const.input[0]).astype(np.float64) - o.array(const.input[2])) * o.array(const.input[1])
    assert abs(float(value) - 3.0) < 3.0 / 255


class Clamps(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.c = nn.Linear(8, 8)

    def forward(self, x):
        return F.relu6(self.a(x)), F.hardtanh(self.b(x), 0.0, 0.5), torch.clamp(self.c(x), -0.2, 0.3)


def test_clamps_are_absorbed_only_when_the_encoding_clips_the_same():
    torch.manual_seed(0)
    model = Clamps().eval()
    x = torch.randn(4, 8) * 4
    q, m = qdq(model, (x,), "8a8w", samples=[(torch.randn(4, 8) * 4,) for _ in range(4)])
    o = Onnx(m)
    # relu6 and hardtanh(0, 0.5): outputs calibrated to [0, max <= clamp max] with zero point
    # 0, the quantization clips exactly as the clamp: absorbed. clamp(-0.2, 0.3): the encoding
    # (which includes 0) covers it too. Whatever is kept has a quantized input.
    for clip in o.ops("Clip"):
        assert o.dq_input(clip, 0) is not None
    assert q.absorbed_clamps + len(o.ops("Clip")) == 3
    assert q.absorbed_clamps >= 2
    [got] = ReferenceEvaluator(m).run(None, {"input_0": x.numpy()})[:1]
    with torch.no_grad():
        want = q.converted(x)[0].numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)


class Shapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.conv2 = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        a = F.max_pool2d(self.conv(x), 2)
        b = self.conv2(x).permute(0, 1, 3, 2)
        y = torch.cat([a.flatten(2), b[:, :, ::2, ::2].reshape(1, 4, -1)], dim=2)
        return y.transpose(1, 2)


def test_data_movement_keeps_its_input_encoding_and_cat_shares_one():
    _, m = qdq(Shapes(), (torch.randn(1, 3, 10, 10),), "8a8w")
    o = Onnx(m)

    def enc(n):
        q = o.quantized_output(n)
        assert q is not None, n.op_type
        s, zp, _, _ = o.encoding(q)
        return float(s), int(zp)

    def enc_in(n):
        s, zp, _, _ = o.encoding(o.dq_input(n, 0))
        return float(s), int(zp)

    [cat] = [n for n in o.ops("Concat") if o.dq_input(n, 0) is not None]
    moved = [n for op in ("MaxPool", "Transpose", "Reshape", "Slice") for n in o.ops(op) if o.dq_input(n, 0)]
    assert {n.op_type for n in moved} == {"MaxPool", "Transpose", "Reshape", "Slice"}
    for n in moved:
        assert enc(n) == enc_in(n), n.op_type
    cat_enc = enc(cat)
    for i in range(2):
        dq = o.dq_input(cat, i)
        assert (float(o.encoding(dq)[0]), int(o.encoding(dq)[1])) == cat_enc


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 8)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.GELU()) for _ in range(2)])
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return torch.softmax(self.head(x), -1)


def test_overrides_by_module_path_and_op_kind():
    x = (torch.randn(2, 8),)
    _, m = qdq(
        Blocks(),
        x,
        "8a8w",
        modules={"blocks.*": "16a8w", "blocks.1.1": "float", "head": "float"},
        ops={"softmax": "16a8w", "gelu": "8a8w"},
    )
    o = Onnx(m)
    gemms = o.ops("Gemm")
    assert len(gemms) == 4
    stem, b0, b1, head = gemms
    assert o.encoding(o.dq_input(stem, 0))[2] == "UINT8"
    # blocks.* at 16 bits (the deepest match wins over the op override for blocks.0's GELU).
    assert o.encoding(o.dq_input(b0, 0))[2] == "UINT16"
    assert o.encoding(o.dq_input(b1, 0))[2] == "UINT16"
    gelus = o.ops("Gelu")
    assert o.encoding(o.dq_input(gelus[0], 0))[2] == "UINT16"
    # blocks.1.1 (its GELU) and head are float: the GELU reads the dequantized output of the
    # 16-bit Linear before it, but its own output is not quantized, nor are head's weights.
    assert o.dq_input(gelus[1], 0) is not None and o.quantized_output(gelus[1]) is None
    assert all(o.dq_input(head, i) is None for i in range(3))
    # softmax by op kind.
    [softmax] = o.ops("Softmax")
    assert o.encoding(o.quantized_output(softmax))[2] == "UINT16"


def test_a_module_pattern_that_matches_nothing_is_an_error():
    with pytest.raises(ValueError, match=r"quantize_modules: pattern\(s\) \['blocks\.9'\] match no module.*stem"):
        qdq(Blocks(), (torch.randn(2, 8),), "8a8w", modules={"blocks.9": "float"})


def test_16_bit_weights_raise_the_weight_scale_until_the_bias_fits_int32():
    # With 16-bit activations and weights, input scale x weight scale is ~1e-10: a bias of 0.5
    # would need 5e9 levels. The weight scale of those channels is raised instead of the bias
    # saturating (which broke resnet18's output: cosine 0.76).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    with torch.no_grad():
        model[0].bias.fill_(3.0)
        model[2].bias.uniform_(-5, 5)
    x = torch.randn(8, 16) * 0.01
    _, m = qdq(model, (x,), "16a16w", samples=[(torch.randn(8, 16) * 0.01,) for _ in range(4)])
    o = Onnx(m)
    for gemm in o.ops("Gemm"):
        b = o.array(o.dq_input(gemm, 2).input[0]).astype(np.int64)
        assert np.abs(b).max() <= 2**30
    [got] = ReferenceEvaluator(m).run(None, {"input_0": x.numpy()})
    with torch.no_grad():
        want = model(x).numpy()
    assert np.abs(got - want).max() < 1e-2 * np.abs(want).max()


def test_tidy_leaves_no_cast_or_constant_around_qdq():
    _, m = qdq(ConvNet(), (torch.randn(1, 3, 8, 8),), "8a8w")
    o = Onnx(m)
    assert not o.ops("Cast")
    for n in o.ops("QuantizeLinear") + o.ops("DequantizeLinear"):
        assert n.input[1] in o.inits and n.input[2] in o.inits


def test_module_paths_are_named_modules_paths():
    from qnnx_backend.quantization.modpaths import module_path

    assert module_path("L['self'].layer1[0]._modules['conv']") == "layer1.0.conv"
    assert module_path("L['self'].blocks.1.attn") == "blocks.1.attn"
    assert module_path("L['model'].encoder['layer']") == "encoder.layer"
    assert module_path("L['self']") == ""


# --- Accuracy against fp32 eager ----------------------------------------------------------------


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def accuracy(model, inputs, samples, scheme, **options):
    """Minimum cosine over ``inputs`` of the QDQ model (onnx's reference evaluator) against
    fp32 eager, and against the converted PT2E model (the same arithmetic in PyTorch; printed
    with ``-s``)."""
    q, m = qdq(model, inputs[0], scheme, samples=samples, **options)
    ev = ReferenceEvaluator(m)
    eager, pt2e = [], []
    for args in inputs:
        [got] = ev.run(None, {f"input_{i}": a.numpy() for i, a in enumerate(args)})[:1]
        with torch.no_grad():
            eager.append(cosine(got, model(*args).numpy()))
            pt2e.append(cosine(got, q.converted(*args)[0].numpy()))
    name = type(model).__name__
    print(f"\n{name} {scheme}: cosine vs fp32 eager {min(eager):.5f}, vs PT2E {min(pt2e):.6f}")
    return min(eager), min(pt2e)


def vision(name, size, calibration=8, tests=2, seed=0):
    """A random-weight torchvision model with BatchNorm statistics refreshed on 32 structured
    images, then ``tests`` inputs and ``calibration`` samples of the same kind."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(seed)
    model = getattr(torchvision.models, name)()
    images = structured_images(32 + calibration + tests, size, seed=seed)
    refresh_batchnorm_on(model, images[:32])
    return model, [(x,) for x in images[32 + calibration :]], [(x,) for x in images[32 : 32 + calibration]]


# Random weights: error grows through the network as it does in an untrained model.
@pytest.mark.parametrize("scheme, floor", [("8a8w", 0.99), ("16a8w", 0.999)])
def test_resnet18_accuracy(scheme, floor):
    # 16 calibration samples: with 8, one test image's activations left the calibrated ranges
    # (0.9976 at 16a8w).
    model, inputs, samples = vision("resnet18", 128, calibration=16, tests=2)
    eager, pt2e = accuracy(model, inputs, samples, scheme)
    # At 8 bits, one-level rounding differences between onnx's reference Conv/QuantizeLinear
    # and PyTorch's (x / scale against x * (1 / scale)) reach the output (0.9993 measured).
    assert eager >= floor and pt2e >= (0.999 if scheme == "8a8w" else 0.9999)


@pytest.mark.parametrize("scheme, floor", [("8a8w", 0.88), ("16a8w", 0.95)])
def test_mobilenet_v2_accuracy(scheme, floor):
    # Untrained mobilenet_v2 amplifies any perturbation: rounding only its weights to int8 (per
    # channel, activations float) gives cosine 0.990-0.994 at 224x224 and about 0.95 at
    # 64x64, so these floors (at 128x128, for time) are below the issue's. At 8 bits a
    # one-level rounding difference between onnx's QuantizeLinear (x / scale) and PyTorch's
    # (x * (1 / scale)) grows as much: the PT2E comparison is made at 16a8w.
    model, inputs, samples = vision("mobilenet_v2", 128, calibration=8, tests=1)
    eager, pt2e = accuracy(model, inputs, samples, scheme)
    assert eager >= floor
    if scheme == "16a8w":
        assert pt2e >= 0.9999


@pytest.mark.parametrize("scheme, floor", [("8a8w", 0.99), ("16a8w", 0.999)])
def test_transformer_encoder_layer_accuracy(scheme, floor):
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True, dropout=0.0).eval()
    tokens = [(t,) for t in structured_tokens(10, 16, 64)]
    eager, pt2e = accuracy(model, tokens[8:], tokens[:8], scheme)
    assert eager >= floor and pt2e >= 0.9999


@pytest.mark.parametrize("scheme, floor", [("8a8w", 0.99), ("16a8w", 0.999)])
def test_trained_mtcnn_onet_accuracy(scheme, floor):
    # Trained weights shipped inside a PyPI wheel (facenet-pytorch's MTCNN output network; no
    # download), on 48x48 structured images (no faces at hand).
    facenet = pytest.importorskip("facenet_pytorch")
    onet = facenet.ONet().eval()

    class ONet(nn.Module):
        def __init__(self):
            super().__init__()
            self.onet = onet

        def forward(self, x):
            return torch.cat(self.onet(x), 1)

    images = structured_images(10, 48, seed=3)
    eager, pt2e = accuracy(ONet().eval(), [(x,) for x in images[8:]], [(x,) for x in images[:8]], scheme)
    assert eager >= floor and pt2e >= 0.9999


def test_rank_3_linears_are_gemms_between_reshapes_and_splits_are_slices():
    # A rank-3 linear exports as MatMul + Add (the MatMul output without an encoding) and
    # MultiheadAttention's q/k/v split as SplitToSequence: neither runs quantized on the HTP.
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True, dropout=0.0)
    _, m = qdq(model, (torch.randn(1, 8, 32),), "8a8w")
    o = Onnx(m)
    kinds = {n.op_type for n in m.graph.node}
    assert "Gemm" in kinds and not kinds & {"SplitToSequence", "SequenceAt"}, kinds
    assert len(o.ops("Gemm")) == 4  # in_proj, out_proj, linear1, linear2
    for n in o.ops("Gemm") + o.ops("MatMul") + o.ops("Slice"):
        assert o.dq_input(n, 0) is not None and o.quantized_output(n) is not None, n.name
    for n in o.ops("MatMul"):
        assert o.dq_input(n, 1) is not None, n.name


class Attention(nn.Module):
    def forward(self, x):
        return torch.softmax((x * 2.0) @ x.transpose(-1, -2), -1) @ x


class InBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Attention()

    def forward(self, x):
        return self.block(x)


@pytest.mark.parametrize(
    "arch, scheme, options, matmul_types",
    [
        (68, "16a8w", {}, ("UINT16", "UINT8")),
        (73, "16a8w", {}, ("UINT16", "UINT16")),
        (None, "16a8w", {}, ("UINT16", "UINT16")),
        (68, "16a8w", {"ops": {"matmul": "16a8w"}}, ("UINT16", "UINT16")),
        # A module promoted to 16 bits on an 8-bit scheme (what mixed_precision does).
        (68, "8a8w", {"modules": {"block": "16a8w"}}, ("UINT16", "UINT8")),
    ],
)
def test_a_16_bit_scheme_reads_the_second_matmul_input_at_8_bits_below_v73(arch, scheme, options, matmul_types):
    # v68 has no 16-bit MatMul of two activations (QNN's validator: "expected >= 73") but takes
    # (16-bit, 8-bit) -> 16-bit; an explicit override of the MatMul is left to the validator.
    _, m = qdq(InBlock().eval(), (torch.randn(1, 8, 16),), scheme, htp_arch=arch, **options)
    o = Onnx(m)
    for n in o.ops("MatMul"):
        assert tuple(o.encoding(o.dq_input(n, i))[2] for i in range(2)) == matmul_types
        assert o.encoding(o.quantized_output(n))[2] == "UINT16"
    [mul] = o.ops("Mul")
    assert o.encoding(o.dq_input(mul, 0))[2] == "UINT16"
    [softmax] = o.ops("Softmax")
    assert o.encoding(o.quantized_output(softmax))[2] == "UINT16"


class Splits(nn.Module):
    def forward(self, x):
        a, b = (x * 1.5).chunk(2, -1)
        rows = (a * b).unbind(1)
        return rows[0] + rows[2]


def test_chunk_and_unbind_become_slices_and_selects_with_the_same_values():
    x = torch.randn(2, 3, 8)
    q, m = qdq(Splits().eval(), (x,), "8a8w")
    kinds = [n.op_type for n in m.graph.node]
    assert not {"SplitToSequence", "SequenceAt", "Split"} & set(kinds), kinds
    [got] = ReferenceEvaluator(m).run(None, {"input_0": x.numpy()})
    np.testing.assert_allclose(got, q.converted(x)[0].numpy(), atol=1e-6)
    assert cosine(got, Splits()(x).numpy()) > 0.99


def _weight_encodings(m):
    """{weight initializer: (integers, scale)} of every DequantizeLinear reading a constant."""
    o = Onnx(m)
    return {
        n.input[0]: (o.array(n.input[0]), o.array(n.input[1]))
        for n in o.ops("DequantizeLinear")
        if n.input[0] in o.inits and o.dtype(n.input[0]) in ("INT8", "INT4")
    }


class ConvStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 16, 3, padding=1)
        self.b = nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.c = nn.Conv2d(16, 8, 1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.c(F.relu(self.b(F.relu(self.a(x)))))
        return self.fc(x.mean((2, 3)))


# Measured: 16a4w 30.5 -> 36.9 dB, 8a8w 47.6 -> 47.9 dB (8-bit activations dominate the error).
@pytest.mark.parametrize("scheme, gain_db", [("16a4w", 4.0), ("8a8w", 0.0)])
def test_gptq_moves_weights_to_other_grid_points_of_the_same_encodings_and_lowers_the_error(scheme, gain_db):
    # GPTQ (weight_rounding="gptq") picks other integers on the grid PT2E's observers chose, so
    # the encodings written are the same as with nearest rounding, and the QDQ model (onnx's
    # reference evaluator) is closer to fp32 eager on inputs it was not calibrated on.
    torch.manual_seed(0)
    model = ConvStack().eval()
    images = structured_images(18, 32)
    samples, inputs = [(x,) for x in images[:16]], [(x,) for x in images[16:]]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    results = {}
    for rounding in ("nearest", "gptq"):
        _, m = qdq(model, inputs[0], scheme, samples=samples, weight_rounding=rounding)
        # The caller's model is never changed (the exported graph's constants are its tensors).
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
        ev = ReferenceEvaluator(m)
        err = 0.0
        for (x,) in inputs:
            [got] = ev.run(None, {"input_0": x.numpy()})[:1]
            with torch.no_grad():
                want = model(x).numpy().astype(np.float64)
            err += float(((got - want) ** 2).sum() / (want**2).sum())
        results[rounding] = (_weight_encodings(m), 10 * math.log10(len(inputs) / err))
    (near, near_db), (gptq, gptq_db) = results["nearest"], results["gptq"]
    print(f"\n{scheme}: SQNR nearest {near_db:.2f} dB, gptq {gptq_db:.2f} dB")
    assert near.keys() == gptq.keys() and len(near) == 4
    for name in near:
        np.testing.assert_array_equal(near[name][1], gptq[name][1])  # the same scales
    assert any((near[n][0] != gptq[n][0]).any() for n in near)
    assert gptq_db > near_db + gain_db


def test_gptq_spreads_errors_by_the_upper_cholesky_factor_of_the_inverse_hessian():
    # gptq._upper_cholesky_of_inverse takes one factorisation and one triangular solve where
    # GPTQ's reference code takes two factorisations and cholesky_inverse: the same factor.
    from qnnx_backend.quantization import gptq

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 40, 90, generator=g, dtype=torch.float64)
    h = x @ x.transpose(1, 2)
    u = gptq._upper_cholesky_of_inverse(h)
    assert torch.equal(u, u.triu()) and bool((torch.diagonal(u, dim1=1, dim2=2) > 0).all())
    torch.testing.assert_close(u.transpose(1, 2) @ u, torch.linalg.inv(h))
    reference = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    torch.testing.assert_close(u, reference)


class SharedStem(nn.Module):
    """A pre-activation stem: one conv output read by a BatchNorm (the block's first op) and
    by the shortcut's Add."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        x = self.stem(x)
        return x + self.conv(torch.relu(self.bn(x)))


def test_a_batchnorm_is_not_folded_into_a_conv_whose_output_another_op_reads(monkeypatch):
    # torchao's prepare_pt2e folds a BatchNorm into the conv it reads whatever else reads that
    # conv; here the Add would then add the BatchNorm's output (0.87 cosine to fp32 at 16a16w
    # on a PreAct block before rewrites.keep_shared_conv_outputs). The BatchNorm stays one.
    torch.manual_seed(0)
    model = SharedStem()
    with torch.no_grad():
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.normal_(0, 0.5)
    images = structured_images(20, 16)
    refresh_batchnorm_on(model, images[:16])
    # torchao's search for QAT conv-BN patterns, which a BatchNorm left in the graph sets off
    # (20 s here) and pt2e.convert_ptq skips (below: the same QDQ model with it).
    from torchao.quantization.pt2e import quantize_pt2e

    searches, search = [], quantize_pt2e._fold_conv_bn_qat
    monkeypatch.setattr(quantize_pt2e, "_fold_conv_bn_qat", lambda gm: searches.append(gm) or search(gm))
    q, m = qdq(model, (images[0],), "16a16w", samples=[(x,) for x in images[:16]])
    assert not searches
    assert len(Onnx(m).ops("BatchNormalization")) == 1
    ev = ReferenceEvaluator(m)
    for x in images[16:]:
        with torch.no_grad():
            want = model(x).numpy().ravel().astype(np.float64)
        got = ev.run(None, {"input_0": x.numpy()})[0].ravel()
        assert got @ want / np.linalg.norm(got) / np.linalg.norm(want) > 0.9999
    monkeypatch.setattr(pt2e, "convert_ptq", quantize_pt2e.convert_pt2e)
    searched, _ = qdq(model, (images[0],), "16a16w", samples=[(x,) for x in images[:16]])
    assert len(searches) == 1 and searched.onnx == q.onnx


def test_an_unknown_weight_rounding_is_refused():
    with pytest.raises(ValueError, match=r"weight_rounding='adaround': use one of gptq, nearest"):
        quant_config.config("8a8w", weight_rounding="adaround")


class TwoLinears(nn.Module):
    """Two Linears on rank-3 input; the first weight has one block of outliers (8x the rest) in
    each output channel, whose per-channel scale rounds most of the other blocks to zero (4
    bits: the rest's largest magnitude is under one step)."""

    def __init__(self, second: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(128, 32, bias=False)
        self.b = nn.Linear(32, 16) if second else nn.Identity()
        with torch.no_grad():
            self.a.weight[:, :32] *= 8.0

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_block_wise_4bit_weights_are_lpbq_in_the_qdq_model():
    model = TwoLinears().eval()
    q, m = qdq(model, (torch.randn(2, 3, 128),), "16a4w", weight_block_size=32)
    o = Onnx(m)
    blocked = [n for n in o.ops("DequantizeLinear") if any(a.name == "block_size" for a in n.attribute)]
    assert len(blocked) == 2, [n.input for n in blocked]
    for n in blocked:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs == {"axis": 1, "block_size": 32}
        assert o.dtype(n.input[0]) == "INT4" and o.dtype(n.input[2]) == "INT4"
        # The scale is ONNX Runtime's LPBQ pattern: uint8 integers x a float per channel.
        s = o.producer[n.input[1]]
        assert s.op_type == "DequantizeLinear" and o.dtype(s.input[0]) == "UINT8"
        k = o.array(s.input[0])
        assert k.min() >= 1 and k.max() == 16, "each channel's largest block scale is 16 steps"
        w = o.array(n.input[0])
        assert w.min() >= -8 and w.max() <= 7
        assert k.shape == (w.shape[0], w.shape[1] // 32)
    # The converted PT2E model computes what the QDQ model says (onnx's reference evaluator).
    x = torch.randn(2, 3, 128)
    with torch.no_grad():
        want = q.converted(x)[0].numpy()
    got = ReferenceEvaluator(m).run(None, {"input_0": x.numpy()})[0]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_block_wise_weights_keep_the_small_blocks_that_per_channel_rounds_away():
    model = TwoLinears(second=False).eval()
    x = torch.randn(8, 3, 128)
    samples = [(torch.randn(8, 3, 128),) for _ in range(4)]
    with torch.no_grad():
        want = model(x)
        err = {}
        for block in (None, 32):
            q, _ = qdq(model, (x,), "16a4w", samples=samples, weight_block_size=block)
            err[block] = float((q.converted(x)[0] - want).pow(2).mean() / want.pow(2).mean())
    assert err[32] < err[None] / 4, err


def test_block_wise_weights_of_a_torch_export_module_with_dotted_constant_names():
    # torch.export keeps a nested module's constants as dotted get_attr targets ("inner.a.weight"),
    # which getattr and register_buffer do not take: block-wise planning failed on them.
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from qnnx_backend.quantization import annotate, blockwise

    model = nn.Sequential(TwoLinears(second=False)).eval()
    x = torch.randn(2, 3, 128)
    gm = torch.export.export(model, (x,), strict=False).module()
    quantizer = annotate.QnnxQuantizer(quant_config.config("16a4w", weight_block_size=32))
    prepared = prepare_pt2e(gm, quantizer)
    prepared(x)
    floats = blockwise.float_weights(prepared)
    assert [w.shape for w in floats.values()] == [torch.Size([32, 128])]
    converted = convert_pt2e(prepared)
    blocked = blockwise.plan(converted, floats, 32)
    assert len(blocked) == 1, list(blocked)
    blockwise.fake_quantize(converted, blocked)
    [w] = blocked.values()
    x = x / 2  # inside the calibrated ranges: no clipping
    with torch.no_grad():
        want = torch.relu(x @ w.dequantized().T)
        got = converted(x)
    # Activations at 16 bits: within a few steps of the block-wise weights' float product.
    assert (got - want).abs().max() <= 1e-3 * want.abs().max()


def _lpbq(m):
    """{block-wise weight initializer: (int4 integers, uint8 block scales, per-channel scales)}."""
    o = Onnx(m)
    out = {}
    for n in o.ops("DequantizeLinear"):
        if any(a.name == "block_size" for a in n.attribute):
            s = o.producer[n.input[1]]
            out[n.input[0]] = (o.array(n.input[0]), o.array(s.input[0]), o.array(s.input[1]))
    return out


class TiedHead(nn.Module):
    """An LM head tied to the embedding (SmolLM2's, Gemma's): one weight, read by a Gather and a
    Linear."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 32)
        self.mix = nn.Linear(32, 32)
        self.head = nn.Linear(32, 64, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        e = self.emb(ids)
        return e, self.head(self.mix(e))


def test_gptq_leaves_an_embedding_tied_to_the_head_its_own_weights():
    # GPTQ replaced the head's weight constant in place, which the tied embedding also reads: the
    # embedding's table became the head's error-compensated values. The head now gets a copy of
    # its own; the embedding's output is nearest rounding's exactly, the head's is GPTQ's.
    torch.manual_seed(0)
    model = TiedHead().eval()
    g = torch.Generator().manual_seed(2)
    samples = [(torch.randint(0, 64, (1, 16), generator=g),) for _ in range(8)]
    outs = {}
    for rounding in ("nearest", "gptq"):
        _, m = qdq(model, samples[0], "8a8w", samples=samples, weight_rounding=rounding)
        outs[rounding] = ReferenceEvaluator(m).run(None, {"input_0": samples[0][0].numpy()})
    np.testing.assert_array_equal(outs["nearest"][0], outs["gptq"][0])
    assert np.abs(outs["nearest"][1] - outs["gptq"][1]).max() > 1e-3
    assert torch.equal(model.head.weight, model.emb.weight)  # the caller's model is untouched


def test_gptq_rounds_block_wise_weights_on_their_grid_and_lowers_the_error():
    # weight_rounding="gptq" with weight_block_size: GPTQ picks the integers on the block-wise
    # grid nearest rounding derives from the float weights (the same per-channel and per-block
    # scales), and the QDQ model (onnx's reference evaluator) is closer to fp32 on inputs it was
    # not calibrated on: inputs with correlated features, as a decoder's hidden states have.
    torch.manual_seed(0)
    model = TwoLinears().eval()
    mix = torch.randn(16, 128)

    def inputs(n):
        return torch.randn(n, 5, 16) @ mix + 0.05 * torch.randn(n, 5, 128)

    samples, held_out = [(inputs(4),) for _ in range(8)], [inputs(4) for _ in range(4)]
    with torch.no_grad():
        want = np.concatenate([model(x).numpy() for x in held_out]).astype(np.float64)
    results = {}
    for rounding in ("nearest", "gptq"):
        _, m = qdq(model, samples[0], "16a4w", samples=samples, weight_block_size=32, weight_rounding=rounding)
        ev = ReferenceEvaluator(m)
        got = np.concatenate([ev.run(None, {"input_0": x.numpy()})[0] for x in held_out])
        results[rounding] = (_lpbq(m), 10 * math.log10((want**2).sum() / ((got - want) ** 2).sum()))
    (near, near_db), (gptq, gptq_db) = results["nearest"], results["gptq"]
    print(f"\n16a4w blocks of 32: SQNR nearest {near_db:.2f} dB, gptq {gptq_db:.2f} dB")
    assert near.keys() == gptq.keys() and len(near) == 2
    for name in near:
        np.testing.assert_array_equal(near[name][1], gptq[name][1])  # the same block scales
        np.testing.assert_array_equal(near[name][2], gptq[name][2])  # and channel scales
        assert gptq[name][0].min() >= -8 and gptq[name][0].max() <= 7
    assert any((near[n][0] != gptq[n][0]).any() for n in near)
    assert gptq_db > near_db + 3.0


@pytest.mark.parametrize(
    "options, message",
    [
        ({"weight_block_size": 48}, "power of two"),
        ({"weight_block_size": True}, "power of two"),
        ({"weight_block_size": 64, "per_channel": False}, "per-channel"),
    ],
)
def test_bad_block_sizes_say_what_to_change(options, message):
    with pytest.raises(ValueError, match=message):
        quant_config.config("16a4w", **options)
    with pytest.raises(ValueError, match="4-bit"):
        quant_config.config("16a8w", weight_block_size=64)
