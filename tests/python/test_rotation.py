"""quantization/rotation.py: rotating a decoder's residual stream leaves its float function
unchanged, spreads a one-channel outlier by the square root of the width, unties a tied LM head
and refuses the families a rotation does not commute with before changing anything. Host only:
what the rotation does to a quantized model on the HTP is measured in bench/llm_quant.py
(``--schemes 16a8w/rot``; docs/llm.md)."""

import math

import pytest
import torch

from qnnx_backend.quantization import rotation

transformers = pytest.importorskip("transformers")

COMMON = dict(vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=1, pad_token_id=0)


def _model(family: str):
    configs = {
        "llama": lambda: transformers.LlamaConfig(head_dim=12, tie_word_embeddings=True, **COMMON),
        "qwen2": lambda: transformers.Qwen2Config(tie_word_embeddings=True, **COMMON),
        "qwen3": lambda: transformers.Qwen3Config(head_dim=12, **COMMON),
        "phi3": lambda: transformers.Phi3Config(**COMMON),
        "gemma3": lambda: transformers.Gemma3TextConfig(head_dim=12, **COMMON),
    }
    torch.manual_seed(0)
    config = configs[family]()
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        # Norm scales and biases away from their initial 1 and 0, so that folding them matters.
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(0.5 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("n", [1, 2, 12, 20, 72, 576, 960, 1024])
def test_hadamard_orders(n):
    h = rotation.hadamard(n)
    assert h is not None and h.abs().eq(1).all()
    assert torch.equal(h @ h.T, n * torch.eye(n, dtype=torch.float64))


def test_orthogonal_without_a_hadamard_matrix():
    assert rotation.hadamard(28) is None  # 28 = 4 x 7; 27 is not prime, 14 has none
    q, kind = rotation.orthogonal(28, torch.Generator().manual_seed(0))
    assert kind == "random orthogonal"
    assert torch.allclose(q @ q.T, torch.eye(28, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "phi3"])
def test_float_function_unchanged(family):
    model = _model(family)
    ids = torch.randint(2, 256, (1, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(ids).logits
        done = rotation.rotate_decoder(model)
        got = model(ids).logits
    assert done.hidden == 48 and done.kind == "hadamard" and done.head_kind == "hadamard"  # 48 = 12 x 4; 12
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max()
    # Every norm now has a scale of 1: its scale lives in the Linears that read it.
    for name, p in model.named_parameters():
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            assert torch.equal(p, torch.ones_like(p)), name


def test_fold_norms_alone():
    model = _model("qwen2")
    ids = torch.randint(2, 256, (1, 9), generator=torch.Generator().manual_seed(4))
    emb = model.model.embed_tokens.weight.detach().clone()
    with torch.no_grad():
        ref = model(ids).logits
        assert rotation.fold_norms(model)
        got = model(ids).logits
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max()
    assert torch.equal(model.model.embed_tokens.weight, emb)  # no rotation
    assert torch.equal(model.model.norm.weight, torch.ones_like(model.model.norm.weight))


def test_exported():
    import qnnx_backend

    assert qnnx_backend.rotate_decoder is rotation.rotate_decoder


def test_tied_head_untied():
    model = _model("llama")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    done = rotation.rotate_decoder(model)
    assert done.untied and not model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()


def test_outlier_channel_spread():
    """A token whose embedding is one massive channel comes out of the rotation with that value
    spread evenly: the largest entry falls by sqrt(hidden), the norm is kept."""
    model = _model("llama")
    with torch.no_grad():
        model.model.embed_tokens.weight[5] = 0.0
        model.model.embed_tokens.weight[5, 17] = 1000.0
    rotation.rotate_decoder(model)
    row = model.model.embed_tokens.weight[5].detach().double()
    assert torch.allclose(row.abs(), torch.full_like(row, 1000.0 / math.sqrt(48)), rtol=1e-5)
    assert abs(float(row.norm()) - 1000.0) < 1e-2


def test_gemma_refused_unchanged():
    model = _model("gemma3")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(ValueError, match="gemma3.*not supported.*Quantize this model without rotating"):
        rotation.rotate_decoder(model)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_heads_off():
    model = _model("qwen2")
    ids = torch.randint(2, 256, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(ids).logits
        done = rotation.rotate_decoder(model, heads=False, seed=3)
        got = model(ids).logits
    assert done.head_dim is None and done.head_kind is None
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max()
