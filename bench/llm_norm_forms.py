"""Why ONNX Runtime's QNN EP runs the fp16 decode step of the 4-layer SmolLM2 faster than qnnx: the
same decode ONNX with its RMSNorms in three forms, each compiled by qnnx and executed on the same
inputs on the emulated HTP (SoC 60, fp16), beside ORT's QNN EP on the file as exported.

    bench/.venv-ort/bin/python bench/llm_ort_peer.py --artifact /tmp/s4 --build smollm2:4 --no-logits \\
        --prompt "hello" --max-new-tokens 2          # the artifact, its ONNX kept
    bench/.venv-ort/bin/python bench/llm_norm_forms.py --artifact /tmp/s4

Forms of ``x / sqrt(mean(x^2) + eps) * gamma`` (the exported Pow, ReduceMean, Add, Sqrt, Div, Mul):

* ``exported``: as exported; qnnx fuses it into QNN's RmsNorm op (lowering/src/passes/fuse_rmsnorm.rs);
* ``decomposed``: ReduceMean written as ReduceSum times 1/D, which qnnx does not fuse: the separate
  elementwise ops ORT's QNN EP runs (the square is taken in fp16, which overflows for residuals
  above 256: the whole SmolLM2's first token reaches 2.3e4, docs/llm.md);
* ``l2norm``: ``LpNormalization(x) * gamma * sqrt(D)`` (QNN's L2Norm), which drops ``eps``: equal to
  the RMSNorm for rows whose mean square is far above eps (1e-5), not for near-zero rows.

Per form: the execute median of ``--runs`` (``qnnx run``, after one untimed), the emulator's
accelerator cycles and its per-op cycles of the largest ops (QNN's detailed profile of one more
execute), and the logits' largest difference from the ``exported`` form's. ORT: the QNN EP on the
exported file (QNN's default optimization level, as qnnx's here), the median of as many runs. The
emulator simulates the HTP on the CPU: its times and cycles say nothing measured about a device.
Writes PREFIX.json and PREFIX.md (default bench/results/llm_norm_forms).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402

FORMS = ("exported", "decomposed", "l2norm")


def _graph_maps(g):
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict = {}
    for n in g.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
    return producer, consumers


def _constant(g, producer, name):
    for i in g.initializer:
        if i.name == name:
            return numpy_helper.to_array(i)
    p = producer.get(name)
    if p is not None and p.op_type == "Constant":
        return numpy_helper.to_array(p.attribute[0].t)
    return None


def rewrite(model: onnx.ModelProto, form: str) -> int:
    """Rewrites every RMSNorm of ``model`` (Pow -> ReduceMean -> Add -> Sqrt -> Div(1, .) ->
    Mul(x, .) -> [Cast] -> Mul(., gamma)) into ``form``, in place; the number rewritten."""
    g = model.graph
    producer, consumers = _graph_maps(g)
    done = 0
    for rm in [n for n in g.node if n.op_type == "ReduceMean"]:
        pw = producer.get(rm.input[0])
        if pw is None or pw.op_type != "Pow":
            continue
        add = consumers[rm.output[0]][0]
        div = consumers[consumers[add.output[0]][0].output[0]][0]  # after the Sqrt
        mul = consumers[div.output[0]][0]
        scale = consumers[mul.output[0]][0]
        while scale.op_type == "Cast":
            scale = consumers[scale.output[0]][0]
        wname = next(i for i in scale.input if _constant(g, producer, i) is not None)
        gamma = _constant(g, producer, wname).astype(np.float32)
        if form == "decomposed":
            total, inv = rm.output[0] + "_sum", f"{rm.name}_inv_d"
            g.initializer.append(numpy_helper.from_array(np.array(1.0 / gamma.shape[-1], np.float32), inv))
            # ReduceSum takes its axes as an input from opset 13, ReduceMean from opset 18.
            axes = rm.input[1] if len(rm.input) > 1 else f"{rm.name}_axes"
            if len(rm.input) == 1:
                ints = next(list(a.ints) for a in rm.attribute if a.name == "axes")
                g.initializer.append(numpy_helper.from_array(np.array(ints, np.int64), axes))
            node = helper.make_node("ReduceSum", [rm.input[0], axes], [total], name=rm.name + "_sum")
            node.attribute.extend(a for a in rm.attribute if a.name == "keepdims")
            i = list(g.node).index(rm)
            g.node.insert(i, node)
            g.node.insert(i + 1, helper.make_node("Mul", [total, inv], [rm.output[0]], name=rm.name + "_mean"))
            g.node.remove(rm)
        else:
            scaled, normed = f"{rm.name}_gamma_sqrt_d", f"{rm.name}_l2"
            g.initializer.append(numpy_helper.from_array(gamma * np.float32(np.sqrt(gamma.shape[-1])), scaled))
            x = next(i for i in mul.input if i != div.output[0])
            g.node.insert(list(g.node).index(scale), helper.make_node("LpNormalization", [x], [normed], axis=-1, p=2, name=normed))
            other = next(i for i in scale.input if i != wname)
            scale.input[list(scale.input).index(other)] = normed
            scale.input[list(scale.input).index(wname)] = scaled
        done += 1
    return done


def inputs(graph: dict, position: int) -> dict:
    """A decode step's inputs at ``position``: a token, the additive mask, caches whose first
    ``position`` rows hold unit normal values (deterministic)."""
    rng = np.random.default_rng(0)
    dtypes = {"i32": np.int32, "i64": np.int64, "f32": np.float32, "u8": np.uint8}
    out = {}
    for i in graph["inputs"]:
        dt, name, dims = dtypes[i["dtype"]], i["name"], i["dims"]
        if name == "input_ids":
            v = np.full(dims, 504, dt)
        elif name == "position_ids":
            v = np.full(dims, position, dt)
        elif name == "attention_mask":
            v = np.full(dims, -10000.0, dt)
            v[..., : position + 1] = 0
            v[..., -1] = 0
        else:
            v = np.zeros(dims, dt)
            v[..., :position, :] = rng.standard_normal(v[..., :position, :].shape).astype(dt)
        out[name] = v
    return out


def run_ours(qnnx: Path, model: Path, feeds: dict, work: Path, runs: int) -> dict:
    args = []
    for name, v in feeds.items():
        np.save(work / f"{name}.npy", v)
        args += ["--input", f"{name}={work / (name + '.npy')}"]
    out = work / ("out-" + model.stem)
    r = subprocess.run([str(qnnx), "--json", "--cache-dir", str(work / "cache"), "run", str(model), "--soc-model", "60",
                        "--precision", "fp16", "--runs", str(runs), "--profile", "detailed", "-o", str(out), *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"qnnx run {model.name} failed: {r.stdout[-2000:]} {r.stderr[-2000:]}")
    d = json.loads(r.stdout)
    ops = sorted(((o["value"], o["onnx_node"] or o["qnn_node"]) for o in d["profile"]["ops"]), reverse=True)[:6]
    return {"execute_median_ms": round(d["median_ms"], 1), "accel_cycles": d["profile"]["accel_cycles"],
            "largest_ops_cycles": [[name, c] for c, name in ops], "logits": np.load(out / "logits.npy")}


def run_ort(model: Path, feeds: dict, runs: int) -> dict:
    import onnxruntime as ort

    import ort_session

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(ort_session.ep_devices(), ort_session.provider_options())
    s = ort.InferenceSession(str(model), sess_options=so)
    s.run(None, feeds)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        logits = s.run(["logits"], feeds)[0]
        times.append((time.perf_counter() - t) * 1e3)
    return {"execute_median_ms": round(statistics.median(times), 1), "logits": logits}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", required=True, help="an fp16 LLM artifact folder built with --keep-onnx")
    ap.add_argument("--position", type=int, default=12, help="the decode step's position (cached rows before it)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--qnnx", help="the qnnx binary (default target/release/qnnx, then target/debug/qnnx)")
    ap.add_argument("--out", default=str(HERE / "results" / "llm_norm_forms"), help="results prefix")
    args = ap.parse_args()
    folder = Path(args.artifact)
    manifest = json.loads((folder / "manifest.json").read_text())
    if manifest["precision"] != "fp16":
        raise SystemExit(f"{folder} is a {manifest['precision']} artifact; this compares fp16 graphs")
    graph = next(g for g in manifest["graphs"] if g["kind"] == "decode")
    exported = folder / "decode.onnx"
    if not exported.exists():
        raise SystemExit(f"{exported} is missing: build the artifact with --keep-onnx")
    qnnx = Path(args.qnnx) if args.qnnx else common.qnnx_binary("release")
    feeds = inputs(graph, args.position)
    results = {"commit": common.commit(), "artifact": str(folder), "layers": manifest["model"]["layers"],
               "cache": manifest["cache"]["length"], "position": args.position, "runs": args.runs,
               "load_average": os.getloadavg(), "forms": {}}
    with tempfile.TemporaryDirectory(prefix="llm_norm_forms-") as tmp:
        work = Path(tmp)
        (work / "cache").mkdir()
        ref = None
        for form in FORMS:
            path = exported
            if form != "exported":
                m = onnx.load(str(exported))
                n = rewrite(m, form)
                path = work / f"{form}.onnx"
                onnx.save(m, str(path))
                del m
            else:
                n = 0
            r = run_ours(qnnx, path, feeds, work, args.runs)
            logits = r.pop("logits")
            ref = logits if ref is None else ref
            r["rewritten_norms"] = n
            r["logits_max_diff_to_exported"] = round(float(np.abs(logits - ref).max()), 4)
            r["argmax_equal_to_exported"] = bool(logits.argmax() == ref.argmax())
            results["forms"][form] = r
            print(form, json.dumps(r), flush=True)
        o = run_ort(exported, feeds, args.runs)
        logits = o.pop("logits")
        o["logits_max_diff_to_exported"] = round(float(np.abs(logits - ref).max()), 4)
        results["ort_qnn_ep_exported"] = o
        print("ort", json.dumps(o), flush=True)
    Path(args.out + ".json").write_text(json.dumps(results, indent=1) + "\n")
    with open(args.out + ".md", "w") as f:
        f.write(f"SmolLM2 decode step ({results['layers']} layers, cache {results['cache']}, position {args.position}), "
                f"fp16, SoC 60, commit {results['commit']}; `bench/.venv-ort/bin/python bench/llm_norm_forms.py "
                f"{' '.join(sys.argv[1:])}`\n\n")
        f.write("| RMSNorm form | execute median ms | accelerator cycles | largest ops (cycles) | logits max diff to exported |\n|---|---|---|---|---|\n")
        for form, r in results["forms"].items():
            ops = ", ".join(f"{name} {c / 1e6:.1f}M" for name, c in r["largest_ops_cycles"][:3])
            f.write(f"| {form} (qnnx) | {r['execute_median_ms']} | {r['accel_cycles'] / 1e6:.1f}M | {ops} | "
                    f"{r['logits_max_diff_to_exported']} |\n")
        f.write(f"| exported (ORT QNN EP) | {o['execute_median_ms']} | | | {o['logits_max_diff_to_exported']} |\n\n")
        f.write("The emulator simulates the HTP on the CPU: these times and cycles say nothing measured about a device.\n")
    print(f"wrote {args.out}.json and {args.out}.md")


if __name__ == "__main__":
    main()
