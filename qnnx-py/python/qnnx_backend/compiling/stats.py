"""What the compile path counts and which errors make it fall back (or, ``strict``, raise)."""

from __future__ import annotations

import collections

from ..exceptions import LibraryLoadError, LoweringError, QnnApiError, UnsupportedOpError

#: Counters of the work done in this process (exports, compiles, cache hits, fallbacks,
#: partitions, call-cost probes, and for quantized graphs calibrations and quantizations);
#: tests use them to prove that a warm start skipped export, lowering and finalize.
STATS: collections.Counter = collections.Counter()

#: Errors after which a graph falls back to eager PyTorch (or, ``strict``, that are raised).
FALLBACK_ERRORS = (UnsupportedOpError, LoweringError, QnnApiError, LibraryLoadError)
