"""The flip chance (specsweep.decide.flip): the chance a rerun of the same design decides otherwise.

Checked over many synthetic studies of several noise models (specsweep.decide.flip_draws): the
predicted chance against the share of fresh reruns whose decision flipped. The bench
(bench/flip_calibration.py, more resamples and reruns) measures the ±5-point target; here the
same 84 studies with few resamples and reruns, a tolerance of 8 points overall and per bin of the
prediction (mean |gap| over the bins): a working estimator stays inside it, while the run-level
bootstrap it replaced (each level's truth drawn from its own runs) misses by about 20 points per bin.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import at_low_priority
from specsweep.analyze.compare import compare
from specsweep.decide import DEFAULT_PROFILES, recommend
from specsweep.decide.decisions import DecisionRow, decided_row, from_json, row_of, same_decision, to_json
from specsweep.decide.draws import HARD_CASES, draw_study
from specsweep.decide.flip import decision_metrics, flip_chances, with_flips
from specsweep.decide.flip_draws import binned_gap, calibration, summarise
from specsweep.decide.result import FlipChance
from specsweep.decide.verdicts import DecisionKind
from specsweep.report.decision import decision_rows
from specsweep.results.store import load_result_sets

#: 6 studies per truth; few resamples and reruns each (the estimate is unbiased study by study, so their
#: binomial noise averages out over the studies)
STUDIES, RESAMPLES, RERUNS = 84, 10, 2
TOLERANCE = 0.08
REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference"


def test_the_fast_row_is_the_recommendations_row_on_every_hard_case() -> None:
    """The flip chance re-decides without sentences: the same class, arm, ties, range and outcomes as the page."""
    rng = np.random.default_rng(5)
    for case in HARD_CASES:
        for _ in range(2):
            comp = compare(draw_study(case, rng))
            for p in DEFAULT_PROFILES:
                assert decided_row(comp, p) == row_of(recommend(comp, p)), case


def test_the_predicted_flip_chance_matches_the_flips_of_fresh_reruns() -> None:
    pts = at_low_priority(calibration, STUDIES, RESAMPLES, RERUNS, seed=1)
    overall = summarise(pts)[0]
    assert overall.n == STUDIES * len(DEFAULT_PROFILES)
    assert 0.05 < overall.observed < 0.5  # the truths mix stable and unstable decisions: a calibration to test
    assert abs(overall.gap) <= TOLERANCE, overall
    assert binned_gap(pts) <= TOLERANCE, summarise(pts)


def test_the_run_level_bootstrap_fails_the_same_check() -> None:
    """The check above can fail: drawing each level's truth from its own runs (not from the fitted
    curve) flags many reruns the truth would not — a study told 60 % flips far less often."""
    pts = at_low_priority(calibration, STUDIES, RESAMPLES, RERUNS, seed=1, method="runs")
    assert binned_gap(pts) > TOLERANCE, summarise(pts)


def test_far_from_any_threshold_a_rerun_rarely_flips_and_the_chance_says_so() -> None:
    rng = np.random.default_rng(2)
    for case in ("latency_crossover_24_3runs", "nominal_plus4"):
        sets = draw_study(dict(HARD_CASES[case], agg=lambda c: 1.25 + 0 * c, user=lambda c: 1.25 + 0 * c), rng)
        chances = flip_chances(sets, resamples=40)
        assert all(ch.chance <= 0.05 for ch in chances.values()), (case, chances)


def test_the_flip_chance_is_seeded() -> None:
    sets = draw_study("plus6_one_run", np.random.default_rng(3))
    a, b = flip_chances(sets, resamples=20, seed=4), flip_chances(sets, resamples=20, seed=4)
    assert a == b
    assert all(ch.resamples == 20 for ch in a.values())


def test_the_flip_chance_is_a_field_of_the_row_the_decision_check_ignores() -> None:
    row = DecisionRow("p", DecisionKind.ENABLE, "mtp")
    with_flip = DecisionRow("p", DecisionKind.ENABLE, "mtp", flip_chance=0.4, flip_resamples=200)
    assert same_decision(row, with_flip)
    assert "flip_chance" not in to_json([row])[0]  # a table without it reads and writes as before
    assert from_json(json.loads(json.dumps(to_json([with_flip])))) == [with_flip]


def test_the_how_stable_cell_gives_the_flip_chance() -> None:
    sets = draw_study("nominal_plus4", np.random.default_rng(6))
    comp = compare(sets)
    recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
    assert all("flip chance" not in r.stability for r in decision_rows(comp, recs))
    recs = with_flips(recs, flip_chances(sets, resamples=10, comp=comp))
    for rec, screen in zip(recs, decision_rows(comp, recs)):
        assert rec.flip is not None
        assert screen.stability.endswith(f"flip chance {rec.flip.chance * 100:.0f}% (10 resamples)")
        assert row_of(rec).flip_chance == rec.flip.chance


@pytest.mark.parametrize(("flips", "text"), [(0, "flip chance 0% (200 resamples)"), (7, "flip chance 4% (200 resamples)")])
def test_the_flip_chance_reads_as_a_percentage(flips: int, text: str) -> None:
    assert FlipChance(flips, 200).text() == text


def test_a_rerun_fitting_only_the_decisions_metrics_decides_as_the_full_comparison() -> None:
    """Reruns fit only the metrics a decision reads (decision_metrics): the rows are the full comparison's,
    on every hard case and both reference data sets."""
    rng = np.random.default_rng(7)
    studies = [draw_study(case, rng) for case in HARD_CASES for _ in range(2)]
    real = [load_result_sets([REFERENCE / name]) for name in ("seed-qwen3.5-122b-a10b", "real-llamacpp-smollm2")]
    for sets in studies + real:
        full = compare(sets, allow_workload_mismatch=True)
        few = compare(sets, allow_workload_mismatch=True, metrics=decision_metrics(full, DEFAULT_PROFILES))
        assert len(few.curves) < len(full.curves) or sets is not real[-1]  # llama.cpp's data hold many more metrics
        assert [decided_row(few, p) for p in DEFAULT_PROFILES] == [decided_row(full, p) for p in DEFAULT_PROFILES]


def test_no_resamples_no_flip_chance() -> None:
    sets = draw_study("plus6_one_run", np.random.default_rng(3))
    assert flip_chances(sets, resamples=0) == {}
