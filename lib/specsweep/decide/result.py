"""What a recommendation is: its verdict and decision, bands of levels, reasons, caveats and next experiments."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from specsweep.decide.claims import Claim
from specsweep.decide.profiles import Profile
from specsweep.decide.text import _pct, deciding_word
from specsweep.decide.verdicts import DecisionKind, Outcome, Verdict, decision_class
from specsweep.markup import md_text


@dataclass
class Decision:
    """The judgement behind a recommendation, without its sentences: the verdict over the profile's
    range for the arm chosen, every candidate's judged levels, and X (concurrent requests) of an
    'enable up to / from X'."""

    verdict: Verdict
    arm: str
    judged: pd.DataFrame
    per_arm: dict[str, pd.DataFrame]
    up_to: float | None
    from_c: float | None
    #: candidate arms not credibly different from ``arm`` for this profile (``arm`` is the simplest of them)
    tied_with: list[str] = field(default_factory=list)

    @property
    def decision(self) -> DecisionKind:
        """The decision class the verdict comes to over ``arm``'s judged levels."""
        return decision_class(self.verdict, self.judged)


@dataclass
class Band:
    """Consecutive tested levels where an arm has the same outcome for a profile."""

    arm: str
    c_from: int
    c_to: int
    outcome: Outcome
    aggregate_delta_pct: tuple[float, float]
    user_delta_pct: tuple[float, float]
    sentence: str
    #: set when a rule (no successful requests, more failures, an SLO) decided the outcome rather
    #: than the profile's deltas
    rule: str | None = None


@dataclass(frozen=True)
class FlipChance:
    """How likely a rerun with the same design decides otherwise (:mod:`specsweep.decide.flip`): of
    ``resamples`` simulated reruns, ``flips`` gave another decision class or an arm outside the measured tie."""

    flips: int
    resamples: int

    @property
    def chance(self) -> float:
        """The estimated probability (0–1) that a rerun flips the decision."""
        return self.flips / self.resamples if self.resamples else math.nan

    def text(self) -> str:
        """As the page prints it: ``flip chance 3% (200 resamples)``."""
        return f"flip chance {self.chance * 100:.0f}% ({self.resamples} resamples)"


@dataclass
class Recommendation:
    """A verdict for one profile, with the evidence behind it."""

    profile: Profile
    verdict: Verdict
    #: the decision class the verdict comes to (:func:`specsweep.decide.verdicts.decision_class`)
    decision: DecisionKind
    arm: str | None
    up_to_concurrency: float | None
    from_concurrency: float | None
    headline: str
    bands: list[Band]
    reasons: list[str]
    caveats: list[str]
    next_experiments: list[str]
    #: one row per (arm, concurrency) in range: deltas, SLO status, outcome
    levels: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: candidate arms not credibly different from ``arm`` (the simplest of them is recommended; recommend.ties)
    tied_with: list[str] = field(default_factory=list)
    #: every finding the sentences state, with its numbers (see specsweep.decide.claims)
    claims: list[Claim] = field(default_factory=list)
    #: how likely a rerun of the same design decides otherwise; None where not estimated
    flip: FlipChance | None = None
    #: what the aggregate is where it is not wall-clock tok/s (``Comparison.aggregate_basis``), else None
    aggregate_basis: str | None = None

    @property
    def decision_at(self) -> float | None:
        """The X of 'enable up to X' or 'enable from X' (concurrent requests); None for other decisions."""
        return self.up_to_concurrency if self.up_to_concurrency is not None else self.from_concurrency

    @property
    def judged_arm(self) -> str | None:
        """The arm whose levels the decision rests on: the recommended one, else (keep off, no
        measurable difference) the one the verdict judged; None where no arm was judged."""
        if self.arm is not None:
            return self.arm
        verdict = next((c.arm for c in self.claims if c.kind == "verdict" and c.arm), None)
        if verdict is not None:
            return verdict
        return None if self.levels.empty else str(self.levels["arm"].iloc[0])

    @property
    def shown_metrics(self) -> set[str]:
        """Metrics whose Δ the recommendation's table shows beside the verdict."""
        if self.levels.empty:
            return set()
        shown = {"output_tok_s"}
        if "deciding_metric" in self.levels:
            shown |= set(map(str, self.levels["deciding_metric"]))
        return shown

    @property
    def next_experiment(self) -> str | None:
        return self.next_experiments[0] if self.next_experiments else None

    def to_markdown(self, omit: Sequence[str] = (), refer: Mapping[str, str] | None = None) -> str:
        """The recommendation as Markdown: headline, one row per level, reasons, caveats, next experiments.

        Lines in ``omit`` (shown once for every profile elsewhere) are left out; a next experiment in
        ``refer`` is replaced by its reference (the same question answered elsewhere on the page).
        """
        lines = [f"### {md_text(self.profile.name)}", "", f"**{self.headline}**", ""]
        if self.profile.description:
            lines += [f"*{md_text(self.profile.description)}*", ""]
        if not self.levels.empty and self.arm is not None or (not self.levels.empty and self.verdict == Verdict.DISABLE):
            lv = self.levels[self.levels["arm"] == self.judged_arm]
            lines += ["| concurrency | outcome | decided by | deciding Δ [95% band] | aggregate Δ [95% band] | per-user Δ |",
                      "|---|---|---|---|---|---|"]
            for r in lv.itertuples():
                decided = r.decided_by if isinstance(r.rule, str) else deciding_word(r.decided_by, self.aggregate_basis)
                deciding = getattr(r, "deciding_band", "n/a")
                lines.append(f"| {r.concurrency} | {r.outcome} | {decided} | {deciding} | {r.aggregate_band} | "
                             f"{_pct(r.user_delta_pct) if not math.isnan(r.user_delta_pct) else 'n/a'} |")
            lines.append("")
        if self.reasons:
            lines += ["**Why**", ""] + [f"- {r}" for r in self.reasons if r not in omit] + [""]
        caveats = [c for c in self.caveats if c not in omit]
        if caveats:
            lines += ["**Caveats for this profile**", ""] + [f"- {c}" for c in caveats] + [""]
        experiments = list(dict.fromkeys((refer or {}).get(e, e) for e in self.next_experiments if e not in omit))
        if experiments:
            lines += ["**Next experiment**", ""] + [f"{i}. {e}" for i, e in enumerate(experiments, start=1)]
        return "\n".join(lines)
