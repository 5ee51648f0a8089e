"""End levels get their own say: an 'enable' (or 'keep off') is not carried over the lowest or highest
tested level where that level's own measurement points the other way.

Input: a comparison, the arm judged and its judged levels (:func:`specsweep.decide.judge.judge_levels`).
Output: :func:`unsettled_ends`, the end levels that unsettle the verdict (marked in the judged levels),
and :func:`end_headline`, the headline of a verdict they left not established.

Why: a polynomial's end point has the widest band and neighbours on one side only, so a loss at the
edge of the grid (or a gain) is smoothed into the rest of the range's result (docs/method.md, "How a
verdict is reached").
"""
from __future__ import annotations

import math

import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.curves import DeltaCurve, smallest_detectable_pct
from specsweep.decide.text import band_text, deciding_word
from specsweep.decide.verdicts import Verdict

#: the rule of an end level whose own measured delta points against the verdict
END_AGAINST: str = "end level: its own measured Δ points the other way"


def unsettled_ends(comp: Comparison, arm: str, judged: pd.DataFrame, verdict: Verdict) -> list[int]:
    """The end levels (lowest, highest) of an 'enable' — or a 'disable' with a loss — that are neutral
    while their own measured Δ of the metric that decided them lies on the other side of 0 by more than
    its own noise (one standard deviation of the level's ln-ratio); each is marked in ``judged``
    (``rule`` :data:`END_AGAINST`)."""
    if verdict == Verdict.DISABLE and not (judged["outcome"] == "loss").any():
        return []
    want = 1 if verdict == Verdict.ENABLE else -1
    out = []
    for i in sorted({0, len(judged) - 1}) if len(judged) > 2 else []:
        r = judged.iloc[i]
        row = comp.delta_rows(arm, str(r["decided_by"])).get(int(r["concurrency"]))
        if r["outcome"] != "neutral" or row is None or pd.isna(row.get("level_noise_ln", math.nan)):
            continue
        flip = -1 if row["better"] == "lower" else 1
        if want * flip * math.log1p(float(row["level_delta_pct"]) / 100) < -float(row["level_noise_ln"]):
            judged.loc[judged.index[i], "rule"] = END_AGAINST
            out.append(int(r["concurrency"]))
    return out


def end_headline(comp: Comparison, arm: str, label: str, criterion: str, judged: pd.DataFrame) -> str | None:
    """'Not established: … wins on … at …, but at the end level 128 its own measured Δ points the other
    way (…); repeat the end levels …' for a verdict :func:`unsettled_ends` left open; None otherwise."""
    ends = judged[judged["rule"] == END_AGAINST]
    if ends.empty:
        return None
    outs = judged["outcome"].tolist()
    way = "wins" if "gain" in outs else "loses"
    decisive = [int(c) for c, o in zip(judged["concurrency"], outs) if o in ("gain", "loss")]
    at = []
    for r in ends.itertuples():
        metric = str(judged.loc[judged["concurrency"] == r.concurrency, "decided_by"].iloc[0])
        metric = metric if comp.delta_rows(arm, metric) else "output_tok_s"
        row = comp.delta_rows(arm, metric).get(int(r.concurrency))
        curve = comp.curve(arm, metric)
        size = _detectable_at(curve, int(r.concurrency)) if curve is not None else math.nan
        at.append(f"at {r.concurrency} its own measured {deciding_word(metric, comp.aggregate_basis)} Δ points the other way "
                  f"({band_text(row)}; detectable there with 80% power: ±{size:.0f}%)")
    return (f"Not established: {label} {way} on {criterion} at concurrency {', '.join(map(str, decisive))}, but "
            f"{'; '.join(at)}. The fitted curve does not settle an end level: re-measure "
            f"{', '.join(str(c) for c in ends['concurrency'])} with more runs before relying on this.")


def _detectable_at(curve: DeltaCurve, c: int) -> float:
    """The smallest |Δ| (%) the band would call credible with 80 % power at level ``c`` of ``curve``."""
    cs = [int(x) for x in curve.concurrency]
    return smallest_detectable_pct(curve, at=cs.index(c)) if c in cs else math.nan
