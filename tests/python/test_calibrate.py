"""Calibration data (qnnx_backend.quantization.calibrate): samples of the model's arguments mapped to the
graph inputs dynamo lifted (in whatever order), the callable form, and every error naming what
to change. No QNN needed."""

import pytest
import torch
import torch.nn as nn

from conftest import capture
from qnnx_backend.compiling import to_onnx
from qnnx_backend.quantization import calibrate as _calibrate


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(6, 3)

    def forward(self, x, y, scale=None):
        # y is read first: dynamo lifts it first.
        out = self.b(y) + self.a(x)
        return out * scale if scale is not None else out


def mapper_for(model, *args, **kwargs):
    [(gm, ex, frame)] = capture(model, *args, **kwargs)
    runtime = [i for i, a in enumerate(ex) if not to_onnx.is_static(a)]
    return _calibrate.Mapper(frame, ex, runtime), ex, runtime


def test_samples_bind_to_the_signature_not_to_the_lifting_order():
    x, y = torch.randn(2, 4), torch.randn(2, 6)
    mapper, ex, runtime = mapper_for(TwoInputs(), x, y)
    names = [mapper.frame.sources[i].root for i in runtime]
    assert names == ["y", "x"]
    x2, y2 = torch.randn(2, 4), torch.randn(2, 6)
    for args, kwargs in (((x2, y2), {}), ((x2,), {"y": y2}), ((), {"y": y2, "x": x2})):
        got = mapper.inputs(args, kwargs, "sample 0")
        assert got[0] is not None and torch.equal(got[0], y2) and torch.equal(got[1], x2)


def test_keyword_only_varargs_and_kwargs_sources():
    class Varied(nn.Module):
        def forward(self, x, *rest, z, **extra):
            return x + rest[0] * z + extra["w"]

    t = [torch.randn(3) for _ in range(4)]
    mapper, _, runtime = mapper_for(Varied(), t[0], t[1], z=t[2], w=t[3])
    u = [torch.randn(3) for _ in range(4)]
    got = mapper.inputs((u[0], u[1]), {"z": u[2], "w": u[3]}, "sample 0")
    sources = {mapper.frame.sources[i].name: v for i, v in zip(runtime, got)}
    assert torch.equal(sources["L['x']"], u[0])
    assert torch.equal(sources["L['rest'][0]"], u[1])
    assert torch.equal(sources["L['z']"], u[2])
    assert torch.equal(sources["L['extra']['w']"], u[3])


def test_a_dict_argument_is_read_by_key():
    class FromBatch(nn.Module):
        def forward(self, batch):
            return batch["image"] * 2 + batch["bias"]

    batch = {"image": torch.randn(2, 3), "bias": torch.randn(2, 3)}
    mapper, _, _ = mapper_for(FromBatch(), batch)
    other = {"image": torch.randn(2, 3), "bias": torch.randn(2, 3)}
    got = mapper.inputs((other,), {}, "sample 0")
    by_name = {mapper.frame.sources[i].name: t for i, t in zip([i for i, s in enumerate(mapper.frame.sources) if s and s.root], got)}
    assert torch.equal(by_name["L['batch']['image']"], other["image"])
    assert torch.equal(by_name["L['batch']['bias']"], other["bias"])


def test_collect_reads_tensors_tuples_and_dicts():
    x, y = torch.randn(2, 4), torch.randn(2, 6)
    mapper, _, _ = mapper_for(TwoInputs(), x, y)
    samples = _calibrate.collect([(x, y), {"x": x, "y": y}, [x, y]], mapper, lambda inputs: None)
    assert len(samples) == 3 and all(torch.equal(s[0], y) for s in samples)
    single, _, _ = mapper_for(nn.Linear(4, 2), x)
    assert len(_calibrate.collect((torch.randn(2, 4) for _ in range(3)), single, lambda i: None)) == 3


def test_the_callable_form_calls_forward_like_the_model():
    model = TwoInputs().eval()
    x, y = torch.randn(2, 4), torch.randn(2, 6)
    [(gm, ex, frame)] = capture(model, x, y)
    runtime = [i for i, a in enumerate(ex) if not to_onnx.is_static(a)]
    mapper = _calibrate.Mapper(frame, ex, runtime)

    def run_float(inputs):
        full = list(ex)
        for i, t in zip(runtime, inputs):
            full[i] = t
        return gm(*full)

    outputs = []

    def calibrate(forward):
        for _ in range(3):
            a, b = torch.randn(2, 4), torch.randn(2, 6)
            out = forward(a, y=b)
            outputs.append((out, model(a, b)))

    samples = _calibrate.collect(calibrate, mapper, run_float)
    assert len(samples) == 3
    for out, want in outputs:
        torch.testing.assert_close(out[0], want)


@pytest.mark.parametrize(
    "calibration, message",
    [
        ([], r"no samples \(the iterable is empty or exhausted\)"),
        (lambda forward: None, r"no samples \(the callable never called forward\)"),
        ([(torch.randn(3, 4), torch.randn(2, 6))], r"sample 0: x is \(3, 4\) torch.float32, but this graph is compiled for \(2, 4\)"),
        ([(torch.randn(2, 4).double(), torch.randn(2, 6))], r"x is \(2, 4\) torch.float64.*compiled for \(2, 4\) torch.float32"),
        ([(torch.randn(2, 4),)], r"sample 0 has no value for y"),
        ([(torch.randn(2, 4), [1, 2])], r"y is a list; the compiled graph takes a tensor \(2, 6\)"),
        ([(1, 2, 3, 4)], r"does not fit forward\(x, y, scale\)"),
        ([3], r"a sample is a int; give a tensor"),
        (5, r"give an iterable of samples or a callable"),
    ],
)
def test_bad_calibration_data_names_what_to_change(calibration, message):
    mapper, _, _ = mapper_for(TwoInputs(), torch.randn(2, 4), torch.randn(2, 6))
    with pytest.raises(ValueError, match=message):
        _calibrate.collect(calibration, mapper, lambda inputs: None)


def test_a_graph_after_a_graph_break_is_refused_with_what_to_do():
    class Broken(nn.Module):
        def forward(self, x):
            h = torch.relu(x)
            torch._dynamo.graph_break()
            return h * 2

    graphs = capture(Broken(), torch.randn(3))
    assert [g[2].resumed for g in graphs] == [False, True]
    gm, ex, frame = graphs[1]
    with pytest.raises(ValueError, match="starts after a graph break in forward.*remove the graph break"):
        _calibrate.Mapper(frame, ex, [i for i, a in enumerate(ex) if not to_onnx.is_static(a)])


def test_digest_follows_the_values():
    a = [(torch.ones(2, 2), torch.zeros(3))]
    same = [(torch.ones(2, 2), torch.zeros(3))]
    assert _calibrate.digest(a) == _calibrate.digest(same)
    assert _calibrate.digest(a) != _calibrate.digest([(torch.ones(2, 2), torch.zeros(3) + 1e-6)])
    assert _calibrate.digest(a) != _calibrate.digest(a + a)
    assert _calibrate.digest([(torch.tensor(1.0),)]) != _calibrate.digest([(torch.tensor(1),)])


def test_samples_made_on_demand_are_bounded_and_spread(monkeypatch):
    """A KV-cache graph's samples (one per position of every calibration sequence) are capped at
    prefill.MAX_SAMPLES, spread from the first to the last; the digest hashes their sources."""
    from qnnx_backend.quantization import prefill

    monkeypatch.setattr(prefill, "MAX_SAMPLES", 4)
    seen = []
    s = prefill.Samples(list(range(10)), lambda k: (torch.tensor(k),), lambda h: seen.append(h))
    assert (s.offered, len(s)) == (10, 4)
    assert [int(x[0]) for x in s] == [0, 3, 6, 9] and [int(x[0]) for x in s[1:3]] == [3, 6]
    assert _calibrate.digest(s) == s.digest() and len(seen) == 2
