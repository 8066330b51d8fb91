"""qnnx_backend.batch_metrics / embedding_structure (numpy only): known values, and a collapsed
embedding space that cosine to float alone would pass."""

import numpy as np
import pytest

import qnnx_backend


def test_identical_batches_are_perfect():
    x = np.random.default_rng(0).normal(size=(6, 16))
    m = qnnx_backend.batch_metrics(x, x, embedding=True)
    assert m["cosine_min"] == pytest.approx(1.0) and m["top1_agreement"] == 1.0
    assert m["offdiag_correlation"] == pytest.approx(1.0) and m["nn_agreement"] == 1.0
    assert m["offdiag_mean_float"] == pytest.approx(m["offdiag_mean_test"])
    assert m["sqnr_db"] == float("inf")


def test_a_collapsed_space_shows_in_the_mean_similarity_not_in_cosine():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 64))
    # Every embedding pulled towards one direction: each stays close to its float one.
    common = rng.normal(size=64) * 3
    y = x + common
    m = qnnx_backend.batch_metrics(x, y, embedding=True)
    assert m["offdiag_mean_float"] < 0.2
    assert m["offdiag_mean_test"] > 0.8, m
    assert qnnx_backend.embedding_structure(x, y)["offdiag_mean_test"] == m["offdiag_mean_test"]


def test_top1_and_errors():
    ref = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    got = np.array([[3.0, 1.0, 0.0], [0.0, 1.0, 2.0]])
    m = qnnx_backend.batch_metrics(ref, got)
    assert m["top1_agreement"] == 0.5 and "offdiag_correlation" not in m
    with pytest.raises(ValueError, match="shapes differ"):
        qnnx_backend.batch_metrics(ref, got[:1])
    with pytest.raises(ValueError, match="at least 3"):
        qnnx_backend.embedding_structure(ref, got)
