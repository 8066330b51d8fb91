"""The warm-start FX fingerprint (qnnx_backend.compiling.fingerprint): stable for the same graph, weights
and options; different when anything that changes the compiled binary changes. No QNN needed."""

import torch

from qnnx_backend.compiling.fingerprint import fingerprint, fx_fingerprint
from qnnx_backend.settings import parse_options


def graph():
    def f(x, w, b):
        return torch.relu(x @ w + b)

    return torch.fx.symbolic_trace(f)


def weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.Parameter(torch.randn(3, 4, generator=g)), torch.nn.Parameter(torch.randn(4, generator=g))


def fp(gm=None, args=None, device="npu", **options):
    gm = gm if gm is not None else graph()
    args = args if args is not None else [torch.randn(2, 3), *weights()]
    x = args[0]
    signature = ((tuple(x.shape), x.dtype),)
    return fx_fingerprint(gm, args, [0], signature, device, parse_options(options))


def test_same_graph_and_weights_give_the_same_fingerprint():
    # A new trace, new weight tensors with the same values, another runtime input of the same
    # signature: the same binary, so the same fingerprint.
    a = fp(graph(), [torch.randn(2, 3), *weights()])
    b = fp(graph(), [torch.zeros(2, 3), *weights()])
    assert a == b
    assert len(a) == 64 and int(a, 16) >= 0


def test_a_changed_weight_gives_another_fingerprint():
    w, b = weights()
    base = fp(args=[torch.randn(2, 3), w, b])
    with torch.no_grad():
        w2 = w.detach().clone()
        w2[1, 2] += 1e-3
    assert fp(args=[torch.randn(2, 3), torch.nn.Parameter(w2), b]) != base
    assert fp(args=[torch.randn(2, 3), w, b.detach().to(torch.float16)]) != base


def test_options_that_change_the_binary_give_another_fingerprint():
    base = fp()
    for options in ({"fp16": True}, {"opt_level": 3}, {"exporter": "dynamo"}, {"soc_model": 57}):
        assert fp(**options) != base, options
    assert fp(device="gpu") != base


def test_options_that_do_not_change_the_binary_keep_the_fingerprint():
    base = fp()
    for options in ({"strict": True}, {"check_nan": False}, {"dry_run": True}, {"log_level": "debug"}):
        assert fp(**options) == base, options


def test_the_graph_code_and_the_input_signature_count():
    base = fp()

    def g(x, w, b):
        return torch.sigmoid(x @ w + b)

    assert fp(gm=torch.fx.symbolic_trace(g)) != base
    assert fp(args=[torch.randn(5, 3), *weights()]) != base
    assert fp(args=[torch.randn(2, 3, dtype=torch.float64), *weights()]) != base


def test_a_non_contiguous_weight_hashes_its_values():
    w, b = weights()
    wt = torch.nn.Parameter(w.detach().t().contiguous().t())
    assert not wt.is_contiguous()
    want = fp(args=[torch.randn(2, 3), w, b])
    assert [fp(args=[torch.randn(2, 3), wt, b]) for _ in range(3)] == [want] * 3


def test_parts_are_length_prefixed():
    assert fingerprint([b"ab", b"c"]) != fingerprint([b"a", b"bc"])
    assert fingerprint([b"ab", b"c"]) == fingerprint([b"ab", b"c"])
    assert fingerprint([b""]) != fingerprint([])



def qfp(calibration="digest-a", **options):
    args = [torch.randn(2, 3), *weights()]
    x = args[0]
    settings = parse_options({"quantize": "8a8w", "calibration": [x], **options})
    return fx_fingerprint(graph(), args, [0], ((tuple(x.shape), x.dtype),), "npu", settings, calibration)


def test_quantize_options_and_calibration_data_enter_the_fingerprint():
    base = qfp()
    assert qfp() == base
    assert base != fp()
    assert qfp(calibration="digest-b") != base
    for options in (
        {"quantize": "16a8w"},
        {"observer": "histogram"},
        {"per_channel": False},
        {"quantize_ops": {"softmax": "16a8w"}},
        {"quantize_modules": {"fc": "float"}},
    ):
        assert qfp(**options) != base, options
