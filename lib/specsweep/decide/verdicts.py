"""The decision's words: a level's outcome, the rules' verdict, and the decision an operator acts on.

Three layers of one judgement, each named once here:

- :data:`Outcome` — one tested level: ``gain``, ``loss`` or ``neutral``;
- :class:`Verdict` — what the rules conclude over a profile's range (``Recommendation.verdict``);
- :class:`DecisionKind` — the decision class an operator acts on. Its value is the word the code,
  ``reports/decisions.json`` and the console use; :meth:`DecisionKind.words` is what the first
  screen and the Markdown summary print. :func:`decision_class` is the one mapping from a verdict to it.

The invariant: a ``disable`` verdict is ``keep off`` where the arm lost a level and ``no measurable
difference`` where it lost none; ``mixed`` and ``no_verdict`` are both ``not established``.
"""
from __future__ import annotations

from enum import StrEnum
from typing import Literal

import pandas as pd

Outcome = Literal["gain", "loss", "neutral"]


class Verdict(StrEnum):
    """What the judging rules conclude over a profile's range (see :mod:`specsweep.decide`)."""

    ENABLE = "enable"
    DISABLE = "disable"
    ENABLE_UP_TO = "enable_up_to"
    ENABLE_FROM = "enable_from"
    MIXED = "mixed"
    NO_VERDICT = "no_verdict"


class DecisionKind(StrEnum):
    """The decision class: what an operator does with speculation for one profile.

    The value is the word ``reports/decisions.json`` and the code use; ``X`` stands for the
    crossover (concurrent requests), which the page prints as a number (:meth:`words`).
    """

    ENABLE = "enable"
    ENABLE_UP_TO = "enable up to X"
    ENABLE_FROM = "enable from X"
    KEEP_OFF = "keep off"
    NO_DIFFERENCE = "no measurable difference"
    NOT_ESTABLISHED = "not established"

    @property
    def enables(self) -> bool:
        """Whether the decision turns speculation on somewhere."""
        return self in (DecisionKind.ENABLE, DecisionKind.ENABLE_UP_TO, DecisionKind.ENABLE_FROM)

    @property
    def decisive_outcome(self) -> Outcome | None:
        """The level outcome that makes the decision where it holds over the whole range: ``gain``
        for enable, ``loss`` for keep off; None for a decision with a crossover or none."""
        return {DecisionKind.ENABLE: "gain", DecisionKind.KEEP_OFF: "loss"}.get(self)  # type: ignore[return-value]

    def words(self, x: float | None = None, *, arm: str = "", about: bool = False) -> str:
        """The decision as the page prints it: 'keep off', 'enable up to 37' (``x``, the crossover in
        concurrent requests, rounded; 'X' without one). ``arm`` (already escaped for where it goes)
        is named after 'enable' ('enable mtp up to 37'); ``about`` says the crossover is approximate
        ('up to about 37')."""
        if not self.enables:
            return self.value
        head = f"enable {arm}" if arm else "enable"
        point = _POINT.get(self)
        if point is None:
            return head
        return f"{head} {point} {'about ' if about else ''}{'X' if x is None else f'{x:.0f}'}"


#: the preposition before the crossover of the decisions that have one
_POINT: dict[DecisionKind, str] = {DecisionKind.ENABLE_UP_TO: "up to", DecisionKind.ENABLE_FROM: "from"}

#: the decision class of each verdict but ``disable``, whose class depends on whether a level was lost
_CLASS: dict[Verdict, DecisionKind] = {
    Verdict.ENABLE: DecisionKind.ENABLE, Verdict.ENABLE_UP_TO: DecisionKind.ENABLE_UP_TO,
    Verdict.ENABLE_FROM: DecisionKind.ENABLE_FROM, Verdict.MIXED: DecisionKind.NOT_ESTABLISHED,
    Verdict.NO_VERDICT: DecisionKind.NOT_ESTABLISHED,
}


def decision_class(verdict: Verdict | str, judged: pd.DataFrame | None) -> DecisionKind:
    """The decision class of a verdict over the judged levels of its arm (``outcome`` per level):
    ``disable`` is ``keep off`` where a level was lost, ``no measurable difference`` where none was."""
    verdict = Verdict(verdict)
    if verdict is not Verdict.DISABLE:
        return _CLASS[verdict]
    lost = judged is not None and not judged.empty and bool((judged["outcome"] == "loss").any())
    return DecisionKind.KEEP_OFF if lost else DecisionKind.NO_DIFFERENCE
