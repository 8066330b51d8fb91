"""In-place writes made functional (``qnnx_backend/compiling/writes.py``) and their replay on the
caller's tensors (``compiling/kvcache.py``), on toy modules and without the QNN library: the
functional forms equal eager's writes bit for bit, and the caller's tensors end up exactly as
eager leaves them, with only the written rows leaving the graph.
"""

import pytest
import torch

import qnnx_backend
from qnnx_backend.compiling import kvcache, writes


def _eager_setitem(buf, key, value):
    out = buf.clone()
    out[key] = value
    return out


IDX = torch.tensor([-1, 2])
KEYS = [
    ((slice(None), 1), torch.randn(2, 5)),  # one position: the value has no indexed axis
    ((slice(None), -2), 3.5),  # negative int, scalar value
    ((slice(None), slice(1, 6, 2)), torch.randn(2, 3, 5)),  # strided slice
    ((slice(None), slice(None), IDX), torch.randn(2, 7, 2)),  # tensor index, negative entries
    ((Ellipsis, IDX), torch.randn(2, 7, 1)),  # Ellipsis, broadcast value
    ((slice(None), torch.tensor(-3)), torch.randn(2, 5)),  # 0-D tensor index
    (torch.arange(70).reshape(2, 7, 5) % 3 == 0, -1.0),  # boolean mask
    ((slice(None), slice(4, 2)), torch.randn(2, 0, 5)),  # empty slice: unchanged
]


@pytest.mark.parametrize("key,value", KEYS, ids=[str(i) for i in range(len(KEYS))])
def test_functional_setitem_equals_eager_bit_for_bit(key, value):
    torch.manual_seed(0)
    buf = torch.randn(2, 7, 5)
    assert torch.equal(writes.setitem(buf, key, value), _eager_setitem(buf, key, value))


def test_functional_index_copy_equals_eager_on_every_dimension():
    torch.manual_seed(0)
    buf = torch.randn(3, 4, 6, 5)
    for dim in range(4):
        n = buf.shape[dim]
        index = torch.tensor([n - 1, 0])
        src = torch.randn(*buf.shape[:dim], 2, *buf.shape[dim + 1 :])
        assert torch.equal(writes.index_copy(buf, dim, index, src), buf.index_copy(dim, index, src))


@pytest.mark.parametrize(
    "key,match",
    [
        ((0, slice(1, 3)), "index exactly one dimension"),
        ((slice(None), torch.zeros(2, 2, dtype=torch.long)), "0-D or 1-D integer tensor"),
        ((None, 0), "no None"),
    ],
)
def test_unsupported_keys_are_refused_with_what_is_supported(key, match):
    with pytest.raises(qnnx_backend.LoweringError, match=match):
        writes.parse_key(torch.Size([2, 7, 5]), key)


def _capture(module, *args):
    """Compile ``module`` with a backend that runs the functionalized FX graph and replays the
    plan's write-backs (what QnnCallable does around the QNN graph); returns the compiled
    module and the plan."""
    captured = {}

    def backend(gm, example_inputs):
        fgm, plan = kvcache.functionalize(gm, [False] * len(example_inputs))
        captured["plan"] = plan
        # The functional graph itself must not write into its inputs.
        assert not kvcache.mutated_inputs(fgm)

        def run(*call_args):
            return tuple(plan.finish(call_args, list(fgm(*call_args))))

        return run

    return torch.compile(module, backend=backend, dynamic=False), captured


class _SlidingWindow(torch.nn.Module):
    """transformers' StaticSlidingWindowLayer once full (Gemma 2/3): roll the caller's cache left
    by one, overwrite the last row of the rolled copy, copy it back, bump the counter, and read
    the cache after the write; plus a slice write and a masked fill on intermediates."""

    def forward(self, keys, counter, row):
        new = keys.roll(-1, dims=-2)
        index = torch.tensor([-1])
        new[:, :, index] = row
        keys.copy_(new)
        counter.add_(1)
        scores = keys.sum(dim=-1)
        scores[:, :, 0:2] = 0.0
        scores.masked_fill_(scores > 1.0, 1.0)
        return scores, keys


def test_sliding_window_update_is_replayed_exactly_from_the_new_row_only():
    keys, counter = torch.randn(1, 2, 4, 3), torch.tensor(5)
    ref_keys, ref_counter = keys.clone(), counter.clone()
    step, captured = _capture(_SlidingWindow(), keys, counter, torch.zeros(1, 2, 1, 3))
    for _ in range(5):
        row = torch.randn(1, 2, 1, 3)
        got_scores, got_keys = step(keys, counter, row)
        want_scores, _ = _SlidingWindow()(ref_keys, ref_counter, row)
        assert torch.equal(got_scores, want_scores)
        assert got_keys is keys  # the caller's tensor, updated in place
        assert torch.equal(keys, ref_keys) and torch.equal(counter, ref_counter)
    plan = captured["plan"]
    # The cache is rolled on the host; only the new row leaves the graph, never the window.
    assert [w.method for w in plan.writebacks] == ["roll", "setitem", "add_"]
    assert plan.n_extra == 1


class _SetitemOnInput(torch.nn.Module):
    """StaticLayer's fallback write (``keys[:, :, positions] = k``) into a caller's tensor."""

    def forward(self, keys, positions, rows):
        keys[:, :, positions] = rows
        return keys.mean(dim=2)


def test_setitem_on_an_input_is_replayed_with_the_written_rows():
    keys = torch.zeros(1, 2, 6, 3)
    ref = keys.clone()
    step, captured = _capture(_SetitemOnInput(), keys, torch.tensor([0, 1]), torch.zeros(1, 2, 2, 3))
    for p in ([0, 1], [2, 3], [5, 4]):
        rows, positions = torch.randn(1, 2, 2, 3), torch.tensor(p)
        got = step(keys, positions, rows)
        assert torch.equal(got, _SetitemOnInput()(ref, positions, rows))
        assert torch.equal(keys, ref)
    assert [w.method for w in captured["plan"].writebacks] == ["setitem"]
    assert captured["plan"].n_extra == 2  # the positions and the rows


class _ThroughView(torch.nn.Module):
    def forward(self, buf, x):
        buf[:, 0].add_(x)
        return buf * 2


class _TwoDims(torch.nn.Module):
    def forward(self, buf, x):
        buf[0, 1:] = x
        return buf * 2


@pytest.mark.parametrize(
    "module,match", [(_ThroughView(), "a view of .*write into .* itself"), (_TwoDims(), "index exactly one dimension")]
)
def test_writes_that_cannot_be_made_functional_are_refused_by_name(module, match):
    def backend(gm, example_inputs):
        # Detected as a write into the input (a view of it included), so kv_cache is required...
        assert kvcache.mutated_inputs(gm) == [next(n.name for n in gm.graph.nodes if n.op == "placeholder")]
        # ...and refused by name rather than exported without the write.
        with pytest.raises(qnnx_backend.LoweringError, match=match):
            kvcache.functionalize(gm, [False] * len(example_inputs))
        return gm.forward

    torch.compile(module, backend=backend)(torch.zeros(3, 4), torch.ones(3))


class _IntermediateView(torch.nn.Module):
    """A write through a view of a tensor the graph made: fine while the viewed tensor is not
    read afterwards (``read=False``); reading it would need the write to reach it."""

    def __init__(self, read: bool):
        super().__init__()
        self.read = read

    def forward(self, x):
        y = x * 2
        head = y[:, :2]
        head.mul_(3)
        return (head, y) if self.read else head


def test_a_write_through_a_view_of_an_intermediate_is_refused_only_if_the_tensor_is_read_after():
    x = torch.randn(3, 4)
    step, _ = _capture(_IntermediateView(read=False), x)
    assert torch.equal(step(x), _IntermediateView(read=False)(x))

    def backend(gm, example_inputs):
        with pytest.raises(qnnx_backend.LoweringError, match="reads y after .* wrote into its view head"):
            kvcache.functionalize(gm, [False] * len(example_inputs))
        return gm.forward

    torch.compile(_IntermediateView(read=True), backend=backend)(x)


class _Frequencies(torch.nn.Module):
    """Phi-3's LongRoPE: a buffer overwritten whole at every call from two other tensors, picked
    by the positions, then read. ``mode`` makes it read the buffer before the write, compute the
    new value from the buffer itself, or add to it: a graph holding a frozen copy cannot."""

    def __init__(self, mode: str = "overwrite"):
        super().__init__()
        self.mode = mode
        self.register_buffer("freq", torch.ones(4))
        self.register_buffer("short", torch.arange(4.0))
        self.register_buffer("long", torch.arange(4.0) * 10)

    def forward(self, positions):
        before = self.freq * 1 if self.mode == "read_first" else 0
        new = torch.where(positions.max() + 1 > 8, self.long, self.short)
        if self.mode == "add":
            self.freq.add_(new)
        else:
            self.freq.copy_(new + self.freq if self.mode == "from_itself" else new)
        return positions[:, None] * self.freq + before


def test_a_buffer_overwritten_whole_is_computed_in_the_graph_and_replayed_on_the_model():
    from qnnx_backend.compiling import to_onnx

    captured = {}

    def backend(gm, example_inputs):
        fgm, plan = kvcache.functionalize(gm, [to_onnx.is_static(a) for a in example_inputs])
        captured["plan"] = plan
        return lambda *a: tuple(plan.finish(a, list(fgm(*a))))

    model, ref = _Frequencies(), _Frequencies()
    step = torch.compile(model, backend=backend, dynamic=False)
    for start in (0, 7, 2):  # short, long, short again
        positions = torch.arange(start, start + 3)
        assert torch.equal(step(positions), ref(positions))
        assert torch.equal(model.freq, ref.freq)
    assert [w.method for w in captured["plan"].writebacks] == ["copy_"]


@pytest.mark.parametrize(
    "mode,match",
    [("read_first", "reads it before this write"), ("from_itself", "reads it before this write"), ("add", "add_ reads the value")],
)
def test_a_buffer_the_graph_reads_as_frozen_is_not_written(mode, match):
    from qnnx_backend.compiling import to_onnx

    def backend(gm, example_inputs):
        with pytest.raises(qnnx_backend.LoweringError, match=match):
            kvcache.functionalize(gm, [to_onnx.is_static(a) for a in example_inputs])
        return gm.forward

    torch.compile(_Frequencies(mode), backend=backend)(torch.arange(3))
