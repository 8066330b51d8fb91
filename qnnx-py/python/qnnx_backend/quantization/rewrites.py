"""Rewrites of a converted (PT2E) graph before its QDQ ONNX export: clamps absorbed into the
encoding before them, splits read through getitem as slices, linears of rank > 2 inputs as
Gemms between Reshapes (what the HTP runs quantized; described in ``pt2e``); and one of the
exported graph before ``prepare_pt2e``: BatchNorms kept from a fold that would change what
another reader of a convolution's output sees."""

from __future__ import annotations

import math
import operator
from typing import Any, Optional

import torch
from torch.fx import GraphModule, Node

from .kinds import ABSORB_KEY, OP_KINDS, SPLITS, aten, constant

_qd = torch.ops.quantized_decomposed


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
        if not node.meta.get(ABSORB_KEY):
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


_BATCH_NORMS = (aten.batch_norm.default, aten._native_batch_norm_legit_no_training.default)


def keep_shared_conv_outputs(gm: GraphModule) -> int:
    """Before ``prepare_pt2e``, on the exported graph. torchao's ``prepare_pt2e`` folds every
    BatchNorm that reads a convolution into that convolution's weights (``_fuse_conv_bn_``),
    whoever else reads the convolution's output: where a pre-activation network's stem feeds
    one output to a BatchNorm and to the shortcut's Add (conv -> BN -> block, plus the conv's
    output), the Add then reads the BatchNorm's output (measured: a PreAct block's quantized
    model at 0.87 cosine to fp32 even at 16a16w). Such a BatchNorm reads an ``aten.clone`` of
    the output instead, which torchao does not fold through: it stays a BatchNorm (QNN
    Batchnorm on quantized tensors, on v68 too). Returns how many."""
    convs = OP_KINDS["conv"] | OP_KINDS["conv_transpose"]
    kept = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _BATCH_NORMS or not node.args:
            continue
        src = node.args[0]
        if not (isinstance(src, Node) and src.op == "call_function" and src.target in convs and len(src.users) > 1):
            continue
        with gm.graph.inserting_before(node):
            copy = gm.graph.call_function(aten.clone.default, (src,))
        copy.meta = dict(src.meta)
        node.replace_input_with(src, copy)
        kept += 1
    if kept:
        gm.graph.lint()
        gm.recompile()
    return kept


def splits_to_slices(gm: GraphModule) -> int:
    """Rewrites each split/chunk/unbind whose outputs are read through getitem into one slice
    (or select, for unbind) per output read. The dynamo ONNX exporter makes SplitToSequence and
    SequenceAt of aten.split (MultiheadAttention splits its packed q/k/v projection so), which
    the HTP has no op for; Slice it runs, keeping the input's encoding. Returns how many splits
    were rewritten."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in SPLITS:
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
