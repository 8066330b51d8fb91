"""Post-training quantization of an FX graph into a standard QDQ ONNX model: the schemes, the
options that configure it, the flow, and the tidying of the exported model.

The graph (dynamo's, weights frozen as in ``_export``) is captured with ``torch.export``,
annotated by ``_quantizer.QnnxQuantizer`` and calibrated with PyTorch's PT2E flow from
``torchao`` (``prepare_pt2e`` inserts observers, the calibration samples run through them,
``convert_pt2e`` turns them into quantize/dequantize pairs), then exported by the dynamo ONNX
exporter at opset 21, the first whose QuantizeLinear/DequantizeLinear take uint16 and int16
(so no com.microsoft Q/DQ is needed, which ``qnnx quantize`` writes for 16-bit models of older
opsets). The result is a plain QDQ model that ONNX Runtime's CPU provider and onnx's reference
evaluator also run, and that the native lowering turns into QNN fixed-point tensors:

* activations: ``QuantizeLinear -> DequantizeLinear`` on every quantized edge, per tensor,
  uint8 or uint16 (zero point in the type's range); graph inputs and outputs stay float;
* weights of Conv / ConvTranspose / Linear (Gemm, or MatMul + Add for inputs of rank > 2): an
  int8, int16 or (16a4w) INT4 initializer behind ``DequantizeLinear``, symmetric (zero point
  0), per output channel (``axis`` 0; 1 for ConvTranspose) unless ``per_channel=False``. PT2E
  has no 4-bit dtype: 4-bit weights are int8 in -7..7 until ``tidy_onnx`` stores them as INT4;
* their bias: an int32 initializer behind ``DequantizeLinear`` whose scale is input scale x
  weight scale (per channel with the weight) and zero point 0: derived, never calibrated. Where
  that scale is so small that the bias would not fit int32 (16-bit weights), the weight scale of
  those channels is raised until it fits, as ONNX Runtime's quantizer does;
* LayerNormalization: gamma quantized like an activation (unsigned, as QNN takes it), beta as
  int32 (its own symmetric scale);
* 16-bit Sigmoid outputs carry QNN's fixed encoding (scale 1/65536, zero point 0), 16-bit Tanh
  outputs scale 1/32768, zero point 32768;
* a ReLU (or a clamp whose range holds the encoding's) right after a quantized op is absorbed
  into that op's output quantization, as ONNX Runtime's quantizer does: the encoding's minimum
  is 0, so ``Conv -> QuantizeLinear`` clips exactly as ``Conv -> Relu -> QuantizeLinear``;
* a linear of an input of rank > 2 is a Gemm between two Reshapes (each between a
  DequantizeLinear and a QuantizeLinear of the same encoding), and a split read through
  getitem is one Slice per output: what the HTP runs quantized (``_quantizer.linear_rows``,
  ``_quantizer.splits_to_slices``);
* below HTP v73 a 16-bit scheme runs matmul (two activations) at 8a8w: v68 has no 16-bit
  kernel for it;
* ops outside ``OP_KINDS``, and ops overridden to "float", stay float between a
  DequantizeLinear and a QuantizeLinear.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

from . import _export
from .exceptions import LoweringError

logger = logging.getLogger("qnnx_backend")


@dataclasses.dataclass(frozen=True)
class Scheme:
    """Activation and weight precision of a quantization scheme."""

    name: str
    act_bits: int
    """8: uint8 activations, 16: uint16."""
    weight_bits: int
    """8: int8 (-127..127), 16: int16 (-32767..32767), 4: int4 (-7..7; ONNX INT4 initializers,
    which QNN takes as 8-bit fixed point with a 4-bit encoding)."""


SCHEMES = {
    s.name: s
    for s in (Scheme("8a8w", 8, 8), Scheme("16a8w", 16, 8), Scheme("16a16w", 16, 16), Scheme("16a4w", 16, 4))
}
#: The override value that keeps an op float.
FLOAT = "float"

#: Activation observers: "minmax" (running minimum and maximum) or "histogram" (a running
#: histogram whose clipping range minimises the quantization error (L2), so that rare outliers
#: do not stretch the encoding). Weights always use their minimum and maximum.
OBSERVERS = ("minmax", "histogram")

aten = torch.ops.aten

# Op kinds that are quantized, by the ATen ops torch.export makes of them; the names are what
# ``quantize_ops`` takes.
OP_KINDS: dict[str, frozenset] = {
    "conv": frozenset({aten.conv1d.default, aten.conv2d.default, aten.conv3d.default,
                       aten.conv1d.padding, aten.conv2d.padding, aten.conv3d.padding}),
    "conv_transpose": frozenset({aten.conv_transpose1d.default, aten.conv_transpose2d.input,
                                 aten.conv_transpose3d.input}),
    "linear": frozenset({aten.linear.default}),
    "matmul": frozenset({aten.matmul.default, aten.bmm.default, aten.mm.default}),
    "add": frozenset({aten.add.Tensor, aten.add_.Tensor}),
    "sub": frozenset({aten.sub.Tensor, aten.sub_.Tensor}),
    "mul": frozenset({aten.mul.Tensor, aten.mul_.Tensor}),
    "div": frozenset({aten.div.Tensor, aten.div_.Tensor}),
    "relu": frozenset({aten.relu.default, aten.relu_.default}),
    "clamp": frozenset({aten.hardtanh.default, aten.hardtanh_.default, aten.relu6.default,
                        aten.clamp.default, aten.clamp_.default}),
    "gelu": frozenset({aten.gelu.default, aten.gelu_.default}),
    "sigmoid": frozenset({aten.sigmoid.default, aten.sigmoid_.default}),
    "tanh": frozenset({aten.tanh.default, aten.tanh_.default}),
    "hardsigmoid": frozenset({aten.hardsigmoid.default, aten.hardsigmoid_.default}),
    "hardswish": frozenset({aten.hardswish.default, aten.hardswish_.default}),
    "silu": frozenset({aten.silu.default, aten.silu_.default}),
    "leaky_relu": frozenset({aten.leaky_relu.default, aten.leaky_relu_.default}),
    "prelu": frozenset({aten.prelu.default}),
    "softmax": frozenset({aten.softmax.int, aten._softmax.default}),
    "layer_norm": frozenset({aten.layer_norm.default}),
    "max_pool": frozenset({aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default}),
    "avg_pool": frozenset({aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default,
                           aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default}),
    "mean": frozenset({aten.mean.dim, aten.mean.default}),
    "cat": frozenset({aten.cat.default, aten.concat.default, aten.concatenate.default}),
    "embedding": frozenset({aten.embedding.default}),
}  # fmt: skip
KIND_OF = {t: k for k, ts in OP_KINDS.items() for t in ts}


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
    activations (QNN's validator: "expected >= 73"), so there a 16-bit scheme runs matmul at
    8a8w unless an override names it."""

    weight_rounding: str = "nearest"
    """How weights take their grid points: "nearest", or "gptq" (each rounding error moved
    onto the weights not yet rounded so that the layer's output changes least: _rounding)."""

    def has_4bit_weights(self) -> bool:
        """Whether the scheme or an override stores weights in 4 bits."""
        schemes = [self.scheme] + [s for _, s in self.modules + self.ops if s is not None]
        return any(s.weight_bits == 4 for s in schemes)

    def matmul_at_8_bits(self) -> bool:
        return self.htp_arch is not None and self.htp_arch < 73 and self.scheme.act_bits == 16

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
                self.matmul_at_8_bits(),
                self.weight_rounding,
            )
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
    """``quantize_modules`` (``kinds=False``) or ``quantize_ops`` as (key, scheme) pairs;
    ValueError naming what to change for anything else."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        example = (
            "{'softmax': '16a8w', 'layer_norm': 'float'}" if kinds else "{'encoder.layers.*.attn': '16a8w', 'fc': 'float'}"
        )
        what = "op kind" if kinds else "nn.Module path pattern"
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
) -> QuantizeConfig:
    """A validated QuantizeConfig from option values (ValueError naming the option to change)."""
    if scheme not in SCHEMES:
        raise ValueError(f"quantize={scheme!r}: use one of {', '.join(SCHEMES)}, or None for a float model")
    if observer not in OBSERVERS:
        raise ValueError(f"observer={observer!r}: use one of {', '.join(OBSERVERS)}")
    from ._rounding import ROUNDINGS

    if weight_rounding not in ROUNDINGS:
        raise ValueError(f"weight_rounding={weight_rounding!r}: use one of {', '.join(ROUNDINGS)}")
    if not isinstance(per_channel, bool):
        raise ValueError(f"per_channel={per_channel!r}: must be True or False")
    return QuantizeConfig(
        SCHEMES[scheme],
        observer,
        per_channel,
        parse_overrides("quantize_modules", modules, kinds=False),
        parse_overrides("quantize_ops", ops, kinds=True),
        htp_arch,
        weight_rounding,
    )


# --- ONNX -------------------------------------------------------------------------------------

#: The opset of the QDQ models: QuantizeLinear/DequantizeLinear-21 take uint16 and int16.
QDQ_OPSET = 21


def tidy_onnx(data: bytes, int4_weights: bool = False) -> bytes:
    """The exporter's QDQ model made plain: Casts of initializers folded into initializers of the
    cast type, the Constants that feed Q/DQ nodes turned into initializers, per-tensor Q/DQ nodes
    without an ``axis``; with ``int4_weights``, the int8 weights that fit 4 bits stored as INT4
    (``_int4_weights``); then checked by onnx's checker."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_from_string(data)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    graph_inputs = {i.name for i in graph.input}
    qdq = {"QuantizeLinear", "DequantizeLinear"}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    keep = []
    for n in graph.node:
        if n.op_type == "Cast" and n.input[0] in inits and n.input[0] not in graph_inputs:
            to = next(helper.get_attribute_value(a) for a in n.attribute if a.name == "to")
            arr = numpy_helper.to_array(inits[n.input[0]]).astype(helper.tensor_dtype_to_np_dtype(to))
            graph.initializer.append(numpy_helper.from_array(arr, n.output[0]))
            inits[n.output[0]] = graph.initializer[-1]  # append() copies
            continue
        users = consumers.get(n.output[0], []) if n.output else []
        if (
            n.op_type == "Constant"
            and users
            and all(u.op_type in qdq for u in users)
            and len(n.attribute) == 1
            and n.attribute[0].name == "value"
        ):
            graph.initializer.append(n.attribute[0].t)
            graph.initializer[-1].name = n.output[0]
            inits[n.output[0]] = graph.initializer[-1]
            continue
        keep.append(n)
    del graph.node[:]
    graph.node.extend(keep)

    for n in graph.node:
        if n.op_type not in qdq:
            continue
        scale = inits.get(n.input[1])
        if scale is not None and len(scale.dims) == 0:
            kept = [a for a in n.attribute if a.name != "axis"]
            del n.attribute[:]
            n.attribute.extend(kept)

    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    kept_inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept_inits)
    if int4_weights:
        _int4_weights(graph)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _int4_weights(graph) -> None:
    """Stores as INT4 (with their zero points) the int8 initializers behind a DequantizeLinear
    whose values all fit -8..7: the 4-bit weights, which PT2E computes as int8 in -7..7. An 8-bit
    weight (a module kept at 8a8w) reaches +-127 in every channel that is not all zero, so it
    stays int8; an all-zero one is exact in 4 bits either way."""
    from onnx import TensorProto, helper, numpy_helper

    inits = {t.name: t for t in graph.initializer}
    to_int4 = set()
    for n in graph.node:
        if n.op_type != "DequantizeLinear" or n.input[0] not in inits:
            continue
        w = inits[n.input[0]]
        if w.data_type != TensorProto.INT8:
            continue
        v = numpy_helper.to_array(w)
        if v.size and v.min() >= -8 and v.max() <= 7:
            to_int4.add(n.input[0])
            if len(n.input) > 2 and n.input[2] in inits:
                to_int4.add(n.input[2])
    for name in to_int4:
        t = inits[name]
        v = numpy_helper.to_array(t)
        t.CopyFrom(helper.make_tensor(name, TensorProto.INT4, list(v.shape), v.ravel().tolist()))


# --- The flow ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Quantized:
    """A quantized graph: its QDQ ONNX model and what was done."""

    onnx: bytes
    converted: torch.fx.GraphModule
    """The converted PT2E model: the same quantize/dequantize arithmetic in PyTorch."""
    annotated: dict[str, int]
    """Quantized nodes by op kind."""
    absorbed_clamps: int
    seconds: dict[str, float]


def _sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` written with the ops the quantizer annotates (MatMul,
    Mul, Add, Softmax): torch.export keeps SDPA as one op, which no annotation covers, and the
    ONNX exporter's own decomposition of it then stays float (a float island that a v68 target
    refuses: a Hugging Face BERT had 22 such nodes). Inference semantics: no dropout."""
    del dropout_p  # inference graphs (eval mode)
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1)) * s
    if is_causal:
        causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)


@_export.exclusive
def quantize(
    traced: torch.nn.Module,
    example: Sequence[torch.Tensor],
    samples: Sequence[Sequence[torch.Tensor]],
    cfg: QuantizeConfig,
) -> Quantized:
    """Calibrates ``traced`` (a module taking the runtime tensors whose FX nodes keep dynamo's
    ``nn_module_stack``: ``_export.Interpreted``) on ``samples`` (tuples of runtime tensors
    like ``example``) and returns its QDQ ONNX model, inputs named ``input_<i>``. LoweringError
    when the graph cannot be captured or exported; ValueError for a ``quantize_modules``
    pattern that matches no module."""
    from torch.fx import traceback as fx_traceback

    # _quantizer first: it imports torchao with torch's pytree deprecation log quietened.
    from . import _quantizer
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from ._export import EXPORT_ERRORS

    seconds = {}
    t = time.perf_counter()
    try:
        with torch.no_grad(), warnings.catch_warnings(), fx_traceback.preserve_node_meta():
            warnings.simplefilter("ignore")
            program = torch.export.export(traced, tuple(example), strict=False)
    except EXPORT_ERRORS as e:
        raise LoweringError(f"quantize: torch.export could not capture the graph: {e}") from None
    if any(n.target is aten.scaled_dot_product_attention.default for n in program.graph.nodes):
        program = program.run_decompositions({aten.scaled_dot_product_attention.default: _sdpa_math})
    gm = program.module()
    quantizer = _quantizer.QnnxQuantizer(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare_pt2e(gm, quantizer)
    unmatched = quantizer.unmatched_modules()
    if unmatched:
        raise ValueError(
            f"quantize_modules: pattern(s) {unmatched} match no module of this graph; patterns are "
            "fnmatch patterns over module paths as model.named_modules() spells them (this graph "
            f"has {_quantizer.some_paths(gm)})"
        )
    seconds["prepare"] = time.perf_counter() - t
    t = time.perf_counter()
    with torch.no_grad():
        for sample in samples:
            prepared(*sample)
    quantizer.fit_bias(prepared)
    seconds["calibrate"] = time.perf_counter() - t
    if cfg.weight_rounding == "gptq":
        from ._rounding import round_weights

        t = time.perf_counter()
        with torch.no_grad():
            round_weights(prepared, samples)
        seconds["rounding"] = time.perf_counter() - t
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = convert_pt2e(prepared)
    absorbed = _quantizer.absorb_clamps(converted)
    _quantizer.splits_to_slices(converted)
    _quantizer.linear_rows(converted)
    seconds["convert"] = time.perf_counter() - t
    t = time.perf_counter()
    names = [f"input_{i}" for i in range(len(example))]
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                converted,
                tuple(example),
                dynamo=True,
                optimize=False,
                opset_version=QDQ_OPSET,
                input_names=names,
                verbose=False,
            )
    except EXPORT_ERRORS as e:
        raise LoweringError(f"quantize: the QDQ ONNX export failed: {e}") from None
    data = tidy_onnx(program.model_proto.SerializeToString(), cfg.has_4bit_weights())
    seconds["export"] = time.perf_counter() - t
    logger.info(
        "qnn quantize %s: %d nodes quantized, %d clamps absorbed; prepare %.1f s, calibrate %.1f s "
        "(%d samples), convert %.1f s, export %.1f s",
        cfg.scheme.name,
        sum(quantizer.counts.values()),
        absorbed,
        seconds["prepare"],
        seconds["calibrate"],
        len(samples),
        seconds["convert"],
        seconds["export"],
    )
    return Quantized(data, converted, dict(quantizer.counts), absorbed, seconds)
