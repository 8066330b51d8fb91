"""The 8-bit KV cache's pieces on the host (quantization/kv8.py): encodings, the rotated rows, and
the graph rewrite checked with onnx's reference evaluator. The compiled graphs on the HTP:
test_llm_quantized.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from qnnx_backend.quantization import kv8


def test_rotation_matrix_is_an_orthogonal_hadamard_with_one_scale():
    r = kv8.rotation_matrix(64)
    assert torch.allclose(r @ r.T, torch.eye(64), atol=1e-6)
    assert set(torch.unique(r * 8).tolist()) == {-1.0, 1.0}
    assert not torch.equal(r, kv8.rotation_matrix(64, seed=1))  # the signs are seeded
    with pytest.raises(ValueError, match="no Hadamard matrix of order 28"):
        kv8.rotation_matrix(28)


def _keys(seed=0):
    """Key-like rows [1, 2 heads, 40, 64]: two channels of each head (a rotary pair) 12x wider."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 2, 40, 64, generator=g)
    x[..., 3] *= 12
    x[..., 35] *= 12
    return x


def test_rotated_rows_round_trip_and_spread_a_wide_channel():
    x = _keys()
    plain = kv8.encodings([[x]], [0])[0]
    rotated = kv8.encodings([[x]], [0], rotate=True)[0]
    assert plain.rotation is None and rotated.rotation is not None
    err = {}
    for name, enc in (("plain", plain), ("rotated", rotated)):
        back = enc.dequantize(enc.quantize(x), torch.float32)
        err[name] = 10 * math.log10(x.pow(2).sum() / (x - back).pow(2).sum())
    # The wide pair sets the plain encoding's step; rotated, its energy is spread over 64 channels.
    assert rotated.scale < plain.scale / 2
    assert err["rotated"] > err["plain"] + 4, err
    # Zero stays exact (unwritten rows): the codes of a zero row dequantize to zero.
    zero = torch.zeros(1, 2, 1, 64)
    assert torch.equal(rotated.dequantize(rotated.quantize(zero), torch.float32), zero)


def _graph():
    """input_0: a cache [1, 2, 40, 64] read by the graph (its sum per head, output 0); input_1:
    the step's new rows, returned as output 1 (the rows a kv_cache graph writes back)."""
    import onnx
    from onnx import TensorProto, helper

    cache = helper.make_tensor_value_info("input_0", TensorProto.FLOAT, [1, 2, 40, 64])
    rows = helper.make_tensor_value_info("input_1", TensorProto.FLOAT, [1, 2, 1, 64])
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])
    nodes = [helper.make_node("ReduceSum", ["input_0", "axes"], ["sums"], keepdims=0),
             helper.make_node("Identity", ["input_1"], ["rows"])]
    outs = [helper.make_tensor_value_info("sums", TensorProto.FLOAT, [1, 2]),
            helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, 2, 1, 64])]
    return helper.make_model(helper.make_graph(nodes, "g", [cache, rows], outs, [axes]),
                             opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("rotate", [False, True])
def test_rewrite_reads_and_writes_the_codes(rotate):
    from onnx.reference import ReferenceEvaluator

    x = _keys()
    enc = kv8.encodings([[x]], [0], rotate=rotate)[0]
    io = kv8.CacheIO(tensor=0, arg=0, rows_output=1, positions_output=-1, dim=2, encoding=enc)
    import onnx

    rewritten = onnx.load_from_string(kv8.rewrite(_graph(), [io]))
    codes = enc.quantize(x)
    new = _keys(1)[:, :, :1]
    sums, rows = ReferenceEvaluator(rewritten).run(None, {"input_0": codes.numpy(), "input_1": new.numpy()})
    # The graph reads what the codes stand for (rotated back), and writes the new rows' codes.
    held = enc.dequantize(codes, torch.float32)
    np.testing.assert_allclose(sums, held.sum((2, 3)).numpy(), rtol=1e-4, atol=1e-2)
    assert rows.dtype == np.uint8
    assert np.abs(rows.astype(int) - enc.quantize(new).numpy().astype(int)).max() <= 1  # float order of sums
    assert (rows == enc.quantize(new).numpy()).mean() > 0.99
    assert ("kv8_unrotate" in str(rewritten.graph.node)) == rotate
