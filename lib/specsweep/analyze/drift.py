"""The machine's drift, measured by sentinel runs, and what it does to every run and band.

Input: each arm's level rows (one per concurrency and repeat, with ``started_utc``), some marked
``sentinel`` — a level re-measured at the end of a study. Output: a :class:`Drift` (the slope of
ln(value) against time per metric, its standard error, the sentinel pairs), the level rows corrected
for it, and each delta curve's band widened by what the correction leaves uncertain.

Invariant: a sentinel row measures the machine, never the arm — it is split off before any figure
of the arm is computed (docs/method.md, "How a verdict is reached").
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.curves import DeltaCurve, widen


@dataclass
class Drift:
    """The machine's drift measured by sentinel runs: a level re-measured at the end of a study.

    ``rate_per_s[metric]``: the slope of ln(value) against time (per second) fitted through the
    sentinel pairs (a sentinel run against the same arm's earlier runs of that level);
    ``rate_se_per_s`` its standard error from the run-to-run noise; ``span_s`` the time from the
    first to the last run; ``pairs`` one row per sentinel (arm, concurrency, Δ% of output tok/s,
    seconds apart). Values of every run are corrected by exp(−rate × (t − t0)) before the curves are
    fitted, and each level's band is widened by the rate's standard error times the time between
    the arm's run and the baseline's there.
    """

    rate_per_s: dict[str, float]
    rate_se_per_s: dict[str, float]
    span_s: float
    pairs: pd.DataFrame
    corrected: bool

    def total_pct(self, metric: str = "output_tok_s") -> tuple[float, float]:
        """(drift over the whole study in %, its standard error in %) of one metric."""
        r, se = self.rate_per_s.get(metric, math.nan), self.rate_se_per_s.get(metric, math.nan)
        return (math.exp(r * self.span_s) - 1) * 100, se * self.span_s * 100

    def credible(self, metric: str = "output_tok_s") -> bool:
        """True where the drift is more than two standard errors from 0."""
        r, se = self.rate_per_s.get(metric, math.nan), self.rate_se_per_s.get(metric, math.nan)
        return bool(abs(r) > 2 * se) if math.isfinite(r) and math.isfinite(se) else False


def _row_seconds(lv: pd.DataFrame) -> np.ndarray | None:
    """Seconds since the epoch of each level row's ``started_utc``; None when any is missing."""
    if "started_utc" not in lv:
        return None
    t = pd.to_datetime(lv["started_utc"], utc=True, errors="coerce")
    if t.isna().any():
        return None
    return (t.astype("int64") / 1e9).to_numpy(float)


def split_sentinels(levels: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ordinary rows, sentinel rows) of an arm's level rows (column ``sentinel`` true)."""
    if "sentinel" not in levels:
        return levels, levels.iloc[0:0]
    mask = levels["sentinel"].fillna(False).astype(bool).to_numpy()
    return levels[~mask].drop(columns=["sentinel"]), levels[mask].drop(columns=["sentinel"])


def estimate_drift(raw: dict[str, pd.DataFrame], sentinels: dict[str, pd.DataFrame], metrics: Sequence[str],
                   run_var: float) -> Drift | None:
    """The drift of each metric from the sentinel rows (see :class:`Drift`); None without sentinel rows.

    ``run_var``: the run-to-run variance of ln(value) of one run (assumed or measured). Without
    timestamps on every row the drift is still measured (pairs, Δ%) but not corrected for.
    """
    times = {a: _row_seconds(lv) for a, lv in raw.items()}
    rows, pairs = _sentinel_pairs(raw, sentinels, metrics, times)
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    all_t = [t for t in times.values() if t is not None]
    sent_t = [t for t in (_row_seconds(s) for s in sentinels.values() if not s.empty) if t is not None]
    timed = frame["seconds_apart"].notna().all() and len(all_t) == len(times)
    span = float(max(np.max(t) for t in all_t + sent_t) - min(np.min(t) for t in all_t + sent_t)) if timed else math.nan
    rate, rate_se = {}, {}
    for m in metrics if timed else ():
        fitted = _rate(frame[frame[m].notna()], m, run_var) if m in frame else None
        if fitted is not None:
            rate[m], rate_se[m] = fitted
    return Drift(rate, rate_se, span, pd.DataFrame(pairs), corrected=bool(timed and rate))


def _sentinel_pairs(raw: dict[str, pd.DataFrame], sentinels: dict[str, pd.DataFrame], metrics: Sequence[str],
                    times: dict[str, np.ndarray | None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per sentinel row with earlier runs of its level: (arm, concurrency, seconds apart, earlier runs,
    and per metric ln(sentinel) − mean ln(earlier runs)), and the pair as :attr:`Drift.pairs` shows it."""
    rows, pairs = [], []
    for arm, sent in sentinels.items():
        if sent.empty:
            continue
        ts = _row_seconds(sent)
        lv = raw[arm]
        t_arm = times[arm]
        for j, (_, srow) in enumerate(sent.iterrows()):
            c = srow["concurrency"]
            orig = lv[lv["concurrency"] == c]
            if orig.empty:
                continue
            t0 = t_arm[(lv["concurrency"] == c).to_numpy()].mean() if t_arm is not None else math.nan
            dt = float(ts[j] - t0) if ts is not None and math.isfinite(t0) else math.nan
            entry: dict[str, Any] = {"arm": arm, "concurrency": int(c), "seconds_apart": dt, "n_earlier": len(orig)}
            for m in metrics:
                if m not in orig or m not in srow or pd.isna(srow[m]):
                    continue
                vals = pd.to_numeric(orig[m], errors="coerce").to_numpy(float)
                if not len(vals) or (vals <= 0).any() or not float(srow[m]) > 0:
                    continue
                entry[m] = math.log(float(srow[m])) - float(np.log(vals).mean())
            rows.append(entry)
            agg = entry.get("output_tok_s")
            pairs.append({"arm": arm, "concurrency": int(c), "seconds_apart": dt,
                          "delta_pct": (math.exp(agg) - 1) * 100 if agg is not None else math.nan})
    return rows, pairs


def _rate(f: pd.DataFrame, m: str, run_var: float) -> tuple[float, float] | None:
    """(slope of ln(value) against time through the origin, per second; its standard error) of metric
    ``m`` over the sentinel pairs ``f``; None without pairs or time between them."""
    if f.empty:
        return None
    dt = f["seconds_apart"].to_numpy(float)
    var_d = run_var * (1 + 1 / f["n_earlier"].to_numpy(float))
    denom = float((dt * dt).sum())
    if denom <= 0:
        return None
    d = f[m].to_numpy(float)
    rate = float((dt * d).sum() / denom)
    if len(d) >= 2:  # the pairs' own disagreement about the line, where it says the noise is larger
        resid = d - rate * dt
        var_d = np.maximum(var_d, float((resid * resid).sum()) / (len(d) - 1))
    return rate, float(math.sqrt((dt * dt * var_d).sum()) / denom)


def correct_for_drift(raw: dict[str, pd.DataFrame], drift: Drift | None
                      ) -> tuple[dict[str, pd.DataFrame], dict[str, dict[int, float]]]:
    """Every arm's level rows corrected for ``drift`` from the first run on (where it could be
    corrected: timestamps on every row), and {arm: {concurrency: mean start of its runs there,
    seconds since the epoch}} of the corrected arms, for :func:`widen_for_drift`."""
    times: dict[str, dict[int, float]] = {}
    if drift is None or not drift.corrected:
        return raw, times
    raw = dict(raw)
    t0 = min(float(np.min(t)) for t in (_row_seconds(raw[a]) for a in raw) if t is not None)
    for a in raw:
        raw[a] = _correct_drift(raw[a], drift, t0)
        t = _row_seconds(raw[a])
        if t is not None:
            times[a] = pd.Series(t).groupby(raw[a]["concurrency"].to_numpy()).mean().to_dict()
    return raw, times


def level_times(raw: dict[str, pd.DataFrame]) -> dict[str, dict[int, float]]:
    """{arm: {concurrency: mean start of its runs there, seconds since the epoch}} of the arms whose
    every row has a start time."""
    times: dict[str, dict[int, float]] = {}
    for a, lv in raw.items():
        t = _row_seconds(lv)
        if t is not None:
            times[a] = pd.Series(t).groupby(lv["concurrency"].to_numpy()).mean().to_dict()
    return times


def arms_interleaved(raw: dict[str, pd.DataFrame]) -> bool | None:
    """Whether the arms' runs were interleaved in time (order abba, repeats taken in turns): some
    arm's runs started both before and after another arm's; None where a start time is missing, so
    the study's stated order is all there is."""
    spans = []
    for lv in raw.values():
        t = _row_seconds(lv)
        if t is None or not len(t):
            return None
        spans.append((float(np.min(t)), float(np.max(t))))
    return any(a0 < b1 and b0 < a1 for i, (a0, a1) in enumerate(spans) for b0, b1 in spans[i + 1:])


def _correct_drift(lv: pd.DataFrame, drift: Drift, t0: float) -> pd.DataFrame:
    """An arm's level rows with every drifted metric divided by exp(rate × (t − t0))."""
    t = _row_seconds(lv)
    if t is None:
        return lv
    lv = lv.copy()
    for m, r in drift.rate_per_s.items():
        if m in lv:
            lv[m] = pd.to_numeric(lv[m], errors="coerce") * np.exp(-r * (t - t0))
    return lv


def widen_for_drift(curve: DeltaCurve, drift: Drift, metric: str, times: dict[str, dict[int, float]],
                     arm: str, baseline: str) -> None:
    """Widen a curve by what the drift correction leaves uncertain, or (no timestamps: no
    correction) to at least the largest drift a sentinel pair showed."""
    if drift.corrected and metric in drift.rate_se_per_s and arm in times and baseline in times:
        lag = np.array([times[arm].get(int(c), math.nan) - times[baseline].get(int(c), math.nan)
                        for c in curve.concurrency])
        extra = np.nan_to_num(np.abs(lag) * drift.rate_se_per_s[metric], nan=0.0)
        widen(curve, extra, None, "the uncertainty of the drift correction (sentinel runs)")
    elif not drift.corrected and not drift.pairs.empty:
        worst = float(np.nanmax(np.abs(np.log1p(drift.pairs["delta_pct"].to_numpy(float) / 100))))
        if math.isfinite(worst):
            widen(curve, None, np.full(len(curve.concurrency), worst),
                   "the largest drift the sentinel runs showed (no timestamps to correct for it)")
