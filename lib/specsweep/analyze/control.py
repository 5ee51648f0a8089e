"""A control arm — configured like the baseline — and the floor its deviation sets on every other arm's band.

Input: the control arms' fitted delta curves of a metric, then every other arm's. Output: a record
of the controls' deviation (:data:`Deviation`), and each other curve's band widened in place to at
least that deviation.

Invariant: no other arm's band at a level is narrower than the controls' largest fitted deviation
from the baseline, nor, at a level a control measured, its observed deviation there, nor the drift
the controls show carried to the time the arm was measured (a rate read from the controls as from
sentinel runs, with its uncertainty: a control measured half as far from the baseline saw half the
drift); so a difference no larger than a control's is never credible (docs/method.md, "How a
verdict is reached").
"""
from __future__ import annotations

import math

import numpy as np

from specsweep.analyze.curves import DeltaCurve, widen

#: per metric, {concurrency: largest |ln(control ÷ baseline)| of the control arms}; key :data:`ANY_LEVEL`:
#: the largest fitted deviation, which holds at every level
Deviation = dict[str, dict[int, float]]
ANY_LEVEL: int = -1


def add_control(dev: Deviation, metric: str, curve: DeltaCurve) -> None:
    """Record a control arm's curve of ``metric``: at every level at least its largest fitted
    deviation; where it measured the level, at least its observed deviation there too."""
    by_level = dev.setdefault(metric, {})
    widest = float(np.abs(curve.fitted).max())
    by_level[ANY_LEVEL] = max(by_level.get(ANY_LEVEL, 0.0), widest)
    for c, y in zip(curve.concurrency, curve.observed):
        by_level[int(c)] = max(by_level.get(int(c), 0.0), abs(float(y)), widest)


def widen_for_controls(curve: DeltaCurve, by_level: dict[int, float], labels: str,
                       drift_floor: np.ndarray | None = None) -> None:
    """Widen another arm's curve in place to at least the controls' deviation ``by_level`` (one
    metric's entry of :data:`Deviation`) and ``drift_floor`` (:func:`drift_floor`, per level);
    ``labels``: the control arms, as the band's note names them."""
    floor = np.array([by_level.get(int(c), by_level[ANY_LEVEL]) for c in curve.concurrency])
    why = "the control arm's deviation from the baseline (" + labels + ")"
    if drift_floor is not None and bool((drift_floor > floor).any()):
        floor = np.maximum(floor, drift_floor)
        why += ", and the drift it shows carried to when this arm was measured"
    widen(curve, None, floor, why)


#: a control's points for the drift rate: (its ln deviation at a level, one sd of it, seconds from the baseline's run)
ControlPoints = list[tuple[float, float, float]]


def lag(times: dict[str, dict[int, float]], arm: str, baseline: str, c: int) -> float:
    """Seconds from the baseline's runs at level ``c`` to the arm's (mean start times); NaN where unknown."""
    return times.get(arm, {}).get(c, math.nan) - times.get(baseline, {}).get(c, math.nan)


def control_points(curve: DeltaCurve, times: dict[str, dict[int, float]], arm: str, baseline: str) -> ControlPoints:
    """A control curve's levels as drift-rate points (:data:`ControlPoints`), where their times are known."""
    if curve.own_se is None:
        return []
    pts = [(float(y), float(s), lag(times, arm, baseline, int(c)))
           for c, y, s in zip(curve.concurrency, curve.observed, curve.own_se)]
    return [p for p in pts if math.isfinite(p[2]) and p[2] != 0 and p[1] > 0]


def drift_floor(curve: DeltaCurve, points: ControlPoints, times: dict[str, dict[int, float]], arm: str,
                baseline: str) -> np.ndarray | None:
    """Per level of another arm's curve, the drift the controls imply at that arm's time lag from the
    baseline: |rate × lag| + crit × se(rate) × |lag|, the rate of ln deviation per second fitted
    through the controls' points (through the origin, weighted by their noise), as sentinel runs
    give one. A control measured half as far from the baseline as the arm saw half its drift, and
    what it saw is noisy: this carries both to the arm. None where no times are known."""
    if not points:
        return None
    y, s, t = (np.array(v, float) for v in zip(*points))
    info = float((t * t / (s * s)).sum())
    rate, se = float((y * t / (s * s)).sum()) / info, 1.0 / math.sqrt(info)
    lags = np.array([abs(lag(times, arm, baseline, int(c))) for c in curve.concurrency])
    out = abs(rate) * lags + curve.crit * se * lags
    return np.where(np.isfinite(out), out, 0.0)


def bounds_drift(times: dict[str, dict[int, float]], arms: list[str], controls: list[str], baseline: str) -> bool:
    """Whether the control arms were measured at least as far in time from the baseline as every
    other arm at every level (after or around the candidates); unknown times count as bounded."""
    for arm in arms:
        for c in times.get(arm, {}):
            la = abs(lag(times, arm, baseline, c))
            lc = max((abs(lag(times, k, baseline, c)) for k in controls), default=math.nan)
            if math.isfinite(la) and math.isfinite(lc) and lc < la:
                return False
    return True
