"""The quantization vocabulary, a leaf every other quantization module imports: the schemes,
the op kinds, the options of ``quantize`` as a validated ``QuantizeConfig``. Imports neither
torch nor torchao (``settings`` validates options with it when the package is imported)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from .. import _native


@dataclasses.dataclass(frozen=True)
class Scheme:
    """Activation and weight precision of a quantization scheme."""

    name: str
    act_bits: int
    """8: uint8 activations, 16: uint16."""
    weight_bits: int
    """8: int8 (-127..127), 16: int16 (-32767..32767), 4: int4 (-7..7; ONNX INT4 initializers,
    which QNN takes as 8-bit fixed point with a 4-bit encoding)."""


#: The schemes by name, as the engine's lowering defines them (``qnnx quantize`` takes the same).
SCHEMES = {name: Scheme(name, act, weight) for name, act, weight in _native.quant_schemes()}

#: QNN's fixed output encodings of 16-bit activations (the lowering's, which converts any other
#: encoding a model gives): ONNX op -> (scale, zero point) of uint16 outputs.
FIXED_U16 = {
    op: (scale, -offset)
    for op, by_dtype in _native.fixed_encodings().items()
    for dtype, (scale, offset) in by_dtype.items()
    if dtype == "u16"
}
#: The override value that keeps an op float.
FLOAT = "float"

#: Activation observers (``observer``) and the 8-bit KV cache's (``kv_cache_observer``):
#: "minmax" (running minimum and maximum) or "histogram" (a running histogram whose clipping
#: range minimises the quantization error (L2), so that rare outliers do not stretch the
#: encoding). Weights always use their minimum and maximum.
OBSERVERS = ("minmax", "histogram")


def check_observer(option: str, value: Any) -> None:
    """ValueError naming ``option`` unless ``value`` is one of ``OBSERVERS``."""
    if value not in OBSERVERS:
        raise ValueError(f"{option}={value!r}: use one of {', '.join(OBSERVERS)}")

#: How much wider than the calibrated range the 16-bit activation encodings of KV-cache graphs
#: (``kv_cache=True``, the LLM artifact) are by default: 2 spends one of the 16 bits on values the
#: calibration did not reach. A decoder's per-token activation ranges are heavy-tailed: the decode
#: graph of SmolLM2-135M at 16a8w, calibrated on 16 docstrings, met other text beyond 900 of its
#: 2,391 encodings, and on its QDQ model headroom 2 took the logits from 13.7 to 24.3 dB against
#: fp32 (4: 19.3 dB; bench/llm_decode_coverage.py). Other graphs get none by default: the bit is
#: not free there, trained MobileNetV2 at 16a8w with GPTQ fell from 30.8 to 22.1 dB with it
#: (docs/quantization.md, "Headroom"). 8-bit encodings are never widened.
DECODER_HEADROOM = 2.0

#: The weight roundings ``weight_rounding`` takes (``gptq``: see quantization/gptq.py).
ROUNDINGS = ("gptq", "nearest")

#: The op kinds ``quantize_ops`` takes; ``quantization/kinds.py`` maps each to the ATen ops
#: torch.export makes of it.
OP_KINDS = (
    "conv",
    "conv_transpose",
    "linear",
    "matmul",
    "add",
    "sub",
    "mul",
    "div",
    "relu",
    "clamp",
    "gelu",
    "sigmoid",
    "tanh",
    "hardsigmoid",
    "hardswish",
    "silu",
    "leaky_relu",
    "prelu",
    "softmax",
    "layer_norm",
    "max_pool",
    "avg_pool",
    "mean",
    "cat",
    "embedding",
)



@dataclasses.dataclass(frozen=True)
class QuantizeConfig:
    """Everything that decides the quantized model besides the graph and the calibration data."""

    scheme: Scheme
    observer: str = "minmax"
    per_channel: bool = True
    modules: tuple[tuple[str, Optional[Scheme]], ...] = ()
    """(nn.Module path pattern, scheme or None = float), in the order given."""
    ops: tuple[tuple[str, Optional[Scheme]], ...] = ()
    """(op kind, scheme or None = float)."""
    htp_arch: Optional[int] = None
    """The target's HTP architecture when known: below v73 the HTP has no 16-bit MatMul of two
    activations (QNN's validator: "expected >= 73"), so there a 16-bit MatMul reads its second
    input at 8 bits (``matmul_16x8``)."""

    weight_rounding: str = "nearest"
    """How weights take their grid points: "nearest", or "gptq" (each rounding error moved
    onto the weights not yet rounded so that the layer's output changes least: ``gptq``)."""
    values: tuple[tuple[str, Optional[Scheme]], ...] = ()
    """(value name, scheme or None = float): the output of one op, named as torch.export names
    its FX node (and the QDQ ONNX model and the per-layer report name the value), stored and read
    at the scheme's activation width whatever its producer's and readers' schemes are; float
    keeps its producer float and its readers reading it unquantized. Wins over ``modules``
    and ``ops`` for that value only: the producer's other inputs and the readers' outputs
    keep theirs."""

    headroom: float = 1.0
    """16-bit activation encodings cover the calibrated range times this factor (1: exactly the
    calibrated range; ``DECODER_HEADROOM`` for KV-cache graphs). 8-bit encodings are not widened."""

    weight_block_size: Optional[int] = None
    """With 4-bit weights: the Linear and MatMul weights quantized per block of this many input
    features (a float scale per output channel times a 4-bit integer scale per block: QNN's
    block expansion, "LPBQ", HTP v69 and newer) instead of per output channel
    (quantization/blockwise.py)."""

    def has_4bit_weights(self) -> bool:
        """Whether the scheme or an override stores weights in 4 bits."""
        schemes = [self.scheme] + [s for _, s in self.modules + self.ops if s is not None]
        return any(s.weight_bits == 4 for s in schemes)

    def matmul_16x8(self, scheme: Scheme) -> bool:
        """Whether a MatMul of two activations at ``scheme`` reads its second input at 8 bits:
        below v73 with 16-bit activations. Of the widths a v68 MatMul of two activations takes,
        (16-bit, 8-bit) -> 16-bit is the widest: (16, 16) -> 16 is refused ("expected >= 73"),
        as are (8, 16) -> 16 and (16, 8) -> 8 (measured on the QNN 2.51 emulator as a QCS6490;
        docs/quantization.md). In an attention the second inputs are K and V, which an 8-bit
        KV cache holds at 8 bits anyway; the first, Q and the softmax's probabilities, keep 16.
        The annotator applies it unless an ``ops`` or value override names the MatMul."""
        return self.htp_arch is not None and self.htp_arch < 73 and scheme.act_bits == 16

    def kv_cache_rotation(self, given: Optional[bool] = None) -> Optional[bool]:
        """The option ``kv_cache_rotation`` as ``given`` (True or False), or its default on this
        HTP: "where the head size has a Hadamard matrix" (None, which kv8.encodings decides per
        cache tensor) on v73 and newer, False below. Measured on SmolLM2-135M at 16a8w on SoC 60 (v73): the rows rotated bring the
        perplexity ratio over the whole Zen of Python from 1.125 to 1.024, and a second text
        agrees (docs/llm-accuracy.md). Below v73 the attention reads K and V at 8 bits
        (``matmul_16x8``), and on the QCS6490 the rotation cost the 4-layer SmolLM2 0.9 dB (34.97
        against 35.91 dB, the same top-1) and the whole model over the whole text 1.0 dB (78.1%
        against 78.6% top-1; docs/llm.md "On v68"). None: the HTP the emulator or
        device picks, as ``matmul_16x8`` reads it."""
        if given is not None:
            return given
        return None if self.htp_arch is None or self.htp_arch >= 73 else False

    def describe(self) -> str:
        """Every field as stable text, for fingerprints."""

        def name(s: Optional[Scheme]) -> str:
            return s.name if s is not None else FLOAT

        return repr(
            (
                self.scheme.name,
                self.observer,
                self.per_channel,
                [(p, name(s)) for p, s in self.modules],
                [(k, name(s)) for k, s in self.ops],
                # Which MatMul rule the graph was annotated with: False for v73+ and 8-bit schemes,
                # "16x8" below v73 (True was the old rule, the whole MatMul at 8a8w).
                self.matmul_16x8(self.scheme) and "16x8",
                self.weight_rounding,
            )
            + ((tuple((v, name(s)) for v, s in self.values),) if self.values else ())
            + ((("weight_block_size", self.weight_block_size),) if self.weight_block_size else ())
            # Only when it widens: graphs without headroom keep the fingerprints they had.
            + ((("headroom", self.headroom),) if self.headroom != 1.0 else ())
        )


def _override_value(option: str, key: str, value: Any) -> Optional[Scheme]:
    if value is None or value == FLOAT:
        return None
    if isinstance(value, str) and value in SCHEMES:
        return SCHEMES[value]
    raise ValueError(
        f"{option}[{key!r}]={value!r}: use one of {', '.join(SCHEMES)}, or {FLOAT!r} (or None) to keep it float"
    )


def parse_overrides(option: str, value: Any, kinds: bool) -> tuple[tuple[str, Optional[Scheme]], ...]:
    """``quantize_modules`` or ``quantize_values`` (``kinds=False``) or ``quantize_ops`` as (key, scheme) pairs;
    ValueError naming what to change for anything else."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        example = (
            "{'softmax': '16a8w', 'layer_norm': 'float'}" if kinds else "{'encoder.layers.*.attn': '16a8w', 'fc': 'float'}"
        )
        what = "op kind" if kinds else "nn.Module path pattern"
        if option == "quantize_values":
            example, what = "{'mul_1': '16a8w'}", "value name (the FX node's, as the per-layer report names it)"
        raise ValueError(f"{option}={value!r}: give a dict of {what} -> scheme or 'float', e.g. {example}")
    out = []
    for key, v in value.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{option}: key {key!r} must be a non-empty string")
        if kinds and key not in OP_KINDS:
            raise ValueError(f"{option}: unknown op kind {key!r}; use one of {', '.join(OP_KINDS)}")
        out.append((key, _override_value(option, key, v)))
    return tuple(out)


def config(
    scheme: str,
    observer: str = "minmax",
    per_channel: bool = True,
    modules: Optional[Mapping[str, Any]] = None,
    ops: Optional[Mapping[str, Any]] = None,
    htp_arch: Optional[int] = None,
    weight_rounding: str = "nearest",
    values: Optional[Mapping[str, Any]] = None,
    weight_block_size: Optional[int] = None,
    headroom: float = 1.0,
) -> QuantizeConfig:
    """A validated QuantizeConfig from option values (ValueError naming the option to change)."""
    if scheme not in SCHEMES:
        raise ValueError(f"quantize={scheme!r}: use one of {', '.join(SCHEMES)}, or None for a float model")
    check_observer("observer", observer)
    if weight_rounding not in ROUNDINGS:
        raise ValueError(f"weight_rounding={weight_rounding!r}: use one of {', '.join(ROUNDINGS)}")
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 1.0 <= headroom <= 16.0:
        raise ValueError(
            f"activation_headroom={headroom!r}: a factor from 1 (16-bit encodings cover exactly the "
            "calibrated range, the default) to 16 (KV-cache graphs default to "
            f"{DECODER_HEADROOM:g}, one bit spent on values the calibration missed)"
        )
    if not isinstance(per_channel, bool):
        raise ValueError(f"per_channel={per_channel!r}: must be True or False")
    if weight_block_size is not None:
        b = weight_block_size
        if isinstance(b, bool) or not isinstance(b, int) or b < 8 or b & (b - 1):
            raise ValueError(
                f"weight_block_size={b!r}: a power of two of at least 8 (32, 64 or 128 are usual), "
                "or None for per-channel weights"
            )
        if SCHEMES[scheme].weight_bits != 4:
            raise ValueError(
                f"weight_block_size={b}: block-wise weights are 4-bit; use quantize=\"16a4w\" with it "
                f"(quantize={scheme!r} has {SCHEMES[scheme].weight_bits}-bit weights)"
            )
        if not per_channel:
            raise ValueError(f"weight_block_size={b} with per_channel=False: block-wise weights have per-channel scales")
    return QuantizeConfig(
        SCHEMES[scheme],
        observer,
        per_channel,
        parse_overrides("quantize_modules", modules, kinds=False),
        parse_overrides("quantize_ops", ops, kinds=True),
        htp_arch,
        weight_rounding,
        parse_overrides("quantize_values", values, kinds=False),
        float(headroom),
        weight_block_size,
    )
