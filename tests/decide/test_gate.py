"""The CI gate (specsweep.decide.gate), statistically: A/A pairs drawn from the synthetic noise models
pass, an injected regression fails.

An A/A pair is two studies drawn independently from one truth. The metric tests share a 1 %
family-wise budget (Bonferroni over every arm × metric × level and each curve's mean shift); without
repeats the noise is the assumption or, where larger, the scatter of the level differences — so
noise twice the assumption (``noise_2x_one_run``) does not read as a shift. Truths near a decision
threshold (+4 % with 3 runs, +6 % with one run, a crossover on a tested level) flip their decision
between two draws in a third to a half of pairs: the gate reports such a change as within noise
and fails only a credible one (a metric or a delta the decision reads beyond noise). So ≥ 95 % of
pairs pass on every truth (bench/gate_rates.py: 100 pairs each; here 24, pooled: the bound lies
about 2 binomial standard errors above what ≈ 1 % failures give), while without the rule the
near-threshold truths alone fail about 40 % of pairs. A 20 % lower aggregate throughput or accept
length of the speculative arm is many standard errors of a curve's mean shift at 3 % noise: every
pair fails, naming it.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from helpers import at_low_priority
from specsweep.decide.draws import draw_pair, draw_study
from specsweep.decide.gate import MAX_LINES, GateResult, gate, gate_text, metric_shifts
from specsweep.results.store import ResultSet

#: (truth, how many pairs): noise models far from a decision threshold, twice the assumed noise, and near a threshold
AA_CASES: tuple[tuple[str, int], ...] = (("nominal_none", 24), ("growing_noise", 24), ("nominal_none_one_run", 24),
                                         ("pair:better", 24), ("noise_2x_one_run", 24), ("nominal_plus4", 24),
                                         ("plus6_one_run", 24), ("latency_crossover_24_3runs", 24))
#: truths whose regressions every pair must catch (3 % noise: 20 % is many standard errors of a curve's mean)
CAUGHT = {"nominal_none", "growing_noise", "nominal_none_one_run", "pair:better", "nominal_plus4", "plus6_one_run",
          "latency_crossover_24_3runs"}


def _pair(case: str, rng: np.random.Generator) -> tuple[list[ResultSet], list[ResultSet]]:
    if case.startswith("pair:"):
        return _with_accept(draw_pair(case[5:], "repeats", rng), rng), _with_accept(draw_pair(case[5:], "repeats", rng), rng)
    return _with_accept(draw_study(case, rng), rng), _with_accept(draw_study(case, rng), rng)


def _with_accept(sets: list[ResultSet], rng: np.random.Generator) -> list[ResultSet]:
    """The speculative arm given an accept length: 2.4 tokens per step, 3 % log-normal noise per run."""
    return [replace(rs, levels=rs.levels.assign(spec_accept_length=2.4 * np.exp(0.03 * rng.standard_normal(len(rs.levels)))))
            if rs.arm == "spec" else rs for rs in sets]


def _scaled(sets: list[ResultSet], arm: str, factor: float, metric: str) -> list[ResultSet]:
    """The study with ``arm``'s ``metric`` × ``factor`` at every level."""
    return [replace(rs, levels=rs.levels.assign(**{metric: rs.levels[metric] * factor})) if rs.arm == arm else rs
            for rs in sets]


def _aa_and_regression(seed: int) -> tuple[list[GateResult], dict[str, list[GateResult]]]:
    rng = np.random.default_rng(seed)
    aa: list[GateResult] = []
    worse: dict[str, list[GateResult]] = {"output_tok_s": [], "spec_accept_length": []}
    for case, n in AA_CASES:
        for i in range(n):
            ref, new = _pair(case, rng)
            aa.append(gate(ref, new))
            if i % 4 == 0 and case in CAUGHT:
                for metric, results in worse.items():
                    results.append(gate(ref, _scaled(new, "spec", 0.8, metric)))
    return aa, worse


def test_aa_pairs_pass_and_a_regression_fails() -> None:
    aa, worse = at_low_priority(_aa_and_regression, 0)
    passed = sum(r.passed for r in aa) / len(aa)
    assert passed >= 0.95, [r.differences for r in aa if not r.passed]
    assert sum(bool(r.within_noise) for r in aa) >= len(aa) // 10  # decisions do flip between draws: noted, not failed
    for metric, word in (("output_tok_s", "aggregate"), ("spec_accept_length", "accept length")):
        assert all(not r.passed for r in worse[metric])
        assert all(any(d.startswith(f"metric    spec {word}") for d in r.differences) for r in worse[metric])


def test_a_decision_change_within_noise_is_noted_and_a_credible_one_fails() -> None:
    """Near a threshold (+6 %, one run) two draws often decide differently with every figure within
    noise: noted on the screen, passed. The same change with the arm 15 % slower fails, saying why."""
    rng = np.random.default_rng(4)
    noted = []
    while not noted:
        ref, new = _pair("plus6_one_run", rng)
        result = gate(ref, new)
        noted = result.within_noise
    assert result.passed and "within noise" in noted[0]
    assert "note      decision" in gate_text(result, "ref", "new")
    worse = gate(ref, _scaled(_scaled(new, "spec", 0.85, "output_tok_s"), "spec", 0.85, "request_tok_s_mean"))
    assert not worse.passed
    assert any(d.startswith("decision") and "beyond its noise" in d for d in worse.differences), worse.differences


def test_a_fixed_tolerance_is_not_what_the_gate_uses() -> None:
    """The limit follows the runs' noise: quieter runs, a tighter limit; one run per level, the assumed noise."""
    rng = np.random.default_rng(1)
    ref, new = draw_study("nominal_none", rng), draw_study("nominal_none", rng)
    quiet = [replace(rs, levels=rs.levels.assign(output_tok_s=np.exp(np.log(rs.levels["output_tok_s"]) * 0.1 +
                                                                     np.log(rs.levels["output_tok_s"]).mean() * 0.9)))
             for rs in ref]
    loud = {(s.arm, s.concurrency): s.limit_ln for s in metric_shifts(ref, new) if s.metric == "output_tok_s"}
    calm = {(s.arm, s.concurrency): s.limit_ln for s in metric_shifts(quiet, quiet) if s.metric == "output_tok_s"}
    assert all(calm[k] < loud[k] for k in loud)
    single = draw_study("nominal_none_one_run", rng)
    assert {s.noise for s in metric_shifts(single, single)} == {"assumed"}


def test_a_changed_decision_or_a_missing_level_fails_on_one_screen() -> None:
    rng = np.random.default_rng(2)
    ref = draw_pair("better", "repeats", rng)
    none = draw_pair("none", "repeats", rng)
    result = gate(ref, none)
    assert not result.passed
    assert any(d.startswith("decision") and "enable" in d and "→ no measurable difference" in d
               for d in result.differences)
    fewer = [replace(rs, levels=rs.levels[rs.levels["concurrency"] != 64]) for rs in ref]
    assert any("levels 64 not measured" in d for d in gate(ref, fewer).differences)
    text = gate_text(result, "ref", "new")
    assert text.startswith("specsweep gate: FAIL")
    assert len(text.splitlines()) <= MAX_LINES + 2
