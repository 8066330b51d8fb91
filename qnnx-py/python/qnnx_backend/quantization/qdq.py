"""The exporter's QDQ model made plain for the lowering and other runtimes (``tidy_onnx``).
``onnx`` is imported inside the functions: only a quantized compile pays for it."""

from __future__ import annotations

from typing import Any, Mapping, Optional

#: The opset of the QDQ models: QuantizeLinear/DequantizeLinear-21 take uint16 and int16.
QDQ_OPSET = 21


def tidy_onnx(data: bytes, int4_weights: bool = False, blocked: Optional[Mapping[str, Any]] = None) -> bytes:
    """The exporter's QDQ model made plain: Casts of initializers folded into initializers of the
    cast type, the Constants that feed Q/DQ nodes turned into initializers, per-tensor Q/DQ nodes
    without an ``axis``; with ``int4_weights``, the int8 weights that fit 4 bits stored as INT4
    (``_int4_weights``); the block-wise weights (``blockwise.Blocked`` by initializer name)
    behind their blocked DequantizeLinear (``_blocked_weights``); then checked by onnx's
    checker."""
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
    if blocked:
        _blocked_weights(graph, blocked)
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


def _blocked_weights(graph, blocked: Mapping[str, Any]) -> None:
    """Rewrites each DequantizeLinear of an integer weight named in ``blocked`` as its
    block-wise int4 weight, as ONNX Runtime's QNN EP takes LPBQ and the lowering reads it:
    ``DequantizeLinear(int4 [out, in], scale, zero point 0, axis=1, block_size)`` whose scale
    ``[out, in / block]`` is ``DequantizeLinear(uint8 k, channel scale, axis=0)``."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    found = set()
    nodes = []
    for n in graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in blocked:
            name = n.input[0]
            b = blocked[name]
            found.add(name)
            scale = f"{name}_lpbq_scale"
            nodes.append(
                helper.make_node(
                    "DequantizeLinear", [f"{name}_lpbq_k", f"{name}_lpbq_channel", f"{name}_lpbq_k_zp"], [scale], axis=0
                )
            )
            del n.input[:]
            n.input.extend([f"{name}_lpbq_q", scale, f"{name}_lpbq_zp"])
            del n.attribute[:]
            n.attribute.extend([helper.make_attribute("axis", 1), helper.make_attribute("block_size", b.block)])
        nodes.append(n)
    missing = sorted(set(blocked) - found)
    if missing:
        raise ValueError(f"block-wise weights {missing} have no DequantizeLinear in the exported model")
    for name in found:
        b = blocked[name]
        q, k = b.q.numpy(), b.k.numpy()
        graph.initializer.extend(
            [
                _int4_tensor(f"{name}_lpbq_q", q),
                _int4_tensor(f"{name}_lpbq_zp", np.zeros(k.shape, np.int8)),
                numpy_helper.from_array(k, f"{name}_lpbq_k"),
                numpy_helper.from_array(b.channel.numpy(), f"{name}_lpbq_channel"),
                helper.make_tensor(f"{name}_lpbq_k_zp", TensorProto.UINT8, [k.shape[0]], [0] * k.shape[0]),
            ]
        )
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _int4_tensor(name: str, a):
    """An ONNX INT4 initializer of the int8 array ``a`` (values in -8..7), packed two per byte
    (low nibble first) with numpy: ``helper.make_tensor`` over a Python list took 40 s for
    SmolLM2's block-wise weights."""
    import numpy as np
    from onnx import TensorProto

    flat = (a.ravel().astype(np.int8) & 0x0F).astype(np.uint8)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.INT4
    t.dims.extend(a.shape)
    t.raw_data = (flat[0::2] | (flat[1::2] << 4)).tobytes()
    return t
