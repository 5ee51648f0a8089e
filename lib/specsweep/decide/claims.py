"""Claims: what a report's sentences assert, with the numbers behind them.

Every sentence of a recommendation that states a finding is rendered from a :class:`Claim`, which
carries the arm (by its short name), the metric, the tested levels it names, the measured Δ% at
each of them with their 95 % bands, whether the difference is credible, and the sentence itself.
:mod:`specsweep.report.consistency` checks a whole page's claims against their numbers (sign, credibility,
"agrees", levels that exist, the deciding metric shown, advice runnable on the server) before the
page is written; :mod:`specsweep.report.summary` builds the Markdown summary from the same claims.

Units: ``values`` and ``bands`` are percentages (Δ% of the arm against the baseline, or for
``kind="gauge"`` and ``kind="cap"`` requests running at once); ``levels``, ``at`` and ``bounds``
are concurrency levels (requests).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Literal

from specsweep.decide.verdicts import DecisionKind

#: what a claim asserts
ClaimKind = Literal[
    "gain",           # credibly better on ``metric`` at ``levels``
    "loss",           # credibly worse on ``metric`` at ``levels``
    "no-difference",  # not credibly different at ``levels`` (within the band or the minimum effect)
    "tie",            # two arms not credibly different from each other
    "crossover",      # the fitted delta curve crosses 0 at ``at``, between the tested ``bounds``
    "verdict",        # a profile's decision (``decision``), decided by ``metric``
    "cap",            # the arm's running-request cap against the levels it lost
    "gauge",          # the server's own gauge against the estimate said before it (``agrees``)
    "advice",         # a configuration change to try: ``argv`` on ``server``
    "experiment",     # a next measurement: ``levels`` to measure, targeting ``metric``
]

#: metrics where a lower value is better (a negative Δ% is an improvement)
LOWER_IS_BETTER_PREFIXES: tuple[str, ...] = ("ttft_", "e2e_", "tpot_", "itl_")


def lower_is_better(metric: str) -> bool:
    """True for waits (TTFT, end-to-end, TPOT, ITL): a shorter one is better."""
    return metric.startswith(LOWER_IS_BETTER_PREFIXES)


@dataclass(frozen=True)
class Claim:
    """One assertion of a page, with its numbers.

    ``values[i]`` is the measured Δ% at ``levels[i]`` and ``bands[i]`` its 95 % band (NaN, NaN when
    none); ``credible`` says whether every one of them is credible (its band excludes 0 and it
    exceeds the profile's minimum effect). ``sentence`` is the text the page shows for it.
    """

    kind: ClaimKind
    arm: str
    metric: str = ""
    levels: tuple[int, ...] = ()
    values: tuple[float, ...] = ()
    bands: tuple[tuple[float, float], ...] = ()
    credible: bool = False
    sentence: str = ""
    #: the profile the claim belongs to ("" for page-wide claims)
    profile: str = ""
    #: verdict claims: the decision class (its X, where it has one, is ``at``)
    decision: DecisionKind | None = None
    #: a point that need not be a tested level (crossover, "up to"), concurrency
    at: float | None = None
    #: the tested levels bounding ``at`` (low, high)
    bounds: tuple[int, int] | None = None
    #: gauge claims: whether the gauge's numbers agree with the estimate stated before
    agrees: bool | None = None
    #: advice claims: the server arguments to run, and the server kind they are for
    argv: tuple[str, ...] = ()
    server: str = ""
    #: anything else a check needs (gauge: ``gauge_max``, ``estimate``, ``cap``)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def better(self) -> str:
        return "lower" if lower_is_better(self.metric) else "higher"

    def improved(self) -> list[bool]:
        """Per level: whether the measured Δ% is in the metric's better direction."""
        flip = -1.0 if lower_is_better(self.metric) else 1.0
        return [flip * v > 0 for v in self.values]


def half_up(x: float, places: int) -> Decimal:
    """``x`` rounded half away from zero (12.5 → 13, not Python's 12), from its shortest repr."""
    q = Decimal(1).scaleb(-places)
    return Decimal(repr(float(x))).quantize(q, rounding=ROUND_HALF_UP)


def pct(x: float) -> str:
    """A Δ% as the page writes it: '+13%' from 9.5 % up (halves away from zero), '+4.2%' below."""
    if math.isnan(x):
        return "n/a"
    d = half_up(x, 0) if abs(x) >= 9.5 else half_up(x, 1)
    sign = "-" if d < 0 else "+"  # a figure that rounds to zero keeps the sign of its side
    if d == 0:
        sign = "-" if x < 0 else "+"
    return f"{sign}{abs(d)}%"


def band(lo: float, hi: float) -> str:
    """'[+3%, +21%]', or '' when there is no band."""
    if math.isnan(lo) or math.isnan(hi):
        return ""
    return f"[{pct(lo)}, {pct(hi)}]"


def join_and(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def delta_claim(kind: ClaimKind, arm: str, metric: str, rows: Sequence[dict[str, Any]], *, credible: bool,
                sentence: str = "", profile: str = "") -> Claim:
    """A gain / loss / no-difference claim from delta rows (:meth:`Comparison.delta_rows` values).

    ``values`` are the measured Δ%, except where a gain's or loss's measured Δ points the other
    way than its credible fitted curve (one noisy level on a curve fitted through all): there the
    fitted Δ, which the judgement rests on, and ``extra['measured']`` keeps every measured one.
    """
    measured = tuple(float(r["delta_pct"]) for r in rows)
    values = list(measured)
    if kind in ("gain", "loss"):
        flip = -1.0 if lower_is_better(metric) else 1.0
        want = 1.0 if kind == "gain" else -1.0
        for i, r in enumerate(rows):
            fit = r.get("fit_delta_pct")
            if flip * want * values[i] <= 0 and fit is not None and not math.isnan(float(fit)):
                values[i] = float(fit)
    return Claim(kind=kind, arm=arm, metric=metric,
                 levels=tuple(int(r["concurrency"]) for r in rows), values=tuple(values),
                 bands=tuple((float(r["ci_low_pct"]), float(r["ci_high_pct"])) for r in rows),
                 credible=credible, sentence=sentence, profile=profile, extra={"measured": measured})


def value_text(claim: Claim, i: int) -> str:
    """The figure of level ``i`` as the page writes it: '+4.0%', or '+4.1% (fitted curve; measured
    -2.0%)' where the claim quotes the fitted Δ because the measured one points the other way."""
    v = claim.values[i]
    m = claim.extra.get("measured", claim.values)[i]
    return pct(v) if v == m else f"{pct(v)} (fitted curve; measured {pct(m)})"


def with_sentence(claim: Claim, sentence: str) -> Claim:
    """The same claim with its rendered sentence."""
    from dataclasses import replace

    return replace(claim, sentence=sentence)
