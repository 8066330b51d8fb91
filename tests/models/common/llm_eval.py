"""Teacher-forced evaluation of a decoder through ``generate``, the way the LLM tests and
bench/llm_quant.py measure a compiled decoder against fp32: the graphs see exactly the inputs
``generate`` gives them (a prefill graph and one decode graph, none per step)."""

from __future__ import annotations

import time

import torch
import transformers


class Forced(transformers.LogitsProcessor):
    """Teacher forcing inside ``generate`` (so the graphs see exactly generate's inputs: two
    graphs, none per step): records each step's logits and when they arrived, then makes the
    true next token the only choice."""

    def __init__(self, targets: torch.Tensor):
        self.targets = targets
        self.logits: list[torch.Tensor] = []
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        self.logits.append(scores[0].detach().clone())
        forced = torch.full_like(scores, float("-inf"))
        forced[0, self.targets[len(self.logits) - 1]] = 0
        return forced


def teacher_forced(model, ids: torch.Tensor, prefill: int, cache_len: int, out: dict | None = None) -> tuple[torch.Tensor, list]:
    """Logits at positions prefill-1 .. n-2 of ``ids`` [1, n] (each predicting the next true
    token): a prefill of the first ``prefill`` tokens, then one decode step per token; and the
    time of each decode step. ``out["cache"]`` receives generate's cache when given."""
    forced = Forced(ids[0, prefill:])
    with torch.no_grad():
        result = model.generate(ids[:, :prefill], return_dict_in_generate=True, max_new_tokens=ids.shape[1] - prefill,
                       do_sample=False, logits_processor=[forced], cache_implementation="static",
                       disable_compile=True, max_cache_len=cache_len)
    if out is not None:
        out["cache"] = result.past_key_values  # what the compiled graphs left in the caller's cache
    steps = [b - a for a, b in zip(forced.times, forced.times[1:])]
    return torch.stack(forced.logits), steps


def held_values(t: torch.Tensor, n: int, rotated: bool) -> int:
    """How many distinct values the first ``n`` rows of a caller's cache tensor ([1, heads, length,
    head size]) hold on the grid the quantized graphs hold them on: as they are, or, ``rotated``
    (``kv_cache_rotation``), times the cache's Hadamard matrix again (the caller's cache holds the
    rows rotated back), counting values within float rounding (1e-4) as one. An 8-bit cache
    holds at most 256."""
    x = t[:, :, :n].float()
    if not rotated:
        return torch.unique(x).numel()
    from qnnx_backend.quantization import kv8

    v = (x @ kv8.rotation_matrix(x.shape[-1])).flatten().unique()
    return 1 + int((v.diff() > 1e-4).sum())
