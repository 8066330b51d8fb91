"""A mixed-precision recipe for decoders from each layer's error measured on the HTP:
``qnnx_backend.decoder_recipe(model, calibration, tokenizer=...)``.

``mixed_precision`` searches a whole graph with every value observed, one compile per attempt:
a decoder's graph is too large for that (an observed graph of every value exceeds the
emulator's memory planner, and a search of 200 projections would take hours). A decoder's
sensitive layers are its projections (``nn.Linear``): ExecuTorch's analyzer ends up keeping the
LM head, ``down_proj`` and ``v_proj`` wider, and so does the host measurement in
``bench/llm_weights.py``. So each Linear is measured **alone**:

1. The calibration sequences (text through ``tokenizer``, or token ids) run once through the
   float model; a hook keeps each Linear's inputs (the first ``tokens`` positions over all
   sequences; a Linear reading the same tensor as another, such as q/k/v, shares it).
2. Linears are packed into small graphs (consecutive ones, about ``GRAPH_WEIGHTS`` weights each;
   one Linear per graph if it is larger): each graph takes its Linears' recorded inputs and
   returns their outputs. It is quantized with the scheme (activations and weights as the
   decoder's graphs quantize them: same observer, rounding, block size), calibrated on the
   recorded inputs in chunks of ``chunk`` positions, compiled for the HTP of ``soc_model`` and
   run there (emulated on x86_64) on the same chunks. Each Linear's SQNR is its HTP output
   against its float output on the same float input: its own error, none inherited.
3. Each Linear's cost is what that error does to the next-token distribution: the float model
   runs the same sequences again with that one Linear's output replaced by what the HTP
   computed, and the mean KL divergence from the float model's distribution is its cost.

The recipe ranks by the cost, not by the SQNR: on SmolLM2-135M the SQNR ranking (ExecuTorch's
criterion) puts ``v_proj`` first and misses the ``down_proj`` that writes the attention sink; with
the weights alone rounded, its worst 120 of 210 projections at 16 bits give 94.1% top-1 agreement
and 24.4 dB (none: 94.5%, 23.6 dB), the cost ranking's 120 give 96.5% and 30.2 dB
(docs/llm-accuracy.md, "A recipe from each layer's error", which also has the whole quantized
model on the HTP). It keeps the costliest at the next wider scheme (``WIDER``: 8-bit weights go
to 16, 4-bit ones to 8) as ``quantize_modules`` overrides, the option every quantized compile takes.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import math
import time
from typing import Any, Optional, Sequence

import torch
from torch._dynamo.eval_frame import reset_code

from ..settings import parse_options
from .prefill import sequences

logger = logging.getLogger("qnnx_backend")

#: Weights per measured graph (about): small enough that each compiles in seconds on the emulator,
#: large enough that a 30-layer decoder is not 200 compiles (SmolLM2-135M: two decoder layers per
#: graph, 15 graphs with the LM head).
GRAPH_WEIGHTS = 8_000_000

#: The scheme a promoted Linear goes to: wider weights (and for 8a8w 16-bit activations, the
#: promotion mixed_precision makes).
WIDER = {"16a8w": "16a16w", "16a4w": "16a8w", "8a8w": "16a8w"}


@dataclasses.dataclass
class DecoderRecipe:
    """Each Linear measured at ``scheme`` on the HTP, costliest first, and the overrides that keep
    the costliest wider (``options``)."""

    scheme: str
    wider: str
    rows: list
    """(module path, SQNR in dB, cost: mean KL divergence of the next-token distribution), costliest first."""
    tokens: int
    """Positions each Linear was measured on."""
    graphs: int
    seconds: float

    def options(self, keep: int) -> dict:
        """``{"quantize_modules": {path: wider scheme}}`` for the ``keep`` costliest Linears; merge
        it into the compile's options."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep={keep!r}: how many Linears to keep wider, an int of at least 0")
        chosen = self.rows[:keep]
        return {"quantize_modules": {r[0]: self.wider for r in chosen}} if chosen else {}

    def table(self, limit: int = 20) -> str:
        """The costliest ``limit`` Linears as a Markdown table."""
        lines = [f"| Linear ({self.scheme} on the HTP, alone) | SQNR | cost (KL) |", "|---|---|---|"]
        lines += [f"| `{p}` | {s:.1f} dB | {c:.2e} |" for p, s, c in self.rows[:limit]]
        return "\n".join(lines)


class _Graph(torch.nn.Module):
    """Some Linears, each applied to its own recorded input."""

    def __init__(self, linears: Sequence[torch.nn.Linear], reads: Sequence[int]):
        super().__init__()
        self.linears = torch.nn.ModuleList(linears)
        self.reads = list(reads)

    def forward(self, *xs):
        return tuple(lin(xs[r]) for lin, r in zip(self.linears, self.reads))


def _sqnr(ref: torch.Tensor, got: torch.Tensor) -> float:
    err = float(((ref.double() - got.double()) ** 2).sum())
    if not math.isfinite(err):
        return float("-inf")
    return 10 * math.log10(float((ref.double() ** 2).sum()) / err) if err > 0 else float("inf")


@torch.no_grad()
def _record(model, seqs, linears, tokens):
    """({path: [rows, in_features] float32}, {path: the first path reading the same tensor},
    the sequences run, each cut to at most ``tokens``): rows are the sequences' positions in order."""
    got: dict = {p: [] for p in linears}
    shared: dict = {}
    first: dict = {}
    alive: list = []  # this forward's inputs, so that no later tensor reuses a recorded address

    def hook(path):
        def pre(_mod, args):
            x = args[0]
            if sum(t.shape[0] for t in got[path]) >= tokens:
                return
            key = (x.data_ptr(), tuple(x.shape))
            if not got[path]:
                shared[path] = first.setdefault(key, path)
                alive.append(x)
            got[path].append(x.detach().reshape(-1, x.shape[-1]).float().clone())

        return pre

    handles = [m.register_forward_pre_hook(hook(p)) for p, m in linears.items()]
    run, rows = [], 0
    try:
        for s in seqs:
            if rows >= tokens:
                break
            s = s[: tokens - rows]
            model(s[None])
            run.append(s)
            rows += s.numel()
            first.clear()
            alive.clear()
    finally:
        for h in handles:
            h.remove()
    return {p: torch.cat(v) for p, v in got.items() if v}, shared, run


def _logits(out) -> torch.Tensor:
    """The logits of a causal LM's output (a ``CausalLMOutput``, a tensor, or a tuple starting with them)."""
    out = getattr(out, "logits", out)
    out = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"decoder_recipe: the model returned {type(out).__name__}; give a causal LM returning logits")
    return out.double().log_softmax(-1)


@torch.no_grad()
def _costs(model, seqs, linears, outputs, n) -> dict:
    """{path: mean KL divergence of the next-token distribution} with that one Linear's output
    replaced by ``outputs[path]`` (its HTP output on the first ``n`` recorded positions)."""
    cut, at = [], 0
    for s in seqs:  # the positions measured: causal, so a sequence's prefix is replayed alone
        if n - at >= 2:
            cut.append(s[: n - at])
        at += s.numel()
    refs = [_logits(model(s[None])) for s in cut]
    costs = {}
    for path, lin in linears.items():
        at = [0]

        def replace(_mod, _args, out, path=path, at=at):
            rows = out.reshape(-1, out.shape[-1]).shape[0]
            new = outputs[path][at[0] : at[0] + rows].reshape(out.shape).to(out.dtype)
            at[0] += rows
            return new

        h = lin.register_forward_hook(replace)
        try:
            kl = [(r.exp() * (r - _logits(model(s[None])))).sum(-1).mean() for s, r in zip(cut, refs)]
        finally:
            h.remove()
        costs[path] = max(0.0, float(sum(kl) / len(kl)))  # >= 0 but for rounding
    return costs


def decoder_recipe(
    model: torch.nn.Module,
    calibration: Any,
    *,
    tokenizer: Any = None,
    quantize: str = "16a8w",
    soc_model: Any = 60,
    htp_arch: Optional[int] = None,
    weight_block_size: Optional[int] = None,
    weight_rounding: str = "nearest",
    observer: str = "minmax",
    modules: str = "*",
    tokens: int = 512,
    chunk: int = 64,
) -> DecoderRecipe:
    """Measures every ``nn.Linear`` of the causal LM ``model`` whose path matches ``modules`` (an
    fnmatch pattern) quantized with ``quantize`` on the HTP of ``soc_model``, alone, on the inputs
    the float model gives it over ``calibration`` (strings through ``tokenizer``, or token ids;
    the first ``tokens`` positions), and returns them costliest first with the overrides that
    keep the costliest wider (module docstring). ValueError naming what to change for bad
    options, no Linear, or calibration too short to give ``chunk`` positions."""
    if quantize not in WIDER:
        raise ValueError(f"quantize={quantize!r}: decoder_recipe takes one of {', '.join(WIDER)} (16a16w has nothing wider)")
    for name, v, least in (("tokens", tokens, 2), ("chunk", chunk, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ValueError(f"{name}={v!r}: an int of at least {least}")
    base = {"quantize": quantize, "soc_model": soc_model, "htp_arch": htp_arch, "observer": observer,
            "weight_rounding": weight_rounding, "weight_block_size": weight_block_size, "strict": True, "cache": False}
    parse_options({**base, "calibration": [torch.zeros(1)]})  # every option checked before any work
    t0 = time.perf_counter()
    model = model.eval()
    linears = {p: m for p, m in model.named_modules() if isinstance(m, torch.nn.Linear) and fnmatch.fnmatchcase(p, modules)}
    if not linears:
        raise ValueError(f"modules={modules!r} matches no nn.Linear of the model (its Linears: {_some(model)})")
    inputs, shared, seqs = _record(model, sequences(calibration, tokenizer), linears, tokens)
    linears = {p: m for p, m in linears.items() if p in inputs}
    if not linears:
        raise ValueError(f"modules={modules!r}: none of the Linears it matches ran on the calibration")
    n = min(t.shape[0] for t in inputs.values())
    if n < chunk:
        raise ValueError(
            f"calibration gives {n} positions; decoder_recipe needs at least chunk={chunk}: give more or longer sequences"
        )
    n -= n % chunk
    sqnr, outputs, graphs = {}, {}, 0
    for group in _groups(list(linears), linears):
        sources = list(dict.fromkeys(shared[p] for p in group))
        reads = [sources.index(shared[p]) for p in group]
        graph = _Graph([linears[p] for p in group], reads)
        feeds = [tuple(inputs[s][i : i + chunk][None] for s in sources) for i in range(0, n, chunk)]
        compiled = torch.compile(graph, backend="qnn", dynamic=False, options={**base, "calibration": feeds})
        with torch.no_grad():
            got = [compiled(*f) for f in feeds]
            for k, p in enumerate(group):
                ref = torch.cat([graph.linears[k](f[reads[k]])[0] for f in feeds])
                outputs[p] = torch.cat([g[k][0] for g in got]).float()
                sqnr[p] = round(_sqnr(ref, outputs[p]), 2)
        graphs += 1
        logger.info("decoder_recipe: graph %d: %s", graphs, ", ".join(f"{p} {sqnr[p]:.1f} dB" for p in group))
        # The compiled graph is not needed again. Only this forward's cache entries are dropped:
        # torch._dynamo.reset() would drop every compiled function of the process (the user's
        # too), and keeping them would reach dynamo's recompile limit for one code object (8),
        # after which it runs the next graphs eagerly.
        reset_code(_Graph.forward.__code__)
    del inputs
    costs = _costs(model, seqs, linears, outputs, n)
    rows = sorted(((p, sqnr[p], costs[p]) for p in linears), key=lambda r: -r[2])
    return DecoderRecipe(quantize, WIDER[quantize], rows, n, graphs, round(time.perf_counter() - t0, 1))


def _groups(paths: list, linears: dict) -> list:
    """Consecutive paths with about GRAPH_WEIGHTS weights each (a larger Linear alone)."""
    out, cur, size = [], [], 0
    for p in paths:
        w = linears[p].weight.numel()
        if cur and size + w > GRAPH_WEIGHTS:
            out.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += w
    return out + [cur] if cur else out


def _some(model) -> str:
    names = [p for p, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "") if names else "none"

