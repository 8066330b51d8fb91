"""Quantized KV-cache graphs (``kv_cache=True`` with ``quantize``), the part of ``QnnCallable``
that differs from other quantized graphs: calibration samples made from prefill passes
(quantization.prefill) and the 8-bit cache's graph rewrite (quantization.kv8)."""

from __future__ import annotations

import logging
import time
from typing import Any, Optional, Sequence

from ..quantization import kv8, prefill
from .stats import STATS

logger = logging.getLogger("qnnx_backend")


class QuantizedCache:
    """Mixed into ``QnnCallable`` (its ``settings``, ``frame``, ``per_call``, ``kv_plan``,
    ``kv_roles`` and ``kv8_caches``)."""

    def kv8_wanted(self) -> bool:
        s = self.settings
        return s.quantize is not None and self.kv_plan is not None and s.kv_cache_bits == 8

    def cache_at_8_bits(self, onnx_bytes: bytes, tensor_idx: Sequence[int], samples: prefill.Samples) -> bytes:
        """The QDQ model with its cache inputs and new-row outputs as raw uint8 (quantization.kv8);
        remembers them for the compiled graph's host-side twins."""
        assert self.kv_plan is not None
        import onnx  # imported for its cost, as the exporter does

        # Parsed once (a whole decoder's QDQ model is hundreds of MB): counted, then edited.
        model = onnx.load_from_string(onnx_bytes)
        found = kv8.plan(self.kv_plan, list(tensor_idx), self.kv_roles, len(model.graph.output))
        # Fitted to the prefills' rows the samples are cut from (each row once, no padding).
        where = {t: (self.kv_roles[a].layer, 0 if self.kv_roles[a].role == "keys" else 1) for t, a, *_ in found}
        rows = [{t: r[layer][kind] for t, (layer, kind) in where.items()} for r in samples.cache_rows]
        encs = kv8.encodings(rows, list(where), rotate=self.settings.kv_rotation(),
                             observer=self.settings.kv_cache_observer)
        self.kv8_caches = [kv8.CacheIO(t, a, r, p, d, encs[t]) for t, a, r, p, d in found]
        if not self.kv8_caches:
            return onnx_bytes  # a prefill graph: its cache is made inside the graph
        logger.info("qnn kv_cache: %s", kv8.describe(self.kv8_caches))
        return kv8.rewrite(model, self.kv8_caches)

    def prefill_samples(self, args: Sequence[Any]) -> list:
        """A KV-cache graph's calibration samples: from one float prefill per calibration
        sequence, the steps this graph takes at a spread of positions (quantization.prefill)."""
        assert self.frame is not None
        s = self.settings
        t = time.perf_counter()
        builder = prefill.PrefillSamples(self.frame, args, self.per_call)
        self.kv_roles = dict(zip(builder.index, builder.inputs))
        samples, prefills = builder.collect(prefill.sequences(s.calibration, s.tokenizer))
        STATS["calibrations"] += 1
        logger.info(
            "qnn kv_cache calibration: %d samples of %d token(s) from %d prefill pass(es) in %.1f s%s",
            len(samples), builder.steps, prefills, time.perf_counter() - t,
            f" (spread over {samples.offered} positions: prefill.MAX_SAMPLES)" if samples.offered > len(samples) else "",
        )
        return samples

    def kv_host(self, tensor_idx: Sequence[int]) -> Optional[kv8.Shadow]:
        """The host side of the quantized KV-cache graph just compiled (its 8-bit cache twins and
        clamped masks), or None for any other graph."""
        if self.settings.quantize is None or not self.kv_roles:
            return None
        masks = [k for k, i in enumerate(tensor_idx) if getattr(self.kv_roles.get(i), "role", None) == "attention_mask"]
        return kv8.Shadow(self.kv8_caches, masks)
