"""Our QNN graph against ONNX Runtime's for the same ONNX model: graphExecute time and op counts.

```sh
python3 bench/graph_quality.py --models se_cnn,efficientnet_b0 [--size 96] [--runs 20]
    [--qnnx target/release/qnnx] [--exec-timer target/release/examples/exec_timer]
    [--ort-python bench/.venv-ort/bin/python] [--work bench/work/graph-quality]
```

Each model is exported once to ONNX (TorchScript exporter, opset 17, constants folded, the export
`ort_ref_backend.py` makes) and that one file is compiled twice: `qnnx compile --precision fp16
--soc-model 60 --htp-arch v73`, and by an ONNX Runtime session on the QNN EP configured as the
benchmark's reference (SoC 60, HTP v73, fp16, no CPU fallback) that writes its EPContext model,
its context binary beside it and its QNN graph as JSON (`dump_json_qnn_graph`). The Rust timer
`qnn-rs/examples/exec_timer` then times `Graph::execute` on both binaries in alternating rounds
until the last two rounds' medians of each side agree within 10% (at most `--max-rounds`). Our
op counts come from one profiled execute (`qnnx run --profile detailed --json`), ONNX Runtime's
from its JSON graph. Prints one JSON line per model and writes them all to
`<work>/results.json`. Run it under `flock /tmp/emu.lock` on a shared machine. Models other
than `se_cnn`, `densenet121` (torchvision) and `hf_mobilevit` (transformers) are timm names,
random init (`pip install timm`; nothing is downloaded). `--onnx FILE` compares a given file
instead, a QDQ model for example (our side then also lowers its encodings; `--precision` only
concerns any op left in float).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _refresh_batchnorm(model, shape, batches: int = 3):
    from models import _refresh_batchnorm as refresh  # bench/models.py

    return refresh(model, shape, batches)


class SECNN:
    """A small CNN of timm-style squeeze-and-excitation blocks (`x.mean((2, 3), keepdim=True)`
    into two 1x1 convs), built lazily so that the ORT side never imports torch."""

    @staticmethod
    def build(size: int):
        import torch

        class SE(torch.nn.Module):
            def __init__(self, c: int):
                super().__init__()
                self.reduce = torch.nn.Conv2d(c, c // 4, 1)
                self.expand = torch.nn.Conv2d(c // 4, c, 1)

            def forward(self, x):
                s = x.mean((2, 3), keepdim=True)
                return x * torch.sigmoid(self.expand(torch.relu(self.reduce(s))))

        layers = []
        c_in = 3
        for c in (32, 64, 96, 128):
            layers += [torch.nn.Conv2d(c_in, c, 3, stride=2, padding=1), torch.nn.BatchNorm2d(c),
                       torch.nn.ReLU(), SE(c), torch.nn.Conv2d(c, c, 3, padding=1, groups=c), SE(c)]
            c_in = c
        return torch.nn.Sequential(*layers)


def build(name: str, size: int):
    """A model in eval mode with fresh BatchNorm statistics, and its input shape."""
    import torch

    torch.manual_seed(0)
    shape = (1, 3, size, size)
    if name == "se_cnn":
        m = SECNN.build(size)
    elif name == "densenet121":
        import torchvision

        m = torchvision.models.densenet121(weights=None)
    elif name.startswith("hf_mobilevit"):
        from transformers import MobileViTConfig, MobileViTModel

        cfg = MobileViTConfig(image_size=size, hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320])
        m = MobileViTModel(cfg)
    else:
        import timm

        m = timm.create_model(name, pretrained=False)
    return _refresh_batchnorm(m, shape), shape


def export(name: str, size: int, path: Path) -> None:
    import torch

    m, shape = build(name, size)

    class Out0(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            y = self.m(x)
            return y if isinstance(y, torch.Tensor) else y[0]

    torch.onnx.export(Out0(m), (torch.randn(*shape),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], do_constant_folding=True)


def ort_compile(model: str, ctx: str, json_dir: str) -> None:
    """In the ORT venv: a session that writes the EPContext model and the JSON QNN graph."""
    sys.path.insert(0, str(HERE))
    import onnxruntime as ort
    from ort_ref_backend import _ep_devices, provider_options

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", ctx)
    opts = provider_options()
    opts["dump_json_qnn_graph"] = "1"
    opts["json_qnn_graph_dir"] = json_dir
    so.add_provider_for_devices(_ep_devices(), opts)
    ort.InferenceSession(model, sess_options=so)


def ort_ops(json_dir: Path) -> dict:
    """QNN op type -> count in ONNX Runtime's dumped graph(s)."""
    c: collections.Counter = collections.Counter()
    for f in sorted(json_dir.glob("*.json")):
        g = json.loads(f.read_text())
        nodes = g.get("graph", {}).get("nodes", {})
        for n in nodes.values():
            c[n.get("type", "?")] += 1
    return dict(c)


def our_ops(qnnx: str, model: Path, precision: str) -> tuple[dict, dict]:
    """QNN op type -> count, and op type -> cycles, from one profiled execute of ours."""
    r = subprocess.run([qnnx, "--json", "run", str(model), "--precision", precision, "--soc-model", "60",
                        "--htp-arch", "v73", "--profile", "detailed", "--runs", "1"],
                       capture_output=True, text=True, check=True)
    j = json.loads(r.stdout)
    counts: collections.Counter = collections.Counter()
    cycles: collections.Counter = collections.Counter()
    for op in j["profile"]["ops"]:
        t = op.get("qnn_op")
        if t is None:  # the graph's Input/Output pseudo-nodes
            continue
        counts[t] += 1
        cycles[t] += op.get("value", 0)
    return dict(counts), dict(cycles)


def time_pair(timer: str, bins: dict, runs: int, max_rounds: int) -> dict:
    """Alternating rounds of exec_timer on each binary until the last two rounds of each side
    agree within 10%, by median or, on a loaded machine where medians wander, by minimum (the
    least disturbed call). Each round's ratio compares the two sides under the same load."""
    rounds: dict = {k: [] for k in bins}

    def agree(xs):
        return len(xs) >= 2 and abs(xs[-1] - xs[-2]) <= 0.1 * min(xs[-1], xs[-2])

    for _ in range(max_rounds):
        for k, b in bins.items():
            r = subprocess.run([timer, str(b), "--runs", str(runs), "--warmup", "3", "--soc", "60",
                                "--arch", "73"], capture_output=True, text=True, check=True)
            rounds[k].append(json.loads(r.stdout.strip().splitlines()[-1]))
        med = {k: [x["median_ms"] for x in v] for k, v in rounds.items()}
        mins = {k: [x["min_ms"] for x in v] for k, v in rounds.items()}
        if all(agree(m) for m in med.values()) or all(agree(m) for m in mins.values()):
            break
    ours, ort = (rounds[k] for k in bins)
    return {
        "median_ms": {k: statistics.median(x["median_ms"] for x in v[-2:]) for k, v in rounds.items()},
        "min_ms": {k: min(x["min_ms"] for x in v) for k, v in rounds.items()},
        "medians_agree": all(agree([x["median_ms"] for x in v]) for v in rounds.values()),
        "round_median_ratios": [a["median_ms"] / b["median_ms"] for a, b in zip(ours, ort)],
        "round_min_ratios": [a["min_ms"] / b["min_ms"] for a, b in zip(ours, ort)],
        "rounds": {k: [(x["median_ms"], x["min_ms"]) for x in v] for k, v in rounds.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="se_cnn")
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--max-rounds", type=int, default=8)
    ap.add_argument("--qnnx", default=str(ROOT / "target/release/qnnx"))
    ap.add_argument("--exec-timer", default=str(ROOT / "target/release/examples/exec_timer"))
    ap.add_argument("--ort-python", default=str(HERE / ".venv-ort/bin/python"))
    ap.add_argument("--work", default=str(HERE / "work/graph-quality"))
    ap.add_argument("--precision", default="fp16", choices=["fp16", "fp32"],
                    help="ours: tensors stored as fp16 (the default), or fp32 (computed in fp16)")
    ap.add_argument("--tag", default="", help="suffix of our binary's name (before/after runs)")
    ap.add_argument("--onnx", type=Path, action="append", default=[],
                    help="compare this ONNX file (a QDQ model that `qnnx quantize` wrote, say) instead of "
                         "exporting --models; repeatable")
    ap.add_argument("--ort-compile", nargs=3, metavar=("MODEL", "CTX", "JSON_DIR"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ort_compile:
        ort_compile(*a.ort_compile)
        return
    sys.path.insert(0, str(HERE))
    work = Path(a.work)
    results = []
    # (name, work dir, ONNX file to export or to use as it is)
    jobs = [(f.stem, work / f"file-{f.stem}", f.resolve()) for f in a.onnx] or [
        (name, work / f"{name}-{a.size}", None) for name in a.models.split(",")]
    for name, d, given in jobs:
        d.mkdir(parents=True, exist_ok=True)
        onnx_path = given or d / "model.onnx"
        if not onnx_path.exists():
            export(name, a.size, onnx_path)
        ours = d / f"ours{a.tag}.bin"
        subprocess.run([a.qnnx, "compile", str(onnx_path), "-o", str(ours), "--precision", a.precision,
                        "--soc-model", "60", "--htp-arch", "v73"], check=True, capture_output=True)
        json_dir = d / "ort-json"
        if not list(d.glob("ort_ctx*.bin")):
            json_dir.mkdir(exist_ok=True)
            subprocess.run([a.ort_python, __file__, "--ort-compile", str(onnx_path), str(d / "ort_ctx.onnx"),
                            str(json_dir)], check=True)
        ort_bin = sorted(d.glob("ort_ctx*.bin"))[0]
        counts, cycles = our_ops(a.qnnx, onnx_path, a.precision)
        t = time_pair(a.exec_timer, {"ours": ours, "ort": ort_bin}, a.runs, a.max_rounds)
        row = {
            "model": name,
            "size": None if given else a.size,
            "tag": a.tag,
            "precision": a.precision,
            "ours_median_ms": t["median_ms"]["ours"],
            "ort_median_ms": t["median_ms"]["ort"],
            "ratio_median": t["median_ms"]["ours"] / t["median_ms"]["ort"],
            "medians_agree": t["medians_agree"],
            "ours_min_ms": t["min_ms"]["ours"],
            "ort_min_ms": t["min_ms"]["ort"],
            "ratio_min": t["min_ms"]["ours"] / t["min_ms"]["ort"],
            "round_median_ratios": t["round_median_ratios"],
            "round_min_ratios": t["round_min_ratios"],
            "rounds": t["rounds"],
            "ops_ours": counts,
            "ops_ort": ort_ops(json_dir),
            "cycles_ours": cycles,
        }
        print(json.dumps(row), flush=True)
        results.append(row)
    out = work / f"results{a.tag}.json"
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
