"""Error-compensating weight rounding (GPTQ) for the PT2E-prepared graph, after calibration.

Rounding each weight to its nearest grid point ("nearest") ignores what the layer computes:
on inputs with correlated features (neighbouring pixels, a 3x3 filter whose taps nearly cancel
on smooth images) many small rounding errors add up in the output. GPTQ (Frantar et al., 2022,
"GPTQ: Accurate Post-Training Quantization for Generative Pre-trained Transformers", the
one-shot form of Optimal Brain Quantization, which its authors also measured on ResNets)
rounds a layer's input columns one at a time and moves each rounding error onto the columns
not yet rounded, weighted by the inverse of the Hessian ``H = 2 X X^T`` of the layer's inputs
``X`` over the calibration samples, so that ``W X`` changes as little as it can. The grid is
the one PT2E's weight observer chose (its per-channel or per-tensor scale, after
``fit_bias``): only which grid point each weight takes changes, so ``convert_pt2e`` writes the
same encodings with other integers, and every exporter and runtime reads them as usual.

Layers are taken in graph order and their inputs are computed by this pass through the layers
already rounded, with every activation observer applied as fake quantization at its calibrated
encoding, so that each layer compensates what the quantized layers before it changed (as GPTQ
and OBQ do). torchao's GPTQ (``Int4WeightOnlyGPTQQuantizer``) targets the group-wise int4
Linear weights of its own tensor subclasses, not convolutions nor PT2E's observers, so this
module implements the algorithm on PT2E's graph: about a hundred lines.

KV-cache graphs (``kv_cache=True``) are the exception to "inputs computed by this pass": a decode
graph's calibration sample is one token (128 of them here: too few for a Hessian over 576 or
1,536 input features), and the prefill and decode graphs share every weight, which rounded per
graph would get other integers in each. Their samples carry ``SequenceHessians``: each Linear's
``H`` from the float model's forward over the whole calibration sequences (every token, up to
``SEQUENCE_TOKENS`` per sequence, as GPTQ's authors calibrate LLMs). Every graph computes them
from the same forwards, so each weight gets the same Hessian and the same rounding in every
graph; they are dropped after each graph (the whole SmolLM2's are 0.5 GB) rather than kept with
the model. These Hessians see the float model's inputs, not those of the layers already rounded
(what makes them the same for every graph); other graphs keep the propagation above.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
import weakref
from typing import Any, Optional, Sequence

import torch
from torch.fx import GraphModule, Node

from . import blockwise
from .calibrate import evenly
from .kinds import constant
from .specs import WEIGHT_OBSERVERS

logger = logging.getLogger("qnnx_backend")

aten = torch.ops.aten

#: Samples GPTQ propagates at most (evenly spread over the calibration samples): it holds every
#: sample's activations of a layer at once, and a KV-cache decode graph calibrates on a sample per
#: position of every sequence, each holding the whole cache (quantization.prefill).
MAX_SAMPLES = 128

#: Tokens of a calibration sequence ``SequenceHessians`` reads at most (GPTQ's authors calibrate
#: on segments of 2,048 tokens): the float forward holds every layer's [heads, n, n] attention.
SEQUENCE_TOKENS = 2048

#: Damping added to H's diagonal, as a fraction of its mean (GPTQ's default): keeps the
#: Cholesky factorisation stable when inputs are nearly collinear.
_DAMP = 0.01

#: Columns rounded between two updates of the rest of the matrix.
_BLOCK = 128

_CONV = {aten.conv1d.default: 1, aten.conv2d.default: 2}
_LINEAR = aten.linear.default


def _encoding(obs: torch.nn.Module) -> tuple[float, int, int, int]:
    """The activation encoding ``obs`` calibrated: (scale, zero point, quant_min, quant_max)."""
    scale, zp = obs.calculate_qparams()
    return float(scale.reshape(-1)[0]), int(zp.reshape(-1)[0]), int(obs.quant_min), int(obs.quant_max)


def _replace_attr(model: GraphModule, target: str, value: torch.Tensor) -> torch.Tensor:
    """Sets ``model``'s constant ``target`` to a new tensor ``value``. Never in place: the
    exported graph's constants can be the caller's own parameters (a Linear's weight, a Conv's
    without BatchNorm), which quantizing must not change."""
    owner_path, _, leaf = target.rpartition(".")
    owner = model.get_submodule(owner_path) if owner_path else model
    old = getattr(owner, leaf)
    if isinstance(old, torch.nn.Parameter):
        value = torch.nn.Parameter(value, requires_grad=False)
    setattr(owner, leaf, value)
    return value


def _own_constant(prepared: GraphModule, observer: Node, src: Node) -> Node:
    """A constant of its own for the weight ``observer`` reads from ``src``, when another op reads
    ``src`` too: an LM head tied to the embedding (SmolLM2's, Gemma's) shares its weight with the
    embedding's Gather, which must keep the float table, not the head's GPTQ-compensated values."""
    if len(src.users) == 1:
        return src
    name = f"{str(src.target).replace('.', '_')}_gptq"
    while hasattr(prepared, name):
        name += "_"
    prepared.register_buffer(name, constant(prepared, str(src.target)).detach().clone())
    with prepared.graph.inserting_before(observer):
        copy = prepared.graph.get_attr(name)
    observer.replace_input_with(src, copy)
    return copy


def _columns(node: Node, x: torch.Tensor, weight: torch.Tensor) -> Optional[torch.Tensor]:
    """The layer's input as the columns its weight rows multiply: [groups, fan_in, samples];
    None for a form this pass does not take (string padding, unusual arguments)."""
    if node.target is _LINEAR:
        return x.reshape(-1, x.shape[-1]).T.unsqueeze(0)
    dims = _CONV[node.target]
    args = list(node.args) + [None] * (7 - len(node.args))
    stride, padding, dilation, groups = (args[3] or 1), (args[4] or 0), (args[5] or 1), (args[6] or 1)
    if isinstance(padding, str) or not isinstance(groups, int):
        return None
    if dims == 1:
        x = x.unsqueeze(-2)
        pick = lambda v: (1, v[0] if isinstance(v, (list, tuple)) else v)  # noqa: E731
        stride, dilation = pick(stride), pick(dilation)
        padding = (0, padding[0] if isinstance(padding, (list, tuple)) else padding)
    kernel = tuple(weight.shape[2:]) if dims == 2 else (1, weight.shape[2])
    cols = torch.nn.functional.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)
    n, fan_in, length = cols.shape
    return cols.permute(1, 0, 2).reshape(groups, fan_in // groups, n * length)


def _upper_cholesky_of_inverse(h: torch.Tensor) -> torch.Tensor:
    """The upper Cholesky factor ``U`` of ``h^-1`` (``h^-1 = U^T U``; ``h`` [groups, n, n],
    positive definite): row i holds how the error of column i spreads onto the columns after it.

    GPTQ's reference code takes it as ``cholesky(cholesky_inverse(cholesky(h)), upper=True)``.
    This takes one factorisation and one triangular solve instead: with ``J`` the order-reversing
    permutation, ``J h J = L L^T`` gives ``h = M M^T`` with ``M = J L J`` upper triangular, so
    ``h^-1 = M^-T M^-1`` and ``U = M^-1 = J L^-1 J`` (the Cholesky factor is unique). Measured on
    this machine's 2 cores, shared with a benchmark, for a 4,608-column Hessian (resnet18's
    layer4 3x3 convolutions), float32: 2.1 s against 11 s, ``cholesky_inverse`` being most of
    that; the two agree to 3e-7 relative. Beside the same benchmark, GPTQ of resnet18's 21
    weights took 51 s instead of 143 s."""
    lower = torch.linalg.cholesky(h.flip(-1, -2))
    eye = torch.eye(h.shape[-1], dtype=h.dtype).expand_as(h)
    return torch.linalg.solve_triangular(lower, eye, upper=False).flip(-1, -2)


def _gptq(w: torch.Tensor, hessian: torch.Tensor, scale: torch.Tensor, qmin: int, qmax: int) -> torch.Tensor:
    """GPTQ over groups at once: ``w`` [groups, rows, cols], ``hessian`` [groups, cols, cols],
    ``scale`` [groups, rows, 1] (a scale per row) or [groups, rows, cols] (a scale per weight: a
    block-wise grid); returns the rounded weights (grid values) in ``w``'s shape."""
    w = w.clone().to(torch.float32)
    h = hessian.clone()
    dead = torch.diagonal(h, dim1=1, dim2=2) == 0
    idx = torch.arange(h.shape[-1])
    h[:, idx, idx] += torch.where(dead, 1.0, 0.0).to(h.dtype)
    w[dead.unsqueeze(1).expand_as(w)] = 0.0
    damp = _DAMP * torch.diagonal(h, dim1=1, dim2=2).mean(-1, keepdim=True)
    h[:, idx, idx] += damp
    hinv = _upper_cholesky_of_inverse(h)
    scale = scale.to(torch.float32).expand_as(w)
    q = torch.empty_like(w)
    cols = w.shape[-1]
    # In blocks of columns (GPTQ's lazy batch update): errors spread inside a block column by
    # column, onto the columns after it in one product per block.
    for start in range(0, cols, _BLOCK):
        end = min(start + _BLOCK, cols)
        block = w[:, :, start:end].clone()
        errs = torch.empty_like(block)
        for j in range(end - start):
            col = block[:, :, j]
            s = scale[:, :, start + j]
            qc = torch.clamp(torch.round(col / s), qmin, qmax) * s
            q[:, :, start + j] = qc
            err = (col - qc) / hinv[:, start + j, start + j].unsqueeze(-1)
            block[:, :, j + 1 :] -= err.unsqueeze(-1) * hinv[:, start + j, start + j + 1 : end].unsqueeze(1)
            errs[:, :, j] = err
        w[:, :, end:] -= errs @ hinv[:, start:end, end:]
    return q


def _key(weight: torch.Tensor) -> tuple:
    """A weight's identity across graphs: its shape and bytes (an exported graph's constant may be
    the module's parameter or a copy of it)."""
    w = weight.detach().to(torch.float32).contiguous()
    return tuple(w.shape), hashlib.sha256(w.numpy().tobytes()).hexdigest()


class SequenceHessians:
    """Each ``torch.nn.Linear``'s ``H = 2 X X^T`` over every token of the calibration sequences,
    from forwards of the float model (module docstring); computed at the first ``of`` call, by
    the weight's content. Deterministic: the same model and sequences give the same Hessians."""

    def __init__(self, model: torch.nn.Module, seqs: Sequence[torch.Tensor]):
        self._model = weakref.ref(model)
        self._seqs = list(seqs)
        self._by_weight: Optional[dict[tuple, torch.Tensor]] = None

    def of(self, weight: torch.Tensor) -> Optional[torch.Tensor]:
        """``H`` [in, in] of the Linear whose weight equals ``weight``; None if no Linear has it."""
        if self._by_weight is None:
            self._by_weight = self._compute()
        return self._by_weight.get(_key(weight))

    @torch.no_grad()
    def _compute(self) -> dict[tuple, torch.Tensor]:
        model = self._model()
        if model is None:
            raise ValueError("GPTQ for kv_cache graphs: the model was freed while compiling")
        t = time.perf_counter()
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        sums = {id(m): torch.zeros(m.in_features, m.in_features) for m in linears}
        counts = {id(m): 0 for m in linears}

        def hook(module, args):
            x = args[0].detach().reshape(-1, module.in_features).to(torch.float32)
            sums[id(module)].addmm_(x.T, x)
            counts[id(module)] += x.shape[0]

        limit = min(SEQUENCE_TOKENS, getattr(getattr(model, "config", None), "max_position_embeddings", None) or SEQUENCE_TOKENS)
        handles = [m.register_forward_pre_hook(hook) for m in linears]
        try:
            with torch.compiler.set_stance("force_eager"):
                for seq in self._seqs:
                    model(input_ids=seq[None, :limit], use_cache=False)
        finally:
            for h in handles:
                h.remove()
        out = {}
        for m in linears:
            if counts[id(m)]:
                out[_key(m.weight)] = sums[id(m)] * (2.0 / counts[id(m)])
        logger.info("qnn quantize: GPTQ Hessians of %d linear layers from %d sequence(s) in %.1f s",
                    len(out), len(self._seqs), time.perf_counter() - t)
        return out


def _weight_of(prepared: GraphModule, node: Node) -> Optional[tuple[torch.nn.Module, Node]]:
    """(weight observer, weight constant node) of a convolution or linear ``node`` whose weight
    PT2E observes; None for any other node."""
    if node.op != "call_function" or not (node.target in _CONV or node.target is _LINEAR) or len(node.args) < 2:
        return None
    wnode = node.args[1]
    if not (isinstance(wnode, Node) and wnode.op == "call_module" and wnode.args):
        return None
    obs = prepared.get_submodule(str(wnode.target))
    src = wnode.args[0]
    if isinstance(obs, WEIGHT_OBSERVERS) and isinstance(src, Node) and src.op == "get_attr":
        return obs, src
    return None


def round_weights(
    prepared: GraphModule,
    samples: Sequence[Sequence[torch.Tensor]],
    block: Optional[int] = None,
    hessians: Optional[SequenceHessians] = None,
) -> dict[str, blockwise.Blocked]:
    """Replaces the weights of the convolutions and linear layers of ``prepared`` (calibrated,
    observers in place) with GPTQ's choice of grid points. With ``block`` (``weight_block_size``),
    each 4-bit Linear weight that ``blockwise.plan`` takes is rounded on its block-wise grid
    instead (the grid ``blockwise.quantize`` derives from the float weight: GPTQ with static
    groups, so only the integers differ from nearest rounding); those are returned, by the
    linear's node name, for ``blockwise.plan``. With ``hessians``, each Linear takes its Hessian
    from them (module docstring); when every weight does, the samples are not run at all."""
    t = time.perf_counter()
    graph = prepared.graph
    weights = {n: w for n in graph.nodes if (w := _weight_of(prepared, n)) is not None}
    given: dict[Node, torch.Tensor] = {}
    if hessians is not None:
        for node, (_, src) in weights.items():
            h = hessians.of(constant(prepared, str(src.target))) if node.target is _LINEAR else None
            if h is not None:
                given[node] = h
    samples = [] if weights and len(given) == len(weights) else evenly(samples, MAX_SAMPLES)
    copied = False  # whether a weight got a constant of its own (_own_constant)
    last_use: dict[Node, Node] = {}
    for node in graph.nodes:
        for a in node.all_input_nodes:
            last_use[a] = node
    placeholders = {n: i for i, n in enumerate(n for n in graph.nodes if n.op == "placeholder")}
    envs: list[dict[Node, Any]] = [{} for _ in samples]
    rounded = 0
    blocks: dict[str, blockwise.Blocked] = {}

    def fetch(env: dict, a: Any) -> Any:
        return torch.fx.node.map_arg(a, lambda n: env[n])

    for node in graph.nodes:
        if node.op == "output":
            break
        weight_obs = weights.get(node)
        if weight_obs is not None:
            obs, src = weight_obs
            param = constant(prepared, str(src.target))
            cols = [] if node in given else [_columns(node, env[node.args[0]], param) for env in envs]
            if (node in given or (cols and all(c is not None for c in cols))) and (
                obs.qscheme != torch.per_channel_symmetric or obs.ch_axis == 0
            ):
                if node in given:
                    hessian = given[node].unsqueeze(0)
                else:
                    hessian = torch.zeros(cols[0].shape[0], cols[0].shape[1], cols[0].shape[1])
                    for c in cols:
                        hessian.baddbmm_(c, c.transpose(1, 2))
                    hessian *= 2.0 / sum(c.shape[-1] for c in cols)
                groups = hessian.shape[0]
                rows = param.shape[0]
                w = param.detach().reshape(groups, rows // groups, -1)
                qmin, qmax = int(obs.quant_min), int(obs.quant_max)
                grid = None
                if block and node.target is _LINEAR and qmin >= -8 and qmax <= 7 and blockwise.fits(param, block):
                    grid = blockwise.quantize(param, block)
                    scale = grid.scales().repeat_interleave(block, dim=1).unsqueeze(0)
                else:
                    scale, _ = obs.calculate_qparams()
                    scale = scale.reshape(-1, 1).expand(rows, 1).reshape(groups, rows // groups, 1)
                q = _gptq(w, hessian, scale, qmin, qmax)
                if grid is not None:
                    ints = torch.round(q[0] / scale[0]).clamp(qmin, qmax).to(torch.int8)
                    blocks[node.name] = dataclasses.replace(grid, q=ints)
                own = _own_constant(prepared, node.args[1], src)
                copied |= own is not src
                src = own
                new = _replace_attr(prepared, str(src.target), q.reshape(param.shape).to(param.dtype))
                for env in envs:
                    env[node.args[1]] = new
                rounded += 1
        # An activation observer's encoding, once per node (a histogram observer searches its
        # histogram for it).
        mod = prepared.get_submodule(str(node.target)) if node.op == "call_module" else None
        encoding = None
        if hasattr(mod, "calculate_qparams") and not isinstance(mod, WEIGHT_OBSERVERS):
            encoding = _encoding(mod)
        for env, sample in zip(envs, samples):
            if node.op == "placeholder":
                env[node] = sample[placeholders[node]]
            elif node.op == "get_attr":
                env[node] = constant(prepared, str(node.target))
            elif node.op == "call_module":
                args, kwargs = fetch(env, node.args), fetch(env, node.kwargs)
                x = args[0] if len(args) == 1 and not kwargs else None
                if isinstance(mod, WEIGHT_OBSERVERS):
                    env[node] = x
                elif encoding is not None and isinstance(x, torch.Tensor) and x.is_floating_point():
                    # Rounded to the encoding it calibrated, as the HTP will.
                    env[node] = torch.fake_quantize_per_tensor_affine(x, *encoding)
                else:
                    # Observers take one value; other modules (torch.export's _guards_fn, which a
                    # KV-cache graph has, takes every input) take what the graph gives them.
                    env[node] = mod(*args, **kwargs)
            elif node.op == "call_function":
                args, kwargs = fetch(env, node.args), fetch(env, node.kwargs)
                env[node] = node.target(*args, **kwargs)
            for a in node.all_input_nodes:
                if last_use.get(a) is node:
                    env.pop(a, None)
    if copied:
        prepared.recompile()
    logger.info(
        "qnn quantize: GPTQ rounded %d weights%s%s in %.1f s",
        rounded,
        f" ({len(blocks)} block-wise)" if block else "",
        f", {len(given)} on Hessians of whole calibration sequences" if given else "",
        time.perf_counter() - t,
    )
    return blocks
