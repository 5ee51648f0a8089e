"""The CI gate (specsweep.decide.gate), statistically: A/A pairs drawn from the synthetic noise models
pass, an injected regression fails.

An A/A pair is two studies drawn independently from one truth. The metric tests share a 1 %
family-wise budget (Bonferroni over every arm × metric × level), and truths far from any decision
threshold keep their decisions (no difference with 3 runs or one run, noise growing with load, +10 %
everywhere): so ≥ 95 % of pairs pass (64 pairs: the bound lies 2 binomial standard errors above what
≈ 1–3 % failures give). Truths near a threshold (+4 % with 3 runs, a crossover on a tested level)
flip their decision between two draws — and the gate rightly says so; they are not A/A passes to expect.
A 20 % lower aggregate throughput of the speculative arm is ≈ 7 standard errors of a level mean at 3 %
noise: every pair fails, naming it.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from helpers import at_low_priority
from specsweep.decide.draws import draw_pair, draw_study
from specsweep.decide.gate import MAX_LINES, GateResult, gate, gate_text, metric_shifts
from specsweep.results.store import ResultSet

#: (truth, how many pairs): noise models far from a decision threshold
AA_CASES: tuple[tuple[str, int], ...] = (("nominal_none", 16), ("growing_noise", 16), ("nominal_none_one_run", 16),
                                         ("pair:better", 16))


def _pair(case: str, rng: np.random.Generator) -> tuple[list[ResultSet], list[ResultSet]]:
    if case.startswith("pair:"):
        return draw_pair(case[5:], "repeats", rng), draw_pair(case[5:], "repeats", rng)
    return draw_study(case, rng), draw_study(case, rng)


def _slower(sets: list[ResultSet], arm: str, factor: float) -> list[ResultSet]:
    """The study with ``arm``'s aggregate throughput × ``factor`` at every level."""
    out = []
    for rs in sets:
        if rs.arm == arm:
            lv = rs.levels.copy()
            lv["output_tok_s"] *= factor
            rs = replace(rs, levels=lv)
        out.append(rs)
    return out


def _aa_and_regression(seed: int) -> tuple[list[GateResult], list[GateResult]]:
    rng = np.random.default_rng(seed)
    aa, worse = [], []
    for case, n in AA_CASES:
        for i in range(n):
            ref, new = _pair(case, rng)
            aa.append(gate(ref, new))
            if i % 4 == 0:
                worse.append(gate(ref, _slower(new, "spec", 0.8)))
    return aa, worse


def test_aa_pairs_pass_and_a_regression_fails() -> None:
    aa, worse = at_low_priority(_aa_and_regression, 0)
    passed = sum(r.passed for r in aa) / len(aa)
    assert passed >= 0.95, [r.differences for r in aa if not r.passed]
    assert all(not r.passed for r in worse)
    assert all(any(d.startswith("metric    spec aggregate") for d in r.differences) for r in worse)


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
