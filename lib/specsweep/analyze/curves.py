"""The delta curve of one arm and metric: y = ln(arm ÷ baseline) fitted against x = log2(concurrency).

Input: the levels' log ratios, their variance factors and a noise estimate (from :mod:`specsweep.analyze.noise`).
Output: a :class:`DeltaCurve` — the fitted value, standard error and 95 % simultaneous band half-width at
each tested level — evaluated anywhere in the tested range by :meth:`DeltaCurve.predict` / :meth:`DeltaCurve.fitted_at`.
The model is the lowest polynomial degree (0 to 3) that fits within the noise, else the level values joined
by straight lines (docs/method.md, "How a verdict is reached").

Invariant: every arm's curve of one metric on a page uses one family, the most flexible any arm's own fit
chose (:func:`shared_models`, :func:`fit_shared`), so equal measurements get equal fits.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: family-wise error rate of every band and credible call (two-sided)
ALPHA: float = 0.05
#: two-sided level at which the next polynomial term, fitted, keeps a lower degree from being chosen
NEXT_TERM_ALPHA: float = 0.05
#: highest polynomial degree tried for a delta curve
MAX_DEGREE: int = 3
DEGREE_NAMES = {0: "constant", 1: "linear", 2: "quadratic", 3: "cubic"}
#: the model of a curve that is no polynomial: the level values themselves
LEVEL_MODEL: str = "level values joined by straight lines"
#: curve families from the simplest to the most flexible (the level values: as flexible as the data)
MODEL_RANK: dict[str, int] = {**{name: d for d, name in DEGREE_NAMES.items()}, LEVEL_MODEL: MAX_DEGREE + 1}
#: a polynomial fit: (centre x0, scale sc, coefficients in z = (x − x0) ÷ sc, their covariance)
Poly = tuple[float, float, np.ndarray, np.ndarray]


@dataclass
class DeltaCurve:
    """The fitted delta curve of one arm and metric (log scale: y = ln(arm / baseline)).

    ``fitted`` and ``half_width`` are per tested level; ``half_width`` is the half-width of the 95 %
    simultaneous band. ``noise`` says where the noise estimate came from.
    """

    concurrency: np.ndarray
    observed: np.ndarray
    fitted: np.ndarray
    se: np.ndarray
    half_width: np.ndarray
    crit: float
    df: float
    noise: str
    model: str
    #: the polynomial (:data:`Poly`); None for level values
    poly: Poly | None = None
    #: the level values' variances (level values only; None for a polynomial)
    level_var: np.ndarray | None = None
    #: how many curves share the 5 % error budget with this one (the metrics a verdict reads)
    family: int = 1
    #: what the ``family`` curves are, as :meth:`method` names them
    family_label: str = "verdict metrics"
    #: what widened the band beyond the fit's own (drift correction, a control arm)
    widened: list[str] = field(default_factory=list)
    #: per tested level, one standard deviation of its own measured ln-ratio (``observed``); None: unknown
    own_se: np.ndarray | None = None

    @property
    def credible(self) -> np.ndarray:
        """+1 where the band lies above 0, −1 below, 0 where it spans 0 — or where the level's own
        measured ln-ratio lies on the other side of 0 by more than its own noise (:func:`contradicted`;
        at the lowest and highest level, on the other side at all): a smooth curve carried there by its
        neighbours is no finding at that level."""
        cred = np.where(self.fitted - self.half_width > 0, 1, np.where(self.fitted + self.half_width < 0, -1, 0))
        if self.own_se is None:
            return cred
        se = self.own_se.copy()
        se[[0, -1]] = 0.0  # an end level's fit leans on neighbours on one side only: any contrary sign voids it
        return np.where(contradicted(cred, self.observed, se), 0, cred)

    def predict(self, concurrency: float) -> tuple[float, float]:
        """Fitted ln-ratio and its standard error at any concurrency within the tested range."""
        x = math.log2(concurrency)
        xs = np.log2(self.concurrency.astype(float))
        if self.poly is not None:
            x0, sc, beta, cov = self.poly
            row = ((x - x0) / sc) ** np.arange(len(beta))
            return float(row @ beta), float(math.sqrt(max(float(row @ cov @ row), 0.0)))
        i = int(np.clip(np.searchsorted(xs, x) - 1, 0, len(xs) - 2)) if len(xs) > 1 else 0
        if len(xs) == 1:
            return float(self.fitted[0]), float(self.se[0])
        t = (x - xs[i]) / (xs[i + 1] - xs[i])
        var = self.level_var if self.level_var is not None else self.se ** 2
        value = (1 - t) * self.fitted[i] + t * self.fitted[i + 1]
        return float(value), float(math.sqrt((1 - t) ** 2 * var[i] + t ** 2 * var[i + 1]))

    def fitted_at(self, concurrency: np.ndarray) -> np.ndarray:
        """The fitted ln-ratio at many concurrencies at once (what :meth:`predict` gives point by point)."""
        x = np.log2(np.asarray(concurrency, float))
        if self.poly is not None:
            x0, sc, beta, _ = self.poly
            return ((x[:, None] - x0) / sc) ** np.arange(len(beta)) @ beta
        if len(self.concurrency) == 1:
            return np.full(x.shape, float(self.fitted[0]))
        xs = np.log2(self.concurrency.astype(float))
        i = np.clip(np.searchsorted(xs, x) - 1, 0, len(xs) - 2)
        t = (x - xs[i]) / (xs[i + 1] - xs[i])
        return (1 - t) * self.fitted[i] + t * self.fitted[i + 1]

    def method(self) -> str:
        """One line naming the model, the noise source and the band."""
        k = len(self.concurrency)
        over = f"{k} levels × {self.family} {self.family_label}" if self.family > 1 else f"{k} levels"
        extra = "".join(f"; widened by {w}" for w in self.widened)
        return (f"{self.model} fit on log2(concurrency), noise from {self.noise}; 95% simultaneous band "
                f"(Bonferroni over {over}){extra}")


def contradicted(sign: np.ndarray, observed: np.ndarray, own_se: np.ndarray) -> np.ndarray:
    """Where a level's own measured ln-ratio ``observed`` lies on the other side of 0 from ``sign``
    (+1/−1/0) by more than one standard deviation of its own noise ``own_se``."""
    return np.asarray(sign) * np.asarray(observed) < -np.asarray(own_se)


def design_matrix(x: np.ndarray, degree: int, x0: float, sc: float) -> np.ndarray:
    """Columns z⁰ … z^degree of z = (x − x0) ÷ sc, one row per x."""
    z = (x - x0) / sc
    return np.vstack([z ** j for j in range(degree + 1)]).T


def wls(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Weighted least squares: coefficients, their unscaled covariance, weighted residual SS."""
    cov = np.linalg.pinv(X.T @ (X * w[:, None]))
    beta = cov @ (X.T @ (w * y))
    r = y - X @ beta
    return beta, cov, float((w * r * r).sum())


def fit_delta_curve(
    concurrency: Sequence[float], y: Sequence[float], v: Sequence[float] | None = None,
    noise_var: float | None = None, noise_df: float = 0.0, noise: str = "residuals", alpha: float = ALPHA,
    family: int = 1, force_model: str | None = None, shape_var: float | None = None,
) -> DeltaCurve | None:
    """Fit the delta curve y = ln(arm / baseline) against x = log2(concurrency).

    ``v``: per-level variance factors (Var(y_i) = σ² v_i; 1/n_arm + 1/n_baseline with repeats,
    the bootstrap variance with ``noise_var`` = 1 and ``noise_df`` = inf). With an independent
    noise estimate (``noise_var`` with ``noise_df`` ≥ 2) the lowest polynomial degree (0..3) whose
    lack-of-fit F-test passes at ``alpha`` and whose next term is not significant at ``alpha`` is used, else the level values themselves; without one,
    backward elimination from degree min(3, k − 3) with the residual variance as noise. None when
    there are fewer than 3 levels and no independent noise estimate. The band is simultaneous over the
    k levels of ``family`` curves: each level's two-sided test runs at ``alpha`` / (k × family).

    ``force_model`` (one of :data:`MODEL_RANK`): use that curve family instead of choosing one, so arms
    compared on one page share it (:func:`shared_models`); a degree the levels cannot carry (more than
    k − 2 with a noise estimate, k − 3 without) falls back to the level values, resp. the highest they carry.

    ``shape_var``: the noise variance (infinite degrees of freedom, same units as ``noise_var``) the
    curve family is chosen under, where it differs from the band's: an assumed noise that a
    significantly larger measured scatter replaced. The larger figure widens the band but never lets
    a simpler curve pass.
    """
    c = np.asarray(concurrency, float)
    ys = np.asarray(y, float)
    k = len(ys)
    vs = np.ones(k) if v is None else np.asarray(v, float)
    w = 1.0 / vs
    x = np.log2(c)
    x0, sc = float(x.mean()), float(x.std()) or 1.0
    independent = noise_var is not None and noise_df >= 2 and k >= 1
    if not independent and k < 3:
        return None
    if independent:
        assert noise_var is not None  # what ``independent`` means
        s2, df = float(noise_var), float(noise_df)
        shape = (s2, df) if shape_var is None else (float(shape_var), math.inf)
        poly, model = _lowest_degree_within(x, ys, w, (x0, sc), shape, alpha, force_model)
        if poly is not None and shape[0] > 0:  # the chosen family's coefficients carry the band's noise
            poly = (poly[0], poly[1], poly[2], poly[3] * (s2 / shape[0]))
    else:
        poly, model, s2, df = _backward_elimination(x, ys, w, (x0, sc), alpha, force_model)
        noise = "the residuals of the fitted curve (no repeats)"
    return _banded(c, ys, vs, x, poly, model, (s2, df), noise, alpha, family)


def _lowest_degree_within(x: np.ndarray, ys: np.ndarray, w: np.ndarray, centre: tuple[float, float],
                          noise: tuple[float, float], alpha: float, force_model: str | None) -> tuple[Poly | None, str]:
    """With an independent noise estimate ``noise`` = (variance s2, degrees of freedom df): the lowest
    degree whose lack-of-fit F-test passes at ``alpha`` and whose next term is not significant
    (:func:`_next_term_significant`), or the forced one; else None: the level values. The
    polynomial's covariance is scaled by s2."""
    from scipy import special  # deferred, and not scipy.stats: slow to import, see bench/import_time.py

    x0, sc = centre
    s2, df = noise
    k = len(ys)
    forced = MODEL_RANK.get(force_model) if force_model is not None else None
    for d in range(0, min(MAX_DEGREE, k - 2) + 1):
        if forced is not None and d != forced:
            continue
        X = design_matrix(x, d, x0, sc)
        beta, cov, rss = wls(X, ys, w)
        f = (rss / (k - d - 1)) / s2 if s2 > 0 else math.inf
        # F(d1, ∞) is χ²(d1) / d1 (scipy's F gives NaN for an infinite denominator)
        p_fit = special.fdtrc(k - d - 1, df, f) if math.isfinite(df) else special.chdtrc(k - d - 1, f * (k - d - 1))
        if forced is not None or (p_fit >= alpha and not _next_term_significant(x, ys, w, centre, d, noise, NEXT_TERM_ALPHA)):
            return (x0, sc, beta, cov * s2), DEGREE_NAMES[d]
    return None, LEVEL_MODEL


def _next_term_significant(x: np.ndarray, ys: np.ndarray, w: np.ndarray, centre: tuple[float, float], d: int,
                           noise: tuple[float, float], alpha: float) -> bool:
    """Whether the degree-(d + 1) coefficient, fitted with it, differs from 0 at ``alpha`` (two-sided,
    under ``noise`` = (variance, df)). The lack-of-fit test spreads a bend over all its degrees of
    freedom and lets a straight line through a curve in 4 draws of 10 where this one-degree test
    finds the bend; False where the levels cannot carry degree d + 1."""
    from scipy import special  # deferred, and not scipy.stats: slow to import, see bench/import_time.py

    s2, df = noise
    if d + 1 > min(MAX_DEGREE, len(ys) - 2) or s2 <= 0:
        return False
    beta, cov, _ = wls(design_matrix(x, d + 1, *centre), ys, w)
    t = abs(float(beta[-1])) / math.sqrt(max(float(cov[-1, -1]) * s2, 1e-300))
    p = 2 * (special.stdtr(df, -t) if math.isfinite(df) else special.ndtr(-t))
    return bool(p < alpha)


def _backward_elimination(x: np.ndarray, ys: np.ndarray, w: np.ndarray, centre: tuple[float, float], alpha: float,
                          force_model: str | None) -> tuple[Poly, str, float, float]:
    """Without a noise estimate: from degree min(3, k − 3) (the lowest that fits noise-free data exactly,
    or the forced one) down while the top coefficient is not significant at ``alpha``, the residual
    variance standing for the noise. Returns (polynomial, model name, residual variance, its df)."""
    from scipy import special  # deferred, and not scipy.stats: slow to import, see bench/import_time.py

    x0, sc = centre
    k = len(ys)
    d = min(MAX_DEGREE, k - 3)
    scale = float((w * ys * ys).sum()) or 1.0
    for low in range(d + 1):  # noise-free data (hand-made sets): the lowest degree that fits exactly
        if wls(design_matrix(x, low, x0, sc), ys, w)[2] <= 1e-20 * scale:
            d = low
            break
    if force_model is not None:
        d = min(MODEL_RANK[force_model], k - 3)
    while True:
        X = design_matrix(x, d, x0, sc)
        beta, cov, rss = wls(X, ys, w)
        df = float(k - d - 1)
        s2 = rss / df
        if d == 0 or s2 <= 0 or force_model is not None:
            break
        t = beta[-1] / math.sqrt(s2 * cov[-1, -1])
        if 2 * special.stdtr(df, -abs(t)) < alpha:
            break
        d -= 1
    return (x0, sc, beta, cov * s2), DEGREE_NAMES[d], s2, df


def _banded(c: np.ndarray, ys: np.ndarray, vs: np.ndarray, x: np.ndarray, poly: Poly | None, model: str,
            noise_estimate: tuple[float, float], noise: str, alpha: float, family: int) -> DeltaCurve:
    """The curve at the tested levels with its simultaneous band: each level's two-sided test at
    ``alpha`` ÷ (k × family), on ``noise_estimate`` = (variance, degrees of freedom)."""
    from scipy import special  # deferred, and not scipy.stats: slow to import, see bench/import_time.py

    s2, df = noise_estimate
    k = len(ys)
    var: np.ndarray | None
    if poly is not None:
        X = design_matrix(x, len(poly[2]) - 1, poly[0], poly[1])
        fitted = X @ poly[2]
        se = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", X, poly[3], X), 0.0))
        var = None
    else:
        fitted, var = ys.copy(), s2 * vs
        se = np.sqrt(var)
    q = 1 - alpha / (2 * k * family)
    crit = float(special.stdtrit(df, q)) if math.isfinite(df) else float(special.ndtri(q))
    return DeltaCurve(c, ys, fitted, se, crit * se, crit, df, noise, model, poly, var, family,
                      own_se=np.sqrt(np.maximum(s2 * vs, 0.0)))


def pct_of_log_ratio(z: float) -> float:
    """Δ % of a log ratio ``z`` (ln(arm ÷ baseline)): (e^z − 1) × 100, +inf where e^z overflows a float — a band
    that wide (a curve fitted to a handful of wildly scattered runs) is unbounded, not an error."""
    return math.inf if z > _LN_MAX else (math.exp(z) - 1.0) * 100.0


#: the largest z whose e^z a float holds
_LN_MAX = math.log(sys.float_info.max)


def smallest_detectable_pct(curve: DeltaCurve, power: float = 0.8, at: int | None = None) -> float:
    """The smallest |delta| (in %) the band would call credible with ``power`` at the best-measured
    level, or at the level of index ``at``."""
    from scipy import special  # deferred, and not scipy.stats: slow to import, see bench/import_time.py

    z = float(special.ndtri(power))
    se = float(curve.se.min()) if at is None else float(curve.se[at])
    return pct_of_log_ratio((curve.crit + z) * se)


def widen(curve: DeltaCurve, extra_se: np.ndarray | None, floor: np.ndarray | None, why: str) -> None:
    """Widen a curve's band in place: its standard errors by ``extra_se`` (in quadrature, a shared
    error such as a drift correction's), its half-width to at least ``floor`` (a control arm's deviation)."""
    if extra_se is not None:
        curve.se = np.sqrt(curve.se ** 2 + extra_se ** 2)
        if curve.level_var is not None:
            curve.level_var = curve.level_var + extra_se ** 2
        curve.half_width = curve.crit * curve.se
    if floor is not None:
        curve.half_width = np.maximum(curve.half_width, floor)
    curve.widened.append(why)


def shared_models(curves: dict[tuple[str, str], DeltaCurve]) -> dict[str, str]:
    """{metric: the curve family every arm's curve of that metric is fitted with}: the most flexible
    family any arm's own fit chose (:data:`MODEL_RANK`), so no arm is fitted more smoothly than its
    data allow and equal measurements get equal fits, whichever arm they belong to."""
    out: dict[str, str] = {}
    for (_, metric), curve in curves.items():
        if curve is not None and MODEL_RANK.get(curve.model, -1) > MODEL_RANK.get(out.get(metric, ""), -1):
            out[metric] = curve.model
    return out


#: the levels of one (arm, metric) to fit: (arm, metric) -> concurrencies
LevelsOf = Callable[[str, str], list[int]]
#: one curve's fit: (arm, metric, levels, random state, curve family or None to choose) -> curve
FitOne = Callable[[str, str, list[int], np.random.Generator, str | None], DeltaCurve | None]


def fit_shared(arms: Sequence[str], metrics: Sequence[str], levels_of: LevelsOf, fit: FitOne,
               rng: np.random.Generator) -> dict[tuple[str, str], DeltaCurve | None]:
    """Every (arm, metric) delta curve fitted with the curve family shared by all arms (:func:`shared_models`).

    Each curve is fitted once freely, then, where its family is not the shared one, again with the
    shared family from the same random state (the same bootstrap draws, so only the family differs).
    """
    curves: dict[tuple[str, str], DeltaCurve | None] = {}
    states: dict[tuple[str, str], Mapping[str, Any]] = {}
    for arm in arms:
        for metric in metrics:
            cs = levels_of(arm, metric)
            if cs:
                states[(arm, metric)] = rng.bit_generator.state
                curves[(arm, metric)] = fit(arm, metric, cs, rng, None)
    models = shared_models({k: c for k, c in curves.items() if c is not None})
    for (arm, metric), curve in curves.items():
        if curve is not None and curve.model != models.get(metric, curve.model):
            again = np.random.default_rng()
            again.bit_generator.state = states[(arm, metric)]
            curves[(arm, metric)] = fit(arm, metric, levels_of(arm, metric), again, models[metric])
    return curves
