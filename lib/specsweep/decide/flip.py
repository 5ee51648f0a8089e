"""How stable a decision is: the estimated probability that a rerun with the same design flips it.

A *flip* is a rerun whose decision, for one profile, has another class than the measured one, or
names an arm the measured decision did not offer: neither its arm nor one of the arms tied with it
(:func:`flipped`; :func:`specsweep.decide.decisions.same_decision` also compares tie sets and the
crossover's bracket; the flip chance is about what an operator acts on: whether to enable, and which
arm). A rerun naming an arm of the measured tie is not a flip: the page already says that arm does
as well, and the rule that names one arm of a tie (the simplest,
:func:`specsweep.decide.ties.resolve_tie`) still names the measured arm given the rerun's. Counting
it counted a coin toss between equal arms: a rerun where they stay tied names the measured arm, one
where they come apart names the larger noisy margin, either arm — and simulated reruns part them far
more often than fresh studies do, since each arm's truth is drawn from its own curve against the
baseline, not from the arms' direct comparison. On studies of two identical arms it predicted
25–38 % where fresh studies flipped 0–7 %.

The estimator (:func:`flip_chances`) simulates reruns of the study from its own data and re-decides
each with the project's decision code (:func:`specsweep.decide.decisions.decided_row`, the rows
:func:`~specsweep.decide.recommend` gives, without their sentences):

- every arm's level rows are redrawn per (concurrency, sentinel or not), on the metrics the
  comparison fitted a delta curve for, in ln(value), a run's metrics together (their correlation kept):
- where a level has n ≥ 2 runs, by a two-stage residual bootstrap: draw n runs with replacement
  twice. The mean of the first draw moves the level's centre — what the truth may be, given the runs
  measured — and the second draw gives the rerun's own runs about that centre, so a rerun's level
  mean scatters about the measured one with twice the variance of a mean (the truth's uncertainty
  plus the rerun's own noise). Residuals are scaled by √(n/(n−1)) so the draws have the runs'
  unbiased variance. Redrawing only once (the plain bootstrap) answers another question — how far
  the measured decision is from the estimate — and predicts about half the flips a rerun shows where
  the truth lies near a decision threshold (``bench/flip_calibration.py`` measures both);
- where a level has one run, by a log-normal draw with the noise the comparison itself used for that
  level (the curve's own standard error: the assumed run-to-run noise, the levels' scatter where
  that is larger, or the bootstrap over the level's requests for per-request statistics), also twice over;
- a control arm is redrawn like any arm, so each rerun's control deviation — which widens every
  band — varies as the control's own runs allow; a drift the runs carry (sentinels, the order the
  arms ran in) is kept, since a rerun of the same design meets it again.

The flip chance is the share of ``resamples`` reruns that flip (default :data:`RESAMPLES`); one
generator seeded with ``seed`` draws every rerun, so the same data give the same figure. It is an
estimate with binomial noise of about √(p(1−p)/resamples) (±4 points at 100 resamples near 20 %).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from specsweep.analyze.compare import ESTIMATED_WAIT, WAIT_METRICS, Comparison, compare
from specsweep.analyze.curves import DeltaCurve
from specsweep.analyze.noise import ASSUMED_NOISE_PCT
from specsweep.decide.decisions import DecisionRow, decided_row, decision_table
from specsweep.decide.profiles import DEFAULT_PROFILES, parse_profile
from specsweep.decide.result import FlipChance, Recommendation
from specsweep.decide.ties import profile_metrics
from specsweep.results.store import ResultSet, load_result_sets

#: reruns simulated per study: a report's flip chance within about ±4 points (binomial, near 20 %);
#: each rerun redraws and fits only the metrics the decisions read (``bench/flip_cost.py`` times it)
RESAMPLES: int = 100
#: bootstrap resamples of per-request statistics inside each simulated rerun's comparison (fewer
#: than the report's: each rerun's band needs only its width's order, and there are many reruns)
RERUN_N_BOOT: int = 50
#: how a rerun's truth is drawn: from the fitted curves ('curve', the estimator) or each level's own runs ('runs')
Method = Literal["curve", "runs"]


def flip_chances(sets: Sequence[ResultSet], profiles: Sequence[dict[str, Any]] | None = None,
                 baseline: str = "baseline", *, resamples: int = RESAMPLES, seed: int = 0,
                 assumed_noise_pct: float | None = ASSUMED_NOISE_PCT, comp: Comparison | None = None,
                 method: Method = "curve") -> dict[str, FlipChance]:
    """{profile name: its flip chance} of the study ``sets`` (see the module docstring); empty where
    ``resamples`` is 0 (no estimate).

    ``comp``: the comparison already made of ``sets`` (else made here, as the report makes it);
    ``method``: 'curve' (the estimator) or 'runs' (each level's runs alone, for the calibration's comparison).
    """
    profiles = list(profiles if profiles is not None else DEFAULT_PROFILES)
    if resamples <= 0:
        return {}
    if comp is None:
        comp = compare(sets, baseline=baseline, allow_workload_mismatch=True, assumed_noise_pct=assumed_noise_pct)
    measured = [decided_row(comp, p) for p in profiles]
    study = Study.of(comp, profiles)
    rng = np.random.default_rng(seed)
    flips = [0] * len(profiles)
    for _ in range(resamples):
        rows = rerun_rows(rerun_sets(sets, study, rng, method), profiles, baseline, assumed_noise_pct, study.metrics)
        for i, (a, b) in enumerate(zip(measured, rows)):
            flips[i] += b is None or flipped(a, b)
    return {parse_profile(p).name: FlipChance(f, resamples) for p, f in zip(profiles, flips)}


def decision_metrics(comp: Comparison, profiles: Sequence[dict[str, Any]]) -> list[str]:
    """The metrics the decisions of ``profiles`` read (:func:`specsweep.decide.ties.profile_metrics`
    of every arm, every wait metric a latency verdict may judge): the only ones a rerun redraws and fits."""
    out = {"output_tok_s", comp.user_metric, *WAIT_METRICS, ESTIMATED_WAIT}
    for p in profiles:
        for arm in comp.spec_arms:
            out.update(profile_metrics(comp, parse_profile(p), arm))
    return sorted(out)


def flipped(a: DecisionRow, b: DecisionRow) -> bool:
    """Whether ``b`` (a rerun) decides otherwise than ``a`` (the measured decision): another decision
    class, or an arm that is neither ``a``'s nor one ``a`` found tied with it (see the module docstring:
    ``a``'s arm is the simplest of its tie, so the simplest of that tie and ``b``'s is still ``a``'s)."""
    if a.decision != b.decision:
        return True
    return b.arm != a.arm and b.arm not in a.tied


def rerun_rows(sets: Sequence[ResultSet], profiles: Sequence[dict[str, Any]], baseline: str,
               assumed_noise_pct: float | None, metrics: Sequence[str] | None = None) -> list[DecisionRow | None]:
    """The decision rows of one simulated rerun (None for each profile where it cannot be decided);
    ``metrics``: the only ones its comparison fits (:func:`decision_metrics`; default all)."""
    try:
        comp = compare(sets, baseline=baseline, allow_workload_mismatch=True, n_boot=RERUN_N_BOOT,
                       assumed_noise_pct=assumed_noise_pct, metrics=metrics)
        return [decided_row(comp, p) for p in profiles]
    except ValueError:  # a redrawn level the comparison cannot use: no decision, so not the same one
        return [None] * len(profiles)


def table_with_flips(paths: Sequence[str | Path], baseline: str = "baseline",
                     profiles: Sequence[dict[str, Any]] | None = None, resamples: int = RESAMPLES) -> list[DecisionRow]:
    """:func:`specsweep.decide.decisions.table_of`, each row with its flip chance (``resamples`` reruns)."""
    sets = load_result_sets([str(p) for p in paths])
    comp = compare(sets, baseline=baseline, assumed_noise_pct=ASSUMED_NOISE_PCT)
    rows = decision_table(comp, profiles)
    chances = flip_chances(sets, profiles, baseline, resamples=resamples, comp=comp)
    return [replace(r, flip_chance=chances[r.profile].chance, flip_resamples=resamples) for r in rows]


def with_flips(recs: Sequence[Recommendation], chances: dict[str, FlipChance]) -> list[Recommendation]:
    """The recommendations, each carrying its profile's flip chance (where estimated)."""
    return [replace(r, flip=chances.get(r.profile.name)) for r in recs]


# ------------------------------------------------------------------------------- simulated reruns


@dataclass
class Study:
    """What every simulated rerun of one study reads from its comparison, worked out once: the
    metrics to redraw, each arm's runs per level and one run's noise per (arm, metric, level)."""

    comp: Comparison
    #: the metrics redrawn and fitted (those the decisions read that the comparison fitted a curve for)
    metrics: list[str]
    #: {arm: {concurrency: runs}}
    runs: dict[str, dict[int, int]]
    #: {(arm, metric, concurrency): sd of ln(value) of one run}, filled as asked
    sds: dict[tuple[str, str, int], float] = field(default_factory=dict)

    @classmethod
    def of(cls, comp: Comparison, profiles: Sequence[dict[str, Any]] | None = None) -> Study:
        """The rerun inputs of ``comp`` for the decisions of ``profiles`` (None: every fitted metric)."""
        fitted = sorted({m for _, m in comp.curves})
        wanted = set(decision_metrics(comp, profiles)) if profiles is not None else set(fitted)
        return cls(comp, [m for m in fitted if m in wanted],
                   {a: _runs_per_level(raw) for a, raw in comp.raw_levels.items()})

    def run_sd(self, arm: str, metric: str, c: int) -> float:
        """:func:`_run_sd`, once per (arm, metric, level)."""
        key = (arm, metric, c)
        if key not in self.sds:
            self.sds[key] = _run_sd(self.comp, arm, metric, c, self.runs)
        return self.sds[key]


def rerun_sets(sets: Sequence[ResultSet], study: Study | Comparison, rng: np.random.Generator,
               method: Method = "curve") -> list[ResultSet]:
    """One simulated rerun of the study (see the module docstring): every arm's result set with its
    level rows moved to a drawn truth (``method`` 'curve'; 'runs': each level's own runs) and redrawn
    (``study``: its :class:`Study`, or the comparison to make one of, every fitted metric redrawn)."""
    if isinstance(study, Comparison):
        study = Study.of(study)
    shifts = _truth_shifts(study, rng) if method == "curve" else {}
    return [replace(rs, levels=_redrawn(rs.levels, rs.arm, study, rng, shifts.get(rs.arm, {}),
                                        stages=1 if method == "curve" else 2)) for rs in sets]


#: {arm: {metric: {concurrency: shift of ln(value)}}}
Shifts = dict[str, dict[str, dict[int, float]]]


def _truth_shifts(study: Study, rng: np.random.Generator) -> Shifts:
    """Per arm, metric and level, how far to move the arm's runs so that their ratio to the baseline
    is a truth drawn from the fitted curve's own uncertainty (its polynomial's covariance, or each
    level value's variance) instead of the measured ratio; the same shift of the baseline's level
    mean (the baseline's own uncertainty) moves every arm, so the ratios stay as drawn."""
    comp, metrics = study.comp, study.metrics
    out: Shifts = {}
    base: dict[str, dict[int, float]] = {}
    for m in metrics:
        base[m] = {}
        for c, n in study.runs.get(comp.baseline, {}).items():
            base[m][c] = study.run_sd(comp.baseline, m, c) / math.sqrt(n) * float(rng.standard_normal())
    for arm in [comp.baseline, *comp.spec_arms]:
        out[arm] = {m: dict(base[m]) for m in metrics}
    for (arm, m), curve in sorted(comp.curves.items()):
        if m not in base:
            continue
        drawn = _drawn_curve(curve, rng)
        for c, f, y in zip(curve.concurrency, drawn, curve.observed):
            out[arm][m][int(c)] = out[arm][m].get(int(c), 0.0) + float(f - y)
    return out


def _runs_per_level(raw: pd.DataFrame | None) -> dict[int, int]:
    """{concurrency: runs} of an arm's level rows."""
    if raw is None or raw.empty:
        return {}
    c, n = np.unique(raw["concurrency"].to_numpy(), return_counts=True)
    return {int(x): int(k) for x, k in zip(c, n)}


def _drawn_curve(curve: DeltaCurve, rng: np.random.Generator) -> np.ndarray:
    """The fitted curve at its tested levels with its coefficients (or level values) drawn from their
    estimated distribution: a plausible truth, given the measured levels."""
    if curve.poly is not None:
        x0, sc, beta, cov = curve.poly
        x = (np.log2(curve.concurrency.astype(float)) - x0) / sc
        rows = x[:, None] ** np.arange(len(beta))
        w, v = np.linalg.eigh((cov + cov.T) / 2)
        z = v @ (np.sqrt(np.clip(w, 0, None)) * rng.standard_normal(len(beta)))
        return np.asarray(rows @ (beta + z), float)
    var = curve.level_var if curve.level_var is not None else curve.se ** 2
    return np.asarray(curve.fitted + np.sqrt(np.clip(var, 0, None)) * rng.standard_normal(len(var)), float)


def _redrawn(levels: pd.DataFrame, arm: str, study: Study, rng: np.random.Generator,
             shifts: dict[str, dict[int, float]], stages: int) -> pd.DataFrame:
    """An arm's level rows, the study's metrics moved by ``shifts`` and redrawn per (concurrency,
    sentinel) group in ln(value)."""
    cols = [m for m in study.metrics if m in levels and _positive(levels[m])]
    if not cols or levels.empty:
        return levels
    out = levels.copy()
    logs = np.log(levels[cols].to_numpy(float))
    sentinel = levels["sentinel"].fillna(False).astype(bool).to_numpy() if "sentinel" in levels else \
        np.zeros(len(levels), bool)
    conc = levels["concurrency"].to_numpy()
    for c in np.unique(conc):
        shift = np.array([shifts.get(m, {}).get(int(c), 0.0) for m in cols])
        for s in (False, True):
            idx = np.flatnonzero((conc == c) & (sentinel == s))
            if len(idx) >= 2:
                logs[idx] = _bootstrap_runs(logs[idx], rng, stages) + shift
            elif len(idx) == 1:
                sd = np.array([study.run_sd(arm, m, int(c)) for m in cols])
                logs[idx] += shift + sd * math.sqrt(stages) * rng.standard_normal(len(cols))
    out[cols] = np.exp(logs)
    return out


def _positive(col: pd.Series) -> bool:
    """Whether a level column is numeric with every measured value above 0 (ln-able)."""
    if not pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
        return False
    values = col.to_numpy(float)
    values = values[~np.isnan(values)]
    return values.size > 0 and bool((values > 0).all())


def _bootstrap_runs(y: np.ndarray, rng: np.random.Generator, stages: int) -> np.ndarray:
    """n runs (rows of ln values) redrawn: n residuals drawn with replacement about the runs' mean —
    with ``stages`` = 2 about a centre first moved by the mean of another such draw; residuals scaled
    to the runs' unbiased variance. NaNs stay NaN."""
    n = len(y)
    centre = np.nanmean(y, axis=0)
    resid = (y - centre) * math.sqrt(n / (n - 1))
    if stages >= 2:
        centre = centre + np.nanmean(resid[rng.integers(0, n, n)], axis=0)
    return np.asarray(centre + resid[rng.integers(0, n, n)], float)


def _run_sd(comp: Comparison, arm: str, metric: str, c: int, runs: dict[str, dict[int, int]] | None = None) -> float:
    """One run's noise (sd of ln(value)) at level ``c`` as the comparison judged it: the curve's own
    standard error there over √(1/n_arm + 1/n_baseline) — of ``arm``'s curve, for the baseline the
    mean over the arms' curves; the assumed noise where no curve has the level. ``runs``: each arm's
    runs per level (:func:`_runs_per_level`; else counted here)."""
    if runs is None:
        runs = {a: _runs_per_level(raw) for a, raw in comp.raw_levels.items()}
    arms = [arm] if arm != comp.baseline else comp.spec_arms
    sds = []
    for a in arms:
        curve = comp.curve(a, metric)
        if curve is None or curve.own_se is None:
            continue
        at = np.flatnonzero(curve.concurrency == c)
        if at.size and np.isfinite(curve.own_se[at[0]]):
            n_a, n_b = runs.get(a, {}).get(c, 1), runs.get(comp.baseline, {}).get(c, 1)
            sds.append(float(curve.own_se[at[0]]) / math.sqrt(1 / n_a + 1 / n_b))
    if sds:
        return float(np.mean(sds))
    return math.log1p((comp.assumed_noise_pct or ASSUMED_NOISE_PCT) / 100)
