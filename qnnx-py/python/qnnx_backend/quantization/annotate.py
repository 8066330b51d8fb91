"""The PT2E quantizer for the HTP (``QnnxQuantizer``): which nodes are quantized with which
specs, and the bias fitted into int32 after calibration. Imports torchao (through ``specs``),
which takes seconds: ``pt2e`` imports this module only when a graph is quantized. What the
annotations make of the ONNX model is described in ``pt2e``.
"""

from __future__ import annotations

import fnmatch
import logging
import operator
from typing import Any, Optional

import torch
from torch.fx import GraphModule, Node

from .config import SCHEMES, QuantizeConfig, Scheme
from .kinds import ABSORB_KEY as _ABSORB
from .kinds import KIND_OF, OP_KINDS, SPLITS as _SPLITS, aten, constant
from .modpaths import module_paths
from .specs import _BIAS_LIMIT, WEIGHT_OBSERVERS, FittedPerTensorObserver, QuantizationAnnotation, Quantizer, SharedQuantizationSpec, Specs

logger = logging.getLogger("qnnx_backend")

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
# Outputs that keep the input's encoding because they pick input values (max pooling) or pad
# with zero, which every encoding here holds exactly.
_SHARING = OP_KINDS["max_pool"] | {aten.constant_pad_nd.default}
_WEIGHTED = OP_KINDS["conv"] | OP_KINDS["conv_transpose"] | OP_KINDS["linear"]
_CLAMPS = OP_KINDS["relu"] | OP_KINDS["clamp"]
_BINARY = OP_KINDS["add"] | OP_KINDS["sub"] | OP_KINDS["mul"] | OP_KINDS["div"]

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


def some_values(gm: GraphModule, limit: int = 12) -> str:
    """Names of values ``gm``'s ops compute, for messages."""
    names = [n.name for n in gm.graph.nodes if n.op == "call_function" and _is_float(n)]
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "") if names else "no values"


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
        self.values = dict(config.values)
        """Value overrides by FX node name (config.values); ``matched_values`` those found."""
        self.matched_values: set[str] = set()
        self.counts: dict[str, int] = {}
        """Annotated nodes by op kind."""
        self.by_kind: set[str] = set()
        """Names of the nodes whose scheme an ``ops`` override chose (``scheme_of``)."""

    def specs(self, scheme: Scheme) -> Specs:
        if scheme.name not in self._specs:
            self._specs[scheme.name] = Specs(scheme, self.config.observer, self.config.per_channel, self.config.headroom)
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
                self.by_kind.add(node.name)
                return scheme
        return self.config.scheme

    def unmatched_modules(self) -> list[str]:
        return [p for p, _ in self.config.modules if p not in self.matched]

    def unmatched_values(self) -> list[str]:
        return [v for v, _ in self.config.values if v not in self.matched_values]

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
        # Value overrides (config.values): the width each overridden value is read at, through
        # the views and clamps that keep it. Its producer and its readers run at the value's
        # scheme, inputs and output: the HTP takes no op (FullyConnected included) whose
        # tensors mix 8 and 16 bits, so the widths change between ops (a QNN Convert).
        read: dict[Node, Optional[Scheme]] = {}
        for n in model.graph.nodes:
            if n.op != "call_function" or not _is_float(n):
                continue
            src = n.args[0] if n.args else None
            if n.name in self.values:
                read[n] = self.values[n.name]
                self.matched_values.add(n.name)
                if n in schemes:
                    schemes[n] = read[n]
                # A clamp absorbed into its source's encoding names the source's value (the
                # QDQ model and the report name it after the clamp): the source goes along.
                if n.target in _CLAMPS and isinstance(src, Node) and len(src.users) == 1 and src in schemes:
                    schemes[src] = read[n]
            elif src in read and (n.target in _DATA_MOVEMENT or (n.target in _CLAMPS and len(src.users) == 1)):
                read[n] = read[src]
                if n in schemes:
                    schemes[n] = read[n]
        for n, v in read.items():
            for u in n.users:
                if u in schemes and u not in read:
                    schemes[u] = v

        def act(a: Node, specs: Specs) -> Any:
            """The spec that a reader of ``a`` with ``specs`` reads it with (None: float)."""
            if a in read:
                v = read[a]
                return None if v is None else self.specs(v).act
            return specs.act

        def put(inputs: dict, a: Node, specs: Specs) -> None:
            spec = act(a, specs)
            if spec is not None:
                inputs[a] = spec

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
                # A weighted op reading a value kept float stays float: its int32 bias derives
                # from the input's encoding.
                if not _is_float(x) or not _is_float(node.args[1]) or act(x, specs) is None:
                    continue
                put(inputs, x, specs)
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
                put(inputs, x, specs)
                weight = node.args[2] if len(node.args) > 2 else None
                bias = node.args[3] if len(node.args) > 3 else None
                if _is_float(weight):
                    inputs[weight] = specs.act
                if _is_float(bias):
                    inputs[bias] = specs.int32
            elif kind == "embedding":
                if not _is_float(x):
                    continue
                put(inputs, x, specs)
                output = SharedQuantizationSpec((x, node))
            elif kind == "cat":
                tensors = [t for t in node.args[0] if isinstance(t, Node)]
                if not tensors or not all(_is_float(t) for t in tensors):
                    continue
                first = tensors[0]
                inputs[first] = act(first, specs) or specs.act
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
                    put(inputs, x, specs)
            elif target in _SHARING:
                if not _is_float(x):
                    continue
                put(inputs, x, specs)
                output = SharedQuantizationSpec((x, node))
            else:
                # Below v73 a 16-bit MatMul of two activations reads the second at 8 bits (a QNN
                # Convert before it): the one mixed width that MatMul takes there; a module
                # promoted to 16 bits included. An override that names the MatMul itself (an
                # ``ops`` or a value override) gets what it names: 16 bits, which QNN refuses.
                narrow = (
                    kind == "matmul"
                    and node.name not in self.by_kind
                    and node not in read
                    and self.config.matmul_16x8(scheme)
                )
                second = self.specs(SCHEMES["8a8w"]) if narrow else specs
                for i, a in enumerate(node.args):
                    if _is_float(a):
                        put(inputs, a, second if i == 1 else specs)
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
