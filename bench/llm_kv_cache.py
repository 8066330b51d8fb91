"""What holding SmolLM2-135M-Instruct's KV cache at 8 bits costs on the host, before any QNN, and
what evens it out.

Everything but the cache stays fp32. The cache is held as the HTP's decode graphs hold it, with
quantization/kv8.py's own encodings: one asymmetric uint8 encoding per layer's keys and per
layer's values over the range the calibration text's float prefills give (bench/llm_quant.py's
calibration text), each row rounded as it is written, the encodings fitted by each of kv8's
observers (``--observers``: "minmax", the default, and "histogram"). Rows, each
against the unchanged fp32 model, teacher-forced over the Zen of Python (bench/llm_weights.py's
metrics), with the keys only, the values only, or both held at 8 bits:

* ``none``: the model as loaded;
* ``rows rotated``: each cached row held times a randomized Hadamard matrix of the head size
  (``kv_cache_rotation=True``: kv8.rotation_matrix);
* ``rotate_decoder``: the residual stream and value heads rotated offline (quantization/rotation.py),
  with and without the rows rotated;
* ``keys smoothed``: an alternative tried for the keys alone (SmoothQuant's scale migration
  between queries and keys, one scale per rotary pair so that it commutes with the rotary
  embedding, ``smooth_keys`` below), with and without the rows rotated.

    python3 bench/llm_kv_cache.py      # host only, about 8 minutes
    python3 bench/llm_kv_cache.py --text license --variants "none,rows rotated"
    python3 bench/llm_kv_cache.py --observers minmax   # only the default fit

``--weight-bits 8``: every Linear's weight (the LM head too, untied) rounded to 8 bits per
channel as 16a8w rounds it (bench/llm_weights.py's ``per_channel``), so the rows say what the
cache costs beside the 8-bit weights rather than alone; its "weights only" row has no cache
rounded. The encodings are fitted to the float model's rows, as the backend fits them (its
calibration prefills run the float model); ``--fit rounded`` fits them to the rounded model's.

    python3 bench/llm_kv_cache.py --variants "rows rotated" --weight-bits 8

``--text license``: a second evaluation text, the first 1,500 characters of the Python
installation's LICENSE.txt (English prose, not calibration text), into
bench/results/llm_kv_cache-license.{json,md}; ``--variants`` runs only the variants named;
``--out`` writes elsewhere.

Results: bench/results/llm_kv_cache.json and .md.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
import transformers

import common  # noqa: E402  (bench/common.py)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models", "common"))
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "results", "llm_kv_cache")

from llm_quant import TEXTS, calibration_texts  # noqa: E402


class Held8(transformers.DynamicCache):
    """A cache whose keys and/or values are rounded to their layer's uint8 encoding (kv8.Encoding,
    rotated rows included) as they are written."""

    def __init__(self, keys, values):
        super().__init__()
        self.enc_k, self.enc_v = keys, values

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if self.enc_k is not None:
            e = self.enc_k[layer_idx]
            key_states = e.dequantize(e.quantize(key_states), key_states.dtype)
        if self.enc_v is not None:
            e = self.enc_v[layer_idx]
            value_states = e.dequantize(e.quantize(value_states), value_states.dtype)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


def encodings(model, seqs, rotate: bool, observer: str):
    """Each layer's kv8 encodings of keys and of values fitted to the calibration prefills' rows."""
    from qnnx_backend.quantization import kv8, prefill

    samples = [[t for kv in prefill.kv_rows(model, seq) for t in kv] for seq in seqs]
    found = kv8.encodings(samples, range(len(samples[0])), rotate=rotate, observer=observer)
    return [found[k] for k in range(0, len(found), 2)], [found[k] for k in range(1, len(found), 2)]


@torch.no_grad()
def smooth_keys(model, seqs):
    """Scale each Llama attention's key channels by ``1/s`` and its query channels by ``s`` (every
    score unchanged), ``s`` per KV head and rotary pair (``i``, ``i + d/2``: a scale shared by a
    pair commutes with the rotary embedding) from the calibration text's largest key pair norms
    (which the rotary embedding keeps), so that every key pair gets the same range."""
    cfg = model.config
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = cfg.hidden_size // heads
    layers = model.model.layers
    widest = torch.zeros(len(layers), kv, d // 2, dtype=torch.float64)

    def hook(i):
        def record(_m, _inp, out):
            x = out.double().reshape(-1, kv, d)
            widest[i] = torch.maximum(widest[i], torch.hypot(x[..., : d // 2], x[..., d // 2 :]).amax(0))
        return record

    handles = [layer.self_attn.k_proj.register_forward_hook(hook(i)) for i, layer in enumerate(layers)]
    for seq in seqs:
        model(input_ids=seq[None], use_cache=False)
    for h in handles:
        h.remove()
    for i, layer in enumerate(layers):
        s = widest[i].clamp_min(1e-6)
        s = s / s.log().mean(-1, keepdim=True).exp()  # geometric mean 1 per head
        s = torch.cat([s, s], -1)  # [kv, d]: both channels of a pair
        a = layer.self_attn
        a.k_proj.weight.data = (a.k_proj.weight.double() / s.reshape(-1, 1)).float()
        a.q_proj.weight.data = (a.q_proj.weight.double() * s.repeat_interleave(heads // kv, 0).reshape(-1, 1)).float()


def main():
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", choices=tuple(TEXTS), default="zen")
    ap.add_argument("--variants", default=None, help="comma-separated variant names (default: all)")
    ap.add_argument("--observers", default="minmax,histogram", help="comma-separated quantization.config.OBSERVERS")
    ap.add_argument("--out", default=None, help="results path without .json/.md (default: by --text)")
    ap.add_argument("--weight-bits", type=int, choices=(8,), default=None,
                    help="round every Linear's weight to 8 bits per channel too (16a8w's weights)")
    ap.add_argument("--fit", choices=("float", "rounded"), default="float",
                    help="with --weight-bits: fit the cache's encodings to the float model's rows (the backend's way) "
                         "or to the rounded model's")
    args = ap.parse_args()
    if args.fit == "rounded" and args.weight_bits is None:
        raise SystemExit("--fit rounded needs --weight-bits")
    out = args.out or (OUT if args.text == "zen" else f"{OUT}-{args.text}")
    warnings.simplefilter("ignore")
    import smollm2
    from llm_weights import cells, per_channel, row_metrics

    from qnnx_backend.quantization import prefill, rotation

    commit = common.commit()
    model, tok = smollm2.load()
    make_text, text_name = TEXTS[args.text]
    ids = tok(make_text(), return_tensors="pt")["input_ids"]
    seqs = prefill.sequences(calibration_texts(16), tok)
    with torch.no_grad():
        ref = model(ids).logits[0]
    variants = {  # name: (model transform, rows rotated)
        "none": (None, False),
        "rows rotated": (None, True),
        "rotate_decoder": (rotation.rotate_decoder, False),
        "rotate_decoder, rows rotated": (rotation.rotate_decoder, True),
        "keys smoothed": (lambda m: smooth_keys(m, seqs), False),
        "keys smoothed, rows rotated": (lambda m: smooth_keys(m, seqs), True),
    }
    if args.variants:
        wanted = args.variants.split(",")
        unknown = set(wanted) - set(variants)
        if unknown:
            raise SystemExit(f"unknown variants {sorted(unknown)}; known: {list(variants)}")
        variants = {k: v for k, v in variants.items() if k in wanted}
    rows, float_db = [], {}
    for name, (transform, rotate) in variants.items():
        m, _ = smollm2.load()
        if transform is not None:
            transform(m)
        with torch.no_grad():
            float_db[name] = row_metrics(ref, m(ids).logits[0], ids)["logits_sqnr_db"]
        fitted = m  # the model whose prefills the encodings are fitted to
        if args.weight_bits:
            rounded, _ = smollm2.load()
            if transform is not None:
                transform(rounded)
            rounded.lm_head.weight = torch.nn.Parameter(rounded.lm_head.weight.detach().clone())  # untied
            with torch.no_grad():
                for lin in rounded.modules():
                    if isinstance(lin, torch.nn.Linear):
                        lin.weight.data = per_channel(lin.weight.data, args.weight_bits)
                rows.append({"variant": name, "encodings": "-", "held at 8 bits": "weights only",
                             **row_metrics(ref, rounded(ids).logits[0], ids)})
            print(json.dumps(rows[-1]), flush=True)
            fitted = rounded if args.fit == "rounded" else m
            m = rounded
        for observer in args.observers.split(","):
            enc_k, enc_v = encodings(fitted, seqs, rotate, observer)
            with torch.no_grad():
                for held, (k, v) in {"keys": (enc_k, None), "values": (None, enc_v), "both": (enc_k, enc_v)}.items():
                    got = m(ids, past_key_values=Held8(k, v), use_cache=True).logits[0]
                    rows.append({"variant": name, "encodings": observer, "held at 8 bits": held, **row_metrics(ref, got, ids)})
                    print(json.dumps(rows[-1]), flush=True)
    with open(out + ".json", "w") as f:
        json.dump({"commit": commit, "text": args.text, "eval_tokens": int(ids.shape[1]),
                   "weight_bits": args.weight_bits, "fit": args.fit,
                   "float_logits_sqnr_db": float_db, "rows": rows}, f, indent=1)
    text = text_name if args.text == "zen" else f"{text_name} ({ids.shape[1]} tokens)"
    with open(out + ".md", "w") as f:
        rounded_too = ("only the KV cache rounded" if not args.weight_bits else
                       f"the KV cache and every Linear's weight ({args.weight_bits} bits per channel) rounded, the "
                       f"cache's encodings fitted to the {args.fit} model's rows")
        f.write(f"SmolLM2-135M-Instruct, {rounded_too} (host: uint8 per layer's keys and values as "
                f"the HTP's graphs hold them, quantization/kv8.py), {text} teacher-forced; commit {commit}; "
                f"`python3 bench/llm_kv_cache.py {' '.join(sys.argv[1:])}`.\n\n"
                f"Float model after each transform against the original, logits SQNR dB: {json.dumps(float_db)}.\n\n"
                "| variant | encodings | at 8 bits | logits SQNR dB | centered dB | log-prob dB | top-1 agreement | ppl ratio | top-1, window |\n"
                "|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['variant']} | {r['encodings']} | {r['held at 8 bits']} | {cells(r)} |\n")


if __name__ == "__main__":
    main()
