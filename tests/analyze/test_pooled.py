"""Pooled level statistics (``metrics.pooled_stats``): exactly numpy's, in bounded memory.

Each case draws observations from a stated model, hands them to ``pooled_stats`` in random
batches with random weights, and compares with ``np.percentile``/``np.mean`` over the array that
repeats each value its weight times. Small batch and gather sizes force the radix passes that a
level of millions of tokens takes (numpy's percentiles to the last bit; the mean to 1e-12).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from specsweep.analyze import metrics
from specsweep.analyze.metrics import pooled_stats

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess

QS = (0, 1, 10, 25, 50, 90, 99, 99.9, 100)


def _draw(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    """Observations (seconds) from one noise model."""
    if kind == "itl":  # decode steps: ~20 ms, lognormal jitter, a few stalls
        v = 0.02 * rng.lognormal(0, 0.1, n)
        stall = rng.random(n) < 0.01
        v[stall] += rng.exponential(0.5, stall.sum())
        return v
    if kind == "concentrated":  # all within a few ulps-scale steps: many passes to tell apart
        return 0.02 + rng.integers(0, 5, n) * 1e-15
    if kind == "ties":  # timer resolution: a handful of distinct values, zeros included
        return rng.choice([0.0, 1e-6, 2e-6, 0.02, 0.02, 0.5], n)
    if kind == "wide":  # several decades and both signs
        return rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-9, 3, n)
    if kind == "identical":
        return np.full(n, 0.0125)
    raise ValueError(kind)


def _split(rng: np.random.Generator, values: np.ndarray, weights: np.ndarray | None) -> list:
    cuts = np.sort(rng.integers(0, values.size + 1, int(rng.integers(0, 8))))
    out = []
    for a, b in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [values.size]))):
        out.append((values[a:b], None if weights is None else weights[a:b]))
    return out


@pytest.mark.parametrize("kind", ["itl", "concentrated", "ties", "wide", "identical"])
def test_pooled_percentiles_equal_numpys_to_the_last_bit(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(["itl", "concentrated", "ties", "wide", "identical"].index(kind))
    checked = 0
    for case in range(150):
        # small batches and gathers in most cases, so that every radix pass is taken
        monkeypatch.setattr(metrics, "_POOL_BATCH", int(rng.choice([7, 64, 1 << 18])))
        monkeypatch.setattr(metrics, "_POOL_GATHER", int(rng.choice([1, 5, 100, 1 << 16])))
        n = int(rng.choice([1, 2, 3, int(rng.integers(4, 50)), int(rng.integers(50, 3000))]))
        values = _draw(rng, kind, n)
        weights = rng.integers(1, 6, n) if case % 2 else None
        batches = _split(rng, values, weights)
        st = pooled_stats(lambda: iter(batches), QS)  # noqa: B023 - used at once
        expanded = values if weights is None else np.repeat(values, weights)
        assert st.count == expanded.size
        want = np.percentile(expanded, QS)
        got = np.array([st.percentiles[float(q)] for q in QS])
        assert np.array_equal(got, want), (kind, case, got - want)
        assert math.isclose(st.mean, float(np.mean(expanded)), rel_tol=1e-12, abs_tol=1e-300)
        checked += 1
    assert checked == 150


def test_pooled_stats_of_nothing_and_of_nan() -> None:
    empty = pooled_stats(lambda: iter([(np.empty(0), None)]), (50, 99))
    assert empty.count == 0 and math.isnan(empty.mean) and all(math.isnan(v) for v in empty.percentiles.values())
    with_nan = pooled_stats(lambda: iter([(np.array([0.1, math.nan, 0.3]), None)]), (50,))
    assert with_nan.count == 3 and math.isnan(with_nan.mean) and math.isnan(with_nan.percentiles[50.0])
    assert np.isnan(np.percentile([0.1, math.nan, 0.3], 50))  # as numpy says


def test_pooled_stats_read_each_batch_once_a_pass_and_hold_a_batch() -> None:
    """Two to five passes; the largest array built is one regrouped batch, not the pooled level."""
    rng = np.random.default_rng(5)
    parts = [(0.02 * rng.lognormal(0, 0.2, 2000), None) for _ in range(600)]  # 1.2 M observations
    passes = []

    def batches():
        passes.append(1)
        return iter(parts)

    st = pooled_stats(batches, (50, 90, 99))
    pooled = np.concatenate([v for v, _ in parts])
    assert [st.percentiles[float(q)] for q in (50, 90, 99)] == np.percentile(pooled, (50, 90, 99)).tolist()
    assert 2 <= len(passes) <= 5
