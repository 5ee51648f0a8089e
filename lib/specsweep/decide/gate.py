"""A CI gate: does a new study or sweep still say what a stored reference said, within its own noise?

:func:`gate` compares the new result sets with the reference's, both compared and decided the way
the report does it, and lists every *difference*:

- a *metric* moved beyond what the runs' own noise explains: aggregate output tok/s, accept length
  and TTFT p99 (:data:`GATE_METRICS`), per arm, per level both measured and as the mean over those
  levels (a shift of the whole curve, the usual regression, tested far more tightly than one level).
  Each is a two-sided t test on ln(value): the difference of the two sets' level means over its
  standard error, the run-to-run variance of ln(value) modelled per level from both sets' repeats
  as the comparison models it (the larger of the variance pooled over the levels and a log-linear
  trend in log2(concurrency) fitted to the levels' own: noise that grows with load widens its own
  levels). Where neither set repeated a level, the assumed run-to-run noise
  (:data:`~specsweep.analyze.noise.ASSUMED_NOISE_PCT` per run) stands in — or, as the comparison
  widens its band, the scatter of the level differences about a quadratic in log2(concurrency),
  pooled with the assumption, where that is larger (an A/A pair's differences are pure noise, and a
  smooth regression is absorbed by the quadratic); the diff says which. The tests share one error
  budget :data:`ALPHA` (Bonferroni over every test), so an A/A pair fails on metrics at most that often;
- a profile's decision changed (its class, its arm, its tie set or the bracket of its crossover,
  :func:`specsweep.decide.decisions.same_decision`) *credibly* (:func:`credible`): a metric above
  moved beyond its noise, or a level delta the decision reads (arm ÷ baseline) moved between the
  studies beyond both levels' noise (:func:`delta_moves`). Where the truth lies near a decision
  threshold two runs of one configuration decide differently in a third to a half of pairs with
  every figure within noise — the decision's own flip chance, not a regression: such a change is
  listed as *within noise* (:attr:`GateResult.within_noise`) and does not fail the gate;
- an arm or a level the reference measured is missing from the new data.

No difference: the gate passes. The output fits one screen (:func:`gate_text`).
``bench/gate_rates.py`` measures the A/A pass rate and the regressions caught per truth.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from specsweep.analyze.compare import Comparison, compare
from specsweep.analyze.curves import pct_of_log_ratio
from specsweep.analyze.noise import ASSUMED_NOISE_PCT, level_variance, residual_scatter, with_assumption
from specsweep.decide.decisions import DecisionRow, decided_row, same_decision
from specsweep.decide.flip import decision_metrics
from specsweep.decide.profiles import DEFAULT_PROFILES
from specsweep.results.store import ResultSet

#: the metrics the gate tests, with the word and unit it prints
GATE_METRICS: dict[str, tuple[str, str]] = {
    "output_tok_s": ("aggregate", "tok/s"),
    "spec_accept_length": ("accept length", "tokens/step"),
    "ttft_p99_s": ("TTFT p99", "s"),
}
#: the chance that an A/A pair fails on some metric (family-wise, over every metric × level compared)
ALPHA: float = 0.01
#: most difference lines printed (the rest are counted)
MAX_LINES: int = 20


#: what a shift line adds about its noise where it was not measured by repeats
_NOISE_WORDS: dict[str, str] = {"assumed": ", noise assumed", "scatter": ", noise from the levels' scatter"}


@dataclass(frozen=True)
class MetricShift:
    """One metric at one level of one arm: the reference's and the new level means (geometric: the
    test is on ln(value)), and the limit of the shift (ln units)."""

    arm: str
    metric: str
    #: the level, or None for the mean over every level both measured (a shift of the whole curve)
    concurrency: int | None
    reference: float
    new: float
    #: the |ln(new mean ÷ reference mean)| the noise explains at the family-wise level
    limit_ln: float
    #: where the noise came from: 'repeats', 'assumed' or 'scatter' (of the level differences, one run each)
    noise: str

    @property
    def shift_ln(self) -> float:
        """ln(new ÷ reference) of the level means (the difference of the mean ln values)."""
        return math.log(self.new / self.reference)

    @property
    def beyond(self) -> bool:
        """Whether the shift is beyond what the noise explains."""
        return abs(self.shift_ln) > self.limit_ln

    def text(self) -> str:
        """One line: the metric, both values, the shift and the limit in %."""
        word, unit = GATE_METRICS.get(self.metric, (self.metric, ""))
        pct = pct_of_log_ratio(self.shift_ln)
        lim = pct_of_log_ratio(self.limit_ln)
        where = f"at {self.concurrency}" if self.concurrency is not None else "over all levels (geometric mean)"
        return (f"{self.arm} {word} {where}: {self.reference:.4g} → {self.new:.4g} {unit} ({pct:+.1f}%; "
                f"noise explains ±{lim:.1f}%{_NOISE_WORDS.get(self.noise, '')})")


@dataclass(frozen=True)
class DeltaMove:
    """A delta (arm ÷ baseline) a decision reads that moved between the studies beyond both levels' noise."""

    arm: str
    metric: str
    concurrency: int
    #: ln(arm ÷ baseline) of the level, in the reference and in the new study
    reference_ln: float
    new_ln: float
    #: the |difference| the two levels' noise explains at the family-wise level
    limit_ln: float

    def text(self) -> str:
        """One phrase: the delta in both studies and the limit, in %."""
        pct = [pct_of_log_ratio(v) for v in (self.reference_ln, self.new_ln)]
        return (f"{self.arm} Δ {self.metric} at {self.concurrency} moved {pct[0]:+.1f}% → {pct[1]:+.1f}% "
                f"(noise explains ±{pct_of_log_ratio(self.limit_ln):.1f} points)")


@dataclass
class GateResult:
    """What the gate found: the difference lines (empty: passed), the decision changes within noise
    (reported, not failed) and how much it compared."""

    differences: list[str] = field(default_factory=list)
    decisions: int = 0
    shifts: list[MetricShift] = field(default_factory=list)
    within_noise: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.differences


def gate(reference: Sequence[ResultSet], new: Sequence[ResultSet], baseline: str = "baseline",
         profiles: Sequence[dict[str, Any]] | None = None, alpha: float = ALPHA) -> GateResult:
    """Compare ``new`` with ``reference`` (see the module docstring); both must hold ``baseline``."""
    out = GateResult()
    profiles = list(profiles if profiles is not None else DEFAULT_PROFILES)
    ref_comp, new_comp = (compare(s, baseline=baseline, assumed_noise_pct=ASSUMED_NOISE_PCT) for s in (reference, new))
    ref_rows, new_rows = ([decided_row(c, p) for p in profiles] for c in (ref_comp, new_comp))
    out.decisions = len(ref_rows)
    out.shifts = metric_shifts(reference, new, alpha)
    beyond = [s for s in out.shifts if s.beyond]
    moved = delta_moves(ref_comp, new_comp, decision_metrics(ref_comp, profiles), alpha)
    for line, row in decision_changes(ref_rows, new_rows):
        why = credible(row, beyond, moved)
        if why:
            out.differences.append(f"{line} — {why}")
        else:
            out.within_noise.append(f"{line} — within noise: {NOT_CREDIBLE}")
    out.differences += missing(reference, new)
    out.differences += ["metric    " + s.text() for s in beyond]
    return out


def decision_changes(ref: Sequence[DecisionRow], new: Sequence[DecisionRow]) -> list[tuple[str, DecisionRow]]:
    """(one line, the reference's row) per profile whose decision differs (class, arm, tie set or
    crossover bracket), the new row in the line."""
    by_name = {r.profile: r for r in new}
    out = []
    for r in ref:
        n = by_name.get(r.profile)
        if n is None:
            out.append((f"decision  {r.profile}: not decided in the new data", r))
        elif not same_decision(r, n):
            out.append((f"decision  {r.profile}: {r.text()} ({r.arm_text()}) → {n.text()} ({n.arm_text()})", r))
    return out


#: what a decision change that is no difference says
NOT_CREDIBLE: str = ("no level credibly reversed and no metric or delta moved beyond the runs' noise (a truth near "
                     "a decision threshold; the reference's flip chance says how often its reruns flip)")


def credible(ref: DecisionRow, beyond: Sequence[MetricShift], moved: Sequence[DeltaMove]) -> str:
    """Why a changed decision of the reference row ``ref`` is credible ('' where it is not): the
    arm it chose, or any arm, has a metric or a delta beyond its noise; or the new decision was not
    made at all (a missing arm or level)."""
    arms = {ref.arm, *ref.tied} - {None}
    shift = next((s for s in beyond if s.arm in arms), None) or next(iter(beyond), None)
    if shift is not None:
        return f"{shift.arm} {GATE_METRICS.get(shift.metric, (shift.metric, ''))[0]} moved beyond its noise"
    move = next((m for m in moved if m.arm in arms), None) or next(iter(moved), None)
    if move is not None:
        return move.text()
    return ""


def _rows(rs: ResultSet) -> pd.DataFrame:
    """An arm's level rows without sentinel runs (those measure drift, not the arm)."""
    lv = rs.levels
    if "sentinel" in lv:
        lv = lv[~lv["sentinel"].fillna(False).astype(bool)]
    return lv


def missing(reference: Sequence[ResultSet], new: Sequence[ResultSet]) -> list[str]:
    """One line per arm, or arm's levels, the reference measured and the new data lack."""
    levels = {rs.arm: set(map(int, _rows(rs)["concurrency"])) for rs in new}
    gone = {rs.arm: sorted(set(map(int, _rows(rs)["concurrency"])) - levels.get(rs.arm, set())) for rs in reference}
    return [f"missing   arm {arm}: in the reference, not in the new data" if arm not in levels else
            f"missing   arm {arm}: levels {', '.join(map(str, cs))} not measured in the new data"
            for arm, cs in gone.items() if arm not in levels or cs]


def _logs(frame: pd.DataFrame, metric: str) -> dict[int, np.ndarray]:
    """{concurrency: ln of the metric's positive values} of level rows."""
    if metric not in frame:
        return {}
    v = pd.to_numeric(frame[metric], errors="coerce").to_numpy(float)
    c = frame["concurrency"].to_numpy()
    ok = np.isfinite(v) & (v > 0)
    return {int(x): np.log(v[ok & (c == x)]) for x in np.unique(c[ok])}


def _ss(y: np.ndarray) -> tuple[float, int]:
    return float(((y - y.mean()) ** 2).sum()), len(y) - 1


def metric_shifts(reference: Sequence[ResultSet], new: Sequence[ResultSet], alpha: float = ALPHA) -> list[MetricShift]:
    """Every (arm, metric, level) both measured, with the shift of its level mean and the limit the
    runs' noise sets at family-wise level ``alpha`` (Bonferroni over all of them)."""
    new_by_arm = {rs.arm: _rows(rs) for rs in new}
    pairs = []  # (arm, metric, {c: (ref logs, new logs)})
    for rs in reference:
        if rs.arm not in new_by_arm:
            continue
        for metric in GATE_METRICS:
            a, b = _logs(_rows(rs), metric), _logs(new_by_arm[rs.arm], metric)
            shared = {c: (a[c], b[c]) for c in sorted(set(a) & set(b)) if len(a[c]) and len(b[c])}
            if shared:
                pairs.append((rs.arm, metric, shared))
    k = sum(len(shared) + (len(shared) > 1) for _, _, shared in pairs)  # each level, and the mean over them
    out = []
    for arm, metric, shared in pairs:
        out += _tested(arm, metric, shared, alpha / (2 * k) if k else alpha)
    return out


def _tested(arm: str, metric: str, shared: dict[int, tuple[np.ndarray, np.ndarray]], tail: float) -> list[MetricShift]:
    """The shifts of one arm and metric, each with its limit: the t quantile 1 − ``tail`` times the
    standard error of the difference of the two level means, the run variance per level modelled as
    the comparison models it (:func:`~specsweep.analyze.noise.level_variance`: the larger of the
    pooled variance and a log-linear trend in log2(concurrency) of the levels' own)."""
    cs = list(shared)
    per_level = []
    for a, b in shared.values():
        parts = [_ss(y) for y in (a, b) if len(y) > 1]
        per_level.append((sum(p[0] for p in parts), sum(p[1] for p in parts)))
    ss, df = sum(p[0] for p in per_level), sum(p[1] for p in per_level)
    if not df:
        var, dof, noise = _without_repeats(cs, [float(b.mean() - a.mean()) for a, b in shared.values()])
    else:
        trend = level_variance(cs, per_level, ss / df, df)
        var, dof = trend if trend is not None else ([ss / df] * len(cs), float(df))
        noise = "repeats"
    crit = float(stats.t.ppf(1 - tail, dof))
    out = []
    for (c, (a, b)), v in zip(shared.items(), var):
        se = math.sqrt(v * (1 / len(a) + 1 / len(b)))
        out.append(MetricShift(arm, metric, c, float(np.exp(a.mean())), float(np.exp(b.mean())), crit * se, noise))
    if len(shared) > 1:  # the whole curve moved: the mean over the levels, far tighter than one level
        k = len(shared)
        se = math.sqrt(sum(v * (1 / len(a) + 1 / len(b)) for (a, b), v in zip(shared.values(), var))) / k
        ref_mean, new_mean = (float(np.exp(np.mean([p[i].mean() for p in shared.values()]))) for i in (0, 1))
        out.append(MetricShift(arm, metric, None, ref_mean, new_mean, crit * se, noise))
    return out


def delta_moves(ref: Comparison, new: Comparison, metrics: Sequence[str], alpha: float = ALPHA) -> list[DeltaMove]:
    """The level deltas of ``metrics`` (every arm both compared) whose ln(arm ÷ baseline) moved
    between the studies by more than both levels' own noise explains: a two-sided z test of the
    difference over √(se_ref² + se_new²), the standard errors the comparisons gave each level (their
    noise models: repeats, the requests' bootstrap, the assumption or the levels' scatter),
    Bonferroni at ``alpha`` over every (arm, metric, level) tested."""
    tests = []
    for arm in [a for a in ref.spec_arms if a in new.spec_arms]:
        for metric in metrics:
            a, b = ref.delta_rows(arm, metric), new.delta_rows(arm, metric)
            for c in sorted(set(a) & set(b)):
                pair = [(r["level_delta_pct"], r["level_noise_ln"]) for r in (a[c], b[c])]
                if all(np.isfinite(v) and np.isfinite(se) for v, se in pair):
                    (ya, sa), (yb, sb) = ((math.log1p(v / 100), se) for v, se in pair)
                    tests.append((arm, metric, int(c), ya, yb, math.hypot(sa, sb)))
    if not tests:
        return []
    z = float(stats.norm.ppf(1 - alpha / (2 * len(tests))))
    return [DeltaMove(arm, m, c, ya, yb, z * se) for arm, m, c, ya, yb, se in tests if abs(yb - ya) > z * se]


def _without_repeats(cs: list[int], diffs: list[float]) -> tuple[list[float], float, str]:
    """(run variance of ln(value) per level, its degrees of freedom, 'assumed' or 'scatter') where
    neither study repeated a level: the assumed run-to-run noise, or — as the comparison widens its
    band — the scatter of the levels' differences (new − reference, one run each) about a quadratic in
    log2(concurrency), pooled with the assumption, where that is larger. The differences of an A/A
    pair are pure noise, and a smooth shift (a regression at every level) is absorbed by the
    quadratic, so the scatter neither misses noise larger than assumed nor swallows a regression."""
    assumed = math.log1p(ASSUMED_NOISE_PCT / 100) ** 2
    raw = residual_scatter(cs, diffs)
    pooled = with_assumption(None if raw is None else (raw[0] / 2, raw[1]), assumed)  # a difference of two runs
    if pooled is not None and pooled[0] > assumed:
        return [pooled[0]] * len(cs), pooled[1], "scatter"
    return [assumed] * len(cs), math.inf, "assumed"


def gate_text(result: GateResult, reference: str, new: str) -> str:
    """The gate's one screen: the verdict, what was compared, each difference (at most :data:`MAX_LINES`)."""
    tested = len(result.shifts)
    head = (f"specsweep gate: {'PASS' if result.passed else 'FAIL'} — {new} against {reference}: "
            f"{result.decisions} decisions and {tested} metric levels compared "
            f"(metric limits: {ALPHA:.0%} family-wise, Bonferroni over the {tested})")
    lines = [head]
    shown = result.differences + [f"note      {n}" for n in result.within_noise]
    if result.differences:
        lines += shown[:MAX_LINES]
    else:
        lines.append("same decisions (class, arm, ties, crossover bracket) or changes within noise; every metric "
                     "within its runs' noise")
        lines += shown[:MAX_LINES - 1]
    if len(shown) > MAX_LINES - (not result.differences):
        lines.append(f"… and {len(shown) - MAX_LINES + (not result.differences)} more")
    return "\n".join(lines)
