"""The benchmark's fixed model set: the same random weights and inputs in every process.

Each entry builds (model, inputs, description) from fixed seeds, so every runner process (ours,
the ONNX Runtime reference, eager) sees identical weights and inputs without passing tensors
between processes. Input sizes are smaller than the usual 224x224 for the vision models because
the x86_64 HTP emulator needs about 2 s per resnet18 inference at 224x224.
"""

from __future__ import annotations

import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _refresh_batchnorm(model: torch.nn.Module, shape, batches: int = 3) -> torch.nn.Module:
    """Random-weight BatchNorm statistics are ~identity and drive activations to ~1e-9 (which
    fp16 flushes to zero); refresh them on random batches so outputs have a useful scale."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(4, *shape[1:]))
    return model.eval()


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(256, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        )

    def forward(self, x):
        return self.net(x)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        )
        self.head = torch.nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class GPT2Prefill(torch.nn.Module):
    """Logits of a tiny random GPT-2 for a whole prompt (no KV cache)."""

    def __init__(self):
        super().__init__()
        import transformers

        transformers.logging.set_verbosity_error()
        config = transformers.GPT2Config(
            n_layer=2,
            n_embd=64,
            n_head=2,
            vocab_size=1000,
            n_positions=128,
            use_cache=False,
            attn_implementation="eager",
        )
        self.model = transformers.GPT2LMHeadModel(config).eval()

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def _mlp():
    return MLP(), (torch.randn(8, 256),), "MLP 256-512-512-10, x [8,256]"


def _small_cnn():
    return SmallCNN(), (torch.randn(1, 3, 32, 32),), "2x(conv3x3+relu+maxpool)+fc, x [1,3,32,32]"


def _resnet18(size: int = 64):
    import torchvision

    shape = (1, 3, size, size)
    model = _refresh_batchnorm(torchvision.models.resnet18(weights=None), shape)
    return model, (torch.randn(*shape),), f"torchvision resnet18, x [1,3,{size},{size}]"


def _mobilenet(size: int = 96):
    import torchvision

    shape = (1, 3, size, size)
    model = _refresh_batchnorm(torchvision.models.mobilenet_v3_small(weights=None), shape)
    return model, (torch.randn(*shape),), f"torchvision mobilenet_v3_small, x [1,3,{size},{size}]"


def _transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=256, batch_first=True)
    return layer.eval(), (torch.randn(1, 32, 64),), "TransformerEncoderLayer d64 h4 ff256, x [1,32,64]"


def _gpt2():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 1000, (1, 32), generator=g)
    return GPT2Prefill(), (ids,), "GPT-2 2 layers, d64, 2 heads, vocab 1000; input_ids [1,32]"


MODELS = {
    "mlp": _mlp,
    "small_cnn": _small_cnn,
    "resnet18": _resnet18,
    "mobilenet_v3_small": _mobilenet,
    "transformer_layer": _transformer,
    "gpt2_prefill": _gpt2,
}


def build(name: str):
    """(model in eval mode, input tuple, description) with fixed seeds."""
    torch.manual_seed(0)
    model, inputs, desc = MODELS[name]()
    return model.eval(), inputs, desc
