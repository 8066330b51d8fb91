"""Post-training quantization of an FX graph into a standard QDQ ONNX model: the schemes, the
options that configure it, the flow, and the tidying of the exported model.

The graph (dynamo's, weights frozen as in ``compiling.to_onnx``) is captured with ``torch.export``,
annotated by ``annotate.QnnxQuantizer`` and calibrated with PyTorch's PT2E flow from
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
  getitem is one Slice per output: what the HTP runs quantized (``rewrites.linear_rows``,
  ``rewrites.splits_to_slices``);
* with ``weight_block_size``, the 4-bit Linear weights block-wise instead (QNN's block
  expansion: a float scale per output channel times a 4-bit integer scale per block of input
  features; ``blockwise``);
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
from typing import Sequence

import torch

from ..compiling import to_onnx
from ..exceptions import LoweringError
from .config import QuantizeConfig
from .kinds import aten
from .qdq import QDQ_OPSET, tidy_onnx

logger = logging.getLogger("qnnx_backend")


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


def convert_ptq(prepared: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """torchao's ``convert_pt2e`` without its search for QAT conv-BatchNorm patterns.
    ``_fold_conv_bn_qat`` folds the pattern that ``prepare_qat_pt2e`` writes (a conv weight scaled
    by the BatchNorm's running statistics before the conv), which a graph from ``prepare_pt2e``
    never holds; yet whenever a BatchNorm is left in the graph (a pre-activation block's,
    ``rewrites.keep_shared_conv_outputs``) it traces its 96 pattern graphs with ``torch.export``
    to look for one: 21.3 s of a 22.9 s quantization of test_preact_bn's small block (0.06 s
    without). Skipped while torchao has that function (0.18); the QDQ model is byte-identical
    (tests/python/test_quantize.py). Callers hold ``to_onnx.exclusive``."""
    from torchao.quantization.pt2e import quantize_pt2e

    fold = getattr(quantize_pt2e, "_fold_conv_bn_qat", None)
    if fold is None:
        return quantize_pt2e.convert_pt2e(prepared)
    quantize_pt2e._fold_conv_bn_qat = lambda m: m
    try:
        return quantize_pt2e.convert_pt2e(prepared)
    finally:
        quantize_pt2e._fold_conv_bn_qat = fold


@to_onnx.exclusive
def quantize(
    traced: torch.nn.Module,
    example: Sequence[torch.Tensor],
    samples: Sequence[Sequence[torch.Tensor]],
    cfg: QuantizeConfig,
) -> Quantized:
    """Calibrates ``traced`` (a module taking the per-call tensors whose FX nodes keep dynamo's
    ``nn_module_stack``: ``to_onnx.Interpreted``) on ``samples`` (tuples of per-call tensors
    like ``example``) and returns its QDQ ONNX model, inputs named ``input_<i>``. LoweringError
    when the graph cannot be captured or exported; ValueError for a ``quantize_modules``
    pattern that matches no module or a ``quantize_values`` name that names no value."""
    # Imported here for their cost (torchao takes seconds), which float compiles do not pay;
    # annotate first: its import of torchao quietens torch's pytree deprecation log.
    from . import annotate, blockwise, rewrites
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    seconds = {}
    t = time.perf_counter()
    try:
        with torch.no_grad(), warnings.catch_warnings(), torch.fx.traceback.preserve_node_meta():
            warnings.simplefilter("ignore")
            program = torch.export.export(traced, tuple(example), strict=False)
    except to_onnx.EXPORT_ERRORS as e:
        raise LoweringError(f"quantize: torch.export could not capture the graph: {e}") from None
    if any(n.target is aten.scaled_dot_product_attention.default for n in program.graph.nodes):
        program = program.run_decompositions({aten.scaled_dot_product_attention.default: _sdpa_math})
    gm = program.module()
    rewrites.keep_shared_conv_outputs(gm)
    quantizer = annotate.QnnxQuantizer(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare_pt2e(gm, quantizer)
    unmatched = quantizer.unmatched_modules()
    if unmatched:
        raise ValueError(
            f"quantize_modules: pattern(s) {unmatched} match no module of this graph; patterns are "
            "fnmatch patterns over module paths as model.named_modules() spells them (this graph "
            f"has {annotate.some_paths(gm)})"
        )
    unmatched = quantizer.unmatched_values()
    if unmatched:
        raise ValueError(
            f"quantize_values: {unmatched} name no value of this graph; a value is named as "
            "torch.export names the FX node of the op that computes it (and the per-layer report "
            f"and the QDQ model name it): this graph has {annotate.some_values(gm)}"
        )
    seconds["prepare"] = time.perf_counter() - t
    t = time.perf_counter()
    with torch.no_grad():
        for sample in samples:
            prepared(*sample)
    quantizer.fit_bias(prepared)
    seconds["calibrate"] = time.perf_counter() - t
    rounded: dict[str, blockwise.Blocked] = {}  # the block-wise weights GPTQ chose
    if cfg.weight_rounding == "gptq":
        from .gptq import SequenceHessians, round_weights  # imported for their cost, as annotate above

        t = time.perf_counter()
        # KV-cache graphs' samples name the model and its calibration sequences: every graph of
        # the model then rounds each weight on the same Hessians (quantization.gptq).
        source = getattr(samples, "sequences", None)
        model = source[0]() if source is not None else None
        hessians = SequenceHessians(model, source[1]) if model is not None else None
        with torch.no_grad():
            rounded = round_weights(prepared, samples, cfg.weight_block_size, hessians)
        seconds["rounding"] = time.perf_counter() - t
    floats = blockwise.float_weights(prepared) if cfg.weight_block_size else {}
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = convert_ptq(prepared)
    blocked = blockwise.plan(converted, floats, cfg.weight_block_size, rounded) if cfg.weight_block_size else {}
    absorbed = rewrites.absorb_clamps(converted)
    rewrites.splits_to_slices(converted)
    rewrites.linear_rows(converted)
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
    except to_onnx.EXPORT_ERRORS as e:
        raise LoweringError(f"quantize: the QDQ ONNX export failed: {e}") from None
    data = tidy_onnx(program.model_proto.SerializeToString(), cfg.has_4bit_weights(), blocked)
    if blocked:
        blockwise.fake_quantize(converted, blocked)
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
