"""The PT2E quantizer for the HTP (``QnnxQuantizer``), its observers, and the rewrites of a
converted graph before its ONNX export. It imports torchao, which takes seconds: ``_quantize``
imports this module only when a graph is quantized. What the annotations make of the ONNX
model is described in ``_quantize``.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import operator
from typing import Any, Optional

import torch
from torch.fx import GraphModule, Node

# torchao 0.18 registers an Enum with torch's pytree at import, which torch 2.15 logs as deprecated
# (torch.utils._pytree's logger) in every process that quantizes: a warning the user did not cause
# and cannot act on, so that one logger is quietened for the import only.
_pytree_log = logging.getLogger("torch.utils._pytree")
_pytree_level = _pytree_log.level
_pytree_log.setLevel(logging.ERROR)
try:
    from torchao.quantization.pt2e import HistogramObserver, MinMaxObserver, PerChannelMinMaxObserver
    from torchao.quantization.pt2e.quantizer import (
        DerivedQuantizationSpec,
        FixedQParamsQuantizationSpec,
        QuantizationAnnotation,
        QuantizationSpec,
        Quantizer,
        SharedQuantizationSpec,
    )
except ImportError as e:
    raise ImportError(
        f"quantizing needs torchao's PT2E machinery ({e}); install it with: pip install 'qnnx[quantize]'"
    ) from e
finally:
    _pytree_log.setLevel(_pytree_level)

from ._modpaths import module_paths
from ._quantize import KIND_OF, OP_KINDS, SCHEMES, QuantizeConfig, Scheme, aten

logger = logging.getLogger("qnnx_backend")

_qd = torch.ops.quantized_decomposed

# Ops that move or select data without computing: the output keeps the input's encoding (QNN
# takes them so, and nothing is requantized). They are quantized when their input is.
_DATA_MOVEMENT = frozenset({
    aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.permute.default,
    aten.transpose.int, aten.t.default, aten.flatten.using_ints, aten.squeeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default, aten.slice.Tensor,
    aten.select.int, aten.expand.default, aten.contiguous.default, aten.clone.default,
    aten.dropout.default, aten.alias.default, aten.detach.default, aten.unflatten.int,
    aten.pixel_shuffle.default, aten.pixel_unshuffle.default, aten.upsample_nearest2d.vec,
    aten.flip.default, aten.repeat.default, aten.narrow.default,
})  # fmt: skip
# Several outputs (read through getitem), each with the input's encoding.
_SPLITS = frozenset({aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default, aten.unbind.int})
# Outputs that keep the input's encoding because they pick input values (max pooling) or pad
# with zero, which every encoding here holds exactly.
_SHARING = OP_KINDS["max_pool"] | {aten.constant_pad_nd.default}
_WEIGHTED = OP_KINDS["conv"] | OP_KINDS["conv_transpose"] | OP_KINDS["linear"]
_CLAMPS = OP_KINDS["relu"] | OP_KINDS["clamp"]
_BINARY = OP_KINDS["add"] | OP_KINDS["sub"] | OP_KINDS["mul"] | OP_KINDS["div"]
# Meta key of a clamp whose producer's output is not quantized: absorb_clamps() removes it.
_ABSORB = "qnnx_absorb_clamp"

_INT32 = (-(2**31), 2**31 - 1)
# A derived bias is fitted into 2**30 of int32's 2**31 levels.
_BIAS_LIMIT = 2.0**30


class FittedPerChannelObserver(PerChannelMinMaxObserver):
    """Per-channel weight observer whose scales can be raised after calibration
    (``min_scale``) so that a derived int32 bias fits. Weights are constants: they are observed
    at the first calibration call only (the per-channel minimum and maximum of every weight at
    every call took 0.23 s per resnet18 call, 30x the model itself)."""

    min_scale: Optional[torch.Tensor] = None
    observed = False

    def forward(self, x):
        if self.observed:
            return x
        self.observed = True
        return super().forward(x)

    def calculate_qparams(self):
        scale, zero_point = super().calculate_qparams()
        if self.min_scale is not None:
            scale = torch.maximum(scale, self.min_scale.to(scale.dtype))
        return scale, zero_point


class FittedPerTensorObserver(MinMaxObserver):
    """Per-tensor weight observer with the same ``min_scale``, also observing once."""

    min_scale: Optional[torch.Tensor] = None
    observed = False

    def forward(self, x):
        if self.observed:
            return x
        self.observed = True
        return super().forward(x)

    def calculate_qparams(self):
        scale, zero_point = super().calculate_qparams()
        if self.min_scale is not None:
            scale = torch.maximum(scale, self.min_scale.to(scale.dtype).reshape(scale.shape))
        return scale, zero_point


#: The weight observers: constants, observed once, scales raised by ``fit_bias``.
WEIGHT_OBSERVERS = (FittedPerChannelObserver, FittedPerTensorObserver)


def constant(model: torch.nn.Module, target: str) -> Any:
    """What a get_attr node's (dotted) target names in ``model``."""
    return operator.attrgetter(target)(model)


class Specs:
    """The QuantizationSpecs of one scheme, made once: PT2E shares one observer between a
    producer's output and a consumer's input when their specs are equal, and observer
    constructors compare by identity."""

    def __init__(self, scheme: Scheme, observer: str, per_channel: bool):
        act_dtype, act_max = (torch.uint8, 255) if scheme.act_bits == 8 else (torch.uint16, 65535)
        act_observer = MinMaxObserver if observer == "minmax" else HistogramObserver
        self.act = QuantizationSpec(
            dtype=act_dtype,
            quant_min=0,
            quant_max=act_max,
            qscheme=torch.per_tensor_affine,
            observer_or_fake_quant_ctr=act_observer.with_args(),
        )
        w_dtype, w_min, w_max = {
            8: (torch.int8, -127, 127),
            16: (torch.int16, -32767, 32767),
            # PT2E has no 4-bit dtype: int8 restricted to -7..7 (symmetric), stored as ONNX
            # INT4 after export (_quantize.tidy_onnx), as ExecuTorch's QnnQuantizer does for its
            # 16a4w (int8, quant range of 4 bits).
            4: (torch.int8, -7, 7),
        }[scheme.weight_bits]
        self.per_channel = per_channel
        self.weight_channel = {
            axis: QuantizationSpec(
                dtype=w_dtype,
                quant_min=w_min,
                quant_max=w_max,
                qscheme=torch.per_channel_symmetric,
                ch_axis=axis,
                observer_or_fake_quant_ctr=FittedPerChannelObserver.with_args(),
            )
            for axis in (0, 1)
        }
        self.weight_tensor = QuantizationSpec(
            dtype=w_dtype,
            quant_min=w_min,
            quant_max=w_max,
            qscheme=torch.per_tensor_symmetric,
            observer_or_fake_quant_ctr=FittedPerTensorObserver.with_args(),
        )
        self.int32 = QuantizationSpec(
            dtype=torch.int32,
            quant_min=_INT32[0],
            quant_max=_INT32[1],
            qscheme=torch.per_tensor_symmetric,
            observer_or_fake_quant_ctr=MinMaxObserver.with_args(),
        )
        # QNN's fixed output encodings for 16-bit Sigmoid and Tanh.
        self.sigmoid: Any = self.act
        self.tanh: Any = self.act
        if scheme.act_bits == 16:
            self.sigmoid = FixedQParamsQuantizationSpec(
                dtype=torch.uint16, scale=1.0 / 65536, zero_point=0, quant_min=0, quant_max=65535,
                qscheme=torch.per_tensor_affine,
            )  # fmt: skip
            self.tanh = FixedQParamsQuantizationSpec(
                dtype=torch.uint16, scale=1.0 / 32768, zero_point=32768, quant_min=0, quant_max=65535,
                qscheme=torch.per_tensor_affine,
            )  # fmt: skip

    def weight(self, axis: Optional[int]) -> QuantizationSpec:
        """Per channel on ``axis`` when per-channel weights are on and the op has an
        output-channel axis; else per tensor."""
        if self.per_channel and axis is not None:
            return self.weight_channel[axis]
        return self.weight_tensor

    @staticmethod
    def bias(node: Node, weight: QuantizationSpec) -> DerivedQuantizationSpec:
        """int32 with scale = input scale x weight scale, zero point 0."""

        def derive(observers):
            act, w = observers
            act_scale, _ = act.calculate_qparams()
            w_scale, _ = w.calculate_qparams()
            scale = (act_scale * w_scale).to(torch.float32)
            return scale, torch.zeros(scale.shape, dtype=torch.int32)

        per_channel = weight.qscheme == torch.per_channel_symmetric
        return DerivedQuantizationSpec(
            derived_from=[(node.args[0], node), (node.args[1], node)],
            derive_qparams_fn=derive,
            dtype=torch.int32,
            quant_min=_INT32[0],
            quant_max=_INT32[1],
            qscheme=torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric,
            ch_axis=0,
        )


# --- Where a node sits in the model -----------------------------------------------------------

def some_paths(gm: GraphModule, limit: int = 12) -> str:
    """Module paths found in ``gm``, for messages."""
    paths: list[str] = []
    for n in gm.graph.nodes:
        for p in module_paths(n):
            if p not in paths:
                paths.append(p)
    if not paths:
        return "no module paths"
    return ", ".join(paths[:limit]) + (", ..." if len(paths) > limit else "")


def _is_float(n: Any) -> bool:
    if not isinstance(n, Node):
        return False
    v = n.meta.get("val")
    return isinstance(v, torch.Tensor) and v.dtype.is_floating_point


# --- The quantizer ----------------------------------------------------------------------------


class QnnxQuantizer(Quantizer):
    """Annotates a ``torch.export`` graph (ATen ops) for the HTP per a ``QuantizeConfig``:
    which edges are quantized, with which dtype and encoding."""

    def __init__(self, config: QuantizeConfig):
        super().__init__()
        self.config = config
        self._specs: dict[str, Specs] = {}
        self.biased: list[str] = []
        """Names of the weighted nodes with a derived bias (for fit_bias)."""
        self.matched: set[str] = set()
        self.counts: dict[str, int] = {}
        """Annotated nodes by op kind."""

    def specs(self, scheme: Scheme) -> Specs:
        if scheme.name not in self._specs:
            self._specs[scheme.name] = Specs(scheme, self.config.observer, self.config.per_channel)
        return self._specs[scheme.name]

    def scheme_of(self, node: Node) -> Optional[Scheme]:
        """The scheme of ``node`` (None: float): that of the deepest module whose path matches
        a ``modules`` pattern (the later pattern at equal depth), else its op kind's ``ops``
        override, else the configured scheme."""
        best: Optional[tuple[int, int]] = None
        chosen: Optional[Scheme] = None
        for depth, path in enumerate(module_paths(node)):
            for order, (pattern, scheme) in enumerate(self.config.modules):
                if fnmatch.fnmatchcase(path, pattern):
                    self.matched.add(pattern)
                    if best is None or (depth, order) >= best:
                        best, chosen = (depth, order), scheme
        if best is not None:
            return chosen
        kind = KIND_OF.get(node.target)
        for k, scheme in self.config.ops:
            if k == kind:
                return scheme
        if kind == "matmul" and self.config.matmul_at_8_bits():
            return SCHEMES["8a8w"]
        return self.config.scheme

    def unmatched_modules(self) -> list[str]:
        return [p for p, _ in self.config.modules if p not in self.matched]

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        """Scalar operands of quantized add/sub/mul/div become constant tensors, quantized like
        any other input (a QDQ model has no float constant beside quantized tensors)."""
        graph = model.graph
        made = 0
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in _BINARY or not _is_float(node):
                continue
            if self.scheme_of(node) is None:
                continue
            args = list(node.args)
            for i, a in enumerate(args[:2]):
                if isinstance(a, (int, float)) and not isinstance(a, bool):
                    name = f"_qnnx_scalar_{made}"
                    made += 1
                    model.register_buffer(name, torch.tensor(float(a), dtype=node.meta["val"].dtype))
                    with graph.inserting_before(node):
                        const = graph.get_attr(name)
                    const.meta["val"] = getattr(model, name)
                    args[i] = const
            node.args = tuple(args)
        if made:
            model.recompile()
        return model

    def annotate(self, model: GraphModule) -> GraphModule:
        out_spec: dict[Node, Any] = {}
        schemes = {
            n: self.scheme_of(n) for n in model.graph.nodes if n.op == "call_function" and n.target in KIND_OF
        }

        def mark(node: Node, inputs: dict, output: Any) -> None:
            node.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map=inputs, output_qspec=output, _annotated=True
            )
            if output is not None:
                out_spec[node] = output
            kind = KIND_OF.get(node.target, "data movement")
            self.counts[kind] = self.counts.get(kind, 0) + 1

        def clamped_by(node: Node) -> bool:
            """Whether ``node``'s only user is a clamp of the same scheme, which then carries the
            output encoding (and is absorbed after convert)."""
            if len(node.users) != 1:
                return False
            user = next(iter(node.users))
            return (
                user.op == "call_function"
                and user.target in _CLAMPS
                and user.args[0] is node
                and schemes.get(user) is not None
                and schemes.get(user) == schemes.get(node)
            )

        for node in model.graph.nodes:
            if node.op != "call_function":
                continue
            target = node.target
            if target in _DATA_MOVEMENT or target in _SPLITS:
                src = node.args[0] if node.args else None
                if not isinstance(src, Node) or src not in out_spec:
                    continue
                shared = SharedQuantizationSpec((src, node))
                if target in _SPLITS:
                    mark(node, {src: out_spec[src]}, None)
                    for user in node.users:
                        if user.op == "call_function" and user.target is operator.getitem:
                            mark(user, {}, shared)
                else:
                    mark(node, {src: out_spec[src]}, shared)
                continue
            scheme = schemes.get(node)
            if scheme is None or not _is_float(node):
                continue
            specs = self.specs(scheme)
            kind = KIND_OF[target]
            x = node.args[0]
            inputs: dict = {}
            output: Any = specs.act
            if target in _WEIGHTED:
                if not _is_float(x) or not _is_float(node.args[1]):
                    continue
                inputs[x] = specs.act
                axis: Optional[int] = 0
                if kind == "conv_transpose":
                    # The weight is [in, out / groups, ...]: output channels on axis 1, all of
                    # them only without groups.
                    axis = 1 if (node.args[6] if len(node.args) > 6 else 1) == 1 else None
                w_spec = specs.weight(axis)
                inputs[node.args[1]] = w_spec
                bias = node.args[2] if len(node.args) > 2 else None
                if _is_float(bias):
                    inputs[bias] = specs.bias(node, w_spec)
                    self.biased.append(node.name)
                if clamped_by(node):
                    output = None
            elif kind == "layer_norm":
                if not _is_float(x):
                    continue
                inputs[x] = specs.act
                weight = node.args[2] if len(node.args) > 2 else None
                bias = node.args[3] if len(node.args) > 3 else None
                if _is_float(weight):
                    inputs[weight] = specs.act
                if _is_float(bias):
                    inputs[bias] = specs.int32
            elif kind == "embedding":
                if not _is_float(x):
                    continue
                inputs[x] = specs.act
                output = SharedQuantizationSpec((x, node))
            elif kind == "cat":
                tensors = [t for t in node.args[0] if isinstance(t, Node)]
                if not tensors or not all(_is_float(t) for t in tensors):
                    continue
                first = tensors[0]
                inputs[first] = specs.act
                shared = SharedQuantizationSpec((first, node))
                for t in tensors[1:]:
                    if t is not first:
                        inputs[t] = shared
                output = shared
            elif target in _CLAMPS:
                if not _is_float(x):
                    continue
                annotation = x.meta.get("quantization_annotation")
                if annotation is not None and annotation.output_qspec is None and clamped_by(x):
                    node.meta[_ABSORB] = True
                else:
                    inputs[x] = specs.act
            elif target in _SHARING:
                if not _is_float(x):
                    continue
                inputs[x] = specs.act
                output = SharedQuantizationSpec((x, node))
            else:
                for a in node.args:
                    if _is_float(a):
                        inputs[a] = specs.act
                if not inputs:
                    continue
                if kind == "sigmoid":
                    output = specs.sigmoid
                elif kind == "tanh":
                    output = specs.tanh
                elif target in _BINARY and clamped_by(node):
                    output = None
            mark(node, inputs, output)
        return model

    def validate(self, model: GraphModule) -> None:
        return None

    def fit_bias(self, prepared: GraphModule) -> None:
        """After calibration: raises the weight scale of the channels whose derived bias would
        not fit (|bias| / (input scale x weight scale) >= 2**30), so that it does."""
        by_name = {n.name: n for n in prepared.graph.nodes}
        for name in self.biased:
            node = by_name.get(name)
            if node is None or len(node.args) < 3:
                continue
            act, weight, bias_obs = (_observer(prepared, a) for a in node.args[:3])
            bias = _observed_constant(prepared, node.args[2])
            if act is None or not isinstance(weight, WEIGHT_OBSERVERS):
                continue
            if bias_obs is None or bias is None:
                continue
            act_scale, _ = act.calculate_qparams()
            need = bias.detach().abs().to(torch.float64) / (act_scale.to(torch.float64) * _BIAS_LIMIT)
            if isinstance(weight, FittedPerTensorObserver):
                need = need.max().reshape(1)
            w_scale, _ = weight.calculate_qparams()
            if bool((need > w_scale.to(torch.float64)).any()):
                weight.min_scale = need.to(torch.float32)
                logger.debug("qnn quantize: %s: weight scale raised so that its int32 bias fits", name)


def _observer(model: GraphModule, n: Any) -> Optional[torch.nn.Module]:
    if isinstance(n, Node) and n.op == "call_module":
        return model.get_submodule(str(n.target))
    return None


def _observed_constant(model: GraphModule, observed: Any) -> Optional[torch.Tensor]:
    """The constant (a get_attr) that an observer node observes, if it observes one."""
    if not isinstance(observed, Node) or observed.op != "call_module" or not observed.args:
        return None
    src = observed.args[0]
    if not (isinstance(src, Node) and src.op == "get_attr"):
        return None
    value = constant(model, str(src.target))
    return value if isinstance(value, torch.Tensor) else None


# --- After convert ----------------------------------------------------------------------------


def _clamp_range(node: Node) -> tuple[float, float]:
    if node.target in OP_KINDS["relu"]:
        return 0.0, math.inf
    if node.target == aten.relu6.default:
        return 0.0, 6.0
    if node.target in (aten.hardtanh.default, aten.hardtanh_.default):
        lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
        hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
        return float(lo), float(hi)
    lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    return (-math.inf if lo is None else float(lo)), (math.inf if hi is None else float(hi))


def absorb_clamps(gm: GraphModule) -> int:
    """Removes each clamp marked by the quantizer when its output quantization clips exactly as
    it would (the clamp's range holds the encoding's, to within half a step: Q(clamp(x)) ==
    Q(x)); otherwise quantizes its input with the same encoding, so that no float edge is left.
    Returns how many clamps were removed."""
    q_op = _qd.quantize_per_tensor.default
    dq_op = _qd.dequantize_per_tensor.default
    removed = 0
    changed = False
    for node in list(gm.graph.nodes):
        if not node.meta.get(_ABSORB):
            continue
        users = list(node.users)
        if not users or any(u.target is not q_op for u in users):
            continue
        params = {tuple(u.args[1:]) for u in users}
        if len(params) != 1:
            continue
        scale, zero_point, qmin, qmax, dtype = next(iter(params))
        lo, hi = _clamp_range(node)
        src = node.args[0]
        changed = True
        if lo < scale * (qmin - zero_point) + scale / 2 and hi > scale * (qmax - zero_point) - scale / 2:
            node.replace_all_uses_with(src)
            gm.graph.erase_node(node)
            removed += 1
        else:
            with gm.graph.inserting_before(node):
                q = gm.graph.call_function(q_op, (src, scale, zero_point, qmin, qmax, dtype))
                dq = gm.graph.call_function(dq_op, (q, scale, zero_point, qmin, qmax, dtype))
            node.replace_input_with(src, dq)
    if changed:
        gm.graph.lint()
        gm.recompile()
    return removed


def splits_to_slices(gm: GraphModule) -> int:
    """Rewrites each split/chunk/unbind whose outputs are read through getitem into one slice
    (or select, for unbind) per output read. The dynamo ONNX exporter makes SplitToSequence and
    SequenceAt of aten.split (MultiheadAttention splits its packed q/k/v projection so), which
    the HTP has no op for; Slice it runs, keeping the input's encoding. Returns how many splits
    were rewritten."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _SPLITS:
            continue
        src = node.args[0]
        outs = node.meta.get("val")
        users = list(node.users)
        if not isinstance(src, Node) or not isinstance(outs, (list, tuple)) or not users:
            continue
        if any(u.op != "call_function" or u.target is not operator.getitem for u in users):
            continue
        rank = outs[0].dim() + (1 if node.target == aten.unbind.int else 0)
        if node.target == aten.unbind.int:
            dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        else:
            dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
        dim = dim % rank
        starts = [0]
        for o in outs:
            starts.append(starts[-1] + (1 if node.target == aten.unbind.int else int(o.shape[dim])))
        for u in users:
            i = u.args[1]
            with gm.graph.inserting_before(u):
                if node.target == aten.unbind.int:
                    piece = gm.graph.call_function(aten.select.int, (src, dim, i))
                else:
                    piece = gm.graph.call_function(aten.slice.Tensor, (src, dim, starts[i], starts[i + 1]))
            piece.meta = dict(u.meta)
            u.replace_all_uses_with(piece)
            gm.graph.erase_node(u)
        gm.graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return rewritten


def _in_features(gm: GraphModule, w: Any) -> Optional[int]:
    """The in-features of a linear's weight (its dim 1): from the node's value, or from the
    constant behind its dequantize (convert_pt2e's nodes carry no value)."""
    if not isinstance(w, Node):
        return None
    v = w.meta.get("val")
    if not isinstance(v, torch.Tensor) and w.op == "call_function" and w.args:
        src = w.args[0]
        if isinstance(src, Node) and src.op == "get_attr":
            v = constant(gm, str(src.target))
    return int(v.shape[1]) if isinstance(v, torch.Tensor) and v.dim() == 2 else None


def linear_rows(gm: GraphModule) -> int:
    """Rewrites each quantized ``linear`` of an input of rank > 2 into a reshape to rows, a
    rank-2 linear and a reshape back, each reshape between a dequantize and a quantize of the
    same encoding. The exporter writes a rank-2 linear as one Gemm (QNN's FullyConnected with
    its int32 bias); of a rank-3 one it makes MatMul then Add, whose MatMul output has no
    encoding: that MatMul ran in float (refused on v68) and the bias was added in fp16, where
    its scale (input scale x weight scale, ~1e-6) loses it (cosine 0.976 for a
    TransformerEncoderLayer on SoC 60). Returns how many were rewritten."""
    q_op = _qd.quantize_per_tensor.default
    dq_op = _qd.dequantize_per_tensor.default
    g = gm.graph
    done = 0
    for node in list(g.nodes):
        if node.op != "call_function" or node.target != aten.linear.default:
            continue
        x = node.args[0]
        out = node.meta.get("val")
        if not (isinstance(x, Node) and x.target is dq_op and isinstance(out, torch.Tensor) and out.dim() > 2):
            continue
        users = list(node.users)
        if not users or any(u.target is not q_op for u in users):
            continue
        x_params = tuple(x.args[1:])
        k = _in_features(gm, node.args[1])
        if k is None:
            continue
        with g.inserting_before(node):
            rows = g.call_function(aten.reshape.default, (x, [-1, k]))
            rows_q = g.call_function(q_op, (rows, *x_params))
            rows_dq = g.call_function(dq_op, (rows_q, *x_params))
            flat = g.call_function(aten.linear.default, (rows_dq, *node.args[1:]), dict(node.kwargs))
        for u in users:
            params = tuple(u.args[1:])
            with g.inserting_before(u):
                fq = g.call_function(q_op, (flat, *params))
                fdq = g.call_function(dq_op, (fq, *params))
                back = g.call_function(aten.reshape.default, (fdq, list(out.shape)))
            u.replace_input_with(node, back)
        g.erase_node(node)
        done += 1
    if done:
        g.lint()
        gm.recompile()
    return done
