"""The one-run noise check (:mod:`specsweep.analyze.noise`): how often the levels' scatter finds noise
larger than the assumption, drawn from the noise model it is meant for.

Model: 8 levels 1, 2, …, 128; the log ratio at each level is a smooth curve plus independent normal
noise of variance 2σ² (one run of each arm, σ per run). The check pools the scatter about a
quadratic (5 degrees of freedom) with the assumption and widens the band where the pooled figure
is larger, i.e. where the scatter itself is: with σ twice the assumed 3 %, P(χ²₅ ÷ 5 × 4 ≤ 1) =
P(χ²₅ ≤ 1.25) ≈ 6 % of curves keep the (too small) assumption — about a cubic (4 degrees of
freedom) it was P(χ²₄ ≤ 1) ≈ 9 %; with σ the assumption itself, P(χ²₅ > 5) ≈ 42 %.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from specsweep.analyze.noise import residual_scatter, with_assumption

pytestmark = pytest.mark.fast

LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]
ASSUMED = 2 * math.log1p(0.03) ** 2  # variance of one level's log ratio at 3 % per run and arm


def _kept_assumption(sigma: float, n: int, seed: int) -> float:
    """Share of ``n`` drawn curves whose pooled scatter does not exceed the assumption."""
    rng = np.random.default_rng(seed)
    x = np.log2(LEVELS)
    kept = 0
    for _ in range(n):
        ys = 0.05 - 0.01 * (x - 3.5) ** 2 + rng.normal(0.0, math.sqrt(2) * sigma, len(x))  # a bend the check must not read as noise
        pooled = with_assumption(residual_scatter(LEVELS, ys), ASSUMED)
        assert pooled is not None
        kept += pooled[0] <= ASSUMED
    return kept / n


def test_noise_twice_the_assumption_is_found_in_all_but_six_percent_of_curves() -> None:
    # 4,000 curves: one binomial sd ≈ 0.4 %; the cubic's 9 % would sit 4 sd above the bound
    assert _kept_assumption(math.log1p(0.06), 4000, 1) <= 0.075


def test_with_the_assumption_right_the_scatter_is_larger_by_chance_in_four_curves_of_ten() -> None:
    share = 1 - _kept_assumption(math.log1p(0.03), 4000, 2)
    assert 0.38 <= share <= 0.46  # P(χ²₅ > 5) ≈ 0.416, ± 2 sd


def test_the_scatter_is_read_about_a_quadratic() -> None:
    x = np.log2(LEVELS)
    s2, df = residual_scatter(LEVELS, 0.1 - 0.02 * x * x) or (math.nan, 0)
    assert df == len(LEVELS) - 3 and s2 == pytest.approx(0.0, abs=1e-20)
    assert residual_scatter(LEVELS[:6], list(x[:6])) is None  # 6 levels: too few to show their noise
