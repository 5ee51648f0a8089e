"""How often the verdicts are right on fresh synthetic arm pairs with known answers.

The noise model is stated in :mod:`specsweep.decide.draws` (7 levels 1..64, 3% log-normal run-to-run
noise on every figure, 3 runs per level given as 3 rows or as one averaged row). Each case draws
500 fresh pairs (seeded) and runs the real ``compare`` and the verdict rules of ``recommend``
(:func:`specsweep.decide.decide`) for the three default profiles, in memory. The report
quotes :data:`specsweep.decide.draws.QUOTED`; these tests recompute every quoted figure.
"""
from __future__ import annotations

import os
import sys

import pytest

from helpers import LOW_PRIORITY, at_low_priority
from specsweep.decide import draws

N = 500


@pytest.fixture(scope="module")
def rates() -> dict[tuple[str, str], dict[str, float]]:
    # minutes of CPU: below the suite's real-time tests in priority (helpers.at_low_priority)
    return at_low_priority(lambda: {(case, form): draws.verdict_rates(case, form, n=N, seed=seed)
                                    for case in draws.CASES for form, seed in draws.SEEDS.items()})


@pytest.mark.parametrize("form", ["repeats", "averaged"])
def test_no_difference_is_reported_as_none(rates, form: str) -> None:
    r = rates[("none", form)]
    assert r["no_difference"] >= 0.95, r  # every profile says no measurable difference
    assert r["any_crossover"] <= 0.05, r


@pytest.mark.parametrize("form", ["repeats", "averaged"])
def test_always_better_is_enabled(rates, form: str) -> None:
    r = rates[("better", form)]
    # every profile says enable. With one averaged row per level the levels' scatter about a quadratic
    # (4 df) is checked against the assumption: in ≈ P(χ²₄ > 12) ≈ 2 % of draws it is larger by chance,
    # the band widens and +10 % is no longer credible — the price of never trusting an assumption the
    # data contradict. Repeats measure the noise and find it every time.
    assert r["enable"] >= (0.99 if form == "repeats" else 0.95), r
    assert r["any_crossover"] <= 0.05, r


@pytest.mark.parametrize("form", ["repeats", "averaged"])
def test_crossover_at_eight_is_found_between_4_and_16(rates, form: str) -> None:
    r = rates[("crossover", form)]
    assert r["crossover_4_16"] >= 0.95, r


def test_the_report_quotes_what_the_draws_measure(rates) -> None:
    assert set(draws.QUOTED) == {(c, f) for c in draws.JUDGED for f in draws.SEEDS}
    for (case, form), figures in draws.QUOTED.items():
        assert set(figures) == set(draws.JUDGED[case])
        for what, share in figures.items():
            assert rates[(case, form)][what] == pytest.approx(share), (case, form, what)


def test_draws_follow_the_stated_model() -> None:
    """The generator itself: the right levels, repeats, true ratio and noise size."""
    import numpy as np

    rng = np.random.default_rng(5)
    base, arm = draws.draw_pair("better", "repeats", rng)
    assert sorted(base.levels["concurrency"].unique()) == list(draws.LEVELS)
    assert base.levels.groupby("concurrency")["repeat"].nunique().eq(draws.REPEATS).all()
    ratio = np.log(arm.levels["output_tok_s"].to_numpy() / base.levels["output_tok_s"].to_numpy())
    assert abs(ratio.mean() - np.log(1.10)) < 0.02
    assert 0.02 < ratio.std() / np.sqrt(2) < 0.04
    one, _ = draws.draw_pair("none", "averaged", rng)
    assert len(one.levels) == len(draws.LEVELS)


@pytest.mark.skipif(not hasattr(os, "setpriority") or sys.platform != "linux", reason="per-thread nice values are Linux's")
def test_the_draws_run_below_the_suites_priority_and_the_worker_keeps_its_own() -> None:
    """The fixture above computes in a thread LOW_PRIORITY steps nicer than the worker's (so real-time
    tests beside it keep the CPU); the worker's own thread is untouched; errors come back."""
    import threading

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = nice()
    assert at_low_priority(nice) == min(19, before + LOW_PRIORITY)
    assert nice() == before
    with pytest.raises(ZeroDivisionError):
        at_low_priority(lambda: 1 / 0)
