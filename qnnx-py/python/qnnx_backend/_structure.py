"""Accuracy of a batch of outputs against their float reference, numpy only: per-sample cosine,
SQNR, top-1 agreement, and the structure of an embedding space (what retrieval and verification
rely on, which cosine-to-float does not see: a quantized encoder can keep each embedding close to
its float one yet pull all of them together).

``batch_metrics(reference, test)`` takes ``[N, ...]`` arrays (N inputs, one row each):

- ``cosine_min`` / ``cosine_mean``: each row's cosine to its float row;
- ``sqnr_db``: over the whole batch;
- ``top1_agreement``: the share of rows whose argmax equals the float argmax (classifier logits);
- with ``embedding=True`` and N >= 3, the pairwise cosine-similarity matrices of the float and the
  test rows: ``offdiag_correlation`` (Pearson correlation of their off-diagonal entries),
  ``offdiag_mean_float`` / ``offdiag_mean_test`` (the mean similarity between different inputs:
  one that creeps towards 1 is a collapsed space) and ``nn_agreement`` (the share of rows whose
  nearest other row is the same in both).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _rows(a: Any) -> np.ndarray:
    x = np.asarray(a, dtype=np.float64)
    if x.ndim == 0:
        raise ValueError("batch_metrics: give [N, ...] arrays, one row per input")
    return x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)


def _similarity(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    u = x / np.maximum(n, 1e-30)
    return u @ u.T


def embedding_structure(reference: Any, test: Any) -> dict:
    """The pairwise-similarity structure of ``test`` rows against ``reference`` rows (N >= 3)."""
    r, t = _rows(reference), _rows(test)
    if r.shape != t.shape:
        raise ValueError(f"embedding_structure: shapes differ: {r.shape} and {t.shape}")
    n = r.shape[0]
    if n < 3:
        raise ValueError(f"embedding_structure: needs at least 3 inputs to compare pairs, got {n}")
    sr, st = _similarity(r), _similarity(t)
    off = ~np.eye(n, dtype=bool)
    a, b = sr[off], st[off]
    corr = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")
    nn_r = np.where(off, sr, -np.inf).argmax(1)
    nn_t = np.where(off, st, -np.inf).argmax(1)
    return {
        "offdiag_correlation": corr,
        "offdiag_mean_float": float(a.mean()),
        "offdiag_mean_test": float(b.mean()),
        "nn_agreement": float((nn_r == nn_t).mean()),
    }


def batch_metrics(reference: Any, test: Any, embedding: bool = False) -> dict:
    """Cosine (per row: min and mean), SQNR, top-1 agreement and, with ``embedding``, the
    embedding-structure numbers of ``test`` against ``reference`` (see the module docstring)."""
    r, t = _rows(reference), _rows(test)
    if r.shape != t.shape:
        raise ValueError(f"batch_metrics: shapes differ: {r.shape} and {t.shape}")
    num = (r * t).sum(1)
    den = np.linalg.norm(r, axis=1) * np.linalg.norm(t, axis=1)
    cos = num / np.maximum(den, 1e-30)
    err = ((r - t) ** 2).sum()
    out = {
        "n": int(r.shape[0]),
        "cosine_min": float(cos.min()),
        "cosine_mean": float(cos.mean()),
        "sqnr_db": float(10 * np.log10((r**2).sum() / err)) if err > 0 else float("inf"),
        "top1_agreement": float((r.argmax(1) == t.argmax(1)).mean()),
    }
    if embedding and r.shape[0] >= 3:
        out.update(embedding_structure(r, t))
    return out
