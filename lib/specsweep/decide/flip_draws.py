"""Whether the flip chance is calibrated: predicted flip chances against the flips of real reruns.

For each *truth* (a study design and true ratios, :data:`TRUTHS`, drawn by
:func:`specsweep.decide.draws.draw_study`): draw a study, decide it and estimate its flip chance
(:func:`specsweep.decide.flip.flip_chances`); then draw ``reruns`` fresh studies from the same truth
and count the share whose decision flips (another class or an arm outside the measured tie, per
profile). Over many studies the mean predicted chance should match the mean observed share, overall
and within bins of the prediction. The truths mix noise models (3 runs at 3 %, one run at 3 % and
at 6 % — twice the assumption —, noise growing with load, drift with a control arm) and true effects
far from a decision threshold (no difference, +12 %) and near it (+3 % to +8 %, a crossover).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specsweep.analyze.compare import compare
from specsweep.decide.decisions import decided_row
from specsweep.decide.draws import GRID, HARD_CASES, draw_study
from specsweep.decide.flip import Method, flip_chances, flipped
from specsweep.decide.profiles import DEFAULT_PROFILES


def _flat(r: float) -> Any:
    return lambda c: r + 0 * c


def _truth(repeats: int, sigma: float, ratio: float, **extra: Any) -> dict[str, Any]:
    return dict(levels=GRID, repeats=repeats, sigma=_flat(sigma), agg=_flat(ratio), user=_flat(ratio), **extra)


#: name -> a :func:`~specsweep.decide.draws.draw_study` spec
TRUTHS: dict[str, dict[str, Any]] = {
    "3 runs, none": HARD_CASES["nominal_none"],
    "3 runs, +3%": _truth(3, 0.03, 1.03),
    "3 runs, +4%": HARD_CASES["nominal_plus4"],
    "3 runs, +6%": _truth(3, 0.03, 1.06),
    "1 run, none": HARD_CASES["nominal_none_one_run"],
    "1 run, +6%": HARD_CASES["plus6_one_run"],
    "1 run, +8%": _truth(1, 0.03, 1.08),
    "1 run, +12%": _truth(1, 0.03, 1.12),
    "1 run 6% noise, none": HARD_CASES["noise_2x_one_run"],
    "1 run 6% noise, +10%": _truth(1, 0.06, 1.10),
    "growing noise, none": HARD_CASES["growing_noise"],
    "drift + control, none": HARD_CASES["drift_control"],
    "crossover at 24, 3 runs": HARD_CASES["latency_crossover_24_3runs"],
    "bending crossover, 1 run": HARD_CASES["curved_24_one_run"],
}
#: bins of the predicted flip chance the calibration is reported in
BINS: tuple[float, ...] = (0.0, 0.05, 0.2, 0.5, 1.0 + 1e-9)


@dataclass(frozen=True)
class Point:
    """One (study, profile): the truth, the predicted flip chance and the share of reruns that flipped."""

    truth: str
    profile: str
    predicted: float
    observed: float


def calibration(n_studies: int, resamples: int, reruns: int, seed: int = 0,
                truths: Sequence[str] | None = None, method: Method = "curve") -> list[Point]:
    """``n_studies`` studies spread evenly over ``truths`` (default: all), each with its predicted
    flip chance per default profile and the share of ``reruns`` fresh draws that flipped."""
    names = list(truths if truths is not None else TRUTHS)
    rng = np.random.default_rng(seed)
    points = []
    for i in range(n_studies):
        name = names[i % len(names)]
        sets = draw_study(TRUTHS[name], rng)
        comp = compare(sets)
        measured = [decided_row(comp, p) for p in DEFAULT_PROFILES]
        chances = flip_chances(sets, comp=comp, resamples=resamples, seed=int(rng.integers(2**31)), method=method)
        flips = np.zeros(len(measured))
        for _ in range(reruns):
            again = compare(draw_study(TRUTHS[name], rng))
            flips += [flipped(a, decided_row(again, p)) for a, p in zip(measured, DEFAULT_PROFILES)]
        points += [Point(name, a.profile, chances[a.profile].chance, f / reruns) for a, f in zip(measured, flips)]
    return points


@dataclass(frozen=True)
class Summary:
    """Mean predicted and observed flip rates (0–1) over a set of points, and how many points."""

    label: str
    n: int
    predicted: float
    observed: float

    @property
    def gap(self) -> float:
        """Predicted minus observed (0–1)."""
        return self.predicted - self.observed


def binned_gap(points: Sequence[Point]) -> float:
    """The mean |predicted − observed| (0–1) over the bins of the prediction, each bin weighted by its
    points: calibration where it matters — a study told 40 % should flip about 40 % of the time."""
    total = 0.0
    for lo, hi in zip(BINS, BINS[1:]):
        pts = [p for p in points if lo <= p.predicted < hi]
        if pts:
            total += len(pts) * abs(float(np.mean([p.predicted - p.observed for p in pts])))
    return total / len(points) if points else math.nan


def summarise(points: Sequence[Point]) -> list[Summary]:
    """The calibration table: every point, then per bin of the prediction, then per truth."""
    def row(label: str, pts: Sequence[Point]) -> Summary:
        if not pts:
            return Summary(label, 0, math.nan, math.nan)
        return Summary(label, len(pts), float(np.mean([p.predicted for p in pts])),
                       float(np.mean([p.observed for p in pts])))

    out = [row("all", points)]
    for lo, hi in zip(BINS, BINS[1:]):
        out.append(row(f"predicted {lo:.0%}–{min(hi, 1.0):.0%}", [p for p in points if lo <= p.predicted < hi]))
    for name in dict.fromkeys(p.truth for p in points):
        out.append(row(name, [p for p in points if p.truth == name]))
    return out
