"""Benchmark orchestration: qnnx against ONNX Runtime's QNN EP and eager PyTorch, in one run.

Every measurement runs in its own fresh process (the runner_*.py scripts, one JSON result each);
this script starts them, aggregates the results, checks the goals and writes
bench/results/latest.json, latest.md and latest.png. Run it through `bench/run`, which creates
the ONNX Runtime venv first.

Per model:
  1. eager PyTorch on the CPU: reference output, steady-state latency, and dynamo's own per-call
     cost (torch.compile with a backend that does nothing);
  2. cold start, `--reps` times, alternating ours / ONNX Runtime, each with an empty cache
     folder; the first repetition then also times `--calls` steady-state calls;
  3. warm start, `--reps` times, alternating, from the caches the first cold runs filled;
  4. raw graphExecute of our context binary in a Rust process (qnn-rs example exec_timer).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Per model: timed calls in a full run, and extra arguments for the reference runner.
MODELS = {
    "mlp": {"calls": 200},
    "small_cnn": {"calls": 200},
    "resnet18": {"calls": 100},
    "mobilenet_v3_small": {"calls": 100},
    # The fused fast path (torch._transformer_encoder_layer_fwd, taken in eval mode without grad)
    # has no ONNX export; the reference traces the layer with the fast path off (same math in
    # standard ops). qnnx rewrites the fused call itself (qnnx_backend/_decompose.py).
    "transformer_layer": {"calls": 100, "ort_args": ["--no-mha-fastpath"]},
    "gpt2_prefill": {"calls": 100},
}

GOALS = {"cold": 0.5, "warm": 0.25, "steady": 0.95, "rss": 0.7, "overhead_us": 20.0}


def loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def cpu_busy_s() -> float:
    """CPU seconds spent busy by the whole machine since boot (all CPUs, from /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return float("nan")
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_for_idle(limit: float, max_wait: float) -> float:
    """Sleeps until the 1-minute load average is below `limit` (or `max_wait` seconds pass)."""
    t0 = time.time()
    while loadavg() >= limit and time.time() - t0 < max_wait:
        print(f"  load average {loadavg():.2f} >= {limit}; waiting", file=sys.stderr, flush=True)
        time.sleep(20)
    return loadavg()


class Runner:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work)
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self.loads: list = []
        self.foreign: list = []

    def run(self, tag: str, cmd: list, json_out: Path | None, env_extra: dict | None = None) -> dict:
        self.count += 1
        env = dict(os.environ)
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONHASHSEED": "0",
                    "PYTHONDONTWRITEBYTECODE": "1"})
        env.update(env_extra or {})
        if self.args.wait_idle:
            wait_for_idle(self.args.load_limit, self.args.wait_idle)
        load = loadavg()
        self.loads.append(load)
        log = self.logs / f"{self.count:03d}-{tag.replace('/', '-')}.log"
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy0 = cpu_busy_s()
        t = time.perf_counter()
        with open(log, "w") as f:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=str(self.work))
        wall = time.perf_counter() - t
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        child_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        # CPUs kept busy by other processes while this measurement ran (0 on an idle machine).
        foreign = max(0.0, (cpu_busy_s() - busy0 - child_cpu) / wall)
        self.foreign.append(foreign)
        print(f"  {tag:40s} {wall:6.1f} s  (load {load:.2f}, other processes {foreign:.2f} CPUs)",
              file=sys.stderr, flush=True)
        if p.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise RuntimeError(f"{tag} failed (exit {p.returncode}); see {log}:\n" + "\n".join(tail))
        if json_out is None:
            lines = [ln for ln in log.read_text().splitlines() if ln.startswith("{")]
            result = json.loads(lines[-1])
        else:
            result = json.loads(json_out.read_text())
        result["wall_s"] = wall
        result["load_at_start"] = load
        result["child_cpu_s"] = child_cpu
        result["foreign_cpus"] = foreign
        return result


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def bench_model(r: Runner, name: str, cfg: dict) -> dict:
    a = r.args
    calls = a.calls if a.calls is not None else cfg["calls"]
    warmup = 3 if a.quick else 10
    d = r.work / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    ours_py, ort_py = a.python, sys.executable
    out: dict = {"model": name, "calls": calls, "warmup": warmup}
    # ONNX Runtime loads the very libQnnHtp.so qnnx uses (scripts/setup-runtime's copy of the
    # same onnxruntime-qnn 2.7.0 wheel).
    lib = ROOT / "runtime" / "qnn" / "libQnnHtp.so"
    htp = ["--htp-lib", str(lib)] if lib.exists() else []

    def runner(py, script, tag, mode, cache, extra=(), n=0, save=None):
        j = d / f"{tag}.json"
        cmd = [py, str(HERE / script), "--model", name, "--mode", mode, "--out", str(j),
               "--calls", str(n), "--warmup", str(warmup)]
        if cache is not None:
            cmd += ["--cache-dir", str(cache)]
        if save:
            cmd += ["--save-output", str(save)]
        cmd += list(extra)
        return r.run(f"{name}/{tag}", cmd, j)

    out["eager"] = runner(ours_py, "runner_eager.py", "eager", "steady", None, n=calls, save=d / "ref.pt")
    cold = {"ours": [], "ort": []}
    warm = {"ours": [], "ort": []}
    caches = {"ours": d / "cache-ours-1", "ort": d / "cache-ort-1"}
    for rep in range(1, a.reps + 1):
        n = calls if rep == 1 else 0
        c_ours = d / f"cache-ours-{rep}"
        c_ort = d / f"cache-ort-{rep}"
        cold["ours"].append(runner(ours_py, "runner_ours.py", f"ours-cold-{rep}", "cold", c_ours, n=n,
                                   save=d / "ours.pt" if rep == 1 else None,
                                   extra=["--binary", str(d / "ours.bin")] if rep == 1 else []))
        cold["ort"].append(runner(ort_py, "runner_ort.py", f"ort-cold-{rep}", "cold", c_ort, n=n,
                                  save=d / "ort.pt" if rep == 1 else None,
                                  extra=cfg.get("ort_args", []) + htp))
        if rep > 1:
            shutil.rmtree(c_ours, ignore_errors=True)
            shutil.rmtree(c_ort, ignore_errors=True)
    for rep in range(1, a.reps + 1):
        warm["ours"].append(runner(ours_py, "runner_ours.py", f"ours-warm-{rep}", "warm", caches["ours"]))
        warm["ort"].append(runner(ort_py, "runner_ort.py", f"ort-warm-{rep}", "warm", caches["ort"],
                                  extra=cfg.get("ort_args", []) + htp))
    out["cold"] = cold
    out["warm"] = warm
    binary = d / "ours.bin"
    ort_bins = sorted((d / "cache-ort-1").glob("*.bin"))
    if binary.exists() and a.exec_timer:
        # graphExecute alone, from Rust, on our context binary and on the one ONNX Runtime wrote
        # into its EPContext cache: the two graphs compared without any Python or ORT code.
        timer = [a.exec_timer, "--runs", str(calls), "--warmup", str(warmup), "--soc", "60", "--arch", "73"]
        out["graph_execute"] = r.run(f"{name}/graph-execute-ours", timer + [str(binary)], None)
        if ort_bins:
            out["graph_execute_ort_binary"] = r.run(f"{name}/graph-execute-ort-binary", timer + [str(ort_bins[0])], None)
    out["errors"] = errors(d)
    return out


def calibrate_binding(r: Runner) -> dict:
    """Python `.run` against Rust graphExecute on a one-node graph: what the binding adds.
    Three alternating rounds of each; the least disturbed (lowest) median of each side is used,
    since a graph this small is at the mercy of anything else the machine does."""
    d = r.work / "binding"
    d.mkdir(parents=True, exist_ok=True)
    n = 500 if r.args.quick else 2000
    out: dict = {"python_run": [], "graph_execute": []}
    for k in range(3):
        j = d / f"run-{k}.json"
        py = r.run(f"binding/python-run-{k}", [r.args.python, str(HERE / "runner_binding.py"), "--calls", str(n),
                                               "--out", str(j), "--binary", str(d / "relu.bin")], j)
        out["python_run"].append(py["run"])
        if r.args.exec_timer:
            rust = r.run(f"binding/graph-execute-{k}", [r.args.exec_timer, str(d / "relu.bin"), "--runs", str(n),
                                                         "--warmup", "200"], None)
            out["graph_execute"].append(rust)
    if out["graph_execute"]:
        py_ms = min(x["median_ms"] for x in out["python_run"])
        rust_ms = min(x["median_ms"] for x in out["graph_execute"])
        out["python_run_ms"] = py_ms
        out["graph_execute_ms"] = rust_ms
        out["binding_us_measured"] = (py_ms - rust_ms) * 1e3
        # A negative difference is noise (the binding cannot make QNN faster): counted as 0.
        out["binding_us"] = max(0.0, out["binding_us_measured"])
    return out


def errors(d: Path) -> dict:
    import torch

    ref = torch.load(d / "ref.pt")
    res = {"max_abs_ref": ref.abs().max().item()}
    for k in ("ours", "ort"):
        p = d / f"{k}.pt"
        if p.exists():
            y = torch.load(p)
            res[k] = (y.to(ref.dtype).reshape(ref.shape) - ref).abs().max().item() if y.numel() == ref.numel() else None
    return res


def above(x: dict):
    base = (x.get("rss") or {}).get("after_build_mb")
    return x["peak_rss_mb"] - base if base is not None else None


def backend_ms(x: dict):
    """Backend import + everything the backend did inside the first call (no dynamo)."""
    st = x.get("stages") or {}
    if x.get("fallback"):
        return None
    if x["path"] == "qnnx":
        if "in_backend_first_call_ms" not in st:
            return None
        return st.get("import_backend_ms", 0) + st.get("backend_ctor_ms", 0) + st["in_backend_first_call_ms"]
    keys = ("import_backend_ms", "fingerprint_ms", "export_ms", "session_ms", "first_run_ms")
    return sum(st.get(k, 0) for k in keys) if "session_ms" in st else None


def ratio(a, b):
    return a / b if a is not None and b else None


def summarize(m: dict, binding_us) -> dict:
    """The headline numbers of one model (medians over repetitions), ratios us / ONNX Runtime."""
    cold_o = [x["first_output_ms"] for x in m["cold"]["ours"]]
    cold_r = [x["first_output_ms"] for x in m["cold"]["ort"]]
    warm_o = [x["first_output_ms"] for x in m["warm"]["ours"]]
    warm_r = [x["first_output_ms"] for x in m["warm"]["ort"]]
    o1, r1 = m["cold"]["ours"][0], m["cold"]["ort"][0]
    s = {
        "desc": m["eager"]["desc"],
        "calls": m["calls"],
        "ours_fallback": any(x.get("fallback") for x in m["cold"]["ours"] + m["warm"]["ours"]),
        "ort_fallback": any(x.get("fallback") for x in m["cold"]["ort"] + m["warm"]["ort"]),
        "cold_ms": {"ours": median(cold_o), "ort": median(cold_r), "ours_all": cold_o, "ort_all": cold_r},
        "warm_ms": {"ours": median(warm_o), "ort": median(warm_r), "ours_all": warm_o, "ort_all": warm_r},
        "steady_ms": {
            "ours": o1.get("steady", {}).get("median_ms"),
            "ort": r1.get("steady", {}).get("median_ms"),
            "eager": m["eager"].get("steady", {}).get("median_ms"),
            "ours_p95": o1.get("steady", {}).get("p95_ms"),
            "ort_p95": r1.get("steady", {}).get("p95_ms"),
            "eager_p95": m["eager"].get("steady", {}).get("p95_ms"),
        },
        "peak_rss_mb": {
            "ours_cold": median([x["peak_rss_mb"] for x in m["cold"]["ours"]]),
            "ort_cold": median([x["peak_rss_mb"] for x in m["cold"]["ort"]]),
            "ours_warm": median([x["peak_rss_mb"] for x in m["warm"]["ours"]]),
            "ort_warm": median([x["peak_rss_mb"] for x in m["warm"]["ort"]]),
            "eager": m["eager"]["peak_rss_mb"],
        },
        # Peak RSS minus RSS before the backend was imported (torch, the model, dynamo): what
        # each backend added, including dynamo's tracing, which both pay.
        "rss_above_baseline_mb": {
            "ours_cold": median([above(x) for x in m["cold"]["ours"]]),
            "ort_cold": median([above(x) for x in m["cold"]["ort"]]),
            "ours_warm": median([above(x) for x in m["warm"]["ours"]]),
            "ort_warm": median([above(x) for x in m["warm"]["ort"]]),
        },
        "max_abs_error": m["errors"],
    }
    ge = m.get("graph_execute", {}).get("median_ms")
    ours_steady = s["steady_ms"]["ours"]
    dyn = m["eager"].get("dynamo_noop", {}).get("median_ms")

    def us(key):
        v = o1.get(key)
        return v["median_ms"] * 1e3 if v else None

    binding = binding_us
    paired = us("overhead_paired")
    s["overhead_us"] = {
        # The headline: per call, everything above graphExecute = time outside the native .run
        # inside compiled(x) (measured call by call) + what .run adds to graphExecute (binding
        # calibration on a one-node graph, Python .run vs Rust graphExecute).
        "total": paired + binding if paired is not None and binding is not None else None,
        "dynamo": us("overhead_paired_dynamo"),
        "qnnx_python": us("overhead_paired_qnnx"),
        "binding": binding,
        # Cross-checks: median(full call) - median(graphExecute alone in a Rust process); noisy
        # for graphs that take milliseconds (emulator jitter is larger than the overhead).
        "vs_graph_execute": (ours_steady - ge) * 1e3 if ours_steady is not None and ge is not None else None,
        "graph_execute_ms": ge,
        "raw_run_ms": (o1.get("raw_run") or {}).get("median_ms"),
        # torch.compile with a backend that returns a constant, without the emulator running
        # between calls (hot caches): dynamo's floor.
        "dynamo_floor_hot": dyn * 1e3 if dyn is not None else None,
        # The same split with a .run that returns at once (hot CPU caches, as on a device
        # where the NPU, not the CPU, runs the graph).
        "hot_total": us("overhead_hot") + binding if o1.get("overhead_hot") and binding is not None else None,
        "hot_dynamo": us("overhead_hot_dynamo"),
        "hot_qnnx_python": us("overhead_hot_qnnx"),
    }
    ge_ort = m.get("graph_execute_ort_binary", {}).get("median_ms")
    s["graph_execute_ms"] = {"ours": ge, "ort_binary": ge_ort, "ratio": ratio(ge, ge_ort)}
    if s["overhead_us"]["qnnx_python"] is not None and binding is not None:
        s["overhead_us"]["qnnx_only"] = s["overhead_us"]["qnnx_python"] + binding
    s["ratios"] = {
        "cold": ratio(s["cold_ms"]["ours"], s["cold_ms"]["ort"]),
        "warm": ratio(s["warm_ms"]["ours"], s["warm_ms"]["ort"]),
        "steady": ratio(s["steady_ms"]["ours"], s["steady_ms"]["ort"]),
        "rss_cold": ratio(s["peak_rss_mb"]["ours_cold"], s["peak_rss_mb"]["ort_cold"]),
        "rss_warm": ratio(s["peak_rss_mb"]["ours_warm"], s["peak_rss_mb"]["ort_warm"]),
        "rss_above_baseline_cold": ratio(s["rss_above_baseline_mb"]["ours_cold"], s["rss_above_baseline_mb"]["ort_cold"]),
    }
    s["stages"] = {
        "ours_cold": o1.get("stages"),
        "ort_cold": r1.get("stages"),
        "ours_warm": m["warm"]["ours"][0].get("stages"),
        "ort_warm": m["warm"]["ort"][0].get("stages"),
        "ours_serialize_ms": o1.get("serialize_ms"),
        "ours_binary_bytes": o1.get("binary_bytes"),
    }
    # The same without torch.compile's own work (dynamo tracing, guards), which both paths pay
    # alike: what each backend spends from its import to the first output.
    s["backend_only_ms"] = {
        "cold_ours": median([backend_ms(x) for x in m["cold"]["ours"]]),
        "cold_ort": median([backend_ms(x) for x in m["cold"]["ort"]]),
        "warm_ours": median([backend_ms(x) for x in m["warm"]["ours"]]),
        "warm_ort": median([backend_ms(x) for x in m["warm"]["ort"]]),
    }
    b = s["backend_only_ms"]
    b["cold_ratio"] = ratio(b["cold_ours"], b["cold_ort"])
    b["warm_ratio"] = ratio(b["warm_ours"], b["warm_ort"])
    s["compile_to_first_output_ms"] = {
        "ours": median([x.get("compile_to_first_output_ms") for x in m["cold"]["ours"]]),
        "ort": median([x.get("compile_to_first_output_ms") for x in m["cold"]["ort"]]),
        "ours_warm": median([x.get("compile_to_first_output_ms") for x in m["warm"]["ours"]]),
        "ort_warm": median([x.get("compile_to_first_output_ms") for x in m["warm"]["ort"]]),
    }
    s["rss_checkpoints_mb"] = {"ours_cold": o1.get("rss"), "ort_cold": r1.get("rss"),
                               "ours_warm": m["warm"]["ours"][0].get("rss"), "ort_warm": m["warm"]["ort"][0].get("rss")}
    s["goals"] = {
        "cold": _le(s["ratios"]["cold"], GOALS["cold"]),
        "warm": _le(s["ratios"]["warm"], GOALS["warm"]),
        "steady": _le(s["ratios"]["steady"], GOALS["steady"]),
        "overhead": _le(s["overhead_us"]["total"], GOALS["overhead_us"]),
        "overhead_hot": _le(s["overhead_us"]["hot_total"], GOALS["overhead_us"]),
        "rss": _le(s["ratios"]["rss_cold"], GOALS["rss"]),
    }
    return s


def _le(v, limit):
    return None if v is None else bool(v <= limit)


def fmt(v, spec=".2f", none="–"):
    return none if v is None else format(v, spec)


def markdown(result: dict) -> str:
    env = result["environment"]
    lines = []
    lines.append(
        f"Run {result['timestamp']} on {env['cpus']} CPUs; 1-min load average {env['load_at_start']:.2f} at the start; "
        f"other processes used {env['foreign_cpus_median']:.2f} CPUs (median over measurements, max {env['foreign_cpus_max']:.2f})"
        + (" (**taken under load**)" if env["under_load"] else "")
        + f"; QNN {env['qnn_build']}, SoC 60 / HTP v73 fp16 for both QNN paths; onnxruntime {env.get('onnxruntime', '?')} "
        f"+ onnxruntime-qnn 2.7.0; torch {env['torch']}. Cold and warm: median of {result['reps']} fresh processes."
    )
    lines.append("")
    lines.append("| model (input) | cold start ours / ORT (ratio) | warm start ours / ORT (ratio) | backend only, cold / warm ms: ours / ORT (ratios) | peak RSS MB, cold process: ours / ORT (ratio); above the torch + model + dynamo baseline | max error ours / ORT (max \\|eager\\|) |")
    lines.append("|---|---|---|---|---|---|")
    for name, s in result["summary"].items():
        c, w, rss, e = s["cold_ms"], s["warm_ms"], s["peak_rss_mb"], s["max_abs_error"]
        bo = s["backend_only_ms"]
        tag = " (fallback)" if s["ours_fallback"] else ""
        tag_r = " (fallback)" if s["ort_fallback"] else ""
        lines.append(
            f"| {name}{tag} ({s['desc'].split(', ', 1)[-1] if ', ' in s['desc'] else s['desc']}) "
            f"| {fmt(c['ours'] and c['ours'] / 1e3)} s / {fmt(c['ort'] and c['ort'] / 1e3)} s{tag_r} (**{fmt(s['ratios']['cold'])}x**) "
            f"| {fmt(w['ours'], '.0f')} ms / {fmt(w['ort'], '.0f')} ms (**{fmt(s['ratios']['warm'])}x**) "
            f"| {fmt(bo['cold_ours'], '.0f')} / {fmt(bo['cold_ort'], '.0f')} ({fmt(bo['cold_ratio'])}x); "
            f"{fmt(bo['warm_ours'], '.0f')} / {fmt(bo['warm_ort'], '.0f')} ({fmt(bo['warm_ratio'])}x) "
            f"| {fmt(rss['ours_cold'], '.0f')} / {fmt(rss['ort_cold'], '.0f')} (**{fmt(s['ratios']['rss_cold'])}x**); "
            f"above baseline {fmt(s['rss_above_baseline_mb']['ours_cold'], '.0f')} / {fmt(s['rss_above_baseline_mb']['ort_cold'], '.0f')} "
            f"({fmt(s['ratios']['rss_above_baseline_cold'])}x) "
            f"| {fmt(e.get('ours'), '.1e')} / {fmt(e.get('ort'), '.1e')} ({fmt(e.get('max_abs_ref'), '.2f')}) |"
        )
    lines.append("")
    lines.append("| model | calls | steady median ms: ours / ORT / eager CPU | p95 ms: ours / ORT / eager | ratio ours / ORT | graphExecute alone ms: our graph / ORT's graph | overhead per call µs: total = dynamo + qnnx Python + binding | same, hot caches |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for name, s in result["summary"].items():
        st, ov = s["steady_ms"], s["overhead_us"]
        lines.append(
            f"| {name} | {s['calls']} | {fmt(st['ours'])} / {fmt(st['ort'])} / {fmt(st['eager'])} "
            f"| {fmt(st['ours_p95'])} / {fmt(st['ort_p95'])} / {fmt(st['eager_p95'])} "
            f"| **{fmt(s['ratios']['steady'], '.3f')}x** | {fmt(ov['graph_execute_ms'])} / {fmt(s['graph_execute_ms']['ort_binary'])} "
            f"| **{fmt(ov['total'], '.0f')}** = {fmt(ov['dynamo'], '.0f')} + {fmt(ov['qnnx_python'], '.0f')} + {fmt(ov['binding'], '.0f')} "
            f"| **{fmt(ov['hot_total'], '.0f')}** = {fmt(ov['hot_dynamo'], '.0f')} + {fmt(ov['hot_qnnx_python'], '.1f')} + {fmt(ov['binding'], '.0f')} |"
        )
    lines.append("")
    g = result["goals"]
    lines.append("Goals (every model): " + "; ".join(
        f"{k} {'met' if v['met'] else 'missed'} ({v['text']})" for k, v in g.items()))
    return "\n".join(lines) + "\n"


def goals(summary: dict) -> dict:
    out = {}
    spec = [("cold", "cold", f"<= {GOALS['cold']}x"), ("warm", "warm", f"<= {GOALS['warm']}x"),
            ("steady", "steady", f"<= {GOALS['steady']}x"), ("overhead", "overhead", f"<= {GOALS['overhead_us']:.0f} µs"),
            ("overhead_hot", "overhead_hot", f"<= {GOALS['overhead_us']:.0f} µs with hot caches"),
            ("rss", "rss", f"<= {GOALS['rss']}x")]
    for key, gk, text in spec:
        vals = {n: s["goals"][gk] for n, s in summary.items()}
        missed = [n for n, v in vals.items() if v is False]
        unknown = [n for n, v in vals.items() if v is None]
        out[key] = {"met": not missed and not unknown, "target": text, "missed_by": missed, "unknown": unknown,
                    "text": text + (f"; missed by {', '.join(missed)}" if missed else "")}
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["summary"])
    panels = [
        ("cold start", "cold", GOALS["cold"]),
        ("warm start", "warm", GOALS["warm"]),
        ("steady state (median)", "steady", GOALS["steady"]),
        ("peak RSS (cold process)", "rss_cold", GOALS["rss"]),
    ]
    names = names[::-1]  # first model at the top
    fig, axes = plt.subplots(1, 5, figsize=(20, 4.2), sharey=False)
    for ax, (title, key, goal) in zip(axes, panels):
        vals = [result["summary"][n]["ratios"][key] or 0 for n in names]
        colors = ["tab:green" if v and v <= goal else "tab:red" for v in vals]
        ax.barh(names, vals, color=colors)
        ax.axvline(1.0, color="gray", lw=1)
        ax.axvline(goal, color="black", ls="--", lw=1, label=f"goal {goal}x")
        ax.set_title(title)
        ax.set_xlabel("qnnx / ONNX Runtime QNN EP")
        for y, v in enumerate(vals):
            ax.text(v, y, f" {v:.2f}", va="center", fontsize=8)
        ax.legend(loc="lower right", fontsize=8)
        if ax is not axes[0]:
            ax.set_yticklabels([])
    ax = axes[4]
    situ = [max(result["summary"][n]["overhead_us"]["total"] or 0, 0.5) for n in names]
    hot = [max(result["summary"][n]["overhead_us"]["hot_total"] or 0, 0.5) for n in names]
    ys = list(range(len(names)))
    ax.barh([y + 0.2 for y in ys], situ, height=0.4, color="tab:orange", label="emulator running")
    ax.barh([y - 0.2 for y in ys], hot, height=0.4, color="tab:blue", label="hot caches")
    ax.axvline(GOALS["overhead_us"], color="black", ls="--", lw=1, label=f"goal {GOALS['overhead_us']:.0f} µs")
    ax.set_xscale("log")
    ax.set_yticks(ys)
    ax.set_yticklabels([])
    ax.set_title("per-call overhead above graphExecute")
    ax.set_xlabel("µs (dynamo + qnnx + binding)")
    ax.legend(loc="lower right", fontsize=8)
    env = result["environment"]
    fig.suptitle(
        f"qnnx vs ONNX Runtime QNN EP on the x86_64 HTP emulator (SoC 60 / v73), {result['timestamp']}"
        + (" — under load" if env["under_load"] else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def environment(a, loads, foreign) -> dict:
    import torch

    env = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_min": min(loads) if loads else loadavg(),
        "load_max": max(loads) if loads else loadavg(),
        "load_limit": a.load_limit,
        # CPUs used by other processes during each measurement (machine busy time minus the
        # measured process's own CPU time, over its wall time).
        "foreign_cpus_median": statistics.median(foreign) if foreign else None,
        "foreign_cpus_max": max(foreign) if foreign else None,
        "foreign_cpus_limit": a.foreign_limit,
    }
    # The 1-minute load average includes the benchmark's own processes (the emulator keeps one
    # to two CPUs busy), so it is only checked before starting; during the run, interference is
    # judged by what other processes used.
    env["under_load"] = bool(foreign) and statistics.median(foreign) > a.foreign_limit
    try:
        import onnxruntime

        env["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    info = ROOT / "runtime" / "qnn" / "INSTALLED.json"
    if info.exists():
        env["qnn_build"] = json.loads(info.read_text()).get("build_id")
    else:
        env["qnn_build"] = "?"
    try:
        env["git_head"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True).stdout.strip()
        env["git_dirty"] = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"],
                                               capture_output=True, text=True).stdout.strip())
    except OSError:
        pass
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", required=True, help="the Python with qnnx_backend (no onnxruntime)")
    ap.add_argument("--exec-timer", help="path of the exec_timer example binary")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--calls", type=int, help="timed calls per steady-state measurement (default: per model)")
    ap.add_argument("--reps", type=int, default=3, help="fresh processes per cold/warm measurement")
    ap.add_argument("--quick", action="store_true", help="smoke run: 10 calls, 1 repetition")
    ap.add_argument("--work", default=str(HERE / "work"))
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--name", default="latest")
    ap.add_argument("--load-limit", type=float, default=1.0, help="1-minute load average to wait for")
    ap.add_argument("--wait-start", type=float, default=0,
                    help="before starting, wait up to this many seconds for the load average to drop below --load-limit")
    ap.add_argument("--wait-idle", type=float, default=0,
                    help="before each process, wait up to this many seconds for the load average to drop")
    ap.add_argument("--foreign-limit", type=float, default=0.25,
                    help="label the run 'under load' when other processes used more CPUs than this (median)")
    args = ap.parse_args()
    if args.quick:
        args.calls = args.calls or 10
        args.reps = 1
    names = [n for n in args.models.split(",") if n]
    for n in names:
        if n not in MODELS:
            sys.exit(f"unknown model {n}; known: {', '.join(MODELS)}")
    start_load = wait_for_idle(args.load_limit, args.wait_start) if args.wait_start else loadavg()
    r = Runner(args)
    t0 = time.time()
    print("binding calibration:", file=sys.stderr, flush=True)
    binding = calibrate_binding(r)
    raw = {}
    for n in names:
        print(f"{n}:", file=sys.stderr, flush=True)
        raw[n] = bench_model(r, n, MODELS[n])
    summary = {n: summarize(raw[n], binding.get("binding_us")) for n in names}
    result = {
        "timestamp": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": "./bench/run " + " ".join(sys.argv[1:]).replace(f"--python {args.python}", "").strip(),
        "quick": args.quick,
        "reps": args.reps,
        "duration_s": time.time() - t0,
        "goal_targets": GOALS,
        "environment": {**environment(args, r.loads, r.foreign), "load_at_start": start_load},
        "binding_calibration": binding,
        "summary": summary,
        "goals": goals(summary),
        "raw": raw,
    }
    res = Path(args.results)
    res.mkdir(parents=True, exist_ok=True)
    (res / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    md = markdown(result)
    (res / f"{args.name}.md").write_text(md)
    try:
        plot(result, res / f"{args.name}.png")
    except ImportError as e:
        print(f"no plot: {e}", file=sys.stderr)
    print(md)
    print(f"results: {res / (args.name + '.json')}, {args.name}.md, {args.name}.png "
          f"({result['duration_s'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
