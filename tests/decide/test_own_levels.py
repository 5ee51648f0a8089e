"""Each level's own measurement has a say: a smooth curve carried to a level by its neighbours is no
finding there when the level's own Δ points the other way, an end level that does so leaves the
verdict not established, and a verdict resting on one level is named as such.

Hand-made level-only studies (the baseline times a known ratio, one run per level, the assumed 3 %
noise): +8 % everywhere but the last level, which is −3 % (within its own noise of ≈ 4.2 %, but on
the other side of 0), −6 % (beyond it) or −10 % (a step the levels' scatter reads as noise).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cases import THROUGHPUT, scaled, study
from specsweep.analyze.compare import compare
from specsweep.analyze.noise import significantly_larger
from specsweep.decide import recommend
from specsweep.decide.judge import carried_by_one
from specsweep.decide.text import band_text
from specsweep.decide.verdicts import DecisionKind
from specsweep.report.consistency import check_claim, check_page

pytestmark = pytest.mark.fast


def _edge(tmp_path: Path, last: float):
    return compare(study(tmp_path, spec=scaled(lambda c: last if c == 64 else 1.08, 1.2)))


def test_a_fitted_gain_against_the_levels_own_delta_is_not_credible(tmp_path: Path) -> None:
    comp = _edge(tmp_path, 0.97)
    row = comp.delta_rows("spec", "output_tok_s")[64]
    assert row["ci_low_pct"] > 0 and row["delta_pct"] < 0  # the fitted band is clear of 0, the level is not
    assert row["credible"] == 0
    assert "points the other way, so not credible" in band_text(row)
    rec = recommend(comp, THROUGHPUT)
    assert rec.levels.set_index("concurrency").loc[64, "outcome"] == "neutral"
    assert check_page(comp, [rec]) == []
    gain = next(c for c in rec.claims if c.kind == "gain")
    said = dataclasses.replace(gain, levels=(*gain.levels, 64), values=(*gain.values, float(row["delta_pct"])))
    assert "credibility" in {v.rule for v in check_claim(comp, said)}


def test_an_end_level_pointing_the_other_way_leaves_the_verdict_not_established(tmp_path: Path) -> None:
    comp = _edge(tmp_path / "a", 0.94)
    rec = recommend(comp, THROUGHPUT)
    assert rec.decision == DecisionKind.NOT_ESTABLISHED, rec.headline
    assert "at 64 its own measured" in rec.headline and "re-measure 64" in rec.headline
    assert check_page(comp, [rec]) == []
    # −10 %: a step of 18 % at one end is more than a quadratic follows, so the levels' scatter reads
    # it as noise larger than the assumption and the band widens to it — never an enable over 64
    wide = recommend(_edge(tmp_path / "b", 0.90), THROUGHPUT)
    assert wide.decision in (DecisionKind.NOT_ESTABLISHED, DecisionKind.NO_DIFFERENCE), wide.headline


def test_the_scatter_is_called_significantly_larger_by_a_one_sided_chi2_test() -> None:
    # 4 degrees of freedom: P(χ²₄ > 4 × 1) ≈ 0.41 (not significant), P(χ²₄ > 4 × 4) ≈ 0.003 (significant)
    assert not significantly_larger((1.0, 4), 1.0)
    assert not significantly_larger((2.0, 4), 1.0)  # P(χ²₄ > 8) ≈ 0.09
    assert significantly_larger((4.0, 4), 1.0)
    assert not significantly_larger(None, 1.0)


def test_a_verdict_resting_on_one_level_is_named() -> None:
    def judged(outs: list[str]) -> pd.DataFrame:
        return pd.DataFrame({"concurrency": 2 ** np.arange(len(outs)), "outcome": outs})

    assert carried_by_one(judged(["neutral", "neutral", "loss", "neutral"])) == 4
    assert carried_by_one(judged(["gain", "neutral", "loss", "neutral"])) is None
    assert carried_by_one(judged(["gain", "gain", "neutral"])) is None
    assert carried_by_one(judged(["neutral", "gain"])) is None  # two levels: nothing to stand out from


def test_one_stalled_level_is_named_on_the_first_screen_and_in_what_to_measure_next() -> None:
    from specsweep.decide import draws
    from specsweep.report.decision import decision_rows

    comp = compare(draws.draw_study("stalled_level", np.random.default_rng(3)), n_boot=0)
    rec = recommend(comp, THROUGHPUT)
    assert rec.decision == DecisionKind.KEEP_OFF, rec.headline
    assert rec.next_experiments[0].startswith("Re-measure concurrency 32: it alone carries this verdict")
    (row,) = decision_rows(comp, [rec])
    assert "one level (32) carries this verdict: re-measure it" in row.stability
    assert check_page(comp, [rec]) == []


def test_a_neutral_level_says_why_and_calls_only_a_band_reaching_zero_not_credible() -> None:
    from specsweep.decide.judge import why_neutral

    def judged(rule: object = None, decided: str = "output_tok_s") -> pd.DataFrame:
        return pd.DataFrame({"concurrency": [32], "rule": [rule], "decided_by": [decided if rule is None else rule]})

    def row(lo: float, hi: float, fit: float, credible: int = 0) -> dict:
        return {"ci_low_pct": lo, "ci_high_pct": hi, "delta_pct": fit, "fit_delta_pct": fit, "credible": credible}

    assert why_neutral(judged(), 32, row(-3.0, 5.0, 1.0), 2.0) == "not credible"
    assert why_neutral(judged(), 32, row(float("nan"), float("nan"), 1.0), 2.0) == "not credible"
    assert why_neutral(judged("both break an SLO"), 32, row(-34.0, -24.0, -29.0), 2.0) == "both arms miss the SLO here"
    assert why_neutral(judged(), 32, row(-34.0, -24.0, -29.0, credible=0), 2.0) == ""  # band_text says why
    assert why_neutral(judged(), 32, row(0.5, 2.5, 1.5, credible=1), 2.0) == "smaller than the 2% minimum effect"
    held = why_neutral(judged(decided="e2e_p99_s"), 32, row(5.0, 15.0, 10.0, credible=1), 2.0)
    assert held == "held back by e2e p99", held
