"""Where a fitted delta curve changes sign: the crossover concurrency between credible levels.

Input: a :class:`~specsweep.analyze.curves.DeltaCurve`. Output: :func:`curve_crossovers`, one row per
credible sign change (the levels around it, the fitted deltas there in %, where the curve crosses 0,
the direction), and :func:`crossover_table` of many curves; :func:`zero_between`, the zero of the
curve between two levels.

Invariant: a crossover is claimed only where the fitted delta is credibly positive at one level and
credibly negative at a later one (or the reverse) with no credible level between them, and it lies
at the zero of the fitted curve on log2(concurrency) (docs/method.md, "How a verdict is reached").
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.curves import DeltaCurve, pct_of_log_ratio


def zero_between(curve: DeltaCurve, c1: float, c2: float) -> float | None:
    """Where the fitted curve first crosses 0 between two levels (log2 grid), else None.

    The crossing is bracketed on a 201-point grid in log2(concurrency), then solved exactly in its
    bracket: a polynomial curve's real root there (numpy's companion-matrix roots), or, for the level
    values joined by straight lines, the root of the line piece that changes sign. So every caller
    that brackets the same zero of the same curve gets the same concurrency, without scipy.optimize
    (slow to import in every report kernel, see bench/import_time.py)."""
    xs = np.linspace(math.log2(c1), math.log2(c2), 201)
    vals = curve.fitted_at(2 ** xs)
    sign = np.sign(vals)
    idx = np.nonzero(sign[:-1] * sign[1:] <= 0)[0]
    if not len(idx):
        return None
    i = int(idx[0])
    if vals[i] == vals[i + 1] or vals[i] == 0:
        return float(2 ** xs[i])
    if vals[i + 1] == 0:
        return float(2 ** xs[i + 1])
    return float(2 ** _root_in(curve, float(xs[i]), float(xs[i + 1])))


def _root_in(curve: DeltaCurve, a: float, b: float) -> float:
    """The zero of the curve's fitted ln-ratio in log2(concurrency) ∈ (a, b), where it changes sign.

    Every value comes from :meth:`DeltaCurve.fitted_at`, as the bracketing grid's did."""
    def value(x: float) -> float:
        return float(curve.fitted_at(np.array([2.0 ** x]))[0])

    if curve.poly is not None:
        x0, sc, beta, _ = curve.poly
        roots = np.polynomial.polynomial.polyroots(np.asarray(beta, float))
        real = roots[np.abs(roots.imag) <= 1e-9 * np.maximum(1.0, np.abs(roots.real))].real * sc + x0
        inside = np.sort(real[(real >= a - 1e-12) & (real <= b + 1e-12)])
        if len(inside):
            return float(min(max(inside[0], a), b))
        fa = value(a)  # a root lost to rounding: bisect the sign change to 1e-12
        while b - a > 1e-12:
            m = (a + b) / 2
            fm = value(m)
            if fm == 0:
                return m
            a, b, fa = (m, b, fm) if fa * fm > 0 else (a, m, fa)
        return (a + b) / 2
    # the level values joined by lines: linear on each piece between the knots inside the bracket,
    # so the first piece that changes sign holds the root
    knots = np.log2(curve.concurrency.astype(float))
    pts = [a, *[float(k) for k in knots if a < k < b], b]
    f = curve.fitted_at(2.0 ** np.array(pts)).tolist()
    for (xa, fa), (xb, fb) in zip(zip(pts, f), zip(pts[1:], f[1:])):
        if fa == 0:
            return xa
        if fa * fb < 0:
            return xa - fa * (xb - xa) / (fb - fa)
    return b


def curve_crossovers(curve: DeltaCurve) -> list[dict[str, Any]]:
    """Credible sign changes of a fitted delta curve: c_low, c_high, deltas there (%), location, direction."""
    out = []
    prev: int | None = None
    cred = curve.credible
    for i, s in enumerate(cred):
        if s == 0:
            continue
        if prev is not None and cred[prev] != s:
            c1, c2 = float(curve.concurrency[prev]), float(curve.concurrency[i])
            out.append({
                "c_low": int(c1), "c_high": int(c2),
                "delta_low_pct": pct_of_log_ratio(float(curve.fitted[prev])),
                "delta_high_pct": pct_of_log_ratio(float(curve.fitted[i])),
                "crossover_concurrency": zero_between(curve, c1, c2) or math.sqrt(c1 * c2),
                "direction": "gain_to_loss" if cred[prev] > 0 else "loss_to_gain",
            })
        prev = i
    return out


#: the columns of :func:`crossover_table`
CROSSOVER_COLUMNS: list[str] = ["arm", "metric", "c_low", "c_high", "delta_low_pct", "delta_high_pct",
                                "crossover_concurrency", "direction"]


def crossover_table(curves: dict[tuple[str, str], DeltaCurve], metrics: Sequence[str]) -> pd.DataFrame:
    """One row per credible sign change (:func:`curve_crossovers`) of the curves of ``metrics``, keyed
    (arm, metric), in the curves' order."""
    rows = [{"arm": arm, "metric": metric, **row}
            for (arm, metric), curve in curves.items() if metric in metrics
            for row in curve_crossovers(curve)]
    return pd.DataFrame(rows, columns=CROSSOVER_COLUMNS)
