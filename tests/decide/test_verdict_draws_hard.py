"""Verdicts on the harder cases (noise above the assumption, drift, a control arm, noise growing with load), drawn fresh from a stated noise model with known answers.

The generator is :func:`specsweep.decide.draws.draw_study` (it builds whole studies in time order and never
calls compare or recommend); each case draws ``N`` seeded studies and runs the real ``compare`` and
``decide`` for the three default profiles. The bounds are the issue's targets, not a rerun of the
code: each is checked against rates the noise model implies, with margins of at least two binomial
standard errors at these draw counts between the target and what a working method gives.

What the model implies (σ = run-to-run noise of one figure of one run):

- nominal (3 % noise, 3 runs per level): every band is a 95 % *simultaneous* band over the levels
  of the three metrics a verdict reads, so a false claim for one profile has probability ≤ 5 % by
  construction; the per-level variance model only widens bands. Target ≤ 2 % per profile is the
  issue's; +4 % everywhere with 3 runs on 8 levels: the constant's standard error is
  σ √(2/3) / √8 ≈ 0.87 %, so the band half-width ≈ 3.1 × 0.87 ≈ 2.7 % and 4 % − 2.7 % is ≈ 1.5 standard
  errors above the band: found with probability ≈ 0.93 at a level, target ≥ 80 %.
- noise twice the assumption, one run: the scatter about a quadratic over 8 levels (5 degrees of
  freedom) exceeds the 3 % assumption with probability P(χ²₅ > 5 ÷ 4) ≈ 0.94, and then the band uses
  it, pooled with the assumption counted as 2 degrees of freedom (t with 7 df); in the other 6 % of
  a metric's curves the band rests on the assumption, half the true noise, and the lower degrees
  fail their lack-of-fit test by that doubled noise: a constant's error is twice the assumed one
  (3.1 ÷ 2 ≈ 1.5 true standard errors, ≈ 13 % per level), a cubic's wiggles worse — a false claim in
  roughly half of those curves; two metrics, correlated: ≈ 4–6 % of studies, plus what a 7-df
  estimate of the noise misses (≈ 1 %). So every profile reads no difference in ≈ 94–96 % (target
  ≥ 94 %, the issue's; fresh draws of 150 ≥ 90 %, two binomial standard errors below), ≤ 10 % false
  claims per profile; the latency profile reads two curves; spurious crossovers ≤ 5 %.
- drift 4 % per arm sweep, no correction: a bias of 4 % at every level is larger than the band's
  ≈ 4.6 % half-width in a third of the draws, so the no-sentinel case must carry the caveat
  (always). With two sentinel runs the drift rate is estimated with a standard error of about
  0.55 σ per arm sweep and corrected; the residual error is in the band: no measurable difference
  in ≥ 90 %.
- noise growing from 1 % to 8 %: pooled variance averages it to ≈ 4.6 %, too narrow at 128 by ×1.7;
  modelled per level the band is right there (false claims ≤ 5 % per profile).
- crossover at 24 on 1, 4, 16, 32, 64, 128: true aggregate Δ +5.8 % at 16 and −4.2 % at 32; on
  level-only data the wait is the Little's-law estimate, the exact inverse of aggregate, so a
  latency gain or loss of the wrong sign needs a credible aggregate error of the wrong sign:
  ≤ 5 %; and both verdicts read one curve, so their "up to" concurrency is the same number.
- a bending delta crossing 0 at 24 on 8 levels, one run (ln ratio quadratic in log2 C, +6 % at 16,
  −5 % at 32): against the assumed 3 % the bend's quadratic term is ≈ 3.5 standard errors from 0, so
  the next-term test keeps a straight line out in ≈ 94 % of draws; a line puts the zero at 12–15,
  outside 16–32. Target: one crossover in 16–32 in ≥ 90 %.
- an edge loss (+6.7 % up to 64, −10 % at 128, or the mirror at 1), 3 runs: the end level's own
  Δ has one standard deviation σ√(2/3) ≈ 2.4 %, so it lies below −2.4 % (its own noise) in
  P(Z < (10 − 2.4)/2.4) ≈ 99.9 % of draws: it is never a credible gain, and an 'enable' over it is
  not established; found or not established ≥ 90 %. With one run (σ√2 ≈ 4.2 %) the end level's own
  Δ is above 0 in P(Z > 10/4.2) ≈ 0.9 %: a gain there needs that, target ≤ 3 %.
- a control arm measured between the baseline and the arm under a slow drift: the rate it shows has
  a standard error of ≈ σ√2 ÷ √8 per control lag, carried to the arm's lag (twice as long) with the
  band's critical value: a false claim needs noise beyond that band, ≤ 5 %.
- one level stalled (−30 % in all 3 runs at 32, nothing elsewhere): the level's own Δ is ≈ 12
  standard deviations out, its neighbours' 0: flagged as one level carrying the verdict ≥ 90 %.
- unguarded drift (no sentinel, no control, arms one after the other): every 'enable' or 'keep off'
  on the first screen carries the drift caveat — always.
"""
from __future__ import annotations

import numpy as np
import pytest

from helpers import at_low_priority
from specsweep.decide import DEFAULT_PROFILES, draws

PROFILES = [p["name"] for p in DEFAULT_PROFILES]


def rates(case: str, n: int, seed: int = 22) -> dict[str, float]:
    return at_low_priority(draws.hard_rates, case, n=n, seed=seed)  # below the real-time tests beside it


def test_generator_follows_its_model() -> None:
    """Independent of compare: levels, time order, drift size and sentinel rows as stated."""
    rng = np.random.default_rng(0)
    base, spec = draws.draw_study("drift_sentinel", rng)
    lv = base.levels
    assert sorted(lv.loc[~lv["sentinel"].fillna(False).astype(bool), "concurrency"]) == list(draws.GRID)
    sent = lv[lv["sentinel"].fillna(False).astype(bool)]
    assert sorted(sent["concurrency"]) == [1, 128]
    t = lambda f: f["started_utc"].map(lambda s: np.datetime64(s[:19])).to_numpy()  # noqa: E731
    assert t(base.levels[~lv["sentinel"].fillna(False).astype(bool)]).max() < t(spec.levels).min() < t(sent).min()
    # drift: over many draws the spec arm (measured one sweep later) is 4 % slower on average
    logs = []
    for _ in range(200):
        b, s = draws.draw_study("drift_no_sentinel", rng)
        logs.append(np.log(s.levels["output_tok_s"].to_numpy() / b.levels["output_tok_s"].to_numpy()).mean())
    assert abs(np.mean(logs) + 0.04) < 0.005
    # growing noise: 1 % at C=1, 8 % at C=128
    sig = draws.HARD_CASES["growing_noise"]["sigma"](np.array([1.0, 128.0]))
    assert sig == pytest.approx([0.01, 0.08])


def test_nominal_no_difference_and_a_four_percent_effect() -> None:
    none = rates("nominal_none", 150)
    for name in PROFILES:
        assert none[f"false_claim:{name}"] <= 0.02 + 0.02, (name, none)  # ≤ 2 %, with one binomial sd at n=150
    plus = rates("nominal_plus4", 100)
    assert plus["throughput_enable"] >= 0.80, plus


def test_noise_twice_the_assumption_with_one_run_per_level() -> None:
    r = rates("noise_2x_one_run", 150)
    for name in PROFILES:
        assert r[f"false_claim:{name}"] <= 0.10, (name, r)
    assert r["no_difference"] >= 0.90, r
    assert r["any_crossover"] <= 0.05, r


@pytest.mark.slow
def test_drift_with_a_sentinel_or_a_control_arm_reads_as_no_difference() -> None:
    sent = rates("drift_sentinel", 80)
    assert sent["no_difference"] + sent["drift_named"] * (1 - sent["no_difference"]) >= 0.90, sent
    ctrl = rates("drift_control", 80)
    assert ctrl["no_difference"] >= 0.90, ctrl
    assert ctrl["control_chosen"] == 0.0, ctrl  # a control arm is never a candidate


def test_drift_without_a_sentinel_carries_the_caveat() -> None:
    r = rates("drift_no_sentinel", 40)
    assert r["drift_caveat"] == 1.0, r
    ctrl = rates("control_noise_only", 60)
    assert ctrl["control_chosen"] == 0.0 and ctrl["drift_caveat"] == 0.0, ctrl
    assert ctrl["no_difference"] >= 0.90, ctrl


def test_noise_growing_with_concurrency() -> None:
    r = rates("growing_noise", 150)
    for name in PROFILES:
        assert r[f"false_claim:{name}"] <= 0.05, (name, r)


@pytest.mark.parametrize("case", ["latency_crossover_24", "latency_crossover_24_3runs"])
def test_latency_rule_on_level_only_data(case: str) -> None:
    r = rates(case, 100)
    assert r["latency_wrong_sign"] <= 0.05, r
    assert r["latency_disagrees"] == 0.0, r  # one curve, one crossover
    assert r["any_crossover"] >= 0.9, r  # the crossover at 24 is found (between 16 and 32)


def test_a_bend_in_the_delta_curve_keeps_its_crossover_in_its_bracket() -> None:
    r = rates("curved_24_one_run", 100)
    assert r["crossover_16_32"] >= 0.90, r


@pytest.mark.parametrize("case", ["edge_loss_high", "edge_loss_low"])
def test_a_loss_at_the_edge_of_the_grid_is_found_or_not_established(case: str) -> None:
    r = rates(case, 100)
    assert r["edge_wrong_sign"] == 0.0, r
    assert r["edge_right"] >= 0.90, r


def test_a_loss_at_the_edge_with_one_run_is_not_a_credible_gain() -> None:
    r = rates("edge_loss_high_one_run", 100)
    assert r["edge_wrong_sign"] <= 0.03, r


def test_a_control_arm_measured_before_the_arm_still_bounds_the_drift() -> None:
    r = rates("drift_control_between", 100)
    assert r["no_difference"] >= 0.95, r
    assert r["control_chosen"] == 0.0, r


def test_one_stalled_level_is_flagged_as_carrying_the_verdict() -> None:
    r = rates("stalled_level", 100)
    assert r["one_level_flagged"] >= 0.90, r


def test_unguarded_drift_is_named_on_the_first_screen() -> None:
    from specsweep.analyze.compare import compare
    from specsweep.decide import recommend
    from specsweep.decide.caveats import DRIFT_NOT_EXCLUDED
    from specsweep.decide.verdicts import DecisionKind
    from specsweep.report.decision import decision_markdown, decision_rows

    rng = np.random.default_rng(31)
    decisive = 0
    for _ in range(30):
        comp = compare(draws.draw_study("drift_no_sentinel", rng), n_boot=0)
        recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
        for row in decision_rows(comp, recs):
            if row.kind in (DecisionKind.ENABLE, DecisionKind.KEEP_OFF):
                decisive += 1
                assert DRIFT_NOT_EXCLUDED in row.stability, row
        assert decision_markdown(comp, recs).count("drift not excluded") == sum(
            r.kind in (DecisionKind.ENABLE, DecisionKind.KEEP_OFF) for r in decision_rows(comp, recs))
    assert decisive > 0  # the drift does move verdicts in these draws: the check above ran


#: the issue's targets, per quoted (case, result): (lowest, highest) share allowed
TARGETS: dict[tuple[str, str], tuple[float, float]] = {
    ("nominal_none", "no_difference"): (0.94, 1.0),
    ("nominal_plus4", "throughput_enable"): (0.80, 1.0),
    ("noise_2x_one_run", "no_difference"): (0.94, 1.0),
    ("noise_2x_one_run", "any_crossover"): (0.0, 0.05),
    ("drift_no_sentinel", "no_difference"): (0.0, 1.0),  # not a target: the caveat is
    ("drift_no_sentinel", "drift_caveat"): (1.0, 1.0),
    ("drift_sentinel", "no_difference"): (0.90, 1.0),
    ("drift_sentinel", "drift_named"): (0.0, 1.0),
    ("drift_control", "no_difference"): (0.90, 1.0),
    ("drift_control", "control_chosen"): (0.0, 0.0),
    ("control_noise_only", "no_difference"): (0.90, 1.0),
    ("control_noise_only", "control_chosen"): (0.0, 0.0),
    ("growing_noise", "no_difference"): (0.85, 1.0),
    ("latency_crossover_24", "latency_wrong_sign"): (0.0, 0.05),
    ("latency_crossover_24", "latency_disagrees"): (0.0, 0.0),
    ("latency_crossover_24", "any_crossover"): (0.90, 1.0),
    ("latency_crossover_24_3runs", "latency_wrong_sign"): (0.0, 0.05),
    ("latency_crossover_24_3runs", "latency_disagrees"): (0.0, 0.0),
    ("latency_crossover_24_3runs", "any_crossover"): (0.90, 1.0),
    ("curved_24_one_run", "crossover_16_32"): (0.90, 1.0),
    ("plus6_one_run", "throughput_enable"): (0.0, 1.0),  # a power figure, quoted for its cost
    ("nominal_none_one_run", "no_difference"): (0.94, 1.0),
    ("nominal_none_one_run", "noise_replaced"): (0.0, 1.0),
    ("edge_loss_high", "edge_wrong_sign"): (0.0, 0.0),
    ("edge_loss_high", "edge_right"): (0.90, 1.0),
    ("edge_loss_low", "edge_wrong_sign"): (0.0, 0.0),
    ("edge_loss_low", "edge_right"): (0.90, 1.0),
    ("edge_loss_high_one_run", "edge_wrong_sign"): (0.0, 0.03),
    ("drift_control_between", "no_difference"): (0.95, 1.0),
    ("drift_control_between", "control_chosen"): (0.0, 0.0),
    ("stalled_level", "one_level_flagged"): (0.90, 1.0),
}


def test_the_page_quotes_figures_that_meet_the_targets() -> None:
    """What the report's table quotes (HARD_QUOTED, 200 draws per case, seed 0) meets every target;
    the tests above check fresh draws on another seed against the same targets."""
    quoted = {(case, what): share for case, figures in draws.HARD_QUOTED.items() for what, share in figures.items()}
    assert set(quoted) == set(TARGETS) == {(c, w) for c, ws in draws.HARD_JUDGED.items() for w in ws}
    for key, share in quoted.items():
        lo, hi = TARGETS[key]
        assert lo <= share <= hi, (key, share)
