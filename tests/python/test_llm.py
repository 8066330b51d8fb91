"""Hugging Face decoders through the qnn backend on the emulated HTP: bucketed prefill
(``qnnx_backend.compile(dynamic=True)``) and greedy generation with ``kv_cache=True``.

The models are built from ``transformers`` configs with random weights (no downloads): GPT-2,
a Llama-style decoder (RMSNorm, rotary positions, SiLU MLP, grouped-query attention) and a
Qwen2-style one (the same with QKV biases), all with eager attention.
"""

import sys
import warnings
from pathlib import Path

import pytest
import torch

import qnnx_backend
from qnnx_backend.compiling import buckets as _buckets, kvcache as _kvcache

transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models" / "common"))
import decoders  # noqa: E402

OPTIONS = {"strict": True, "device": "npu", "soc_model": 60}
# Prefill logits against eager: the HTP computes in fp16 (measured 1.1e-3 to 1.7e-3 of the
# largest logit for these models).
PREFILL_REL = 1e-2
PROMPT = 7
NEW_TOKENS = 16


def _model(kind: str) -> torch.nn.Module:
    return decoders.build(kind, hidden=64, layers=2, vocab=512, max_positions=256)


def _prompt(batch: int, n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, 512, (batch, n), generator=torch.Generator().manual_seed(seed))


def _generate(model, ids):
    return model.generate(
        ids,
        max_new_tokens=NEW_TOKENS,
        do_sample=False,
        cache_implementation="static",
        disable_compile=True,  # generate would otherwise torch.compile with inductor itself
    )


KINDS = ["gpt2", "llama", "qwen2"]


@pytest.mark.htp
@pytest.mark.parametrize("kind", KINDS)
def test_bucketed_prefill_matches_eager_and_reuses_the_bucket(kind):
    model = _model(kind)
    compiled = qnnx_backend.compile(model, dynamic=True, **OPTIONS)
    with torch.no_grad():
        for n in (10, 37):
            ids = _prompt(2, n, seed=n)
            got = compiled(input_ids=ids).logits
            want = model(input_ids=ids, use_cache=False).logits
            assert got.shape == want.shape == (2, n, 512)
            err = (got - want).abs().max().item()
            scale = want.abs().max().item()
            assert err <= PREFILL_REL * scale, f"{kind} n={n}: max error {err:.3e}, max |logit| {scale:.3e}"
            # Top-1 agrees except where two logits are within fp16 noise of each other.
            assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.95
    # 37 tokens were not seen before: they ran in the 64-token graph compiled for 10.
    assert compiled.buckets == {64}
    assert qnnx_backend.STATS["compiles"] == 1
    assert qnnx_backend.STATS["fallbacks"] == 0


@pytest.mark.htp
@pytest.mark.parametrize("kind", ["llama", "qwen2", "gemma"])
def test_multi_query_attention_runs_and_matches_eager(kind):
    """One KV head (as Gemma-2B-style models have): ``repeat_kv`` expands it over the query
    heads. With the prompt as long as a head (32), the key and value projections are square and
    are read as rank-5 tensors: the HTP library crashed the process on that until the lowering
    worked around it (issue 13, lowering/src/plan/workarounds.rs)."""
    model = decoders.build(kind, hidden=128, layers=2, vocab=512, max_positions=256, heads=4, kv_heads=1)
    compiled = torch.compile(model, backend="qnn", options=OPTIONS)
    ids = _prompt(1, 32)
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits
        got = compiled(input_ids=ids, use_cache=False).logits
    assert got.shape == want.shape == (1, 32, 512)
    err = (got - want).abs().max().item()
    scale = want.abs().max().item()
    assert err <= PREFILL_REL * scale, f"{kind}: max error {err:.3e}, max |logit| {scale:.3e}"
    assert qnnx_backend.STATS["compiles"] == 1
    assert qnnx_backend.STATS["fallbacks"] == 0


@pytest.mark.htp
def test_multi_query_attention_generates_the_eager_tokens_with_kv_cache():
    model = decoders.build("llama", hidden=64, layers=2, vocab=512, max_positions=256, heads=4, kv_heads=1)
    ids = _prompt(1, 16)
    with torch.no_grad():
        want = _generate(model, ids)
        model.forward = torch.compile(model.forward, backend="qnn", options={**OPTIONS, "kv_cache": True})
        got = _generate(model, ids)
    assert got[0, 16:].tolist() == want[0, 16:].tolist()
    assert qnnx_backend.STATS["fallbacks"] == 0


@pytest.mark.htp
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_with_kv_cache_gives_the_eager_tokens(kind):
    model = _model(kind)
    ids = _prompt(1, PROMPT)
    with torch.no_grad():
        want = _generate(model, ids)
        model.forward = torch.compile(model.forward, backend="qnn", options={**OPTIONS, "kv_cache": True})
        got = _generate(model, ids)
    tokens = want[0, PROMPT:].tolist()
    assert len(set(tokens)) > 3, f"degenerate reference {tokens}: the comparison would mean little"
    assert got[0, PROMPT:].tolist() == tokens
    # One prefill graph and one decode graph, both on QNN, reused for every token.
    assert qnnx_backend.STATS["compiles"] == 2
    assert qnnx_backend.STATS["fallbacks"] == 0


@pytest.mark.htp
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_batched_generation_with_left_padding(kind):
    # Batch 2, the second prompt left-padded by 3: the padding mask enters both graphs, and the
    # batch dimension runs through the cache write-back.
    model = _model(kind)
    ids = _prompt(2, 9, seed=3)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = 0
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, cache_implementation="static", disable_compile=True)
    with torch.no_grad():
        want = model.generate(ids, **kw)
        model.forward = torch.compile(model.forward, backend="qnn", options={**OPTIONS, "kv_cache": True})
        got = model.generate(ids, **kw)
    assert torch.equal(got, want), f"{got[:, 9:].tolist()} != {want[:, 9:].tolist()}"
    assert qnnx_backend.STATS["compiles"] == 2 and qnnx_backend.STATS["fallbacks"] == 0


@pytest.mark.htp
def test_cache_updates_land_in_the_callers_tensors():
    model = _model("llama")
    ids = _prompt(1, PROMPT)
    caches = []
    with torch.no_grad():
        for compiled in (False, True):
            torch._dynamo.reset()
            cache = transformers.StaticCache(config=model.config, max_cache_len=32)
            fwd = model.forward
            if compiled:
                fwd = torch.compile(model.forward, backend="qnn", options={**OPTIONS, "kv_cache": True})
            out = fwd(input_ids=ids, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            fwd(input_ids=nxt, past_key_values=cache, use_cache=True)
            caches.append(cache)
    eager, ours = caches
    for le, lo in zip(eager.layers, ours.layers):
        assert int(lo.cumulative_length) == int(le.cumulative_length) == PROMPT + 1
        # Rows up to the written positions match eager to fp16 accuracy; the rest stay zero.
        for a, b in ((le.keys, lo.keys), (le.values, lo.values)):
            assert (a[:, :, : PROMPT + 1] - b[:, :, : PROMPT + 1]).abs().max() < 2e-2 * a.abs().max()
            assert torch.count_nonzero(b[:, :, PROMPT + 1 :]) == 0


@pytest.mark.htp
def test_without_kv_cache_a_mutating_graph_is_refused_not_silently_wrong():
    model = _model("llama")
    ids = _prompt(1, PROMPT)
    forward = model.forward
    with torch.no_grad():
        want = _generate(model, ids)
        model.forward = torch.compile(forward, backend="qnn", options=OPTIONS)
        with pytest.raises(qnnx_backend.LoweringError, match="kv_cache"):
            _generate(model, ids)
        torch._dynamo.reset()
        model.forward = torch.compile(forward, backend="qnn", options={**OPTIONS, "strict": False})
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = _generate(model, ids)
    assert torch.equal(got, want)
    assert any("kv_cache" in str(x.message) for x in w)


@pytest.mark.htp
def test_dynamic_false_fixes_the_signature():
    model = _model("llama")
    compiled = qnnx_backend.compile(model, dynamic=False, **OPTIONS)
    with torch.no_grad():
        compiled(input_ids=_prompt(1, 8), use_cache=False)
        with pytest.raises(qnnx_backend.QnnxError, match="dynamic=False"):
            compiled(input_ids=_prompt(1, 9), use_cache=False)


def test_buckets():
    assert [_buckets.bucket(n) for n in (1, 64, 65, 128, 129, 256, 257, 700)] == [64, 64, 128, 128, 256, 256, 512, 768]
    assert _buckets.bucket(200, limit=200) == 200
    with pytest.raises(ValueError, match="at most 200 positions"):
        _buckets.bucket(201, limit=200)
    with pytest.raises(ValueError, match="at least one"):
        _buckets.bucket(0)


def test_inputs_outside_the_bucketed_prefill_contract():
    model = _model("llama")
    compiled = qnnx_backend.compile(model, dynamic=True, **OPTIONS)
    ids = _prompt(1, 5)
    with pytest.raises(ValueError, match="cache-free"):
        compiled(input_ids=ids, use_cache=True)
    with pytest.raises(ValueError, match="attention_mask has shape"):
        compiled(input_ids=ids, attention_mask=torch.ones(1, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="at most 256 positions"):
        compiled(input_ids=_prompt(1, 300))
    with pytest.raises(ValueError, match=r"\[batch, sequence\]"):
        compiled(input_ids=ids[0])
    with pytest.raises(ValueError, match="dynamic=1"):
        qnnx_backend.compile(model, dynamic=1)


class _Appender(torch.nn.Module):
    """A toy step with the StaticCache pattern: writes rows into a caller's buffer, bumps a
    counter, and reads the buffer after the write."""

    def forward(self, buf, pos, counter, rows):
        buf.index_copy_(1, pos, rows)
        counter.add_(rows.shape[1])
        return buf.sum(dim=1) * 2, counter


def test_functionalized_graph_replays_writes_exactly():
    captured = {}

    def backend(gm, example_inputs):
        fgm, plan = _kvcache.functionalize(gm, [False] * len(example_inputs))
        captured["plan"] = plan

        def run(*args):
            return tuple(plan.finish(args, list(fgm(*args))))

        return run

    step = torch.compile(_Appender(), backend=backend, dynamic=False)
    buf, counter = torch.zeros(2, 6, 3), torch.tensor(0)
    ref_buf, ref_counter = buf.clone(), counter.clone()
    for p in ([0, 1], [2, 3], [5, 4]):
        rows = torch.randn(2, 2, 3)
        pos = torch.tensor(p)
        got_sum, got_counter = step(buf, pos, counter, rows)
        want_sum, want_counter = _Appender()(ref_buf, pos, ref_counter, rows)
        assert torch.equal(got_sum, want_sum)
        assert got_counter is counter  # the caller's tensor, updated in place
        assert torch.equal(buf, ref_buf) and torch.equal(counter, ref_counter)
    plan = captured["plan"]
    # Only this step's rows and positions leave the graph, never the whole buffer.
    assert [w.method for w in plan.writebacks] == ["index_copy_", "add_"]
    assert plan.n_extra == 2


class _Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])

    def forward(self, x):
        return self.layers(x)


def _onnx(module, x) -> bytes:
    import io

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), buf, dynamo=False, opset_version=17)
    return buf.getvalue()


@pytest.mark.htp
def test_prefill_and_decode_graphs_in_one_context():
    from qnnx_backend import _native

    torch.manual_seed(0)
    stack = _Stack().eval()
    xs = [torch.randn(1, 32, 256), torch.randn(1, 1, 256)]
    models = [_onnx(stack, x) for x in xs]
    spec = _native.Spec("npu", soc_model=60)
    alone = [_native.compile(m, spec) for m in models]
    both = _native.compile_many(models, ["prefill", "decode"], spec, weight_sharing=False)
    for x, a, b in zip(xs, alone, both):
        outs = []
        for g in (a, b):
            (_, _, shape, _), = g.outputs
            y = torch.empty(shape, dtype=torch.float32)
            g.run([(x.data_ptr(), x.numel() * 4)], [(y.data_ptr(), y.numel() * 4)])
            outs.append(y)
        assert torch.equal(outs[0], outs[1])  # one context computes what each graph computes alone
        assert (outs[1].reshape(stack(x).shape) - stack(x)).abs().max() < 1e-2
    # With the HTP's weight-sharing config the shared weights are stored once; this x86_64
    # library can write such a binary but not load it, so it is not cached here.
    shared = _native.compile_many(models, ["prefill", "decode"], spec, weight_sharing=True)
    assert len(shared[0].binary()) < 0.75 * len(both[0].binary())
