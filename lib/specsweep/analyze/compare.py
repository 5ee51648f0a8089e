"""Every arm joined against a baseline on concurrency: deltas, fitted delta curves with their bands, crossovers, Pareto.

Input: the arms' result sets and the baseline's arm name. Output: a :class:`Comparison` — the joined
levels (one row per arm and concurrency), one delta row per (arm, concurrency, metric), the fitted
curve per (arm, metric), the crossovers and the Pareto frontier — which decide/ and report/ read.
:func:`compare` runs the steps, each in the module that owns it: the join (:mod:`.join`), the
workload check (:mod:`.workload_match`), drift (:mod:`.drift`), the noise and the curve fit
(:mod:`.noise`, :mod:`.curves`), control arms (:mod:`.control`), crossovers (:mod:`.crossover`)
and the frontier (:mod:`.pareto`).

Definitions (docs/method.md, "How a verdict is reached"; the report quotes :data:`METHOD` word for word):

- ``delta_pct`` = (arm / baseline − 1) × 100 for every metric both arms have at a concurrency
  (values averaged over repeats); ``fit_delta_pct`` the fitted curve's value there.
- ``ci_low_pct`` / ``ci_high_pct``: the 95 % *simultaneous* band around the fitted delta at the
  tested levels (Bonferroni over the k levels of the :attr:`Comparison.family` verdict metrics).
  A level is *credibly* better or worse only where the band excludes 0; ``within_noise`` where it
  spans 0.

Invariant: the same result sets and arguments give the same figures: every random draw comes from
one generator seeded with ``seed``, in a fixed order of arms and metrics.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.control import (
    ControlPoints,
    Deviation,
    add_control,
    control_points,
    drift_floor,
    widen_for_controls,
)
from specsweep.analyze.crossover import crossover_table
from specsweep.analyze.curves import DeltaCurve, fit_shared, pct_of_log_ratio
from specsweep.analyze.drift import (
    Drift,
    correct_for_drift,
    estimate_drift,
    level_times,
    split_sentinels,
    widen_for_drift,
)
from specsweep.analyze.enginecpu import BASIS_CPU, normalise_aggregate
from specsweep.analyze.join import (
    NOT_METRICS,
    compared_metrics,
    join_levels,
    joinable_levels,
    measured_requests,
    require_shared_levels,
)
from specsweep.analyze.noise import ASSUMED_NOISE_PCT, fit_metric, pooled_run_var
from specsweep.analyze.pareto import pareto_table
from specsweep.analyze.workload_match import check_workloads
from specsweep.results.columns import METRICS, MetricInfo, metric_info
from specsweep.results.meta import Meta, Workload
from specsweep.results.store import ResultSet
from specsweep.servers import dialect_of

#: the curve model and band, as the report states it (one definition, see the module docstring)
METHOD: str = (
    "each metric's delta is modelled as y = ln(arm ÷ baseline) against x = log2(concurrency) over the levels both "
    "arms measured. The run-to-run noise of y comes from, in order: repeats (each level's own variance of ln(value) "
    "over both arms, modelled as the larger of the pooled variance and a log-linear trend in log2(concurrency) "
    "fitted to the levels' variances, so noise that grows with load widens the band where it grows); else, for "
    "per-request statistics of single runs, a bootstrap over each level's requests (within-run noise, never less "
    "than the run-to-run noise below); else, with one run per level, an assumed run-to-run noise per run and arm "
    "(the report parameter assumed_noise_pct, 3% unless set; a stated assumption, not a measurement: repeats replace "
    "it) — but where 7 or more levels let the data show their scatter about a quadratic and that scatter, pooled with "
    "the assumption counted as 2 degrees of freedom, is larger, the pooled figure is used for the band (with its "
    "degrees of freedom; the page says whether the scatter is significantly larger, one-sided χ² test at 5%), so "
    "the page is never more confident than the data. The curve is the lowest-degree polynomial in x (degree 0 to "
    "3) that fits within the noise — the assumed one where there is no measurement, so a larger scatter widens "
    "the band but never simplifies the curve — (lack-of-fit F-test at 5%) and whose next term, fitted, is not "
    "significant at 5%, else the level values joined by straight lines; every arm's curve of one metric is "
    "fitted with the same family, the most flexible any arm's own fit needed, so equal measurements get equal "
    "fits. The band is a 95% simultaneous band around the fitted curve at the tested levels: Bonferroni "
    "over the k levels of the m metrics a verdict reads (aggregate, per-user speed and the waits), i.e. each level "
    "at t quantile 1 − 0.025 ÷ (k × m). A level is credible where the band excludes 0 and its own measured delta "
    "does not lie on the other side of 0 by more than one standard deviation of its own noise (at the lowest and "
    "highest level: not on the other side at all). Drift: where a study re-measured levels at its end (sentinel runs), the "
    "drift of each metric is the slope of ln(value) against time through the sentinel pairs; every run is divided "
    "by exp(slope × time), and each level's band widened (in quadrature) by the slope's standard error × the time "
    "between the arm's and the baseline's runs there. A control arm (configured like the baseline) is never a "
    "candidate; every other arm's band is at least as wide as the control's largest fitted deviation from the "
    "baseline (and, at each level it measured, its observed deviation there). Intervals are not bootstrap intervals "
    "except where the noise source says so.")
#: what a user waits for, in the order they are named: measured percentiles, else Little's law
WAIT_METRICS: tuple[str, ...] = ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s")
ESTIMATED_WAIT: str = "e2e_mean_est_s"



@dataclass
class Comparison:
    """Every arm joined against the baseline. All frames are tidy (one row per observation)."""

    baseline: str
    arms: list[str]
    labels: dict[str, str]
    metas: dict[str, Meta]
    #: one row per (arm, concurrency): metrics averaged over repeats, plus ``n_repeats``
    levels: pd.DataFrame
    #: one row per (arm, concurrency, metric), non-baseline arms only
    deltas: pd.DataFrame
    #: one row per sign change: arm, metric, c_low, c_high, crossover_concurrency, direction
    crossovers: pd.DataFrame
    #: one row per (arm, concurrency) with ``on_frontier``
    pareto: pd.DataFrame
    #: the per-user speed column used throughout (1/TPOT when measured, else per-request tok/s)
    user_metric: str
    workload: Workload
    caps: dict[str, int | None]
    notes: list[str] = field(default_factory=list)
    #: arms whose server states no cap but whose running-request gauge held at a ceiling while requests
    #: waited (``server_queued_max`` > 0): that ceiling, the cap as observed
    observed_caps: dict[str, int] = field(default_factory=dict)
    #: the fitted delta curve per (arm, metric); absent where no curve could be fitted
    curves: dict[tuple[str, str], DeltaCurve] = field(default_factory=dict)
    #: arms whose token counts came from SSE chunks (arm -> where), so token-based figures are not trusted
    chunk_counted: dict[str, str] = field(default_factory=dict)
    #: warnings recorded in the arms' meta.json, as (arm, text)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    #: run-to-run noise (% per run) assumed where there were no repeats; None: residuals were used
    assumed_noise_pct: float | None = None
    #: arms that are controls (configured like the baseline): never a candidate, their deviation widens every band
    controls: list[str] = field(default_factory=list)
    #: the drift measured by sentinel runs (None: no sentinel in the data)
    drift: Drift | None = None
    #: how the runs were ordered, as the study recorded it (None: not measured by a study)
    run_order: str | None = None
    #: each arm's level rows, one per (concurrency, repeat), drift-corrected (what the curves were fitted on)
    raw_levels: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)
    #: each arm's measured requests (for bootstraps), or None
    requests: dict[str, pd.DataFrame | None] = field(default_factory=dict, repr=False)
    #: how many curves share the 5 % error budget (the metrics a verdict reads)
    family: int = 1
    #: bootstrap resamples used for per-request statistics
    n_boot: int = 400
    #: what ``output_tok_s`` means here where it is not wall-clock tok/s (a CPU engine that lost CPU to
    #: another process: :data:`~specsweep.analyze.enginecpu.BASIS_CPU`), else None
    aggregate_basis: str | None = None
    #: {(arm, metric): {concurrency: delta row}}, built from ``deltas`` when first asked for; not an
    #: init field, so that ``dataclasses.replace(comp, deltas=...)`` (charts.select) builds its own
    _delta_index: dict[tuple[str, str], dict[int, dict[str, Any]]] | None = field(default=None, init=False, repr=False)

    @property
    def spec_arms(self) -> list[str]:
        return [a for a in self.arms if a != self.baseline]

    @property
    def candidate_arms(self) -> list[str]:
        """Arms a verdict may recommend: every arm but the baseline and the controls."""
        return [a for a in self.spec_arms if a not in self.controls]

    def control_deviation(self, metric: str = "output_tok_s") -> dict[str, float]:
        """{control arm: largest |observed Δ%| from the baseline over its levels} for one metric."""
        out = {}
        for a in self.controls:
            rows = self.delta_rows(a, metric)
            if rows:
                out[a] = max(abs(float(r["delta_pct"])) for r in rows.values())
        return out

    def delta(self, arm: str, metric: str) -> pd.DataFrame:
        """The delta rows of one arm and metric, sorted by concurrency."""
        d = self.deltas
        return d[(d["arm"] == arm) & (d["metric"] == metric)].sort_values("concurrency").reset_index(drop=True)

    def delta_rows(self, arm: str, metric: str) -> dict[int, dict[str, Any]]:
        """{concurrency: delta row as a dict} of one arm and metric (built once, then cached)."""
        if self._delta_index is None:
            self._delta_index = _delta_index(records(self.deltas))
        return self._delta_index.get((arm, metric), {})

    def crossover(self, arm: str, metric: str = "output_tok_s") -> pd.DataFrame:
        c = self.crossovers
        mask = (c["arm"].to_numpy(object) == arm) & (c["metric"].to_numpy(object) == metric)  # numpy: no string kernels
        return c[mask].reset_index(drop=True)

    def arm_levels(self, arm: str) -> pd.DataFrame:
        return self.levels[self.levels["arm"] == arm].sort_values("concurrency").reset_index(drop=True)

    def curve(self, arm: str, metric: str) -> DeltaCurve | None:
        """The fitted delta curve of an arm and metric, or None."""
        return self.curves.get((arm, metric))

    def single_run(self) -> bool:
        """True when no arm repeated any level (no run-to-run noise can be measured)."""
        return bool((self.levels["n_repeats"].fillna(1) <= 1).all())

    def shared_levels(self, arm: str) -> list[int]:
        """Concurrency levels measured by both ``arm`` and the baseline."""
        a = set(self.levels.loc[self.levels["arm"] == arm, "concurrency"])
        b = set(self.levels.loc[self.levels["arm"] == self.baseline, "concurrency"])
        return sorted(int(c) for c in a & b)

    def unshared_levels(self, arm: str) -> dict[str, list[int]]:
        """Levels measured by one side only: {'arm': [...], 'baseline': [...]}."""
        a = set(self.levels.loc[self.levels["arm"] == arm, "concurrency"])
        b = set(self.levels.loc[self.levels["arm"] == self.baseline, "concurrency"])
        return {"arm": sorted(int(c) for c in a - b), "baseline": sorted(int(c) for c in b - a)}


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``frame.to_dict("records")``, the same Python values, built faster: one ``tolist`` per column
    instead of boxing cell by cell."""
    cols = list(frame.columns)
    return [dict(zip(cols, vals)) for vals in zip(*(frame[c].tolist() for c in cols))]


def _delta_index(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    index: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in rows:
        index.setdefault((r["arm"], r["metric"]), {})[int(r["concurrency"])] = r
    return index


#: derived metrics compare adds (not in the metrics registry): label, unit, better, definition
DERIVED: dict[str, MetricInfo] = {
    "e2e_mean_est_s": MetricInfo(
        "Mean request time, Little's-law estimate", "s", "lower",
        "concurrency × output tokens per request ÷ aggregate tok/s: the mean time from sending a request to its "
        "last token, queueing included, estimated by Little's law for a closed loop (level-only data)"),
}


def info(metric: str) -> MetricInfo:
    """Label, unit, direction and definition of a metric, derived ones included."""
    return DERIVED.get(metric) or metric_info(metric)


def compare(
    sets: Sequence[ResultSet],
    baseline: str = "baseline",
    *,
    allow_workload_mismatch: bool = False,
    n_boot: int = 400,
    seed: int = 0,
    assumed_noise_pct: float | None = ASSUMED_NOISE_PCT,
    metrics: Sequence[str] | None = None,
) -> Comparison:
    """Join every arm against ``baseline`` on concurrency (see the module docstring).

    ``metrics``: fit curves and make delta rows for these metrics only (default: every compared
    metric) — for callers that read a few, such as the flip chance's many simulated reruns; the
    error budget's family still counts every verdict metric the data hold, so the bands are the same.

    With a single result set there is nothing to join: the comparison has its levels (for charts
    of one arm) and no deltas. An arm that shares no concurrency level with the baseline is an
    error (:class:`~specsweep.analyze.join.NoSharedLevelError`) naming both level lists.
    """
    by_arm = _by_arm(sets, baseline)
    raw_levels, definition_notes = joinable_levels(by_arm)
    # a CPU engine that lost CPU to another process: decide on tok/s per engine CPU-second
    raw_levels, cpu_note = normalise_aggregate(raw_levels, {a: rs.meta for a, rs in by_arm.items()})
    definition_notes = definition_notes + ([cpu_note] if cpu_note else [])
    raw_levels, drift, times = _drift_corrected(raw_levels, baseline, assumed_noise_pct)
    require_shared_levels(raw_levels, baseline)
    notes = check_workloads(sets, by_arm[baseline], allow_workload_mismatch) + definition_notes
    levels, user_metric = join_levels(by_arm, raw_levels, definition_notes)
    join = _join(by_arm, raw_levels, levels, n_boot, assumed_noise_pct, metrics)
    fits = fit_shared(join.arms, join.metrics, join.levels_of, join.fit, np.random.default_rng(seed))
    curves = _banded(fits, join, drift, times)
    rows = _delta_rows(join, curves)
    comp = _comparison(join, levels, user_metric, rows, curves, notes + _unshared_notes(join), drift)
    comp.aggregate_basis = BASIS_CPU if cpu_note else None
    return comp


def _by_arm(sets: Sequence[ResultSet], baseline: str) -> dict[str, ResultSet]:
    """The result sets by arm, the baseline first, the others in the order given; a ValueError naming
    the arms where the baseline is not among them."""
    by_arm = {rs.arm: rs for rs in sets}
    if baseline not in by_arm:
        raise ValueError(
            f"baseline arm '{baseline}' is not among the result sets (arms: {', '.join(by_arm)}); "
            "set the baseline parameter to one of them"
        )
    return {a: by_arm[a] for a in [baseline] + [a for a in by_arm if a != baseline]}


def _drift_corrected(raw_levels: dict[str, pd.DataFrame], baseline: str, assumed_noise_pct: float | None
                     ) -> tuple[dict[str, pd.DataFrame], Drift | None, dict[str, dict[int, float]]]:
    """Every arm's level rows without their sentinel rows and, where those show drift, corrected for
    it: (level rows, the drift or None, each arm's run times per level; see :mod:`specsweep.analyze.drift`)."""
    sentinel_rows: dict[str, pd.DataFrame] = {}
    raw_levels = dict(raw_levels)
    for a in raw_levels:
        raw_levels[a], sentinel_rows[a] = split_sentinels(raw_levels[a])
    drift = None
    if any(not f.empty for f in sentinel_rows.values()):
        drift_metrics = [c for c in raw_levels[baseline].columns if c not in NOT_METRICS
                         and pd.api.types.is_numeric_dtype(raw_levels[baseline][c])]
        run_var = max(math.log1p((assumed_noise_pct or ASSUMED_NOISE_PCT) / 100) ** 2,
                      pooled_run_var(raw_levels, "output_tok_s"))
        drift = estimate_drift(raw_levels, sentinel_rows, drift_metrics, run_var)
    raw_levels, times = correct_for_drift(raw_levels, drift)
    return raw_levels, drift, times


@dataclass
class _Join:
    """What the delta curves are fitted from: the arms, their level rows and requests, the joined rows."""

    baseline: str
    #: the arms compared with the baseline, in order
    arms: list[str]
    controls: list[str]
    by_arm: dict[str, ResultSet]
    #: each arm's level rows, one per (concurrency, repeat), drift-corrected
    raw_levels: dict[str, pd.DataFrame]
    requests: dict[str, pd.DataFrame | None]
    #: {arm: {concurrency: its joined row}}, the baseline's included
    rows: dict[str, dict[Any, dict[str, Any]]]
    metrics: list[str]
    #: how many curves share the 5 % error budget (the metrics a verdict reads)
    family: int
    n_boot: int
    assumed_noise_pct: float | None

    def levels_of(self, arm: str, metric: str) -> list[int]:
        """The levels where both ``arm`` and the baseline have ``metric`` (the baseline's not 0)."""
        arm_rows, base_rows = self.rows[arm], self.rows[self.baseline]
        return [int(c) for c in sorted(set(arm_rows) & set(base_rows))
                if not (pd.isna(base_rows[c][metric]) or pd.isna(arm_rows[c][metric]) or base_rows[c][metric] == 0)]

    def fit(self, arm: str, metric: str, cs: list[int], rng: np.random.Generator, model: str | None) -> DeltaCurve | None:
        """The delta curve of ``arm`` and ``metric`` at the levels ``cs`` (:func:`~specsweep.analyze.noise.fit_metric`)."""
        return fit_metric(metric, cs, self.raw_levels[arm], self.raw_levels[self.baseline], self.requests[arm],
                          self.requests[self.baseline], self.n_boot, rng, self.family, self.assumed_noise_pct,
                          force_model=model)


def _join(by_arm: dict[str, ResultSet], raw_levels: dict[str, pd.DataFrame], levels: pd.DataFrame, n_boot: int,
          assumed_noise_pct: float | None, only: Sequence[str] | None = None) -> _Join:
    """The fitting inputs of the arms ``by_arm`` (the baseline first) and their joined ``levels``
    (the metrics ``only`` where given)."""
    arms = list(by_arm)
    metrics = compared_metrics(levels)
    rows: dict[str, dict[Any, dict[str, Any]]] = {a: {} for a in arms}
    for r in records(levels):  # {arm: {concurrency: row}}, ``levels.set_index`` per arm the fast way
        rows[r["arm"]][r.pop("concurrency")] = r
    # the metrics a verdict reads share one 5 % error budget: aggregate, per-user speed and the waits
    waits = [m for m in WAIT_METRICS if m in metrics] or [m for m in (ESTIMATED_WAIT,) if m in metrics]
    if only is not None:
        metrics = [m for m in metrics if m in set(only)]
    return _Join(baseline=arms[0], arms=arms[1:], controls=[a for a in arms[1:] if by_arm[a].meta.control],
                 by_arm=by_arm, raw_levels=raw_levels, requests={a: measured_requests(by_arm[a]) for a in arms},
                 rows=rows, metrics=metrics, family=2 + len(waits), n_boot=n_boot, assumed_noise_pct=assumed_noise_pct)


def _banded(fits: dict[tuple[str, str], DeltaCurve | None], join: _Join, drift: Drift | None,
            times: dict[str, dict[int, float]]) -> dict[tuple[str, str], DeltaCurve]:
    """The fitted curves, their bands widened for drift and to the control arms' deviation; the control
    arms' curves first (they widen the others), each arm's in the order of the metrics."""
    curves: dict[tuple[str, str], DeltaCurve] = {}
    control_dev: Deviation = {}
    labels = ", ".join(join.by_arm[a].label for a in join.controls)
    run_times = level_times(join.raw_levels) if join.controls else {}
    points: dict[str, ControlPoints] = {}
    for arm in sorted(join.arms, key=lambda a: a not in join.controls):
        for metric in join.metrics:
            curve = fits.get((arm, metric))
            if curve is None:
                continue
            if drift is not None:
                widen_for_drift(curve, drift, metric, times, arm, join.baseline)
            if arm in join.controls:
                add_control(control_dev, metric, curve)
                points.setdefault(metric, []).extend(control_points(curve, run_times, arm, join.baseline))
            elif control_dev.get(metric):
                floor = drift_floor(curve, points.get(metric, []), run_times, arm, join.baseline)
                widen_for_controls(curve, control_dev[metric], labels, floor)
            curves[(arm, metric)] = curve
    return curves


#: the columns of :attr:`Comparison.deltas`
DELTA_COLUMNS: list[str] = ["arm", "concurrency", "metric", "baseline_value", "arm_value", "delta_pct", "fit_delta_pct",
                            "ci_low_pct", "ci_high_pct", "ci_kind", "within_noise", "credible", "better",
                            "level_delta_pct", "level_noise_ln"]


def _delta_rows(join: _Join, curves: dict[tuple[str, str], DeltaCurve]) -> list[dict[str, Any]]:
    """One delta row per (arm, concurrency, metric) both arms measured, in the arms' order, then the metrics'."""
    rows = []
    base_rows = join.rows[join.baseline]
    for arm in join.arms:
        arm_rows = join.rows[arm]
        for metric in join.metrics:
            curve = curves.get((arm, metric))
            at = {int(c): i for i, c in enumerate(curve.concurrency)} if curve is not None else {}
            for c in join.levels_of(arm, metric):
                rows.append(_delta_row(arm, metric, c, float(base_rows[c][metric]), float(arm_rows[c][metric]),
                                       curve, at.get(c)))
    return rows


def _delta_row(arm: str, metric: str, c: int, b: float, v: float, curve: DeltaCurve | None,
               i: int | None) -> dict[str, Any]:
    """One delta row: the baseline's value ``b`` and the arm's ``v`` at level ``c``, the fitted delta,
    its band and credibility where the curve has the level (its index ``i``)."""
    fit = lo = hi = own = own_se = math.nan
    cred = 0
    fitted = curve is not None and i is not None
    if curve is not None and i is not None:
        f, h = curve.fitted[i], curve.half_width[i]
        fit, lo, hi = (pct_of_log_ratio(z) for z in (f, f - h, f + h))
        cred = int(curve.credible[i])
        own = pct_of_log_ratio(float(curve.observed[i]))
        own_se = float(curve.own_se[i]) if curve.own_se is not None else math.nan
    return {
        "arm": arm, "concurrency": c, "metric": metric,
        "baseline_value": b, "arm_value": v,
        "delta_pct": (v / b - 1.0) * 100.0,
        "fit_delta_pct": fit,
        "ci_low_pct": lo, "ci_high_pct": hi,
        "ci_kind": curve.method() if curve is not None and fitted else "none",
        "within_noise": (cred == 0) if fitted else None,
        "credible": cred,
        "better": info(metric).better,
        "level_delta_pct": own, "level_noise_ln": own_se,
    }


def _unshared_notes(join: _Join) -> list[str]:
    """One note per arm measured at levels the baseline was not, or the reverse."""
    base_rows = join.rows[join.baseline]
    notes = []
    for arm in join.arms:
        only = sorted(set(base_rows) ^ set(join.rows[arm]))
        if only:
            notes.append(f"Arm '{arm}' and the baseline were not measured at the same levels; "
                         f"concurrency {', '.join(map(str, only))} appear in only one of them and are not compared.")
    return notes


def _comparison(join: _Join, levels: pd.DataFrame, user_metric: str, rows: list[dict[str, Any]],
                curves: dict[tuple[str, str], DeltaCurve], notes: list[str], drift: Drift | None) -> Comparison:
    """The :class:`Comparison` of the joined arms, its tables built from the delta rows and curves."""
    by_arm = join.by_arm
    arms = list(by_arm)
    comp = Comparison(
        baseline=join.baseline,
        arms=arms,
        labels={a: by_arm[a].label for a in arms},
        metas={a: by_arm[a].meta for a in arms},
        levels=levels,
        deltas=pd.DataFrame(rows, columns=DELTA_COLUMNS),
        crossovers=crossover_table(curves, ("output_tok_s", user_metric)),
        pareto=pareto_table(levels, user_metric),
        user_metric=user_metric,
        workload=by_arm[join.baseline].meta.workload,
        caps={a: _cap(by_arm[a].meta) for a in arms},
        notes=notes,
        observed_caps={a: c for a in arms if _cap(by_arm[a].meta) is None
                       and (c := observed_cap(by_arm[a].levels)) is not None},
        curves=curves,
        chunk_counted={a: w for a in arms if (w := _chunk_counted(by_arm[a]))},
        assumed_noise_pct=join.assumed_noise_pct,
        warnings=[(a, str(w)) for a in arms for w in by_arm[a].meta.warnings],
        controls=join.controls,
        drift=drift,
        raw_levels=join.raw_levels,
        requests=join.requests,
        family=join.family,
        n_boot=join.n_boot,
        run_order=next((str(study.order) for a in arms if (study := by_arm[a].meta.study) and study.order), None),
    )
    comp._delta_index = _delta_index(rows)  # the rows ``deltas`` was made of: no second pass over the frame
    return comp


def _cap(meta: Meta) -> int | None:
    """The running-request cap meta.json records, as the server's dialect reads it (``running_cap``:
    ``max_running_requests`` of ``server`` or its ``/server_info`` snapshot; SGLang's scheduler's
    effective cap where that was left unset), or None."""
    return dialect_of(str(meta.server.get("name") or "sglang")).running_cap(meta.server)


def observed_cap(levels: pd.DataFrame | None) -> int | None:
    """The running-request cap a server showed without stating it: the most requests its running
    gauge saw (``server_running_max``) at the levels where requests also waited
    (``server_queued_max`` > 0); None where none waited or the gauges were not polled."""
    if levels is None or not {"server_running_max", "server_queued_max"} <= set(levels.columns):
        return None
    waited = levels[(levels["server_queued_max"] > 0) & levels["server_running_max"].notna()]
    return int(waited["server_running_max"].max()) if len(waited) else None


def _chunk_counted(rs: ResultSet) -> str | None:
    """Where an arm's token counts came from SSE chunks (levels or requests), or None."""
    where = []
    for name, frame in (("levels", rs.levels), ("requests", rs.requests)):
        if frame is not None and "token_source" in frame and (frame["token_source"] == "chunks").any():
            where.append(name)
    return " and ".join(where) or None


def delta_table(comp: Comparison, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """A wide, readable table: one row per (arm, concurrency), baseline and arm values, Δ% and its band per metric."""
    metrics = list(metrics or ["output_tok_s", comp.user_metric])
    out = []
    for arm in comp.spec_arms:
        for c in sorted(comp.deltas.loc[comp.deltas["arm"] == arm, "concurrency"].unique()):
            row: dict[str, Any] = {"arm": arm, "concurrency": int(c)}
            for m in metrics:
                d = comp.deltas[(comp.deltas["arm"] == arm) & (comp.deltas["concurrency"] == c) & (comp.deltas["metric"] == m)]
                if d.empty:
                    continue
                r = d.iloc[0]
                unit = METRICS[m].unit if m in METRICS else ""
                row[f"{m} baseline ({unit})"] = r["baseline_value"]
                row[f"{m} {arm} ({unit})"] = r["arm_value"]
                row[f"{m} Δ%"] = r["delta_pct"]
                if r["ci_kind"] != "none":
                    row[f"{m} 95% band"] = f"[{r['ci_low_pct']:+.1f}, {r['ci_high_pct']:+.1f}]"
            out.append(row)
    return pd.DataFrame(out)
