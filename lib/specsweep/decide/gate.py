"""A CI gate: does a new study or sweep still say what a stored reference said, within its own noise?

:func:`gate` compares the new result sets with the reference's, both compared and decided the way
the report does it, and lists every *difference*:

- a profile's decision changed: its class, its arm, its tie set or the bracket of its crossover
  (:func:`specsweep.decide.decisions.same_decision`; the crossover may move inside its bracket);
- an arm or a level the reference measured is missing from the new data;
- a *metric* moved beyond what the runs' own noise explains: aggregate output tok/s, accept length
  and TTFT p99 (:data:`GATE_METRICS`), per arm and level both measured. Each is a two-sided t test
  on ln(value): the difference of the two sets' level means over its standard error, the run-to-run
  variance of ln(value) modelled per level from both sets' repeats as the comparison models it (the
  larger of the variance pooled over the levels and a log-linear trend in log2(concurrency) fitted
  to the levels' own: noise that grows with load widens its own levels). Where neither set repeated a level anywhere, the assumed run-to-run noise
  (:data:`~specsweep.analyze.noise.ASSUMED_NOISE_PCT` per run) stands in, and the diff says so.
  The tests share one error budget :data:`ALPHA` (Bonferroni over every arm × metric × level
  compared), so an A/A pair (two runs of one configuration) fails on metrics at most that often.

No difference: the gate passes. The output fits one screen (:func:`gate_text`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from specsweep.analyze.compare import compare
from specsweep.analyze.noise import ASSUMED_NOISE_PCT, level_variance
from specsweep.decide.decisions import DecisionRow, decided_row, same_decision
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


@dataclass(frozen=True)
class MetricShift:
    """One metric at one level of one arm: the reference's and the new level means (geometric: the
    test is on ln(value)), and the limit of the shift (ln units)."""

    arm: str
    metric: str
    concurrency: int
    reference: float
    new: float
    #: the |ln(new mean ÷ reference mean)| the noise explains at the family-wise level
    limit_ln: float
    #: where the noise came from: 'repeats' or 'assumed'
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
        pct = (math.exp(self.shift_ln) - 1) * 100
        lim = (math.exp(self.limit_ln) - 1) * 100
        return (f"{self.arm} {word} at {self.concurrency}: {self.reference:.4g} → {self.new:.4g} {unit} ({pct:+.1f}%; "
                f"noise explains ±{lim:.1f}%{', noise assumed' if self.noise == 'assumed' else ''})")


@dataclass
class GateResult:
    """What the gate found: the difference lines (empty: passed) and how much it compared."""

    differences: list[str] = field(default_factory=list)
    decisions: int = 0
    shifts: list[MetricShift] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.differences


def gate(reference: Sequence[ResultSet], new: Sequence[ResultSet], baseline: str = "baseline",
         profiles: Sequence[dict[str, Any]] | None = None, alpha: float = ALPHA) -> GateResult:
    """Compare ``new`` with ``reference`` (see the module docstring); both must hold ``baseline``."""
    out = GateResult()
    ref_rows = _decisions(reference, baseline, profiles)
    new_rows = _decisions(new, baseline, profiles)
    out.decisions = len(ref_rows)
    out.differences += decision_changes(ref_rows, new_rows)
    out.differences += missing(reference, new)
    out.shifts = metric_shifts(reference, new, alpha)
    out.differences += ["metric    " + s.text() for s in out.shifts if s.beyond]
    return out


def _decisions(sets: Sequence[ResultSet], baseline: str, profiles: Sequence[dict[str, Any]] | None) -> list[DecisionRow]:
    """The decision rows the report would print for ``sets`` (its comparison, its rules)."""
    comp = compare(sets, baseline=baseline, assumed_noise_pct=ASSUMED_NOISE_PCT)
    return [decided_row(comp, p) for p in (profiles if profiles is not None else DEFAULT_PROFILES)]


def decision_changes(ref: Sequence[DecisionRow], new: Sequence[DecisionRow]) -> list[str]:
    """One line per profile whose decision differs (class, arm, tie set or crossover bracket)."""
    by_name = {r.profile: r for r in new}
    out = []
    for r in ref:
        n = by_name.get(r.profile)
        if n is None:
            out.append(f"decision  {r.profile}: not decided in the new data")
        elif not same_decision(r, n):
            out.append(f"decision  {r.profile}: {r.text()} ({r.arm_text()}) → {n.text()} ({n.arm_text()})")
    return out


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
    k = sum(len(shared) for _, _, shared in pairs)
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
        var, dof, noise = [math.log1p(ASSUMED_NOISE_PCT / 100) ** 2] * len(cs), math.inf, "assumed"
    else:
        trend = level_variance(cs, per_level, ss / df, df)
        var, dof = trend if trend is not None else ([ss / df] * len(cs), float(df))
        noise = "repeats"
    crit = float(stats.t.ppf(1 - tail, dof))
    out = []
    for (c, (a, b)), v in zip(shared.items(), var):
        se = math.sqrt(v * (1 / len(a) + 1 / len(b)))
        out.append(MetricShift(arm, metric, c, float(np.exp(a.mean())), float(np.exp(b.mean())), crit * se, noise))
    return out


def gate_text(result: GateResult, reference: str, new: str) -> str:
    """The gate's one screen: the verdict, what was compared, each difference (at most :data:`MAX_LINES`)."""
    tested = len(result.shifts)
    head = (f"specsweep gate: {'PASS' if result.passed else 'FAIL'} — {new} against {reference}: "
            f"{result.decisions} decisions and {tested} metric levels compared "
            f"(metric limits: {ALPHA:.0%} family-wise, Bonferroni over the {tested})")
    lines = [head]
    if result.differences:
        lines += result.differences[:MAX_LINES]
        if len(result.differences) > MAX_LINES:
            lines.append(f"… and {len(result.differences) - MAX_LINES} more")
    else:
        lines.append("same decisions (class, arm, ties, crossover bracket); every metric within its runs' noise")
    return "\n".join(lines)
