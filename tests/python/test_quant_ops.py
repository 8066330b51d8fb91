"""Quantized (QDQ) ONNX graphs per QNN op family on the emulated HTP, bit for bit against onnx's
reference evaluator of the same QDQ model.

The emulator's fixed-point arithmetic is the device's, so a quantized graph can be checked
exactly here: each model is one op with QuantizeLinear/DequantizeLinear pairs on its inputs and
outputs (constant weights as int8 per channel behind a DequantizeLinear, as PyTorch's and ONNX
Runtime's quantizers write them), fed its inputs' integer codes (quantized I/O), and the HTP's
output codes must be within one quantization step of the reference's, which computes the op in
float on the dequantized inputs and quantizes the result (at 16 bits, within the measured steps of
``STEPS_16``).
Each family runs at 8-bit and 16-bit activations on SoC 60 (v73) and on the QCS6490 (v68, no float
path). What a target refuses must be refused when compiling, naming the node; the expected
refusals are listed in ``REFUSED``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from qnnx_backend import _native
from qnnx_backend.compiling.call import CompiledGraph

pytestmark = pytest.mark.htp

TARGETS = {"v73": 60, "v68": "QCS6490"}
ACT = {8: (TensorProto.UINT8, np.uint8, 255), 16: (TensorProto.UINT16, np.uint16, 65535)}

# (family, activation bits, target) that the HTP refuses, and a word of its message: v68 has no
# 16-bit MatMul of two activations (ExecuTorch likewise gates 16-bit MatMul to v73+).
REFUSED: dict[tuple[str, int, str], str] = {("matmul", 16, "v68"): "expected >= 73"}

# At 16-bit activations the HTP's arithmetic is not the float reference rounded once: its
# accumulators, requantization and lookup tables keep fewer bits than a 16-bit step, so some
# families land a few 16-bit steps away (measured on the emulator, QNN 2.51; a 16-bit step is
# 1/256 of an 8-bit one, so 67 steps is a quarter of an 8-bit step). These are the measured
# worst cases per (family, target); every other family and all of 8-bit is within one step.
# MatMul's second input is converted to the symmetric encoding QNN requires at 16 bits, which
# costs half a bit. A change that makes any of these worse fails here.
STEPS_16 = {
    ("conv", "v73"): 3,
    ("conv", "v68"): 20,
    ("depthwise_conv", "v73"): 3,
    ("depthwise_conv", "v68"): 18,
    ("fully_connected", "v73"): 2,
    ("fully_connected", "v68"): 17,
    ("matmul", "v73"): 2,
    ("gelu", "v73"): 17,
    ("gelu", "v68"): 17,
    ("layer_norm", "v73"): 67,
    ("layer_norm", "v68"): 67,
    ("leaky_relu", "v73"): 2,
    ("leaky_relu", "v68"): 2,
    ("max_pool", "v73"): 2,
    ("max_pool", "v68"): 2,
    ("sigmoid", "v73"): 3,
    ("sigmoid", "v68"): 3,
    ("softmax", "v73"): 6,
    ("softmax", "v68"): 6,
    ("tanh", "v73"): 3,
    ("tanh", "v68"): 3,
}


class Qdq:
    """Builds a one-op QDQ model: float graph inputs, each quantized and dequantized, the op,
    its output quantized and dequantized. Encodings come from the data (min/max over the
    example input and the float reference output)."""

    def __init__(self, bits: int, weight_bits: int = 8):
        self.bits = bits
        self.weight_bits = weight_bits
        self.nodes: list = []
        self.inits: list = []
        self.inputs: list = []
        self.feeds: dict[str, np.ndarray] = {}
        self.n = 0

    def _init(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def encoding(self, lo: float, hi: float) -> tuple[np.float32, np.generic]:
        """Scale and zero point covering [lo, hi] and 0."""
        _, npt, qmax = ACT[self.bits]
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = np.float32(max(hi - lo, 1e-6) / qmax)
        return scale, npt(int(np.clip(round(-lo / float(scale)), 0, qmax)))

    def edge(self, name: str, lo: float, hi: float) -> str:
        """QuantizeLinear -> DequantizeLinear on `name`, covering [lo, hi] and 0."""
        scale, zp = self.encoding(lo, hi)
        self.n += 1
        s = self._init(f"s{self.n}", scale)
        z = self._init(f"z{self.n}", zp)
        self.nodes.append(helper.make_node("QuantizeLinear", [name, s, z], [f"{name}_q"]))
        self.nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", s, z], [f"{name}_dq"]))
        return f"{name}_dq"

    def input(self, name: str, x: np.ndarray) -> str:
        """A graph input, quantized first. Its values are put on the encoding's grid, so that
        quantizing it is exact on both sides: a value halfway between two steps may round
        either way in the graph's Quantize (QNN computes it in its own float arithmetic), and
        one step on the input is several on the output of a steep op (tanh)."""
        lo, hi = float(x.min()), float(x.max())
        scale, zp = self.encoding(lo, hi)
        _, _, qmax = ACT[self.bits]
        codes = np.clip(np.round(x / scale) + int(zp), 0, qmax)
        x = ((codes - int(zp)) * scale).astype(np.float32)
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(x.shape)))
        self.feeds[name] = x
        return self.edge(name, lo, hi)

    def weight(self, name: str, w: np.ndarray, axis: int = 0) -> str:
        """int8 (or, with ``weight_bits=4``, ONNX INT4) per-channel symmetric weights along
        `axis`, as PT2E writes them."""
        qmax = 2 ** (self.weight_bits - 1) - 1
        amax = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis))
        scale = (np.maximum(amax, 1e-8) / qmax).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.round(w / scale.reshape(shape)), -qmax, qmax).astype(np.int8)
        if self.weight_bits == 4:
            self.inits.append(helper.make_tensor(f"{name}_int", TensorProto.INT4, q.shape, q.ravel().tolist()))
            self.inits.append(helper.make_tensor(f"{name}_z", TensorProto.INT4, scale.shape, [0] * scale.size))
        else:
            self._init(f"{name}_int", q)
            self._init(f"{name}_z", np.zeros_like(q, shape=scale.shape))
        self._init(f"{name}_s", scale)
        self.nodes.append(
            helper.make_node(
                "DequantizeLinear", [f"{name}_int", f"{name}_s", f"{name}_z"], [name], axis=axis
            )
        )
        return name

    def const(self, name: str, v: np.ndarray) -> str:
        return self._init(name, np.asarray(v))

    def model(self, op: str, ins: list[str], opset: int, **attrs) -> onnx.ModelProto:
        """The op on `ins`, its output quantized with the range the float op gives."""
        self.nodes.append(helper.make_node(op, ins, ["y_f"], **attrs))
        float_model = self._build(["y_f"], opset)
        (y,) = ReferenceEvaluator(float_model).run(None, self.feeds)
        out = self.edge("y_f", float(y.min()), float(y.max()))
        self.nodes.append(helper.make_node("Identity", [out], ["y"]))
        return self._build(["y"], opset)

    def _build(self, outs: list[str], opset: int) -> onnx.ModelProto:
        g = helper.make_graph(
            self.nodes,
            "qdq",
            self.inputs,
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
            self.inits,
        )
        # Opset 21 at least: the reference evaluator's QuantizeLinear/DequantizeLinear with 16-bit
        # types are opset 21.
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", max(opset, 21))])
        m.ir_version = 10
        return m


def rng(seed=0):
    return np.random.default_rng(seed)


def x4(c=4, hw=8, seed=0):
    return rng(seed).standard_normal((1, c, hw, hw)).astype(np.float32)


def conv(q):
    x = q.input("x", x4())
    w = q.weight("w", rng(1).standard_normal((6, 4, 3, 3)).astype(np.float32) * 0.2)
    b = q.const("b", rng(2).standard_normal(6).astype(np.float32) * 0.1)
    return q.model("Conv", [x, w, b], 17, pads=[1, 1, 1, 1], strides=[1, 1])


def depthwise_conv(q):
    x = q.input("x", x4())
    w = q.weight("w", rng(1).standard_normal((4, 1, 3, 3)).astype(np.float32) * 0.3)
    return q.model("Conv", [x, w], 17, pads=[1, 1, 1, 1], group=4)


def fully_connected(q):
    x = q.input("x", rng(0).standard_normal((2, 16)).astype(np.float32))
    w = q.weight("w", rng(1).standard_normal((8, 16)).astype(np.float32) * 0.3)
    b = q.const("b", rng(2).standard_normal(8).astype(np.float32) * 0.1)
    return q.model("Gemm", [x, w, b], 17, transB=1)


def matmul(q):
    a = q.input("a", rng(0).standard_normal((1, 2, 4, 8)).astype(np.float32))
    b = q.input("b", rng(1).standard_normal((1, 2, 8, 4)).astype(np.float32))
    return q.model("MatMul", [a, b], 17)


def add(q):
    a = q.input("a", x4())
    b = q.input("b", rng(1).standard_normal((1, 4, 1, 1)).astype(np.float32) * 3)
    return q.model("Add", [a, b], 17)


def mul(q):
    a = q.input("a", x4())
    b = q.input("b", x4(seed=3) * 0.5)
    return q.model("Mul", [a, b], 17)


def relu(q):
    return q.model("Relu", [q.input("x", x4())], 17)


def clip(q):
    x = q.input("x", x4() * 4)
    return q.model("Clip", [x, q.const("lo", np.float32(0)), q.const("hi", np.float32(6))], 17)


def leaky_relu(q):
    return q.model("LeakyRelu", [q.input("x", x4())], 17, alpha=0.1)


def prelu(q):
    x = q.input("x", x4())
    slope = q.const("slope", np.full((4, 1, 1), 0.25, np.float32))
    return q.model("PRelu", [x, slope], 17)


def sigmoid(q):
    return q.model("Sigmoid", [q.input("x", x4() * 3)], 17)


def tanh(q):
    return q.model("Tanh", [q.input("x", x4() * 2)], 17)


def softmax(q):
    x = q.input("x", rng(0).standard_normal((2, 4, 16)).astype(np.float32) * 2)
    return q.model("Softmax", [x], 17, axis=-1)


def layer_norm(q):
    x = q.input("x", rng(0).standard_normal((2, 5, 16)).astype(np.float32) * 2 + 1)
    gamma = q.const("gamma", (rng(1).random(16) + 0.5).astype(np.float32))
    beta = q.const("beta", (rng(2).standard_normal(16) * 0.1).astype(np.float32))
    return q.model("LayerNormalization", [x, gamma, beta], 17, axis=-1)


def average_pool(q):
    return q.model("AveragePool", [q.input("x", x4())], 17, kernel_shape=[2, 2], strides=[2, 2])


def max_pool(q):
    return q.model("MaxPool", [q.input("x", x4())], 17, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def global_average_pool(q):
    return q.model("GlobalAveragePool", [q.input("x", x4())], 17)


def reduce_mean(q):
    x = q.input("x", rng(0).standard_normal((2, 6, 16)).astype(np.float32))
    return q.model("ReduceMean", [x, q.const("axes", np.array([-1], np.int64))], 18, keepdims=1)


def concat(q):
    a = q.input("a", x4())
    b = q.input("b", x4(seed=5) * 3)
    return q.model("Concat", [a, b], 17, axis=1)


def transpose(q):
    return q.model("Transpose", [q.input("x", x4())], 17, perm=[0, 2, 3, 1])


def resize_nearest(q):
    x = q.input("x", x4(hw=4))
    scales = q.const("scales", np.array([1, 1, 2, 2], np.float32))
    return q.model("Resize", [x, "", scales], 17, mode="nearest")


def gelu(q):
    return q.model("Gelu", [q.input("x", x4() * 2)], 20)


def embedding(q):
    """An embedding table stored at the activation width behind its DequantizeLinear (as PT2E
    writes nn.Embedding), gathered by integer token ids (a graph input passed as is)."""
    table = rng(3).standard_normal((10, 6)).astype(np.float32)
    scale, zp = q.encoding(float(table.min()), float(table.max()))
    _, npt, qmax = ACT[q.bits]
    codes = np.clip(np.round(table / scale) + int(zp), 0, qmax).astype(npt)
    q.nodes.append(
        helper.make_node("DequantizeLinear", [q.const("t_int", codes), q.const("t_s", scale), q.const("t_z", zp)], ["t"])
    )
    q.inputs.append(helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5]))
    q.feeds["ids"] = rng(4).integers(0, 10, (2, 5)).astype(np.int64)
    return q.model("Gather", ["t", "ids"], 17, axis=0)


FAMILIES = {
    f.__name__: f
    for f in [
        conv,
        depthwise_conv,
        fully_connected,
        matmul,
        add,
        mul,
        relu,
        clip,
        leaky_relu,
        prelu,
        sigmoid,
        tanh,
        softmax,
        layer_norm,
        average_pool,
        max_pool,
        global_average_pool,
        reduce_mean,
        concat,
        transpose,
        resize_nearest,
        gelu,
        embedding,
    ]
}


def encoding_of(m: onnx.ModelProto, tensor: str) -> tuple[float, int]:
    """Scale and zero point of the QuantizeLinear on `tensor`."""
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor)
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return float(init[q.input[1]]), int(init[q.input[2]])


def run_htp(m: onnx.ModelProto, q: Qdq, soc) -> np.ndarray:
    """The output's integer codes from the HTP, fed the inputs' codes (quantized I/O: the
    comparison is of the op, not of the graph's boundary conversions)."""
    native = _native.compile(m.SerializeToString(), _native.Spec("npu", soc_model=soc), quantized_io=True)
    g = CompiledGraph(native, "npu", [None])
    ins = []
    for name, *_ in native.inputs:
        if q.feeds[name].dtype.kind in "iu":  # integer inputs (token ids) are not quantized
            ins.append(torch.from_numpy(q.feeds[name]))
            continue
        scale, zp = encoding_of(m, name)
        codes = np.round(q.feeds[name] / scale) + zp
        ins.append(torch.from_numpy(codes.astype(ACT[q.bits][1])))
    return g(ins)[0].numpy().astype(np.int64)


# The families with weights, run again with 4-bit weights (the 16a4w scheme's, and 8-bit
# activations with them): QNN takes them as 8-bit fixed point with a 4-bit encoding, on v68 too.
# With 8-bit activations they are within one step; with 16-bit ones the HTP's 16x4-bit kernels
# land further off than its 16x8-bit ones, biased low (mean -12 to -34 steps; measured on the
# emulator, QNN 2.51): at worst 79 16-bit steps, under a third of an 8-bit step. These are the
# measured worst cases.
WEIGHTED = ("conv", "depthwise_conv", "fully_connected")
STEPS_16_W4 = {
    ("conv", "v73"): 50,
    ("conv", "v68"): 46,
    ("depthwise_conv", "v73"): 42,
    ("depthwise_conv", "v68"): 79,
    ("fully_connected", "v73"): 39,
    ("fully_connected", "v68"): 54,
}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_quantized_op_matches_the_reference_within_one_step(family, bits, target):
    check_family(family, bits, target, Qdq(bits))


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("family", WEIGHTED)
def test_4bit_weights_match_the_reference_within_one_step(family, bits, target):
    q = Qdq(bits, weight_bits=4)
    check_family(family, bits, target, q, STEPS_16_W4)
    kinds = {i.data_type for i in q.inits if i.name.endswith("_int")}
    assert kinds == {TensorProto.INT4}, kinds


def check_family(family: str, bits: int, target: str, q: Qdq, steps_16=STEPS_16):
    m = FAMILIES[family](q)
    (ref,) = ReferenceEvaluator(m).run(None, q.feeds)
    scale, zp = encoding_of(m, "y_f")
    want = np.round(ref.astype(np.float64) / scale).astype(np.int64) + zp
    refused = REFUSED.get((family, bits, target))
    if refused is not None:
        with pytest.raises(_native.QnnxError, match=refused):
            run_htp(m, q, TARGETS[target])
        return
    got = run_htp(m, q, TARGETS[target])
    assert got.shape == want.shape
    off = np.abs(got - want)
    allowed = steps_16.get((family, target), 1) if bits == 16 else 1
    assert off.max() <= allowed, (
        f"{family} {bits}-bit on {target}: {int(off.max())} steps off at worst (allowed "
        f"{allowed}), {int((off > 1).sum())} of {off.size} values more than one step"
    )
