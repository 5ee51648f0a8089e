"""Replaying a recorded full-grid study through the adaptive policy (:mod:`specsweep.study.adaptive`).

Input: the result sets of a study that measured every arm at every level (its runs: one level row
per (arm, concurrency, repeat), with its requests where recorded). :func:`replay` runs the policy
against it: each measurement the policy chooses — (arm, level, repeat) — is answered with that
recorded run (its level row, requests and server metrics), and costs the run's own duration (the
level's measured window ``window_s``, else ``run_s`` for data that records none, such as the
synthetic studies of :mod:`specsweep.decide.draws`, a run a minute). Nothing is simulated that was
not measured: the policy may only ask for runs the study holds (``max_repeats`` is what was
recorded), and sentinel runs, which the policy does not choose, are kept and paid for as recorded.

Output: a :class:`Replayed` per study — the device time used against the full grid's, the decision
table of both (:func:`specsweep.decide.decisions.row_of`, the page's own rows), whether they match
(:func:`~specsweep.decide.decisions.same_decision`: class, arm, tie set, bracket), and every level
where the adaptive decision says the opposite of what the full grid's credible outcome there says
(:func:`contradictions`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from specsweep.decide import Profile, Recommendation
from specsweep.decide.decisions import DecisionRow, row_of, same_decision
from specsweep.decide.verdicts import DecisionKind
from specsweep.results.store import ResultSet
from specsweep.study.adaptive import Measured, Plan, Step, Stop, next_step, plan_for, recommendations

#: seconds a run costs where its level row records no measured window
RUN_S: float = 60.0
#: most policy steps one replay takes (a guard against a policy that never stops)
MAX_STEPS: int = 200

Key = tuple[str, int, int]


def _sentinel(levels: pd.DataFrame) -> pd.Series:
    return levels["sentinel"].fillna(False).astype(bool) if "sentinel" in levels else pd.Series(False, index=levels.index)


def run_seconds(row: pd.Series | dict[str, object], run_s: float = RUN_S) -> float:
    """A recorded run's cost in seconds: its measured window, else ``run_s``."""
    w = row.get("window_s") if hasattr(row, "get") else None
    try:
        value = float(w)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return run_s
    return value if math.isfinite(value) and value > 0 else run_s


@dataclass
class Recorded:
    """A recorded full-grid study: its result sets and, per (arm, level, repeat), the run's seconds."""

    sets: list[ResultSet]
    baseline: str
    seconds: dict[Key, float]
    #: seconds of the runs the policy does not choose (sentinels), paid by both the full grid and the replay
    fixed_s: float = 0.0

    @classmethod
    def of(cls, sets: Sequence[ResultSet], baseline: str = "baseline", run_s: float = RUN_S) -> Recorded:
        seconds: dict[Key, float] = {}
        fixed = 0.0
        for rs in sets:
            lv = rs.levels
            for (_, row), sent in zip(lv.iterrows(), _sentinel(lv)):
                if sent:
                    fixed += run_seconds(row, run_s)
                else:
                    seconds[(rs.arm, int(row["concurrency"]), int(row["repeat"]))] = run_seconds(row, run_s)
        return cls(list(sets), baseline, seconds, fixed)

    @property
    def levels(self) -> list[int]:
        return sorted({c for _, c, _ in self.seconds})

    @property
    def full_s(self) -> float:
        return sum(self.seconds.values()) + self.fixed_s

    def max_repeats(self, arm: str, level: int) -> int:
        """How many runs of ``arm`` at ``level`` the study holds, numbered 0, 1, … (a gap ends them)."""
        n = 0
        while (arm, level, n) in self.seconds:
            n += 1
        return n

    def subset(self, taken: set[Key]) -> list[ResultSet]:
        """The result sets holding only the runs ``taken`` (and every sentinel run); arms with none left out."""
        out = []
        for rs in self.sets:
            keep = self._keep(rs.levels, rs.arm, taken, sentinels=True)
            if not keep.any() or not (keep & ~_sentinel(rs.levels)).any():
                continue
            meta = rs.meta.model_copy(deep=True)
            levels = rs.levels[keep].reset_index(drop=True)
            meta.sweep.concurrency = sorted({int(c) for c in levels["concurrency"]}) if meta.sweep.concurrency else None
            frames = {name: (f[self._keep(f, rs.arm, taken)].reset_index(drop=True) if f is not None else None)
                      for name, f in (("requests", rs.requests), ("server_metrics", rs.server_metrics))}
            out.append(ResultSet(rs.path, meta, levels, frames["requests"], frames["server_metrics"], list(rs.notes)))
        return out

    def _keep(self, frame: pd.DataFrame, arm: str, taken: set[Key], sentinels: bool = False) -> pd.Series:
        keys = [(arm, int(c), int(r)) in taken for c, r in zip(frame["concurrency"], frame["repeat"])]
        keep = pd.Series(keys, index=frame.index, dtype=bool)
        return keep | _sentinel(frame) if sentinels else keep


@dataclass
class Replayed:
    """One replayed study: time used and the full grid's, both decision tables, what matched."""

    name: str
    spent_s: float
    full_s: float
    full: list[DecisionRow]
    adaptive: list[DecisionRow]
    stop: Stop
    steps: list[Step] = field(default_factory=list)
    #: per profile, the levels where the adaptive decision says the opposite of the full grid's credible outcome
    contradicted: dict[str, list[int]] = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return self.spent_s / self.full_s if self.full_s else math.nan

    @property
    def matches(self) -> bool:
        return all(same_decision(a, b) for a, b in zip(self.full, self.adaptive))

    @property
    def contradicts(self) -> bool:
        return any(self.contradicted.values())


def stance(row: DecisionRow, c: int) -> int:
    """What a decision says about level ``c``: +1 speculation on, −1 off (keep off, or beyond its
    crossover), 0 no claim (no measurable difference, not established)."""
    d = row.decision
    if d == DecisionKind.ENABLE:
        return 1
    if d == DecisionKind.KEEP_OFF:
        return -1
    if d in (DecisionKind.ENABLE_UP_TO, DecisionKind.ENABLE_FROM) and row.x is not None:
        below = 1 if d == DecisionKind.ENABLE_UP_TO else -1
        return below if c < row.x else -below if c > row.x else 0
    return 0


def contradictions(adaptive: DecisionRow, full: Recommendation, arm: str | None) -> list[int]:
    """Levels where ``adaptive`` turns speculation on (off) and the full grid's judged outcome of the
    same arm is a credible loss (gain)."""
    if arm is None or full.levels.empty:
        return []
    lv = full.levels[full.levels["arm"] == arm]
    out = []
    for c, o in zip(lv["concurrency"], lv["outcome"]):
        s = stance(adaptive, int(c))
        if (s > 0 and o == "loss") or (s < 0 and o == "gain"):
            out.append(int(c))
    return out


def _controls(sets: Sequence[ResultSet]) -> list[str]:
    return [rs.arm for rs in sets if rs.meta.control]


def replay_plan(rec: Recorded, profiles: Sequence[Profile], **kw: object) -> Plan:
    """The policy's plan for a recorded study: its levels, arms, controls and recorded runs."""
    arms = [rs.arm for rs in rec.sets]
    # before anything is measured a run is guessed to take the full grid's mean run (as a study file's
    # rough duration guesses it); measured durations replace the guess level by level
    kw.setdefault("prior_cost_s", sum(rec.seconds.values()) / max(len(rec.seconds), 1))
    return plan_for(rec.levels, rec.baseline, arms, _controls(rec.sets), profiles, rec.max_repeats, **kw)


def replay(rec: Recorded, profiles: Sequence[Profile], name: str = "study", **kw: object) -> Replayed:
    """Run the adaptive policy against ``rec`` (see the module docstring); ``kw`` go to the :class:`Plan`
    (``budget_s`` defaults to the full grid's time)."""
    kw.setdefault("budget_s", rec.full_s)
    plan = replay_plan(rec, profiles, **kw)
    measured = Measured()
    taken: set[Key] = set()
    steps: list[Step] = []
    outcome: Step | Stop = Stop("exhausted", "no step taken")
    for _ in range(MAX_STEPS):
        outcome = next_step(rec.subset(taken), plan, measured)
        if isinstance(outcome, Stop):
            break
        steps.append(outcome)
        for ch in outcome.choices:
            key = (ch.arm, ch.level, ch.repeat)
            taken.add(key)
            measured.add(ch.arm, ch.level, rec.seconds[key])
    if not isinstance(outcome, Stop):
        outcome = Stop("exhausted", f"stopped after {MAX_STEPS} steps")
    if not taken:
        raise ValueError(f"{name}: the policy measured nothing ({outcome.detail}); raise budget_s")
    _, full_recs = recommendations(rec.sets, plan)
    _, ad_recs = recommendations(rec.subset(taken), plan)
    full_rows, ad_rows = [row_of(r) for r in full_recs], [row_of(r) for r in ad_recs]
    contradicted = {r.profile.name: contradictions(a, r, ar.judged_arm)
                    for a, r, ar in zip(ad_rows, full_recs, ad_recs)}
    return Replayed(name, measured.spent_s + rec.fixed_s, rec.full_s, full_rows, ad_rows, outcome, steps, contradicted)
