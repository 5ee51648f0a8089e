"""A control arm — configured like the baseline — and the floor its deviation sets on every other arm's band.

Input: the control arms' fitted delta curves of a metric, then every other arm's. Output: a record
of the controls' deviation (:data:`Deviation`), and each other curve's band widened in place to at
least that deviation.

Invariant: no other arm's band at a level is narrower than the controls' largest fitted deviation
from the baseline, nor, at a level a control measured, its observed deviation there; so a difference
no larger than a control's is never credible (docs/method.md, "How a verdict is reached").
"""
from __future__ import annotations

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


def widen_for_controls(curve: DeltaCurve, by_level: dict[int, float], labels: str) -> None:
    """Widen another arm's curve in place to at least the controls' deviation ``by_level`` (one
    metric's entry of :data:`Deviation`); ``labels``: the control arms, as the band's note names them."""
    floor = np.array([by_level.get(int(c), by_level[ANY_LEVEL]) for c in curve.concurrency])
    widen(curve, None, floor, "the control arm's deviation from the baseline (" + labels + ")")
