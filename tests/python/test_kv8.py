"""The 8-bit KV cache's pieces on the host (quantization/kv8.py): encodings, the rotated rows, and
the graph rewrite checked with onnx's reference evaluator. The compiled graphs on the HTP:
test_llm_quantized.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from qnnx_backend.quantization import config as quant_config
from qnnx_backend.quantization import kv8
from qnnx_backend.settings import parse_options


def test_rotation_matrix_is_an_orthogonal_hadamard_with_one_scale():
    r = kv8.rotation_matrix(64)
    assert torch.allclose(r @ r.T, torch.eye(64), atol=1e-6)
    assert set(torch.unique(r * 8).tolist()) == {-1.0, 1.0}
    assert not torch.equal(r, kv8.rotation_matrix(64, seed=1))  # the signs are seeded
    with pytest.raises(ValueError, match="no Hadamard matrix of order 28"):
        kv8.rotation_matrix(28)


def test_by_default_rows_are_held_rotated_where_the_head_size_has_a_hadamard_matrix_on_v73_and_newer():
    g = torch.Generator().manual_seed(0)
    x64, x28 = torch.randn(1, 2, 5, 64, generator=g), torch.randn(1, 2, 5, 28, generator=g)
    encs = kv8.encodings([[x64, x28]], [0, 1], rotate=None)
    assert encs[0].rotation is not None and encs[1].rotation is None
    with pytest.raises(ValueError, match="no Hadamard matrix of order 28"):
        kv8.encodings([[x28]], [0], rotate=True)
    assert kv8.encodings([[x64]], [0], rotate=False)[0].rotation is None
    # The default by HTP (config.QuantizeConfig.kv_cache_rotation): None ("where the head size
    # allows") on v73 and newer and on an HTP left to the emulator or device, off below v73.
    assert [quant_config.config("16a8w", htp_arch=a).kv_cache_rotation() for a in (None, 73, 79, 69, 68)] == [
        None, None, None, False, False]
    base = {"kv_cache": True, "quantize": "16a8w", "calibration": [torch.zeros(8, dtype=torch.long)]}
    assert parse_options({**base, "soc_model": 60}).kv_rotation() is None
    assert parse_options({**base, "soc_model": "QCS6490"}).kv_rotation() is False
    assert parse_options({**base, "soc_model": 60, "kv_cache_rotation": False}).kv_rotation() is False


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


def _sqnr(x: torch.Tensor, enc: kv8.Encoding) -> float:
    back = enc.dequantize(enc.quantize(x), torch.float32)
    return 10 * math.log10(x.pow(2).sum() / (x - back).pow(2).sum())


def test_the_histogram_fit_clips_rare_values_where_that_pays():
    """The histogram's fit (torchao's HistogramObserver) gives a few rare wide values up for the
    resolution of all the others; "minmax", the default, covers every value."""
    g = torch.Generator().manual_seed(3)
    rows = [torch.randn(1, 3, 200, 64, generator=g) for _ in range(4)]
    rows[1][0, 2, 17, 5] = 40.0  # one value in 150k, 10x the others' widest
    lo = min(float(r.min()) for r in rows)
    hi = max(float(r.max()) for r in rows)
    minmax = kv8.encodings([[r] for r in rows], [0])[0]  # "minmax", the default
    assert minmax == kv8.Encoding.covering(lo, hi)
    fitted = kv8.encodings([[r] for r in rows], [0], observer="histogram")[0]
    assert fitted.scale < minmax.scale / 3, (fitted, minmax)
    # Every other value gets a finer grid; the rare one saturates at the range's end.
    bulk = torch.cat([rows[0], rows[2], rows[3]], 2)
    assert _sqnr(bulk, fitted) > _sqnr(bulk, minmax) + 10, (_sqnr(bulk, fitted), _sqnr(bulk, minmax))
    assert int(fitted.quantize(rows[1])[0, 2, 17, 5]) == kv8.QMAX
    # Zero stays exact, and rows held rotated are fitted rotated.
    assert float(fitted.dequantize(fitted.quantize(torch.zeros(1, 1, 1, 64)), torch.float32).abs().max()) == 0
    assert kv8.encodings([[r] for r in rows], [0], rotate=True, observer="histogram")[0].rotation is not None


def test_the_cache_observer_is_checked():
    with pytest.raises(ValueError, match="kv_cache_observer='mse': use one of minmax, histogram"):
        kv8.encodings([[torch.ones(1, 1, 2, 4)]], [0], observer="mse")
    with pytest.raises(ValueError, match="no calibration rows"):
        kv8.encodings([], [0])
    base = {"kv_cache": True, "quantize": "16a8w", "calibration": [torch.zeros(8, dtype=torch.long)]}
    assert parse_options(base).kv_cache_observer == "minmax"
    assert parse_options({**base, "kv_cache_observer": "histogram"}).kv_cache_observer == "histogram"
    with pytest.raises(ValueError, match="kv_cache_observer='mse': use one of"):
        parse_options({**base, "kv_cache_observer": "mse"})
    with pytest.raises(ValueError, match="use it with kv_cache=True and kv_cache_bits=8"):
        parse_options({**base, "kv_cache_bits": 16, "kv_cache_observer": "histogram"})


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


def _attention(s: int = 40):
    """A decode step's attention in QDQ form, as the exporter writes it: input_0/1 the key and
    value caches [1, 2, s, 64], input_2/3 this step's new key and value rows (also returned as
    outputs 1 and 2: the rows a kv_cache graph writes back), input_4 the query, input_5 the
    one-hot slot; each cache joins its new row by a Where, the keys are transposed, every
    activation is re-encoded at 16 bits (symmetric ranges wide enough for _keys)."""
    import onnx
    from onnx import TensorProto, helper

    inits, nodes = [], []

    def qdq(x: str, bound: float) -> str:
        sc, zp = f"{x}_s", f"{x}_z"
        inits.extend([helper.make_tensor(sc, TensorProto.FLOAT, [], [2 * bound / 65535]),
                      helper.make_tensor(zp, TensorProto.UINT16, [], [32768])])
        nodes.extend([helper.make_node("QuantizeLinear", [x, sc, zp], [f"{x}_q"]),
                      helper.make_node("DequantizeLinear", [f"{x}_q", sc, zp], [f"{x}_dq"])])
        return f"{x}_dq"

    kr, vr, q = qdq("input_2", 64), qdq("input_3", 64), qdq("input_4", 8)
    nodes += [helper.make_node("Where", ["input_5", kr, "input_0"], ["k"]),
              helper.make_node("Where", ["input_5", vr, "input_1"], ["v"]),
              helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2])]
    kt, v = qdq("kt", 64), qdq("v", 64)
    nodes.append(helper.make_node("MatMul", [q, kt], ["scores"]))
    nodes.append(helper.make_node("Softmax", [qdq("scores", 2000)], ["p"], axis=-1))
    nodes.append(helper.make_node("MatMul", [qdq("p", 1), v], ["attn"]))
    nodes += [helper.make_node("Identity", ["input_2"], ["krow"]), helper.make_node("Identity", ["input_3"], ["vrow"])]
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(f"input_{k}", f, [1, 2, s, 64]) for k in (0, 1)]
    ins += [helper.make_tensor_value_info(f"input_{k}", f, [1, 2, 1, 64]) for k in (2, 3, 4)]
    ins.append(helper.make_tensor_value_info("input_5", TensorProto.BOOL, [1, 1, s, 1]))
    outs = [helper.make_tensor_value_info(n, f, None) for n in ("attn", "krow", "vrow")]
    return helper.make_model(helper.make_graph(nodes, "attention", ins, outs, inits),
                             opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("rotate", [False, True])
def test_rotated_rows_are_read_by_the_attention_as_they_are(rotate):
    """With the rows held rotated, the attention reads the rotated cache directly: the queries
    are rotated for the keys and the output rotated back for the values, never the whole cache
    (no read-side product per cached row); it computes the attention over the held rows."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    keys, values = _keys(), _keys(2) / 4
    p = 23  # this step's slot; slots after it are empty
    keys[:, :, p:], values[:, :, p:] = 0, 0
    encs = kv8.encodings([[keys, values]], [0, 1], rotate=rotate)
    ios = [kv8.CacheIO(tensor=k, arg=k, rows_output=1 + k, positions_output=-1, dim=2, encoding=encs[k]) for k in (0, 1)]
    rewritten = onnx.load_from_string(kv8.rewrite(_attention(), ios))
    names = " ".join(n.name for n in rewritten.graph.node)
    assert "kv8_unrotate" not in names.replace("kv8_unrotate_output", "")
    assert ("rotate_query" in names and "unrotate_output" in names) == rotate
    g = torch.Generator().manual_seed(7)
    new_k, new_v, q = (torch.randn(1, 2, 1, 64, generator=g) for _ in range(3))
    slot = torch.zeros(1, 1, 40, 1, dtype=torch.bool)
    slot[0, 0, p] = True
    codes = [encs[0].quantize(keys), encs[1].quantize(values)]
    feeds = {"input_0": codes[0].numpy(), "input_1": codes[1].numpy(), "input_2": new_k.numpy(),
             "input_3": new_v.numpy(), "input_4": q.numpy(), "input_5": slot.numpy()}
    attn, krow, vrow = ReferenceEvaluator(rewritten).run(None, feeds)
    # Float attention over the held rows (the codes' values, rotated back) and this step's row.
    k = torch.where(slot, new_k, encs[0].dequantize(codes[0], torch.float32))
    v = torch.where(slot, new_v, encs[1].dequantize(codes[1], torch.float32))
    want = torch.softmax(q @ k.transpose(-1, -2), -1) @ v
    err = (torch.from_numpy(attn) - want).abs().max().item()
    assert err < 0.02 * want.abs().max().item(), err
    assert krow.dtype == np.uint8 and (krow == encs[0].quantize(new_k).numpy()).mean() > 0.99
