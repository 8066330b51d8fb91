"""The graph edits of an 8-bit KV cache held rotated (``kv_cache_rotation``; quantization.kv8):
the matrix products with the rotation, and the attention reading the rotated rows as they are."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

#: Ops between a cache read and the attention's MatMul that move or copy elements without mixing
#: a row's channels (the update's Where, GQA's repeat, the keys' transpose, re-encodings).
CARRY = {"Where", "Unsqueeze", "Expand", "Identity", "Reshape", "Transpose", "QuantizeLinear", "DequantizeLinear"}
UINT8, UINT16 = 2, 4  # onnx.TensorProto data types


def at_attention(g: Any, inits: list, read: str, r: torch.Tensor, grids: dict, name: str) -> bool:
    """For a cache held rotated (rows times ``r``): edits the graph so that the attention reads
    the rotated rows as they are, when the path from the cache read ``read`` to its attention
    MatMul is one ``CARRY`` op after another. (qR)(kR)^T = qk^T, so for keys the queries are
    rotated (one row per head per step); P(vR) = (Pv)R, so for values the attention's output is
    rotated back. Rotating the whole cache back where it is read instead costs a product per
    cached row (189 M multiply-adds per decode step for SmolLM2's 256 slots, docs/llm.md). The
    step's new row joins the cache rotated; re-encodings on the path take the cache's grid
    (``grids``: 8 and 16 bits, both holding every code exactly). False, with the graph untouched,
    for any other path."""
    from onnx import TensorProto, helper, numpy_helper

    d = int(r.shape[0])
    consumers: dict[str, list] = {}
    producer: dict[str, Any] = {}
    for n in g.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
        for x in n.output:
            producer[x] = n
    init = {i.name: i for i in g.initializer}

    def const(x: str) -> Any:
        """A constant's value: an initializer, a Constant node, or a Concat of them (the
        exporter's shapes), else None."""
        if x in init:
            return numpy_helper.to_array(init[x]).tolist()
        n = producer.get(x)
        if n is not None and n.op_type == "Constant" and len(n.attribute) == 1:
            v = helper.get_attribute_value(n.attribute[0])
            return numpy_helper.to_array(v).tolist() if hasattr(v, "dims") else (list(v) if isinstance(v, Sequence) else v)
        if n is not None and n.op_type == "Concat" and helper.get_attribute_value(n.attribute[0]) == 0:
            parts = [const(i) for i in n.input]
            if all(isinstance(p, list) for p in parts):
                return [v for p in parts for v in p]
        return None

    source = next((i for i in g.input if f"{i.name}_kv8" == read), None)
    if source is None:
        return False
    rank = len(source.type.tensor_type.shape.dim)
    value, axis, path, where = read, rank - 1, [], None  # axis: where the row's channels are
    while True:
        users = consumers.get(value, [])
        if len(users) != 1 or users[0].op_type not in CARRY | {"MatMul"}:
            return False
        n = users[0]
        if n.op_type == "MatMul":
            break
        op = n.op_type
        if op == "Where":
            if where is not None or n.input[0] == value or list(n.input).count(value) != 1:
                return False
            where = n
        elif op == "Transpose":
            perm = [helper.get_attribute_value(a) for a in n.attribute if a.name == "perm"]
            if not perm or len(perm[0]) != rank:
                return False
            axis = list(perm[0]).index(axis)
        elif op == "Unsqueeze":
            axes = const(n.input[1])
            if axes is None:
                return False
            out_rank = rank + len(axes)
            axes = sorted(a % out_rank for a in axes)
            for a in axes:  # each inserted axis before the channels shifts them by one
                axis += a <= axis
            rank = out_rank
        elif op in ("Reshape", "Expand"):
            shape = const(n.input[1])
            # The channels stay the last axis, in place, only while its size stays d.
            if axis != rank - 1 or not shape or shape[-1] not in ((d,) if op == "Reshape" else (1, d)):
                return False
            rank = len(shape) if op == "Reshape" else max(rank, len(shape))
            axis = rank - 1
        elif op in ("QuantizeLinear", "DequantizeLinear"):
            zp = init.get(n.input[2]) if len(n.input) > 2 else None
            if zp is None or zp.dims or zp.data_type not in (UINT8, UINT16):
                return False  # per-tensor uint8 or uint16 only
        path.append(n)
        value = n.output[0]
    mm = users[0]
    if where is None or mm.input[1] != value or axis not in (rank - 1, rank - 2):
        return False
    keys = axis == rank - 2  # q @ k^T contracts the channels; p @ v keeps them
    q_range = None
    if keys:
        dq = producer.get(mm.input[0])
        if dq is None or dq.op_type != "DequantizeLinear" or const(dq.input[1]) is None or dq.input[2] not in init:
            return False
        scale, zp = float(const(dq.input[1])), float(const(dq.input[2]))
        top = 255 if init[dq.input[2]].data_type == UINT8 else 65535
        q_range = (-zp * scale, (top - zp) * scale)

    # The path holds: the rows on it are rotated now, on the cache's grid.
    for n in path:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            n.input[1], n.input[2] = grids[init[n.input[2]].data_type]
    on_path = {read} | {p.output[0] for p in path}
    k = 1 if where.input[2] in on_path else 2  # the data input that is not the cache: the new row
    row, rotated = where.input[k], f"{name}_kv8_row_rotated"
    before_where = rotate(inits, row, f"{rotated}_f", r, f"{name}_kv8_rotate_row")
    before_where += requantize(f"{rotated}_f", rotated, *grids[UINT16])
    where.input[k] = rotated
    if keys:
        # |(qR)_j| <= |q|_2 <= sqrt(d) max|q_i|: an encoding that cannot clip, 3 of 16 bits wider.
        bound = math.sqrt(d) * max(abs(q_range[0]), abs(q_range[1]), 1e-8)
        sq, zq = f"{name}_kv8_query_scale", f"{name}_kv8_query_zero_point"
        inits += [helper.make_tensor(sq, TensorProto.FLOAT, [], [2 * bound / 65535]),
                  helper.make_tensor(zq, TensorProto.UINT16, [], [32768])]
        q = f"{name}_kv8_query_rotated"
        at_mm = rotate(inits, mm.input[0], f"{q}_f", r, f"{name}_kv8_rotate_query")
        at_mm += requantize(f"{q}_f", q, sq, zq)
        mm.input[0] = q
    else:
        # P v R lies within the rotated rows' range (P's rows are convex weights): the cache's grid.
        out = mm.output[0]
        mm.output[0] = f"{out}_kv8_rotated"
        at_mm = requantize(mm.output[0], f"{out}_kv8_rotated16", *grids[UINT16])
        at_mm += rotate(inits, f"{out}_kv8_rotated16", out, r.T, f"{name}_kv8_unrotate_output")
    # One rebuild, after every edit: the node list's extend copies the messages.
    placed = []
    for n in list(g.node):
        here = (n.name, list(n.output))
        if here == (where.name, list(where.output)):
            placed += before_where
        if keys and here == (mm.name, list(mm.output)):
            placed += at_mm
        placed.append(n)
        if not keys and here == (mm.name, list(mm.output)):
            placed += at_mm
    del g.node[:]
    g.node.extend(placed)
    return True


def requantize(src: str, dst: str, scale: str, zero_point: str) -> list:
    """``dst``: ``src`` through a QuantizeLinear and DequantizeLinear of the given encoding."""
    from onnx import helper

    return [helper.make_node("QuantizeLinear", [src, scale, zero_point], [f"{dst}_q"], name=f"{dst}_q"),
            helper.make_node("DequantizeLinear", [f"{dst}_q", scale, zero_point], [dst], name=f"{dst}_dq")]


def rotate(inits: list, src: str, dst: str, r: torch.Tensor, name: str) -> list:
    """Nodes computing ``dst = src @ r`` for an orthogonal ``r`` with entries ``+-1/sqrt(d)``: the
    matrix as int8 ``+-1`` behind a DequantizeLinear of scale ``1/sqrt(d)`` (a quantized weight,
    exact), so the HTP runs it as a FullyConnected of the graph's activation precision."""
    from onnx import TensorProto, helper

    d = r.shape[0]
    signs = torch.sign(r).to(torch.int8)
    if not torch.allclose(signs.double() / math.sqrt(d), r.double(), rtol=0, atol=1e-6 / math.sqrt(d)):
        raise ValueError("kv8: the cache rotation must have entries +-1/sqrt(d) (a Hadamard matrix)")
    w, ws, wz = f"{name}_w", f"{name}_w_scale", f"{name}_w_zero_point"
    inits += [helper.make_tensor(w, TensorProto.INT8, [d, d], signs.flatten().tolist()),
              helper.make_tensor(ws, TensorProto.FLOAT, [], [1.0 / math.sqrt(d)]),
              helper.make_tensor(wz, TensorProto.INT8, [], [0])]
    return [helper.make_node("DequantizeLinear", [w, ws, wz], [f"{name}_wf"], name=f"{name}_wdq"),
            helper.make_node("MatMul", [src, f"{name}_wf"], [dst], name=name)]
