# /// script
# dependencies = ["torch==2.15.0", "torchvision==0.29.2", "onnx==1.22.0", "onnxscript==0.7.2", "numpy"]
# ///
"""Models whose every value's shape lowering must infer as ONNX does
(lowering/tests/shape_agreement.rs): the models of the repository's test generators and
fixtures, detection-style exports (a torchvision ResNet-FPN backbone, SSDlite's backbone and
head, a YOLO-style upsample-and-concatenate neck) and hand-built Resize + Concat chains over
the Resize and Upsample opsets.

For each model NAME, OUT_DIR gets NAME.onnx (external data beside it, where it has some) and
NAME.shapes.json: `onnx.shape_inference.infer_shapes(model, strict_mode=True)`'s type of every
graph input, output and value_info entry, as {"name": [elem_type, [dim or null, ...] or null]}
(null for a symbolic or unknown dim). A model ONNX's strict inference rejects is listed in
OUT_DIR/rejected.json with the reason instead.

Run: python3 tests/models/shape_agreement/gen.py OUT_DIR   (fixed seeds; about 1 min)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
# The generators that write models into a folder (their own tests use them), with the
# exporters to run them with; a generator may write one model or one folder per case.
GENERATORS = [
    ("tests/models/mlp/gen.py", ["", "--dynamo"]),
    ("tests/models/small_cnn/gen.py", ["", "--dynamo"]),
    ("tests/models/resnet18/gen.py", [""]),
    ("tests/models/mobilenet_v3_small/gen.py", ["", "--dynamo"]),
    ("tests/models/transformer_encoder/gen.py", ["", "--dynamo"]),
    ("tests/models/gpt2_tiny/gen.py", [""]),
    ("tests/models/decoder_pair/gen.py", [""]),
    ("tests/models/ops/gen.py", [""]),
    ("qnnx-cli/tests/make_models.py", [""]),
]
# Committed fixtures of the generators that write in place.
FIXTURES = ["tests/models/load", "tests/models/regressions"]


def shapes(model: onnx.ModelProto) -> dict:
    # data_prop: shape arithmetic (Shape -> Slice -> Concat -> Resize sizes) is evaluated, as
    # lowering folds it, so more dims are static and compared.
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    g = inferred.graph
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            continue
        dims = None
        if t.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in t.shape.dim]
        out[vi.name] = [t.elem_type, dims]
    return out


def with_input_shapes(model: onnx.ModelProto, input_shapes: dict) -> onnx.ModelProto:
    """A copy of `model` whose graph inputs named in `input_shapes` have those static dims."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        if vi.name in input_shapes:
            for d, v in zip(vi.type.tensor_type.shape.dim, input_shapes[vi.name]):
                d.Clear()
                d.dim_value = v
    return m


def save(out: str, name: str, src: str, rejected: dict, input_shapes=None) -> None:
    """Copies model file `src` (and its external data) as NAME.onnx and writes NAME.shapes.json;
    with `input_shapes` (for inputs with symbolic dims), ONNX infers with those dims and
    NAME.inputs.json gives them to lowering too."""
    model = onnx.load(src)
    try:
        inferred = shapes(with_input_shapes(model, input_shapes) if input_shapes else model)
    except Exception as e:  # noqa: BLE001 - any inference failure is recorded, not fatal
        rejected[name] = f"{type(e).__name__}: {e}"
        return
    dst = os.path.join(out, f"{name}.onnx")
    shutil.copyfile(src, dst)
    for t in onnx.load(src, load_external_data=False).graph.initializer:
        for kv in t.external_data:
            if kv.key == "location":
                shutil.copyfile(os.path.join(os.path.dirname(src), kv.value), os.path.join(out, kv.value))
    with open(os.path.join(out, f"{name}.shapes.json"), "w") as f:
        json.dump(inferred, f, indent=0, sort_keys=True)
    if input_shapes:
        with open(os.path.join(out, f"{name}.inputs.json"), "w") as f:
            json.dump(input_shapes, f, sort_keys=True)


def save_proto(out: str, name: str, model: onnx.ModelProto, rejected: dict, input_shapes=None) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.onnx")
        onnx.save(model, p)
        save(out, name, p, rejected, input_shapes)


def run_generators(out: str, rejected: dict) -> None:
    for script, flags in GENERATORS:
        base = os.path.basename(os.path.dirname(script)) if script.endswith("gen.py") else "cli"
        for flag in flags:
            label = base + ("-dynamo" if flag else "")
            with tempfile.TemporaryDirectory() as d:
                cmd = [sys.executable, os.path.join(REPO, script), d] + ([flag] if flag else [])
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
                for root, _, files in sorted(os.walk(d)):
                    for f in sorted(files):
                        if not f.endswith(".onnx"):
                            continue
                        rel = os.path.relpath(os.path.join(root, f), d)
                        case = rel[: -len(".onnx")].replace(os.sep, "__").replace("__model", "")
                        name = label if case == "model" else f"{label}__{case}"
                        save(out, name, os.path.join(root, f), rejected)
    for folder in FIXTURES:
        for root, _, files in sorted(os.walk(os.path.join(REPO, folder))):
            for f in sorted(files):
                if f.endswith(".onnx"):
                    rel = os.path.relpath(os.path.join(root, f), os.path.join(REPO, folder))
                    case = rel[: -len(".onnx")].replace(os.sep, "__").replace("__model", "")
                    name = os.path.basename(folder) + "__" + case
                    save(out, name, os.path.join(root, f), rejected)


def export(module: torch.nn.Module, args, dynamo: bool, dynamic_hw: bool = False) -> onnx.ModelProto:
    """The TorchScript or dynamo export of `module` at `args`; with `dynamic_hw` (TorchScript)
    the input's height and width are symbolic, as detectors are exported to run at any size."""
    module = module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            return torch.onnx.export(module, args, dynamo=True, verbose=False).model_proto
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "m.onnx")
            axes = {"image": {2: "height", 3: "width"}} if dynamic_hw else None
            torch.onnx.export(module, args, p, dynamo=False, opset_version=17, input_names=["image"], dynamic_axes=axes)
            return onnx.load(p)


class FpnBackbone(torch.nn.Module):
    """torchvision's ResNet-18 FPN backbone (what Faster/Mask R-CNN run): its feature maps."""

    def __init__(self):
        super().__init__()
        from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

        self.body = resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=5)

    def forward(self, x):
        return tuple(self.body(x).values())


class SsdLite(torch.nn.Module):
    """SSDlite320-MobileNetV3's backbone and head: per-level predictions reshaped and
    concatenated."""

    def __init__(self):
        super().__init__()
        import torchvision

        m = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)
        self.backbone, self.head = m.backbone, m.head

    def forward(self, x):
        out = self.head(list(self.backbone(x).values()))
        return out["bbox_regression"], out["cls_logits"]


class YoloNeck(torch.nn.Module):
    """A YOLO-style neck: a strided stem, then the deepest map upsampled x2 and concatenated
    with the one above, twice, each followed by a convolution."""

    def __init__(self):
        super().__init__()
        c = torch.nn.Conv2d
        self.s1, self.s2, self.s3 = c(3, 16, 3, 2, 1), c(16, 32, 3, 2, 1), c(32, 64, 3, 2, 1)
        self.up = torch.nn.Upsample(scale_factor=2, mode="nearest")
        self.c2, self.c1 = c(64 + 32, 32, 1), c(32 + 16, 16, 3, 1, 1)

    def forward(self, x):
        f1 = torch.relu(self.s1(x))
        f2 = torch.relu(self.s2(f1))
        f3 = torch.relu(self.s3(f2))
        p2 = self.c2(torch.cat([self.up(f3), f2], 1))
        p1 = self.c1(torch.cat([self.up(p2), f1], 1))
        return p1, p2, f3


def detection(out: str, rejected: dict) -> None:
    torch.manual_seed(0)
    cases = [
        ("fpn_resnet18", FpnBackbone, (torch.randn(1, 3, 64, 64),), [False]),
        ("ssdlite320", SsdLite, (torch.randn(1, 3, 320, 320),), [False]),
        ("yolo_neck", YoloNeck, (torch.randn(1, 3, 64, 96),), [False, True]),
    ]
    for name, make, args, exporters in cases:
        for dynamo in exporters:
            save_proto(out, name + ("-dynamo" if dynamo else ""), export(make(), args, dynamo), rejected)
    # Exported with a symbolic height and width, inferred at another size than the export's.
    for name, make, args, size in [
        ("fpn_resnet18-dynamic", FpnBackbone, (torch.randn(1, 3, 64, 64),), [1, 3, 96, 128]),
        ("ssdlite320-dynamic", SsdLite, (torch.randn(1, 3, 320, 320),), [1, 3, 256, 192]),
        ("yolo_neck-dynamic", YoloNeck, (torch.randn(1, 3, 64, 96),), [1, 3, 128, 64]),
    ]:
        model = export(make(), args, False, dynamic_hw=True)
        save_proto(out, name, model, rejected, {"image": size})


def resize_chains(out: str, rejected: dict) -> None:
    """Resize (and Upsample) of each opset's form, then Concat with a map of the size it
    should have."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT

    def model(opset, nodes, inits, inputs, outputs):
        g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m

    x = helper.make_tensor_value_info("x", f, [1, 8, 5, 7])
    skip = helper.make_tensor_value_info("skip", f, [1, 4, 10, 14])
    y = helper.make_tensor_value_info("y", f, None)
    scales = np.array([1, 1, 2, 2], np.float32)
    for opset in (11, 13, 18, 19):
        roi = [""] if opset >= 13 else ["roi"]
        inits = {"scales": scales}
        if opset < 13:
            inits["roi"] = np.zeros(0, np.float32)
        nodes = [
            helper.make_node("Resize", ["x"] + roi + ["scales"], ["r"], mode="nearest"),
            helper.make_node("Concat", ["r", "skip"], ["c"], axis=1),
            helper.make_node("Resize", ["c"] + roi + ["", "sizes"] if opset >= 13 else ["c"] + roi + ["no_scales", "sizes"], ["r2"], mode="linear"),
            helper.make_node("Conv", ["r2", "w"], ["y"], pads=[1, 1, 1, 1]),
        ]
        inits["sizes"] = np.array([1, 12, 6, 9], np.int64)
        if opset < 13:
            inits["no_scales"] = np.zeros(0, np.float32)
        inits["w"] = rng.standard_normal((3, 12, 3, 3)).astype(np.float32)
        save_proto(out, f"resize_concat_opset{opset}", model(opset, nodes, inits, [x, skip], [y]), rejected)
    # Scales that do not divide: floor(5 * 0.6) = 3, floor(7 * 1.5) = 10.
    nodes = [
        helper.make_node("Resize", ["x", "", "s"], ["r"], mode="linear", coordinate_transformation_mode="half_pixel"),
        helper.make_node("Resize", ["r", "", "s2"], ["y"], mode="cubic"),
    ]
    inits = {"s": np.array([1, 1, 0.6, 1.5], np.float32), "s2": np.array([1, 1, 3, 0.5], np.float32)}
    save_proto(out, "resize_floor_scales", model(13, nodes, inits, [x], [y]), rejected)
    # Upsample (opset 9: scales an input; opset 7: an attribute) into a Concat.
    for opset in (7, 9):
        if opset == 9:
            up = helper.make_node("Upsample", ["x", "us"], ["u"], mode="nearest")
            inits = {"us": scales}
        else:
            up = helper.make_node("Upsample", ["x"], ["u"], mode="nearest", scales=[1.0, 1.0, 2.0, 2.0])
            inits = {}
        nodes = [up, helper.make_node("Concat", ["u", "skip"], ["y"], axis=1)]
        save_proto(out, f"upsample_concat_opset{opset}", model(opset, nodes, inits, [x, skip], [y]), rejected)
    # Sizes computed from another map's shape, as torch exports F.interpolate(size=...).
    nodes = [
        helper.make_node("Shape", ["skip"], ["ss"]),
        helper.make_node("Slice", ["ss", "two", "four"], ["hw"]),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Slice", ["xs", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "hw"], ["sz"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sz"], ["r"], mode="nearest"),
        helper.make_node("Concat", ["r", "skip"], ["y"], axis=1),
    ]
    inits = {k: np.array([v], np.int64) for k, v in [("zero", 0), ("two", 2), ("four", 4)]}
    save_proto(out, "resize_sizes_from_shape", model(13, nodes, inits, [x, skip], [y]), rejected)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rejected: dict = {}
    resize_chains(out, rejected)
    detection(out, rejected)
    run_generators(out, rejected)
    with open(os.path.join(out, "rejected.json"), "w") as f:
        json.dump(rejected, f, indent=1, sort_keys=True)
    n = len([f for f in os.listdir(out) if f.endswith(".shapes.json")])
    print(f"{n} models, {len(rejected)} rejected by ONNX's strict shape inference")


if __name__ == "__main__":
    main()
