"""Where the run-to-run noise of a delta comes from, and one metric's delta curve fitted on it.

Input: one arm's and the baseline's level rows (one row per concurrency and repeat) and, where
measured, their request rows. Output: :func:`fit_metric`, the metric's
:class:`~specsweep.analyze.curves.DeltaCurve`, whose ``noise`` names the source used.

The sources, in order (docs/method.md, "How a verdict is reached"): repeats (each level's own
variance of ln(value), :func:`level_variance`); else, for per-request statistics of single runs, a
bootstrap over each level's requests, floored at the assumed run-to-run noise; else, one run per
level, :data:`ASSUMED_NOISE_PCT` per run and arm, widened to the levels' scatter about a quadratic
pooled with it (:func:`residual_scatter`) where that is larger, the page saying whether it is
significantly larger (:func:`significantly_larger`); the curve family is chosen under the
assumption either way (a larger noise widens the band, never simplifies the curve). Invariant: the page is never more
confident than the data — an assumption only ever widens to a larger measured scatter.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specsweep.analyze.curves import MAX_DEGREE, DeltaCurve, design_matrix, fit_delta_curve, wls

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
#: a level's per-request statistic needs at least this many requests per arm to be bootstrapped
MIN_REQUESTS: int = 3
#: smallest bootstrap variance of ln(statistic) used (a level whose requests agree exactly is not infinitely precise)
MIN_BOOT_VAR: float = 1e-8
#: run-to-run noise (%, one standard deviation of a figure between two runs of one level) assumed
#: where the data carry no estimate of it: no repeats. An assumption, said on the page; repeats
#: replace it with a measurement. Typical closed-loop figures on a dedicated server vary 1–3 %
#: between runs; 3 % is the top of that range (and the noise model of ``specsweep.decide.draws``).
ASSUMED_NOISE_PCT: float = 3.0


def _stat(samples: np.ndarray, stat: str) -> np.ndarray:
    """A statistic along the last axis: 'mean' or 'pNN'."""
    if stat == "mean":
        return samples.mean(axis=-1)
    return np.percentile(samples, float(stat[1:]), axis=-1)


def _bootstrap_log_var(samples: np.ndarray, stat: str, n_boot: int, rng: np.random.Generator) -> float:
    """Bootstrap variance of ln(stat(samples)); NaN when it cannot be computed."""
    samples = samples[np.isfinite(samples)]
    if samples.size < MIN_REQUESTS or (samples <= 0).any():
        return math.nan
    boots = _stat(samples[rng.integers(0, samples.size, (n_boot, samples.size))], stat)
    return float(np.log(boots).var(ddof=1)) if (boots > 0).all() else math.nan


@dataclass
class LevelLogs:
    """One metric's log ratios at the levels where both arms have positive values (ln of each value)."""

    #: the levels kept
    cs: list[int]
    #: per level: mean ln(arm value) − mean ln(baseline value)
    ys: list[float]
    #: per level: the variance factor 1/n_arm + 1/n_baseline (runs)
    vs: list[float]
    #: pooled within-level sum of squares of ln(value) over both arms, and its degrees of freedom
    ss: float
    df: int
    #: per level: (sum of squares, degrees of freedom) of ln(value)
    per_level: list[tuple[float, int]]
    #: per level: (runs of the arm, runs of the baseline)
    counts: list[tuple[int, int]]


def level_logs(metric: str, cs: Sequence[int], raw_a: pd.DataFrame, raw_b: pd.DataFrame) -> LevelLogs | None:
    """The log ratios of ``metric`` at the levels ``cs`` (see :class:`LevelLogs`); None where no level has any."""
    logs = LevelLogs([], [], [], 0.0, 0, [], [])
    ca, va = raw_a["concurrency"].to_numpy(), pd.to_numeric(raw_a[metric], errors="coerce").to_numpy(float)
    cb, vb = raw_b["concurrency"].to_numpy(), pd.to_numeric(raw_b[metric], errors="coerce").to_numpy(float)
    for c in cs:
        a, b = va[(ca == c) & ~np.isnan(va)], vb[(cb == c) & ~np.isnan(vb)]
        if not len(a) or not len(b) or (a <= 0).any() or (b <= 0).any():
            continue  # a level with no positive value (e.g. nothing succeeded) has no log ratio
        logs.cs.append(c)
        la, lb = np.log(a), np.log(b)
        logs.ys.append(la.mean() - lb.mean())
        logs.vs.append(1 / len(a) + 1 / len(b))
        ss_c = float(((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum())
        logs.ss += ss_c
        logs.df += len(a) - 1 + len(b) - 1
        logs.per_level.append((ss_c, len(a) - 1 + len(b) - 1))
        logs.counts.append((len(a), len(b)))
    return logs if logs.cs else None


#: :func:`~specsweep.analyze.curves.fit_delta_curve` with the curve family settings of one fit
FitCurve = Callable[..., DeltaCurve | None]


def fit_metric(
    metric: str, cs: list[int], raw_a: pd.DataFrame, raw_b: pd.DataFrame,
    req_a: pd.DataFrame | None, req_b: pd.DataFrame | None, n_boot: int, rng: np.random.Generator, family: int = 1,
    assumed_noise_pct: float | None = ASSUMED_NOISE_PCT, force_model: str | None = None,
) -> DeltaCurve | None:
    """The delta curve of one metric between an arm and the baseline (see :func:`fit_delta_curve`).

    ``raw_a`` / ``raw_b``: one row per (concurrency, repeat) with the metric's column (values in
    its own unit); ``cs``: the levels to fit; ``req_a`` / ``req_b``: measured requests (for the
    bootstrap of per-request statistics, :data:`REQUEST_STATS`), or None. The whole-run verdict
    fits every metric of every arm with it; the report's category view fits each category's rows.
    Without repeats, run-to-run noise cannot be measured: ``assumed_noise_pct`` (per run and arm)
    stands in for it, as an independent noise estimate, and floors a within-run bootstrap; None
    falls back to the residuals of the fitted curve (few degrees of freedom: wide bands).
    ``force_model``: the curve family to use (see :func:`fit_delta_curve`).
    """
    if metric not in raw_a or metric not in raw_b:
        return None
    logs = level_logs(metric, cs, raw_a, raw_b)
    if logs is None:
        return None
    fit: FitCurve = functools.partial(fit_delta_curve, family=family, force_model=force_model)
    if logs.df >= 2:
        return _fit_on_repeats(logs, fit)
    floor = 2 * math.log1p(assumed_noise_pct / 100) ** 2 if assumed_noise_pct else None
    boot = _bootstrap_variances(metric, logs.cs, req_a, req_b, n_boot, rng)
    if boot is not None:
        return _fit_on_bootstrap(logs, boot, floor, assumed_noise_pct, fit)
    if floor is not None:
        return _fit_on_assumption(logs, floor, assumed_noise_pct, fit)
    return fit(logs.cs, logs.ys)


def _fit_on_repeats(logs: LevelLogs, fit: FitCurve) -> DeltaCurve | None:
    """Repeats measured the noise: each level's own variance where a trend can be fitted, else the pooled one."""
    runs = sorted({f"{n_a} vs {n_b}" for n_a, n_b in logs.counts})
    level_var = level_variance(logs.cs, logs.per_level, logs.ss / logs.df, logs.df)
    if level_var is not None:
        var_c, df_c = level_var
        return fit(logs.cs, logs.ys, [v * s for v, s in zip(logs.vs, var_c)], 1.0, df_c,
                   noise=f"repeats ({', '.join(runs)} runs per level), the variance modelled per "
                         "level as the larger of the pooled figure and a log-linear trend in "
                         "log2(concurrency)")
    return fit(logs.cs, logs.ys, logs.vs, logs.ss / logs.df, logs.df, noise=f"repeats ({', '.join(runs)} runs per level)")


def _bootstrap_variances(metric: str, cs: Sequence[int], req_a: pd.DataFrame | None, req_b: pd.DataFrame | None,
                         n_boot: int, rng: np.random.Generator) -> list[float] | None:
    """Per level, the bootstrap variance of ln(arm statistic) + ln(baseline statistic) over the levels'
    requests; None where ``metric`` is no per-request statistic, a side has no requests, or a level's
    variance cannot be computed."""
    if metric not in REQUEST_STATS or req_a is None or req_b is None:
        return None
    col, stat = REQUEST_STATS[metric]
    boot = []
    for c in cs:
        if n_boot < 2:
            boot.append(math.nan)
            continue
        va = _bootstrap_log_var(req_a.loc[req_a["concurrency"] == c, col].to_numpy(float), stat, n_boot, rng)
        vb = _bootstrap_log_var(req_b.loc[req_b["concurrency"] == c, col].to_numpy(float), stat, n_boot, rng)
        boot.append(va + vb)
    return boot if all(np.isfinite(boot)) else None


def _fit_on_bootstrap(logs: LevelLogs, boot: list[float], floor: float | None, assumed_noise_pct: float | None,
                      fit: FitCurve) -> DeltaCurve | None:
    """One run per level, per-request statistic: the bootstrap's within-run noise, at least the
    assumed run-to-run noise ``floor`` (variance of y), or the levels' scatter where that is larger."""
    cs, ys = logs.cs, logs.ys
    if floor is None:
        boot = [max(b, MIN_BOOT_VAR) for b in boot]
        return fit(cs, ys, boot, 1.0, math.inf,
                   noise="a bootstrap over each level's requests (one run: within-run noise only)")
    raw = residual_scatter(cs, ys)
    scatter = with_assumption(raw, floor)
    if scatter is not None and scatter[0] > max(boot) and scatter[0] > floor:
        s2, sdf = scatter
        text = _scatter_text(s2, sdf, assumed_noise_pct, significantly_larger(raw, floor))
        return fit(cs, ys, [max(b, s2) / s2 for b in boot], s2, sdf, noise=text, shape_var=floor / s2)
    boot = [max(b, floor) for b in boot]
    return fit(cs, ys, boot, 1.0, math.inf,
               noise=f"a bootstrap over each level's requests (one run: within-run noise), at "
                     f"least the assumed run-to-run noise of {assumed_noise_pct:g}% per run")


def _fit_on_assumption(logs: LevelLogs, floor: float, assumed_noise_pct: float | None,
                       fit: FitCurve) -> DeltaCurve | None:
    """One run per level: the assumed run-to-run noise ``floor`` (variance of y), or the levels'
    scatter about a quadratic pooled with it where that is larger (the band only: the curve family is
    chosen under the assumption either way, so a larger noise never lets a simpler curve pass)."""
    cs, ys = logs.cs, logs.ys
    raw = residual_scatter(cs, ys)
    scatter = with_assumption(raw, floor)
    if scatter is not None and scatter[0] > floor:
        s2, sdf = scatter
        text = _scatter_text(s2, sdf, assumed_noise_pct, significantly_larger(raw, floor))
        return fit(cs, ys, [2.0] * len(cs), s2 / 2, sdf, noise=text, shape_var=floor / 2)
    checked = ("; the levels' scatter about a quadratic is within it" if scatter is not None else
               f"; {len(cs)} levels are too few to check it against their scatter (needs {MIN_SCATTER_LEVELS})")
    return fit(cs, ys, [2.0] * len(cs), floor / 2, math.inf,
               noise=f"an assumed run-to-run noise of {assumed_noise_pct:g}% per run (one run per "
                     f"level: not measured; repeats would measure it{checked})")


#: fewest levels whose scatter can stand for the noise (a cubic's four coefficients and three residual
#: degrees of freedom: a grid that could carry the most flexible curve and still show its noise)
MIN_SCATTER_LEVELS: int = MAX_DEGREE + 4
#: degree of the smooth curve the levels' scatter is measured about: a quadratic, not the cubic the
#: fit may use — one more degree of freedom for the noise (5 of 8 levels instead of 4) misses noise
#: twice the assumption in 6 % of curves instead of 9 %, and a scatter inflated by a curve that bends
#: more than a quadratic only widens the band (the curve's shape is chosen under the assumption)
SCATTER_DEGREE: int = 2


def residual_scatter(cs: Sequence[float], ys: Sequence[float]) -> tuple[float, int] | None:
    """(variance of y about a quadratic in log2(concurrency), its degrees of freedom), or None with
    fewer than :data:`MIN_SCATTER_LEVELS` levels.

    With one run per level this is all the data say about the noise: any smooth curve up to a
    quadratic (:data:`SCATTER_DEGREE`) is read as the effect, what is left as noise (an over-estimate
    where the true curve is not that smooth, never an under-estimate of the noise it contains).
    """
    k = len(ys)
    if k < MIN_SCATTER_LEVELS:
        return None
    x = np.log2(np.asarray(cs, float))
    x0, sc = float(x.mean()), float(x.std()) or 1.0
    _, _, rss = wls(design_matrix(x, SCATTER_DEGREE, x0, sc), np.asarray(ys, float), np.ones(k))
    df = k - SCATTER_DEGREE - 1
    return rss / df, df


#: one-sided level of the test that the levels' scatter exceeds the assumed noise
SCATTER_ALPHA: float = 0.05


def significantly_larger(scatter: tuple[float, int] | None, assumed_var: float) -> bool:
    """Whether the levels' scatter ``(variance, df)`` is significantly larger than ``assumed_var``:
    a one-sided χ² test at :data:`SCATTER_ALPHA` (df × scatter ÷ assumed ~ χ²(df) when the assumption
    holds). The page says which: a larger scatter is the larger of two noisy figures in about 40 % of
    draws where the assumption is right. It still widens the band then — with one run per level and
    5 degrees of freedom the test finds noise twice the assumption in only 3 draws of 4, and keeping
    the band at the assumption in the fourth reads 84 % of such studies right instead of 96 %
    (decide.draws, ``noise_2x_one_run``)."""
    from scipy import special  # deferred, and not scipy.stats: slow to import, see bench/import_time.py

    if scatter is None or assumed_var <= 0:
        return False
    s2, df = scatter
    return bool(special.chdtrc(df, df * s2 / assumed_var) < SCATTER_ALPHA)


#: degrees of freedom the assumed noise counts for where it is pooled with the levels' scatter
#: (a stated prior: the assumption is as good as a scatter on this many degrees of freedom)
ASSUMPTION_DF: float = 2.0


def with_assumption(scatter: tuple[float, int] | None, assumed_var: float) -> tuple[float, float] | None:
    """The scatter ``(variance, df)`` pooled with the assumed variance (:data:`ASSUMPTION_DF` degrees of freedom)."""
    if scatter is None:
        return None
    s2, df = scatter
    return (ASSUMPTION_DF * assumed_var + df * s2) / (ASSUMPTION_DF + df), ASSUMPTION_DF + df


def _scatter_text(s2: float, df: float, assumed_noise_pct: float | None, significant: bool) -> str:
    per_run = (math.exp(math.sqrt(s2 / 2)) - 1) * 100
    how = "significantly larger than" if significant else "larger than (not significantly)"
    return (f"the levels' scatter about a quadratic pooled with the assumed {assumed_noise_pct:g}% per run (counted as "
            f"{ASSUMPTION_DF:g} degrees of freedom): {per_run:.1f}% per run and arm on {df:g} degrees of freedom, "
            f"{how} the assumption, so it is used for the band (one run per level; the curve's shape is "
            "chosen under the assumption)")


def level_variance(cs: Sequence[int], per_level: Sequence[tuple[float, int]], pooled: float,
                    df: int) -> tuple[list[float], float] | None:
    """Per-level variance of ln(value) with repeats: the larger of the pooled variance and a
    log-linear trend in log2(concurrency) fitted to the levels' own variances (bias-corrected for
    their few degrees of freedom), with ``df − 2`` degrees of freedom; None where fewer than 3
    levels have repeats or too few degrees of freedom remain."""
    from scipy import special

    pts = [(math.log2(c), ss / d, d) for c, (ss, d) in zip(cs, per_level) if d >= 1 and ss > 0]
    if len(pts) < 3 or df - 2 < 2:
        return None
    x = np.array([p[0] for p in pts])
    d = np.array([p[2] for p in pts], float)
    # E[ln s²] = ln σ² + ψ(d/2) − ln(d/2); Var[ln s²] = ψ'(d/2)
    z = np.log([p[1] for p in pts]) - (special.digamma(d / 2) - np.log(d / 2))
    w = 1.0 / special.zeta(2.0, d / 2)  # trigamma: special.polygamma(1, x) is 1.0 * 1.0 * zeta(2, x)
    X = np.vstack([np.ones_like(x), x]).T
    beta, _, _ = wls(X, z, w)
    trend = np.exp(beta[0] + beta[1] * np.log2(np.asarray(cs, float)))
    return [max(pooled, float(t)) for t in trend], float(df - 2)


def pooled_run_var(raw: dict[str, pd.DataFrame], metric: str) -> float:
    """Pooled within-level variance of ln(metric) over every arm's repeats (0 without repeats)."""
    ss, df = 0.0, 0
    for lv in raw.values():
        if metric not in lv:
            continue
        v = pd.to_numeric(lv[metric], errors="coerce")
        ok = v > 0
        logs = np.log(v[ok])
        for _, g in logs.groupby(lv.loc[ok, "concurrency"]):
            ss += float(((g - g.mean()) ** 2).sum())
            df += len(g) - 1
    return ss / df if df else 0.0
