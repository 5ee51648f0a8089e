"""The adaptive policy: which measurement a study takes next, or why it stops.

A full grid measures every arm at every level ``repeats`` times. Most of those runs do not move the
decision: levels between two levels that agree, repeats of a level whose band is already clear of
the minimum effect. :func:`next_step` looks at what has been measured (the arms' result sets) and
chooses the next :class:`Step` — one level, new or repeated, measured on every arm still in
contention (the baseline and the control arms always with them, so every arm stays paired with the
baseline) — or a :class:`Stop`. It is pure: the same result sets and :class:`Plan` give the same
answer; it neither measures nor writes.

The order of what it asks for:

1. **Coarse design.** A few log-spaced levels (:func:`coarse_levels`: both ends of the grid and
   levels evenly spaced in log2(concurrency) between), once on every arm.
2. **The crossover's bracket.** For each profile, on the arm its decision judges: between two
   measured levels whose outcomes differ (gain, loss, neutral), and between the last gain and the
   first loss of an 'enable up to/from X', the untested level nearest the middle in log2(C) — so X
   ends up between two *adjacent* levels of the grid, the bracket the full grid would name.
3. **What the curve smooths away.** Beside a measured level whose own runs credibly show a gain or
   a loss that the fitted curve there does not (a loss at the end of the grid, a stall), the untested
   level nearest the middle on each side.
4. **Open signs.** At each measured level of each arm in contention, the probability that measuring
   it up to the most repeats allowed would change the sign (gain, loss or neutral) of a metric the
   profile reads (:func:`level_flip`, from the level's own runs); the level with the largest
   probability per second of cost is repeated, until a profile's summed probability over its levels
   is at most ``target_flip`` (settled).

It stops when every profile is settled (``settled``), when the next useful measurement would spend
more than the budget left (``budget``), or when what keeps a decision open cannot be measured any
more (``exhausted``: every repeat allowed is taken). Every choice carries its reason; levels never
measured get one too (:func:`skipped_levels`), so the page can list them.

Arms: a candidate the decision of no profile judges or ties with (it is credibly different from the
one judged) stops being measured at new levels and repeats; the page says so (:attr:`Step.dropped`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

import pandas as pd

from specsweep.analyze.compare import Comparison, compare
from specsweep.decide import Profile, Recommendation, recommend
from specsweep.decide.ties import profile_metrics
from specsweep.results.store import ResultSet

#: how many levels the coarse design measures first (both ends included)
COARSE_LEVELS: int = 4
#: a profile is settled when its summed flip probability (a fraction) is at most this
TARGET_FLIP: float = 0.05

StopReason = Literal["settled", "budget", "exhausted"]


@dataclass(frozen=True)
class Choice:
    """One run to measure: ``arm`` at concurrency ``level``, its ``repeat``-th run there (0-based,
    the prompt seed's offset, shared by the arms of one step so they stay paired), with ``requests``
    measured requests (None: the study's own count), and why."""

    arm: str
    level: int
    repeat: int
    requests: int | None
    reason: str


@dataclass(frozen=True)
class Step:
    """The next measurement: one level on every arm still measured, its estimated cost (device
    seconds) and why; ``dropped``: candidates no longer measured, with why."""

    choices: tuple[Choice, ...]
    reason: str
    est_s: float
    dropped: tuple[tuple[str, str], ...] = ()

    @property
    def levels(self) -> list[int]:
        return sorted({c.level for c in self.choices})


@dataclass(frozen=True)
class Stop:
    """Why the study stops measuring: ``settled`` (every profile's decision), ``budget`` (the next
    useful measurement costs more than is left), ``exhausted`` (nothing allowed can change it)."""

    reason: StopReason
    detail: str


@dataclass(frozen=True)
class Plan:
    """What a study may measure and what it decides.

    ``levels``: the candidate concurrency levels (the full grid's); ``max_repeats(arm, level)``: the
    most runs allowed there (a recorded study: those it holds); ``budget_s``: device seconds of
    measurement; ``cost_s(level)``: a run's estimated seconds before any was measured at that level.
    """

    levels: tuple[int, ...]
    baseline: str
    candidates: tuple[str, ...]
    controls: tuple[str, ...]
    profiles: tuple[Profile, ...]
    max_repeats: Callable[[str, int], int]
    budget_s: float = math.inf
    target_flip: float = TARGET_FLIP
    coarse: int = COARSE_LEVELS
    requests: int | None = None
    prior_cost_s: float = 60.0
    n_boot: int = 0
    assumed_noise_pct: float = 3.0

    @property
    def arms(self) -> tuple[str, ...]:
        return (self.baseline, *self.candidates, *self.controls)


@dataclass
class Measured:
    """What has been measured so far: runs per (arm, level) and each level's run durations (s)."""

    runs: dict[tuple[str, int], int] = field(default_factory=dict)
    seconds: dict[int, list[float]] = field(default_factory=dict)

    def add(self, arm: str, level: int, seconds: float) -> None:
        self.runs[(arm, level)] = self.runs.get((arm, level), 0) + 1
        self.seconds.setdefault(level, []).append(seconds)

    def count(self, arm: str, level: int) -> int:
        return self.runs.get((arm, level), 0)

    def levels(self, arm: str) -> list[int]:
        return sorted(c for (a, c), n in self.runs.items() if a == arm and n > 0)

    @property
    def spent_s(self) -> float:
        return sum(sum(v) for v in self.seconds.values())

    def cost_s(self, level: int, prior_s: float) -> float:
        """A run's estimated seconds at ``level``: the mean measured there; else interpolated in
        log2(C) between the measured levels around it (the nearest one's beyond them); else ``prior_s``."""
        means = {c: sum(v) / len(v) for c, v in self.seconds.items() if v}
        if level in means:
            return means[level]
        if not means:
            return prior_s
        below = [c for c in means if c < level]
        above = [c for c in means if c > level]
        if not below or not above:
            return means[max(below) if below else min(above)]
        a, b = max(below), min(above)
        t = (math.log2(level) - math.log2(a)) / (math.log2(b) - math.log2(a))
        return means[a] + t * (means[b] - means[a])


def coarse_levels(levels: Sequence[int], n: int = COARSE_LEVELS) -> list[int]:
    """``n`` of ``levels`` (sorted, distinct): both ends and those nearest to evenly log2-spaced
    points between (all of them where there are at most ``n``)."""
    cs = sorted(set(int(c) for c in levels))
    if len(cs) <= max(n, 2):
        return cs
    lo, hi = math.log2(cs[0]), math.log2(cs[-1])
    out: list[int] = []
    for i in range(max(n, 2)):
        target = lo + (hi - lo) * i / (max(n, 2) - 1)
        free = [c for c in cs if c not in out]
        out.append(min(free, key=lambda c: (abs(math.log2(c) - target), c)))
    return sorted(out)


# ----------------------------------------------------------------------------- flip probability


def _bonferroni_z(k: int, family: int) -> float:
    """The normal quantile of a 95 % band shared over ``k`` levels of ``family`` metrics (the band's
    own is a t quantile; the normal one is close enough to size its standard error)."""
    return NormalDist().inv_cdf(1 - 0.025 / max(k * family, 1))


def sign_flip(now: int, y: float, se: float, shrink: float, z: float, min_effect_pct: float) -> float:
    """Probability that a level's sign ``now`` (gain +1, loss −1, neutral 0) changes once the variance
    of its measured ln-ratio ``y`` (standard error ``se``) shrinks by the factor ``shrink`` (< 1: more runs).

    With the runs added, y' ~ N(y, se² − se'²) (se' = se·√shrink: the predictive distribution of the
    mean of all runs given those measured), and y' is a gain where it exceeds both z·se' (the band
    then clear of 0) and ln(1 + min effect), a loss where it is below both negated.
    """
    if any(math.isnan(v) for v in (y, se)) or shrink >= 1.0 or se <= 0:
        return 0.0
    se_new = se * math.sqrt(max(shrink, 0.0))
    sd = math.sqrt(max(se * se - se_new * se_new, 1e-24))
    up = max(z * se_new, math.log1p(min_effect_pct / 100))
    down = max(z * se_new, -math.log1p(-min(min_effect_pct, 99.0) / 100))
    p_gain = 1 - NormalDist(y, sd).cdf(up)
    p_loss = NormalDist(y, sd).cdf(-down)
    return 1.0 - {1: p_gain, -1: p_loss}.get(now, 1.0 - p_gain - p_loss)


def _sign_now(row: Mapping[str, object], min_effect_pct: float) -> int:
    """A delta row's sign as the judge reads it: credible and beyond the minimum effect (in ln-ratio terms)."""
    fit, cred = float(row["fit_delta_pct"]), row.get("credible", 0)  # type: ignore[arg-type]
    cred = 0 if cred is None or (isinstance(cred, float) and math.isnan(cred)) else int(cred)  # type: ignore[call-overload]
    return cred if cred * fit > min_effect_pct else 0


def level_flip(comp: Comparison, profile: Profile, arm: str, level: int, measured: Measured, plan: Plan) -> float:
    """Probability that measuring ``level`` up to the most runs allowed (arm and baseline) changes the
    sign of a metric the profile reads for ``arm`` there (the largest over those metrics).

    It reads the level's *own* measured ln-ratio and noise, not the fitted curve's band: the curve of
    a few levels smooths over what the full grid's levels would show (a loss at the end of the grid),
    while the level's own runs are what more runs there refine. The band is sized for the full grid
    (all of ``plan.levels``, the metrics a verdict reads)."""
    n_a, n_b = measured.count(arm, level), measured.count(plan.baseline, level)
    m_a, m_b = max(plan.max_repeats(arm, level), n_a), max(plan.max_repeats(plan.baseline, level), n_b)
    if not n_a or not n_b:
        return 0.0
    shrink = (1 / m_a + 1 / m_b) / (1 / n_a + 1 / n_b)
    z = _bonferroni_z(len(plan.levels), comp.family)
    out = 0.0
    for metric in profile_metrics(comp, profile, arm):
        row = comp.delta_rows(arm, metric).get(level)
        if row is None or pd.isna(row.get("level_delta_pct")):
            continue
        flip = -1 if row["better"] == "lower" else 1
        y = flip * math.log1p(float(row["level_delta_pct"]) / 100)
        now = flip * _sign_now(row, profile.min_effect_pct)
        out = max(out, sign_flip(now, y, float(row["level_noise_ln"]), shrink, z, profile.min_effect_pct))
    return out


# ------------------------------------------------------------------------------------- choosing


@dataclass(frozen=True)
class _Want:
    """A measurement one profile asks for: a level (new or repeated), its priority, why."""

    level: int
    priority: float
    reason: str
    new: bool


def _outcomes(rec: Recommendation, arm: str) -> list[tuple[int, str]]:
    lv = rec.levels[rec.levels["arm"] == arm] if not rec.levels.empty else rec.levels
    return sorted((int(c), str(o)) for c, o in zip(lv.get("concurrency", []), lv.get("outcome", [])))


def _middle(levels: Sequence[int], a: int, b: int, measured: set[int]) -> int | None:
    """The untested level strictly between ``a`` and ``b`` nearest their middle in log2(C), or None."""
    between = [c for c in levels if a < c < b and c not in measured]
    if not between:
        return None
    mid = (math.log2(a) + math.log2(b)) / 2
    return min(between, key=lambda c: (abs(math.log2(c) - mid), c))


def _bracket_wants(rec: Recommendation, plan: Plan, measured: Measured) -> list[_Want]:
    """New levels that narrow where the judged arm's outcome changes (see the module docstring)."""
    arm = rec.judged_arm
    if arm is None:
        return []
    outs = _outcomes(rec, arm)
    tested = set(measured.levels(arm)) & set(measured.levels(plan.baseline))
    gains = [c for c, o in outs if o == "gain"]
    losses = [c for c, o in outs if o == "loss"]
    span = (min(max(gains), min(losses)), max(max(gains), min(losses))) if gains and losses else None
    wants = []
    for (a, oa), (b, ob) in zip(outs, outs[1:]):
        inside = span is not None and span[0] <= a and b <= span[1]
        if oa == ob and not inside:
            continue
        c = _middle(plan.levels, a, b, tested)
        if c is not None:
            why = (f"{rec.profile.name}: the outcome changes between {a} ({oa}) and {b} ({ob})" if oa != ob else
                   f"{rec.profile.name}: the crossover lies between {span[0]} and {span[1]}" if span else "")
            wants.append(_Want(c, 10.0, why + f"; {c} narrows it", True))
    return wants


def _curve_smooths(comp: Comparison, rec: Recommendation, plan: Plan, measured: Measured) -> list[_Want]:
    """New levels beside a measured level whose own runs credibly disagree with the fitted curve's
    outcome there (the curve through a few levels smooths a loss at the end of the grid, or a stall,
    away): the untested level nearest the middle on each side."""
    arm = rec.judged_arm
    if arm is None:
        return []
    z = _bonferroni_z(len(plan.levels), comp.family)
    tested = sorted(set(measured.levels(arm)) & set(measured.levels(plan.baseline)))
    wants = []
    for c, outcome in _outcomes(rec, arm):
        own = _own_sign(comp, rec.profile, arm, c, z)
        if own == 0 or own == {"gain": 1, "loss": -1}.get(outcome, 0):
            continue
        i = tested.index(c) if c in tested else -1
        for a, b in ((tested[i - 1], c) if i > 0 else (0, 0), (c, tested[i + 1]) if 0 <= i < len(tested) - 1 else (0, 0)):
            mid = _middle(plan.levels, a, b, set(tested)) if a else None
            if mid is not None:
                wants.append(_Want(mid, 5.0, f"{rec.profile.name}: at {c} the runs themselves show a "
                                              f"{'gain' if own > 0 else 'loss'} that the curve through its neighbours "
                                              f"calls {outcome}; {mid} shows the shape between", True))
    return wants


def _own_sign(comp: Comparison, profile: Profile, arm: str, level: int, z: float) -> int:
    """+1/−1 where the level's own runs of a metric the profile reads show a gain/loss clear of 0 at
    ``z`` standard errors and beyond the minimum effect (the first such metric), else 0."""
    for metric in profile_metrics(comp, profile, arm):
        row = comp.delta_rows(arm, metric).get(level)
        if row is None or pd.isna(row.get("level_delta_pct")) or pd.isna(row.get("level_noise_ln")):
            continue
        flip = -1 if row["better"] == "lower" else 1
        y = flip * math.log1p(float(row["level_delta_pct"]) / 100)
        if abs(y) > max(z * float(row["level_noise_ln"]), math.log1p(profile.min_effect_pct / 100)):
            return 1 if y > 0 else -1
    return 0


def _contention(rec: Recommendation) -> list[str]:
    arm = rec.judged_arm
    return [] if arm is None else [arm, *rec.tied_with]


def _band_wants(comp: Comparison, rec: Recommendation, plan: Plan, measured: Measured) -> tuple[list[_Want], float]:
    """Repeats of levels whose sign may still change (one per level, its flip probability as
    priority) and the profile's summed flip probability."""
    per_level: dict[int, tuple[float, str]] = {}
    total = 0.0
    for arm in _contention(rec):
        for c, _ in _outcomes(rec, arm):
            p = level_flip(comp, rec.profile, arm, c, measured, plan)
            total += p
            if p > per_level.get(c, (0.0, ""))[0]:
                per_level[c] = (p, arm)
    wants = [_Want(c, p, f"{rec.profile.name}: {arm} at {c} may still change sign (probability {p:.0%} if "
                         "measured up to the most runs allowed)", False)
             for c, (p, arm) in per_level.items() if p > 0]
    return wants, total


def _measured_arms(plan: Plan, recs: Sequence[Recommendation], comp: Comparison) -> tuple[list[str], list[tuple[str, str]]]:
    """(the arms a step measures: the baseline, every candidate some profile judges or ties, the
    controls; the candidates left out with why)."""
    keep = {a for rec in recs for a in _contention(rec)}
    if not keep:
        keep = set(plan.candidates)
    dropped = [(a, "credibly different from the arm every profile judges") for a in plan.candidates
               if a not in keep and a in comp.arms]
    arms = [plan.baseline, *[a for a in plan.candidates if a in keep or a not in comp.arms], *plan.controls]
    return arms, dropped


def _step_for(want: _Want, arms: Sequence[str], plan: Plan, measured: Measured) -> tuple[Choice, ...]:
    """The runs of one wanted level: each arm's next run there, where one is allowed."""
    out = []
    for arm in arms:
        n = measured.count(arm, want.level)
        if want.new and n:
            continue
        if n < plan.max_repeats(arm, want.level):
            out.append(Choice(arm, want.level, n, plan.requests, want.reason))
    return tuple(out)


def coarse_step(plan: Plan, measured: Measured) -> Step | None:
    """The coarse levels not measured yet, on every arm lacking them (one step: a live study measures
    them in one run per arm); None when done."""
    levels = coarse_levels(plan.levels, plan.coarse)
    why = f"coarse design: {', '.join(map(str, levels))} (log-spaced, both ends)"
    choices = tuple(Choice(a, c, 0, plan.requests, why) for a in plan.arms for c in levels
                    if not measured.count(a, c) and plan.max_repeats(a, c) > 0)
    if not choices:
        return None
    return Step(choices, why, sum(measured.cost_s(ch.level, plan.prior_cost_s) for ch in choices))


def recommendations(sets: Sequence[ResultSet], plan: Plan) -> tuple[Comparison, list[Recommendation]]:
    """The comparison of what was measured and each profile's recommendation on it."""
    comp = compare(sets, baseline=plan.baseline, n_boot=plan.n_boot, assumed_noise_pct=plan.assumed_noise_pct)
    return comp, [recommend(comp, p) for p in plan.profiles]


def next_step(sets: Sequence[ResultSet], plan: Plan, measured: Measured) -> Step | Stop:
    """The next measurement, or why to stop (see the module docstring). ``sets``: the arms' result
    sets so far (only what ``measured`` counts); ``measured``: their runs and durations."""
    first = coarse_step(plan, measured)
    left = plan.budget_s - measured.spent_s
    if first is not None:
        return first if first.est_s <= left else Stop("budget", f"the coarse design needs about {first.est_s:.0f} s, "
                                                                 f"{max(left, 0):.0f} s of the budget are left")
    comp, recs = recommendations(sets, plan)
    wants: list[_Want] = []
    open_profiles = []
    for rec in recs:
        bracket = _bracket_wants(rec, plan, measured) + _curve_smooths(comp, rec, plan, measured)
        bands, total = _band_wants(comp, rec, plan, measured)
        wants += bracket + (bands if total > plan.target_flip else [])
        if bracket or total > plan.target_flip:
            open_profiles.append(f"{rec.profile.name} (flip probability {total:.0%})")
    if not open_profiles:
        return Stop("settled", f"every profile's decision is settled (flip probability ≤ {plan.target_flip:.0%} each)")
    arms, dropped = _measured_arms(plan, recs, comp)
    return _cheapest_useful(wants, arms, plan, measured, left, open_profiles, tuple(dropped))


def _cheapest_useful(wants: Sequence[_Want], arms: Sequence[str], plan: Plan, measured: Measured, left: float,
                     open_profiles: Sequence[str], dropped: tuple[tuple[str, str], ...]) -> Step | Stop:
    """The wanted level of the highest priority per second that can be measured within the budget."""
    best: tuple[float, Step] | None = None
    too_dear = False
    for want in wants:
        choices = _step_for(want, arms, plan, measured)
        if not choices:
            continue
        cost = sum(measured.cost_s(ch.level, plan.prior_cost_s) for ch in choices)
        if cost > left:
            too_dear = True
            continue
        score = want.priority / max(cost, 1e-9)
        if best is None or score > best[0]:
            best = (score, Step(choices, want.reason, cost, dropped))
    if best is not None:
        return best[1]
    if too_dear:
        return Stop("budget", f"still open: {'; '.join(open_profiles)}; the next useful measurement costs more than "
                              f"the {max(left, 0):.0f} s of budget left")
    return Stop("exhausted", f"still open: {'; '.join(open_profiles)}; every run allowed where it could change is "
                             "taken")


def skipped_levels(plan: Plan, measured: Measured, stop: Stop | None = None) -> dict[int, str]:
    """{level never measured: why}: its measured neighbours agreed, or the study stopped first."""
    tested = measured.levels(plan.baseline)
    out = {}
    for c in plan.levels:
        if c in tested:
            continue
        below = [t for t in tested if t < c]
        above = [t for t in tested if t > c]
        if stop is not None and stop.reason != "settled":
            out[c] = f"not reached: the study stopped ({stop.reason})"
        elif below and above:
            out[c] = (f"between {below[-1]} and {above[0]}, whose outcomes agree for every profile (no crossover "
                      "to narrow there)")
        else:
            out[c] = "outside the measured levels"
    return out


def full_grid_s(plan: Plan, measured: Measured) -> float:
    """Seconds the full grid (every arm, level and allowed run) would take, from the measured
    durations per level (:meth:`Measured.cost_s` where a level was not measured)."""
    return sum(plan.max_repeats(a, c) * measured.cost_s(c, plan.prior_cost_s) for a in plan.arms for c in plan.levels)


def plan_for(levels: Sequence[int], baseline: str, arms: Sequence[str], controls: Sequence[str],
             profiles: Sequence[Profile], max_repeats: Callable[[str, int], int] | Mapping[tuple[str, int], int],
             **kw: object) -> Plan:
    """A :class:`Plan` from plain lists (``max_repeats`` a function or a {(arm, level): runs} mapping)."""
    fn = max_repeats if callable(max_repeats) else (lambda a, c, m=max_repeats: int(m.get((a, c), 0)))
    cands = tuple(a for a in arms if a != baseline and a not in controls)
    return Plan(tuple(sorted(set(levels))), baseline, cands, tuple(a for a in controls if a != baseline),
                tuple(profiles), fn, **kw)  # type: ignore[arg-type]
