"""Quantized graphs for the LLM artifact: ``export.DecoderStep`` calibrated in prefill mode,
quantized by PT2E (``quantization.pt2e``, the same machinery as ``torch.compile``'s quantized
``kv_cache`` graphs), with the KV cache held at 8 bits between steps.

* **Calibration** (``Calibration``): each calibration sequence runs once through the float model
  as a causal prefill that keeps every layer's keys and values (keys after the rotary
  embedding, as the artifact's cache holds them). A graph of ``T`` tokens is then fed, at its
  start positions ``p`` (the decode graph: every position; a prefill bucket: each whole chunk),
  exactly what ``qnnx_engine::llm::Generator`` feeds it there:
  ``seq[p:p+T]``, positions ``p..p+T``, the additive mask (0 for the cache slots ``< p`` and on
  and below the diagonal of the last ``T`` columns, ``MASKED`` elsewhere) and every layer's
  cache holding the prefill's rows ``< p`` (zeros after). One forward per sequence, no
  token-by-token loop (docs/llm.md); the samples are made when read (``prefill.Samples``).
* **The mask value** is ``MASKED`` = ``quantization.prefill.MASK_FLOOR`` (-100), not the float
  artifacts' -10000: added to the scores in a 16-bit graph, a mask of -10000 would stretch the
  scores' encoding to steps of 0.15 (the manifest's ``attention_mask.masked`` tells the host).
* **The 8-bit cache** (``kv_cache_bits=8``): one asymmetric uint8 encoding per layer's keys and
  per layer's values, over the range the calibration prefills' rows hold, shared by every graph
  of the artifact; each graph reads the cache as raw uint8 (behind a DequantizeLinear) and
  returns its new rows as raw uint8 (after a QuantizeLinear) with the same encoding
  (``quantization.kv8.rewrite``), so the host copies bytes and never converts the cache. With
  ``kv_cache_bits=16`` the cache is float on the host and 16-bit inside the graph.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from ..compiling import to_onnx
from ..quantization import config as quant_config
from ..quantization import kv8, pt2e
from ..quantization.prefill import MASK_FLOOR, POSITIONS, Samples, hash_prefills, kv_rows, sequences, spread
from . import export

#: The mask value of quantized artifacts (module docstring).
MASKED = MASK_FLOOR


@dataclass
class Calibration:
    """The calibration sequences and their float prefills' K/V rows (one forward each)."""

    seqs: list[torch.Tensor]
    rows: list[list[tuple[torch.Tensor, torch.Tensor]]]
    seconds: float
    prefills: int = 0
    counts: dict[int, int] = field(default_factory=dict)
    """Samples per graph length (tokens)."""
    model: Any = None
    """A weak reference to the float model (GPTQ's Hessians: ``Samples.sequences``)."""

    @staticmethod
    @torch.no_grad()
    def run(model: torch.nn.Module, calibration: Any, tokenizer: Any, cache_len: int) -> "Calibration":
        """``calibration`` (strings through ``tokenizer``, or token id sequences) prefilled by
        ``model`` in float32; sequences are cut to ``cache_len`` tokens (no graph sees more)."""
        t0 = time.perf_counter()
        seqs = [s[:cache_len] for s in sequences(calibration, tokenizer)]
        rows = [[(k.float(), v.float()) for k, v in kv_rows(model, s)] for s in seqs]
        return Calibration(seqs, rows, time.perf_counter() - t0, len(seqs), model=weakref.ref(model))

    def starts(self, n: int, tokens: int, cache_len: int) -> list[int]:
        """Where a graph of ``tokens`` tokens starts in a sequence of ``n``: the decode graph at
        every position (``prefill.POSITIONS``); a prefill bucket at 0 and at each later whole
        chunk (longer prompts are prefilled in chunks)."""
        last = min(n - tokens, cache_len - tokens)
        if tokens > 1:
            return list(range(0, last + 1, tokens)) if last >= 0 else []
        return spread(last, POSITIONS)

    def samples(self, step: export.DecoderStep) -> Samples:
        """The graph inputs of ``step`` at every start of every sequence (module docstring), made
        when read."""
        s, t, c = step.shape, step.tokens, step.cache_len

        def make(key: tuple[int, int]) -> tuple[torch.Tensor, ...]:
            k, p = key
            seq, rows = self.seqs[k], self.rows[k]
            ids = seq[p : p + t].to(torch.int32)[None]
            pos = torch.arange(p, p + t, dtype=torch.int32)[None]
            mask = torch.full((1, 1, t, c + t), MASKED)
            mask[0, 0, :, :p] = 0
            mask[0, 0, :, c:] = torch.triu(torch.full((t, t), MASKED), diagonal=1)
            past = []
            for keys, values in rows:
                for src in (keys, values):
                    v = torch.zeros(1, s.kv_heads, c, s.head_dim)
                    v[:, :, :p] = src[:, :, :p]
                    past.append(v)
            return (ids, pos, mask, *past)

        def fingerprint(h) -> None:
            h.update(repr((t, c)).encode())
            hash_prefills(h, self.seqs, self.rows)

        keys = [(k, p) for k, seq in enumerate(self.seqs) for p in self.starts(int(seq.numel()), t, c)]
        out = Samples(keys, make, fingerprint, (self.model, self.seqs) if self.model is not None else None)
        if not out:
            raise ValueError(
                f"calibration: no sequence is long enough for the {t}-token graph; give sequences of at "
                f"least {t + 1 if t == 1 else t} tokens"
            )
        self.counts[t] = len(out)
        return out

    def cache_encodings(self, rotate: Optional[bool] = False, observer: str = "minmax") -> list[kv8.Encoding]:
        """Per cache tensor in graph-input order (``past_key_0``, ``past_value_0``, ...), the uint8
        encoding fitted to every calibration prefill's rows (held rotated; ``kv8.encodings``)."""
        flat = [[t for kv in r for t in kv] for r in self.rows]
        found = kv8.encodings(flat, range(len(flat[0])), rotate=rotate, observer=observer)
        return [found[k] for k in range(len(flat[0]))]


def config(scheme: str, soc_model: int, modules: Optional[dict] = None) -> quant_config.QuantizeConfig:
    """The QuantizeConfig of ``scheme`` (``quantization.config``'s names) for the HTP of
    ``soc_model``, with a decoder's headroom (``config.DECODER_HEADROOM``) and the
    ``quantize_modules`` overrides ``modules`` (paths of the graph's module: ``step_modules``);
    ValueError for an unknown scheme or a bad override."""
    from .. import _native

    arch = _native.target_arch("npu", soc_model, None)
    return quant_config.config(scheme, htp_arch=arch, headroom=quant_config.DECODER_HEADROOM, modules=modules)


def step_modules(model: torch.nn.Module, step: torch.nn.Module, overrides: Optional[dict]) -> Optional[dict]:
    """``overrides`` (``quantize_modules`` over the Hugging Face model's paths, as
    ``decoder_recipe`` writes them: ``model.layers.11.mlp.down_proj``) in the paths of ``step``,
    which holds the same modules under other names (``layers.11.mlp.down_proj``; a shard's
    layers count from 0): each pattern's matches, by identity. ValueError for a pattern that
    matches no module of ``model``; None when no match is in ``step``."""
    import fnmatch

    if not overrides:
        return None
    names = {id(m): p for p, m in step.named_modules() if p}
    out = {}
    for pattern, scheme in overrides.items():
        matched = [m for p, m in model.named_modules() if p and fnmatch.fnmatchcase(p, pattern)]
        if not matched:
            some = ", ".join(p for p, m in list(model.named_modules())[1:4])
            raise ValueError(
                f"quantize_modules: {pattern!r} matches no module of the model; give paths as "
                f"model.named_modules() spells them (such as {some}, or decoder_recipe's)"
            )
        out.update({names[id(m)]: scheme for m in matched if id(m) in names})
    return out or None


def graph_onnx(
    step: export.DecoderStep,
    calib: Calibration,
    cfg: quant_config.QuantizeConfig,
    cache: Optional[Sequence[kv8.Encoding]],
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[bytes, dict[str, float]]:
    """``step``'s QDQ ONNX model with the artifact's I/O names, calibrated on ``calib``; with
    ``cache`` (the 8-bit encodings), its cache I/O raw uint8. Also the seconds of each stage."""
    import onnx

    samples = calib.samples(step)
    progress(f"quantizing the {step.tokens}-token graph on {len(samples)} calibration samples")
    q = pt2e.quantize(step.eval(), step.example_inputs(), samples, cfg)
    data = q.onnx
    if cache is not None:
        layers = step.shape.layers
        ios = [kv8.CacheIO(3 + j, -1, 1 + j, -1, 2, cache[j]) for j in range(2 * layers)]
        data = kv8.rewrite(onnx.load_from_string(data), ios)
    names, outs = export.io_names(step.shape.layers)
    return to_onnx.rename_io(data, names, outs), dict(q.seconds)
