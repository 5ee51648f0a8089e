"""Join arms against a baseline on concurrency: deltas with intervals, crossovers, Pareto frontier.

Definitions (DESIGN §5):

- ``delta_pct`` = (arm / baseline − 1) × 100 for every metric both arms have at a concurrency.
- Intervals (95 %): with >= 2 repeats in both arms at a level, a Welch t-interval on the
  difference of mean log values (the ratio of geometric means), which stays honest with few
  repeats where a bootstrap over 2-3 values is far too narrow; else, for per-request statistics
  (mean / percentile of TTFT, TPOT, e2e, per-user speed) when both arms stored requests, a
  percentile bootstrap over the requests of each arm — within-run noise only, it cannot see
  run-to-run variation. Otherwise the delta is a single run with no interval, and says so. A
  delta whose interval spans 0 is "within noise".
- ``crossover_concurrency``: where a delta changes sign between two measured levels, by linear
  interpolation of the delta in log2(concurrency).
- Effective concurrency: measured by Little's law when requests were stored (see ``metrics``);
  for level-only data estimated as aggregate tok/s ÷ per-request tok/s and labelled an estimate.
- Pareto frontier over (per-user speed, aggregate tok/s) of every arm and level: points that no
  other point beats on one axis without losing on the other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from specsweep.metrics import METRICS, metric_info
from specsweep.store import ResultSet

#: workload fields that must match for a comparison to be fair
WORKLOAD_KEYS: tuple[str, ...] = ("kind", "input_tokens", "output_tokens", "dataset_digest")
#: per-request statistics that can be bootstrapped from request samples: metric -> (column, stat)
REQUEST_STATS: dict[str, tuple[str, str]] = {
    "user_tok_s_mean": ("user_tok_s", "mean"),
    "user_tok_s_p50": ("user_tok_s", "p50"),
    "user_tok_s_p10": ("user_tok_s", "p10"),
    "request_tok_s_mean": ("request_tok_s", "mean"),
    **{
        f"{m}_{s}_s": (f"{m}_s", s)
        for m in ("ttft", "tpot", "e2e")
        for s in ("mean", "p50", "p90", "p99")
    },
}
#: columns of ``levels`` that are identifiers or counts, not metrics to compare
NOT_METRICS: frozenset[str] = frozenset(
    {"run_id", "arm", "concurrency", "repeat", "n_requests", "n_ok", "n_errors", "window_s",
     "output_tokens", "steady_window_s", "token_source", "n_repeats", "requested_output_tokens",
     "short_outputs", "warmup_requests"}
)
USER_METRICS: tuple[str, ...] = ("user_tok_s_mean", "request_tok_s_mean")


class WorkloadMismatchError(ValueError):
    """Arms were measured with different workloads; comparing them would mislead."""


@dataclass
class Comparison:
    """Every arm joined against the baseline. All frames are tidy (one row per observation)."""

    baseline: str
    arms: list[str]
    labels: dict[str, str]
    metas: dict[str, dict[str, Any]]
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
    workload: dict[str, Any]
    caps: dict[str, int | None]
    notes: list[str] = field(default_factory=list)

    @property
    def spec_arms(self) -> list[str]:
        return [a for a in self.arms if a != self.baseline]

    def delta(self, arm: str, metric: str) -> pd.DataFrame:
        """The delta rows of one arm and metric, sorted by concurrency."""
        d = self.deltas
        return d[(d["arm"] == arm) & (d["metric"] == metric)].sort_values("concurrency").reset_index(drop=True)

    def crossover(self, arm: str, metric: str = "output_tok_s") -> pd.DataFrame:
        c = self.crossovers
        return c[(c["arm"] == arm) & (c["metric"] == metric)].reset_index(drop=True)

    def arm_levels(self, arm: str) -> pd.DataFrame:
        return self.levels[self.levels["arm"] == arm].sort_values("concurrency").reset_index(drop=True)

    def has_intervals(self) -> bool:
        return bool(self.deltas["ci_kind"].ne("none").any()) if len(self.deltas) else False


# ----------------------------------------------------------------------------------- workloads


def workload_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The workload fields that differ between two meta.json ``workload`` records."""
    diffs = []
    for key in WORKLOAD_KEYS:
        va, vb = a.get(key), b.get(key)
        if key == "dataset_digest" and (va is None or vb is None):
            continue
        if va != vb:
            diffs.append(f"{key} {va!r} vs {vb!r}")
    return diffs


def _check_workloads(sets: Sequence[ResultSet], baseline: ResultSet, allow: bool) -> list[str]:
    notes: list[str] = []
    problems = []
    for rs in sets:
        if rs is baseline:
            continue
        diffs = workload_differences(rs.meta["workload"], baseline.meta["workload"])
        if diffs:
            problems.append(f"arm '{rs.arm}' vs baseline '{baseline.arm}': {'; '.join(diffs)}")
        sa, sb = rs.meta["workload"].get("seed"), baseline.meta["workload"].get("seed")
        if sa is not None and sb is not None and sa != sb:
            notes.append(
                f"Arm '{rs.arm}' used prompt seed {sa} and the baseline {sb}: same workload shape, "
                "different prompts, so the comparison is not paired request by request."
            )
    for rs in sets:
        if rs is baseline:
            continue
        plan_a, plan_b = rs.meta.get("sweep") or {}, baseline.meta.get("sweep") or {}
        for key in ("requests_per_level", "repeats", "warmup_requests"):
            if plan_a.get(key) is not None and plan_b.get(key) is not None and plan_a.get(key) != plan_b.get(key):
                notes.append(f"Arm '{rs.arm}' and the baseline used different {key.replace('_', ' ')} "
                             f"({plan_a.get(key)} vs {plan_b.get(key)}): prompts are not paired request by request.")
        notes.extend(f"Arm '{rs.arm}': {n}." for n in rs.notes)
    notes.extend(f"Baseline: {n}." for n in baseline.notes)
    if problems and not allow:
        raise WorkloadMismatchError(
            "the arms were measured with different workloads — " + " | ".join(problems)
            + ". Re-measure with the same workload, or pass allow_workload_mismatch=True to compare anyway."
        )
    notes.extend(f"Workloads differ ({p}); compared anyway because it was explicitly allowed." for p in problems)
    return notes


# ----------------------------------------------------------------------------------- bootstrap


def _stat(samples: np.ndarray, stat: str) -> np.ndarray:
    """A statistic along the last axis: 'mean' or 'pNN'."""
    if stat == "mean":
        return samples.mean(axis=-1)
    return np.percentile(samples, float(stat[1:]), axis=-1)


def bootstrap_ratio_ci(
    arm: np.ndarray, base: np.ndarray, stat: str = "mean", *, n_boot: int = 2000, seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of (stat(arm)/stat(base) − 1) × 100, resampling each side."""
    arm, base = np.asarray(arm, float), np.asarray(base, float)
    arm, base = arm[~np.isnan(arm)], base[~np.isnan(base)]
    if arm.size < 2 or base.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    a = _stat(arm[rng.integers(0, arm.size, (n_boot, arm.size))], stat)
    b = _stat(base[rng.integers(0, base.size, (n_boot, base.size))], stat)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (a / b - 1.0) * 100.0
    ratio = ratio[np.isfinite(ratio)]
    if ratio.size == 0:
        return math.nan, math.nan
    lo, hi = np.percentile(ratio, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


# ------------------------------------------------------------------------------------ building


def welch_log_ratio_ci(arm: np.ndarray, base: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Welch t-interval of (arm / base − 1) × 100 from repeat values, on the log scale.

    NaN when a side has fewer than 2 values or any value is not positive.
    """
    from scipy import stats

    a, b = np.asarray(arm, float), np.asarray(base, float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if a.size < 2 or b.size < 2 or (a <= 0).any() or (b <= 0).any():
        return math.nan, math.nan
    la, lb = np.log(a), np.log(b)
    va, vb = la.var(ddof=1) / a.size, lb.var(ddof=1) / b.size
    diff = la.mean() - lb.mean()
    se = math.sqrt(va + vb)
    if se == 0:
        return (math.exp(diff) - 1) * 100, (math.exp(diff) - 1) * 100
    df = (va + vb) ** 2 / ((va**2 / (a.size - 1) if va else 0) + (vb**2 / (b.size - 1) if vb else 0))
    t = float(stats.t.ppf((1 + level) / 2, df))
    return (math.exp(diff - t * se) - 1) * 100, (math.exp(diff + t * se) - 1) * 100


def _measured_requests(rs: ResultSet) -> pd.DataFrame | None:
    if rs.requests is None or rs.requests.empty:
        return None
    req = rs.requests[~rs.requests["warmup"].astype(bool)]
    ok = req["error"].isna() & (req["output_tokens"].fillna(0) > 0)
    return req[ok]


def _aggregate_levels(rs: ResultSet) -> pd.DataFrame:
    lv = rs.levels.copy()
    numeric = [c for c in lv.columns if c not in {"run_id", "arm", "token_source"} and pd.api.types.is_numeric_dtype(lv[c])]
    agg = lv.groupby("concurrency", as_index=False)[[c for c in numeric if c not in {"concurrency"}]].mean()
    agg["n_repeats"] = lv.groupby("concurrency")["repeat"].nunique().to_numpy()
    agg = agg.drop(columns=["repeat"], errors="ignore")
    agg.insert(0, "arm", rs.arm)
    agg["has_requests"] = _measured_requests(rs) is not None
    return agg


def _cap(meta: dict[str, Any]) -> int | None:
    server = meta.get("server") or {}
    cap = server.get("max_running_requests")
    if cap is None:
        snapshot = server.get("server_info") or {}
        cap = snapshot.get("max_running_requests")
    try:
        return int(cap) if cap is not None else None
    except (TypeError, ValueError):
        return None


def _crossovers(deltas: pd.DataFrame) -> pd.DataFrame:
    """Every sign change of each (arm, metric) delta between consecutive non-zero levels.

    Between two measured levels the crossover is interpolated in log2(concurrency); when levels
    with a delta of exactly 0 lie between them, it is the first such level.
    """
    rows = []
    for (arm, metric), grp in deltas.groupby(["arm", "metric"], sort=False):
        grp = grp.dropna(subset=["delta_pct"]).sort_values("concurrency")
        prev: tuple[float, float] | None = None  # last non-zero (concurrency, delta)
        zeros: list[float] = []
        for c, d in zip(grp["concurrency"].to_numpy(float), grp["delta_pct"].to_numpy(float)):
            if d == 0:
                zeros.append(c)
                continue
            if prev is not None and (prev[1] > 0) != (d > 0):
                (c1, d1), (c2, d2) = prev, (c, d)
                if zeros:
                    x = math.log2(zeros[0])
                else:
                    x1, x2 = math.log2(c1), math.log2(c2)
                    x = x1 + (0 - d1) * (x2 - x1) / (d2 - d1)
                rows.append({
                    "arm": arm, "metric": metric, "c_low": int(c1), "c_high": int(c2),
                    "delta_low_pct": d1, "delta_high_pct": d2,
                    "crossover_concurrency": 2.0 ** x,
                    "direction": "gain_to_loss" if d1 > 0 else "loss_to_gain",
                })
            prev, zeros = (c, d), []
    cols = ["arm", "metric", "c_low", "c_high", "delta_low_pct", "delta_high_pct", "crossover_concurrency", "direction"]
    return pd.DataFrame(rows, columns=cols)


def pareto_frontier(points: pd.DataFrame, x: str, y: str) -> pd.Series:
    """True for rows no other row dominates (>= on both ``x`` and ``y``, > on one)."""
    xs, ys = points[x].to_numpy(float), points[y].to_numpy(float)
    flags = []
    for i in range(len(points)):
        if math.isnan(xs[i]) or math.isnan(ys[i]):
            flags.append(False)
            continue
        dominated = ((xs >= xs[i]) & (ys >= ys[i]) & ((xs > xs[i]) | (ys > ys[i]))).any()
        flags.append(not bool(dominated))
    return pd.Series(flags, index=points.index)


def compare(
    sets: Sequence[ResultSet],
    baseline: str = "baseline",
    *,
    allow_workload_mismatch: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Join every arm against ``baseline`` on concurrency (see the module docstring).

    With a single result set there is nothing to join: the comparison has its levels (for charts
    of one arm) and no deltas.
    """
    by_arm = {rs.arm: rs for rs in sets}
    if baseline not in by_arm:
        raise ValueError(
            f"baseline arm '{baseline}' is not among the result sets (arms: {', '.join(by_arm)}); "
            "set the baseline parameter to one of them"
        )
    base = by_arm[baseline]
    notes = _check_workloads(sets, base, allow_workload_mismatch)
    arms = [baseline] + [a for a in by_arm if a != baseline]

    levels = pd.concat([_aggregate_levels(by_arm[a]) for a in arms], ignore_index=True)
    user_metric = next(
        (m for m in USER_METRICS if m in levels.columns and levels.groupby("arm")[m].apply(lambda s: s.notna().any()).all()),
        None,
    )
    if user_metric is None:
        raise ValueError("no per-user speed metric (user_tok_s_mean or request_tok_s_mean) is present in every arm")
    levels["concurrency_estimate"] = levels["output_tok_s"] / levels[user_metric]
    measured = levels["effective_concurrency"] if "effective_concurrency" in levels else pd.Series(math.nan, index=levels.index)
    levels["effective_concurrency_kind"] = np.where(measured.notna(), "measured", "estimate")

    metrics = [
        c for c in levels.columns
        if c not in NOT_METRICS and c not in {"has_requests", "concurrency_estimate", "effective_concurrency_kind"}
        and pd.api.types.is_numeric_dtype(levels[c])
    ]
    requests = {a: _measured_requests(by_arm[a]) for a in arms}
    raw_levels = {a: by_arm[a].levels for a in arms}
    rows = []
    base_lv = levels[levels["arm"] == baseline].set_index("concurrency")
    for arm in arms[1:]:
        arm_lv = levels[levels["arm"] == arm].set_index("concurrency")
        for c in sorted(set(arm_lv.index) & set(base_lv.index)):
            for metric in metrics:
                b, v = base_lv.at[c, metric], arm_lv.at[c, metric]
                if pd.isna(b) or pd.isna(v) or b == 0:
                    continue
                lo = hi = math.nan
                kind = "none"
                rb = raw_levels[baseline]
                ra = raw_levels[arm]
                reps_b = rb.loc[rb["concurrency"] == c, metric].dropna() if metric in rb else pd.Series(dtype=float)
                reps_a = ra.loc[ra["concurrency"] == c, metric].dropna() if metric in ra else pd.Series(dtype=float)
                if len(reps_a) >= 2 and len(reps_b) >= 2:
                    lo, hi = welch_log_ratio_ci(reps_a.to_numpy(), reps_b.to_numpy())
                    if not math.isnan(lo):
                        kind = f"Welch t over repeats ({len(reps_a)} vs {len(reps_b)})"
                elif metric in REQUEST_STATS and requests[arm] is not None and requests[baseline] is not None:
                    col, stat = REQUEST_STATS[metric]
                    sa = requests[arm].loc[requests[arm]["concurrency"] == c, col].to_numpy(float)
                    sb = requests[baseline].loc[requests[baseline]["concurrency"] == c, col].to_numpy(float)
                    lo, hi = bootstrap_ratio_ci(sa, sb, stat, n_boot=n_boot, seed=seed)
                    if not math.isnan(lo):
                        kind = f"bootstrap over requests, within-run noise only ({len(sa)} vs {len(sb)})"
                rows.append({
                    "arm": arm, "concurrency": int(c), "metric": metric,
                    "baseline_value": float(b), "arm_value": float(v),
                    "delta_pct": (float(v) / float(b) - 1.0) * 100.0,
                    "ci_low_pct": lo, "ci_high_pct": hi,
                    "ci_kind": kind,
                    "within_noise": (lo <= 0 <= hi) if kind != "none" else None,
                    "better": metric_info(metric).better,
                })
    deltas = pd.DataFrame(rows, columns=[
        "arm", "concurrency", "metric", "baseline_value", "arm_value", "delta_pct",
        "ci_low_pct", "ci_high_pct", "ci_kind", "within_noise", "better",
    ])
    crossovers = _crossovers(deltas[deltas["metric"].isin(["output_tok_s", user_metric])])

    pareto = levels[["arm", "concurrency", "output_tok_s", user_metric]].copy()
    pareto["on_frontier"] = pareto_frontier(pareto, user_metric, "output_tok_s")

    missing = {a: sorted(set(base_lv.index) ^ set(levels.loc[levels["arm"] == a, "concurrency"])) for a in arms[1:]}
    for arm, only in missing.items():
        if only:
            notes.append(f"Arm '{arm}' and the baseline were not measured at the same levels; "
                         f"concurrency {', '.join(map(str, only))} appear in only one of them and are not compared.")
    return Comparison(
        baseline=baseline,
        arms=arms,
        labels={a: by_arm[a].label for a in arms},
        metas={a: by_arm[a].meta for a in arms},
        levels=levels,
        deltas=deltas,
        crossovers=crossovers,
        pareto=pareto,
        user_metric=user_metric,
        workload=dict(base.meta["workload"]),
        caps={a: _cap(by_arm[a].meta) for a in arms},
        notes=notes,
    )


def delta_table(comp: Comparison, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """A wide, readable table: one row per (arm, concurrency), baseline and arm values and Δ% per metric."""
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
                    row[f"{m} 95% CI"] = f"[{r['ci_low_pct']:+.1f}, {r['ci_high_pct']:+.1f}]"
            out.append(row)
    return pd.DataFrame(out)
