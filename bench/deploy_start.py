"""Time to first output of a saved model (``qnnx_backend.load``) against a ``torch.compile``
warm start (the cache filled by an earlier process) and against ONNX Runtime's QNN EP loading its
own EPContext model (bench/.venv-ort, same libQnnHtp.so, SoC 60 / v73 / fp16, no torch in the
process), each in fresh processes, and the per-call
cost of the saved model's call: its Python work with a ``.run`` that returns at once (the
emulator's graphExecute times vary by milliseconds from call to call, far more than the overhead).

    QNNX_RUNTIME_DIR=$PWD/runtime python3 bench/deploy_start.py [--models small_cnn,resnet18] [--reps 3]

For each model: one process exports it (``qnnx_backend.export``) and one fills a torch.compile
cache (``cache=True``); then ``--reps`` fresh processes of each kind are timed. "spawn to first
output" is the wall time from the parent starting the child process (interpreter start, imports)
to the child's first output; "to first output" is the child's own clock from just before ``import qnnx_backend``
(torch.compile: with torch imported, the model built and dynamo imported first, as bench/run's
warm start) to the first output. Prints a Markdown table and writes bench/results/deploy.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))

EXPORT = textwrap.dedent(
    """
    import sys, numpy as np, torch
    sys.path.insert(0, {here!r})
    import models, qnnx_backend
    m, inputs, _ = models.build({name!r})
    opts = {{"soc_model": 60, "htp_arch": 73, "fp16": True}}
    qnnx_backend.export(m, inputs, sys.argv[1], options=opts)
    np.save(sys.argv[2], inputs[0].numpy())
    # The same ONNX export, for ONNX Runtime.
    from qnnx_backend.compiling import to_onnx
    data = to_onnx.onnx_bytes(m, inputs, qnnx_backend.parse_options(opts), names=["x"])
    open(sys.argv[3], "wb").write(data)
    """
)

# ONNX Runtime's QNN EP (bench/.venv-ort), configured by bench/ort_session.py as every benchmark
# configures it: with a context path the session writes the EPContext model; without, argv[1] is
# that model. The clock starts before onnxruntime's import (ort_session imports it).
ORT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    sys.path.insert(0, {here!r})
    x = np.load(sys.argv[2])
    t0 = time.perf_counter()
    import ort_session
    sess = ort_session.session(sys.argv[1], ctx_path=sys.argv[4] if len(sys.argv) > 4 else None, htp_lib=sys.argv[3])
    y = sess.run(None, {{sess.get_inputs()[0].name: x}})
    print("RESULT " + json.dumps({{"first_s": time.perf_counter() - t0, "first_at": time.time(),
                                  "torch_loaded": "torch" in sys.modules}}))
    """
).format(here=HERE)
ORT_PY = os.path.join(HERE, ".venv-ort", "bin", "python")

LOAD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    x = np.load(sys.argv[2])
    t0 = time.perf_counter()
    import qnnx_backend
    m = qnnx_backend.load(sys.argv[1])
    y = m(x)
    first = time.perf_counter() - t0
    first_at = time.time()
    calls = int(sys.argv[3])
    g = m._graph
    ins = [np.ascontiguousarray(x)]
    outs = [np.empty(s, dtype=d) for _, d, _, s in g.outs]
    ptr_in = [(a.ctypes.data, a.nbytes) for a in ins]
    ptr_out = [(o.ctypes.data, o.nbytes) for o in outs]
    whole, raw = [], []
    for _ in range(calls):
        t = time.perf_counter(); m(x); whole.append(time.perf_counter() - t)
        t = time.perf_counter(); g.native.run(ptr_in, ptr_out); raw.append(time.perf_counter() - t)
    class NoRun:  # the same call with a .run that returns at once: qnnx's Python cost per call
        inputs, outputs = g.native.inputs, g.native.outputs
        def run(self, i, o):
            pass
    g.native = NoRun()
    hot = []
    for _ in range(2000):
        t = time.perf_counter(); m(x); hot.append(time.perf_counter() - t)
    print("RESULT " + json.dumps({"first_s": first, "first_at": first_at, "load_ms": m.load_ms,
                                  "torch_loaded": "torch" in sys.modules,
                                  "call_ms": sorted(whole)[len(whole) // 2] * 1e3,
                                  "run_ms": sorted(raw)[len(raw) // 2] * 1e3,
                                  "python_us": sorted(hot)[len(hot) // 2] * 1e6}))
    """
)

WARM = textwrap.dedent(
    """
    import json, sys, time
    import torch, torch._dynamo
    sys.path.insert(0, {here!r})
    import models
    m, inputs, _ = models.build({name!r})
    t0 = time.perf_counter()
    import qnnx_backend
    c = torch.compile(m, backend="qnn", options={{"strict": True, "device": "npu", "soc_model": 60, "htp_arch": 73,
                                                  "fp16": True, "cache": True, "cache_dir": sys.argv[1]}})
    with torch.inference_mode():
        y = c(*inputs)
    first = time.perf_counter() - t0
    print("RESULT " + json.dumps({{"first_s": first, "first_at": time.time(), "stats": dict(qnnx_backend.STATS)}}))
    """
)


def child(code: str, *args: str, python: str = sys.executable) -> tuple[dict, float]:
    """The child's result and the wall time from spawning it to its first output."""
    t = time.time()
    out = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    r = json.loads(line[len("RESULT "):])
    return r, r["first_at"] - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="small_cnn,resnet18")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            saved, x = os.path.join(tmp, f"{name}.qnnx"), os.path.join(tmp, f"{name}.npy")
            onnx, ctx = os.path.join(tmp, f"{name}.onnx"), os.path.join(tmp, f"{name}_ctx.onnx")
            cache = os.path.join(tmp, f"{name}-cache")
            subprocess.run([sys.executable, "-c", EXPORT.format(here=HERE, name=name), saved, x, onnx], check=True)
            htp = os.path.join(os.environ["QNNX_RUNTIME_DIR"], "qnn", "libQnnHtp.so")
            ort_rows = []
            if os.path.exists(ORT_PY):
                child(ORT, onnx, x, htp, ctx, python=ORT_PY)
                ort_rows = [child(ORT, ctx, x, htp, python=ORT_PY) for _ in range(args.reps)]
            warm_code = WARM.format(here=HERE, name=name)
            filled, _ = child(warm_code, cache)
            assert filled["stats"].get("compiles") == 1, filled
            loads = [child(LOAD, saved, x, str(args.calls)) for _ in range(args.reps)]
            warms = [child(warm_code, cache) for _ in range(args.reps)]
            assert all(w[0]["stats"] == {"cache_hits": 1} for w in warms), warms
            assert not any(r["torch_loaded"] for r, _ in loads)
            med = statistics.median
            row = {
                "model": name,
                "file_bytes": os.path.getsize(saved),
                "load_first_s": med(r["first_s"] for r, _ in loads),
                "load_process_s": med(w for _, w in loads),
                "load_ms": med(r["load_ms"] for r, _ in loads),
                "warm_first_s": med(r["first_s"] for r, _ in warms),
                "warm_process_s": med(w for _, w in warms),
                "call_ms": med(r["call_ms"] for r, _ in loads),
                "run_ms": med(r["run_ms"] for r, _ in loads),
                "python_us": med(r["python_us"] for r, _ in loads),
                "ort_ctx_first_s": med(r["first_s"] for r, _ in ort_rows) if ort_rows else None,
                "ort_ctx_process_s": med(w for _, w in ort_rows) if ort_rows else None,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print("| model | load() / ORT EPContext session: import to first output (ratio) | spawn to first output (ratio) |")
    print("|---|---|---|")
    for r in rows:
        if r["ort_ctx_first_s"] is None:
            continue
        print(
            f"| {r['model']} | {r['load_first_s'] * 1e3:.0f} ms / {r['ort_ctx_first_s'] * 1e3:.0f} ms "
            f"(**{r['load_first_s'] / r['ort_ctx_first_s']:.2f}x**) | {r['load_process_s']:.2f} s / "
            f"{r['ort_ctx_process_s']:.2f} s (**{r['load_process_s'] / r['ort_ctx_process_s']:.2f}x**) |"
        )
    print()
    print("| model | saved file | load(): import to first output / process spawn to first output | torch.compile warm start: import to first output / spawn to first output | ratios | load_ms (Rust: map, checks, contextCreateFromBinary) | call median / .run median, emulator | qnnx Python per call, .run returning at once |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['file_bytes'] / 1e6:.2f} MB | {r['load_first_s'] * 1e3:.0f} ms / {r['load_process_s']:.2f} s "
            f"| {r['warm_first_s'] * 1e3:.0f} ms / {r['warm_process_s']:.2f} s "
            f"| **{r['load_first_s'] / r['warm_first_s']:.2f}x** / **{r['load_process_s'] / r['warm_process_s']:.2f}x** "
            f"| {r['load_ms']:.0f} ms | {r['call_ms']:.2f} / {r['run_ms']:.2f} ms | {r['python_us']:.1f} us |"
        )
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "deploy.json"), "w") as f:
        json.dump({"argv": sys.argv, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
