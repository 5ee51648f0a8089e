"""The report's first screen: per profile the decision, its range, the deciding metric with its band
and how stable it is; beside it the verdict strip; then a short verdict in prose.

Everything here is built from the recommendations' claims (:mod:`specsweep.decide.claims`), so the first
screen, the prose and the Markdown summary (:mod:`specsweep.report.summary`) say what the
recommendation sections say, with the same numbers. Arms are named by their short name.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.decide import Recommendation
from specsweep.decide.caveats import DRIFT_NOT_EXCLUDED, arms_interleaved_in, control_bounds_drift, unguarded
from specsweep.decide.claims import Claim, join_and, pct
from specsweep.decide.decisions import row_of
from specsweep.decide.judge import carried_by_one, why_neutral
from specsweep.decide.text import aggregate_word, band_text, deciding_word
from specsweep.decide.verdicts import DecisionKind
from specsweep.markup import markdown_html, md_text


@dataclass(frozen=True)
class ScreenRow:
    """One profile's decision as the first screen shows it (strings are plain text, not yet escaped)."""

    profile: str
    #: the decision class
    kind: DecisionKind
    #: the X of 'enable up to / from X' (concurrent requests), None for the other decisions
    x: float | None
    #: the arm the decision is about (short name), None when no arm is recommended
    arm: str | None
    #: where to enable it (concurrency), '—' when nowhere
    enable_at: str
    #: the tested levels the profile judged
    tested: str
    #: the deciding metric and its measured Δ with the 95 % band, where it decides
    deciding_figure: str
    #: the deciding metric's name ('' where no one metric decides)
    deciding_metric: str
    #: how many of the judged levels are credible and the flip chance (the chance a rerun of the same design
    #: decides otherwise); the page-wide part, :func:`stability`, is said once under the table
    stability: str
    #: arms not credibly different from ``arm`` for this profile (``arm`` is the simplest of them)
    tied_with: tuple[str, ...] = ()
    #: what the figure is ('weakest fitted gain of the gains at 1, 4 and 16'; '' where it needs no note)
    deciding_note: str = ""
    #: the tested levels inside the range where it is enabled (concurrency)
    enable_levels: tuple[int, ...] = ()

    @property
    def deciding(self) -> str:
        """The first screen's deciding cell: the figure, and in brackets what it is."""
        return self.deciding_figure + (f" ({self.deciding_note})" if self.deciding_note else "")

    @property
    def decision(self) -> str:
        """The decision as the page prints it ('enable up to 37', 'keep off')."""
        return self.kind.words(self.x)

    def arm_text(self) -> str:
        """The arm cell: its short name, and the arms it is tied with (plain text)."""
        if not self.arm:
            return "—"
        return self.arm + (f" (tied with {', '.join(self.tied_with)})" if self.tied_with else "")


def stability(comp: Comparison) -> str:
    """Runs per level, where the noise comes from, and whether drift between arms was guarded against."""
    reps = comp.levels["n_repeats"].fillna(1)
    if comp.single_run():
        runs = "one run per level"
        noises = [c.noise for (a, m), c in comp.curves.items() if m == "output_tok_s"]
        if comp.assumed_noise_pct:
            checked = not any("too few to check" in n for n in noises)
            larger = any(n.startswith("the levels' scatter") for n in noises)
            noise = (f"noise larger than the assumed {comp.assumed_noise_pct:g}% (from the levels' scatter)" if larger else
                     f"noise assumed ({comp.assumed_noise_pct:g}% per run)"
                     + (", checked against the levels' scatter" if checked else ", too few levels to check it"))
        else:
            noise = "noise from the fitted curve's residuals"
    else:
        runs = f"{int(reps.min())}–{int(reps.max())} runs per level" if reps.min() != reps.max() else f"{int(reps.min())} runs per level"
        noise = "noise measured from the repeats"
    if comp.drift is not None:
        drift = "drift measured by sentinel runs"
    elif comp.controls:
        drift = ("drift bounded by a control arm" if control_bounds_drift(comp) else
                 "drift carried from a control arm measured before the arms (not bounded by it)")
    elif arms_interleaved_in(comp):
        drift = "arms interleaved"
    else:
        drift = "arms measured one after the other (drift not measured)"
    return f"{runs}; {noise}; {drift}"


def _verdict_claim(rec: Recommendation) -> Claim | None:
    return next((c for c in rec.claims if c.kind == "verdict"), None)


def _deciding(comp: Comparison, rec: Recommendation) -> tuple[str, str, str]:
    """(the deciding metric's name, its measured Δ and band where it decides): at the levels bounding X,
    or at the decisive level nearest to 0 (the weakest gain or loss), or the largest Δ when nothing is
    credible; ('', '—') or ('', 'see the levels') where no one metric decides."""
    claim = _verdict_claim(rec)
    if claim is None or rec.levels.empty:
        return "", "—", ""
    basis = comp.aggregate_basis  # the aggregate is named by the basis it is decided on
    word = deciding_word(claim.metric, basis)
    rows = comp.delta_rows(claim.arm, claim.metric)
    lv = rec.levels[rec.levels["arm"] == claim.arm]
    want = rec.decision.decisive_outcome
    if claim.bounds is not None and (claim.bounds[0] != claim.bounds[1] or want is None):
        # each bounding level on the metric the table says decided it (a latency gain by per-user speed)
        decided = dict(zip(lv["concurrency"].astype(int), lv["deciding_metric"].astype(str))) if "deciding_metric" in lv else {}

        def at(c: int, named: bool = True) -> str:
            m = decided.get(c, claim.metric)
            return (f"{deciding_word(m, basis)}: " if named else "") + f"{band_text(comp.delta_rows(claim.arm, m).get(c))} at {c}"

        lo, hi = claim.bounds
        same = decided.get(lo, claim.metric) == decided.get(hi, claim.metric)
        return word, at(lo) if lo == hi else f"{at(lo)} → {at(hi, named=not same)}", ""
    if want is not None:
        return _weakest(lv, want, basis)
    if rec.decision == DecisionKind.NO_DIFFERENCE and rows:
        c = max((c for c in rows if c in set(lv["concurrency"])), key=lambda c: abs(float(rows[c]["delta_pct"])), default=None)
        if c is not None:
            why = why_neutral(lv, c, rows[c], rec.profile.min_effect_pct, basis)
            return word, f"{word}: {band_text(rows[c])} at {c}", "largest Δ" + (f", {why}" if why else "")
    return "", "see the levels", ""


_PLURAL = {"gain": "gains", "loss": "losses"}


def _weakest(levels: pd.DataFrame, want: str, basis: str | None = None) -> tuple[str, str, str]:
    """(metric name, its Δ and band) at the decisive level (outcome ``want``) nearest to 0 (``basis``: the
    comparison's ``aggregate_basis``)."""
    decisive = levels[levels["outcome"] == want]
    if decisive.empty:
        return "", "—", ""
    r = decisive.loc[decisive["deciding_band"].index[decisive["margin"].abs().to_numpy().argmin()]]
    word = deciding_word(r["deciding_metric"], basis)
    # which levels it is the weakest of, and by what: the fitted margin, not the measured Δ quoted
    weakest = "weakest fitted gain" if want == "gain" else "smallest fitted loss"
    over = join_and([str(int(c)) for c in decisive["concurrency"]])
    return word, f"{word}: {r['deciding_band']} at {int(r['concurrency'])}", f"{weakest} of the {_PLURAL[want]} at {over}"


def _span_text(cs: Sequence[int], tested: Sequence[int]) -> str:
    """"1–16" where ``cs`` are three or more consecutive tested levels, else "32 and 64"."""
    i = [list(tested).index(c) for c in cs]
    if len(cs) > 2 and i == list(range(i[0], i[0] + len(cs))):
        return f"{cs[0]}–{cs[-1]}"
    return join_and([str(c) for c in cs])


def _within_slo(lv: pd.DataFrame, kind: DecisionKind, x: float | None, enable_at: str) -> tuple[str, tuple[int, ...]]:
    """(where to enable it, the tested levels inside that range): under an SLO only the levels where the
    arm meets it, and the range says where it does not — never 'enable, 1–128' over levels where
    the arm misses the SLO and gives up throughput."""
    cs = [int(c) for c in lv["concurrency"]] if not lv.empty else []
    inside = [c for c in cs if kind == DecisionKind.ENABLE or (x is not None and (
        c <= x if kind == DecisionKind.ENABLE_UP_TO else c >= x if kind == DecisionKind.ENABLE_FROM else False))]
    if not kind.enables or "arm_meets_slo" not in lv or lv["arm_meets_slo"].isna().all():
        return enable_at, tuple(inside)
    meets = {int(c) for c, ok in zip(lv["concurrency"], lv["arm_meets_slo"]) if ok is True or ok == 1}
    kept, missed = [c for c in inside if c in meets], [c for c in cs if c not in meets]
    if not missed:
        return enable_at, tuple(inside)
    if not kept:
        return f"— (misses the SLO at {_span_text(missed, cs)})", ()
    # a kept level where the arm is no better says so: 'enable at 1 and 2' must not read as a gain at 1
    same = [c for c, o in zip(lv["concurrency"], lv["outcome"]) if int(c) in kept and o == "neutral"] \
        if "outcome" in lv else []
    alike = f"no measurable difference at {_span_text([int(c) for c in same], cs)}; " if same and len(same) < len(kept) else ""
    return f"{_span_text(kept, cs)} ({alike}misses the SLO at {_span_text(missed, cs)})", tuple(kept)


def decision_rows(comp: Comparison, recs: Sequence[Recommendation]) -> list[ScreenRow]:
    """One :class:`ScreenRow` per recommendation, from its verdict claim."""
    out = []
    for rec in recs:
        claim = _verdict_claim(rec)
        kind = rec.decision
        lv = rec.levels[rec.levels["arm"] == (rec.arm or (claim.arm if claim else None))] if not rec.levels.empty else rec.levels
        cs = [int(c) for c in lv["concurrency"]] if not lv.empty else []
        tested = (f"{cs[0]}–{cs[-1]}" if len(cs) > 1 else str(cs[0])) if cs else "—"
        if kind == DecisionKind.ENABLE:
            enable_at = tested
        elif kind == DecisionKind.ENABLE_UP_TO and rec.up_to_concurrency is not None:
            enable_at = f"{cs[0]} to about {rec.up_to_concurrency:.0f}"
        elif kind == DecisionKind.ENABLE_FROM and rec.from_concurrency is not None:
            enable_at = f"about {rec.from_concurrency:.0f} to {cs[-1]}"
        else:
            enable_at = "—"
        enable_at, enable_levels = _within_slo(lv, kind, rec.decision_at, enable_at)
        credible = int((lv["outcome"] != "neutral").sum()) if not lv.empty else 0
        levels_note = f"{credible} of {len(cs)} levels credible" if cs else "no levels judged"
        lone = carried_by_one(lv) if not lv.empty else None
        if lone is not None:
            levels_note += f"; one level ({lone}) carries this verdict: re-measure it"
        if kind in (DecisionKind.ENABLE, DecisionKind.KEEP_OFF) and unguarded(comp):
            levels_note += f"; {DRIFT_NOT_EXCLUDED}"
        if rec.flip is not None:  # the chance a rerun of the same design decides otherwise (class or arm)
            levels_note += f"; {rec.flip.text()}"
        word, deciding, note = _deciding(comp, rec)
        row = row_of(rec)  # the class, arm, ties and X decisions.json and the console carry
        out.append(ScreenRow(profile=rec.profile.name, kind=row.decision, x=row.x, arm=row.arm or rec.judged_arm,
                             enable_at=enable_at, tested=tested, deciding_figure=deciding, deciding_note=note, deciding_metric=word,
                             stability=levels_note, tied_with=row.tied, enable_levels=enable_levels))
    return out


DECISION_COLUMNS: tuple[str, ...] = ("profile", "decision", "arm", "enable at", "tested", "deciding metric [95% band]",
                                     "how stable")


def decision_frame(comp: Comparison, recs: Sequence[Recommendation]) -> pd.DataFrame:
    """The decision table as a frame (plain text cells; :func:`specsweep.report.table` escapes them)."""
    return pd.DataFrame([[r.profile, r.decision, r.arm_text(), r.enable_at, r.tested, r.deciding, r.stability]
                         for r in decision_rows(comp, recs)], columns=list(DECISION_COLUMNS))


def decision_markdown(comp: Comparison, recs: Sequence[Recommendation]) -> str:
    """The decision table in Markdown, every cell escaped (profile names and arms are untrusted)."""
    lines = ["| " + " | ".join(DECISION_COLUMNS) + " |", "|" + "---|" * len(DECISION_COLUMNS)]
    for r in decision_rows(comp, recs):
        cells = [md_text(r.profile), f"**{md_text(r.decision)}**", md_text(r.arm_text()), md_text(r.enable_at),
                 md_text(r.tested), md_text(r.deciding), md_text(r.stability)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"*How stable, for every profile:* {md_text(stability(comp))}."]
    return "\n".join(lines)


def _strip_html(comp: Comparison, recs: Sequence[Recommendation]) -> str:
    """The verdict strip chart's HTML, or '' where the chart module has none yet (it comes with charts.verdict_strip)."""
    from specsweep.report import charts
    from specsweep.report.display import _render

    strip, frame = getattr(charts, "verdict_strip", None), getattr(charts, "verdict_strip_frame", None)
    if strip is None or frame is None:
        return ""
    chart = strip(frame(comp, recs), width=420)
    return _render(chart.to_dict())["text/html"] if chart is not None else ""


def first_screen_html(comp: Comparison, recs: Sequence[Recommendation]) -> str:
    """The decision table and, beside it, the verdict strip: the screen an operator acts on."""
    table = markdown_html(decision_markdown(comp, recs))
    chart = _strip_html(comp, recs)
    side = f'<div style="flex:1 1 420px;min-width:0">{chart}</div>' if chart else ""
    return ('<div class="specsweep-decision" style="display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start">'
            f'<div style="flex:1 1 560px;min-width:0;overflow-x:auto">{table}</div>{side}</div>')


def first_screen(comp: Comparison, recs: Sequence[Recommendation]) -> Any:
    """:func:`first_screen_html` as a display object."""
    from IPython.display import HTML

    return HTML(first_screen_html(comp, recs))


def _values(claim: Claim) -> str:
    return ", ".join(f"{pct(v)} at {c}" for c, v in zip(claim.levels, claim.values))


def verdict_prose(comp: Comparison, recs: Sequence[Recommendation]) -> str:
    """The verdict in a few sentences (Markdown): what each recommended arm does to aggregate throughput,
    each group of profiles with the same decision and deciding metric once (how stable it is stands under
    the decision table). Short names only."""
    lines: list[str] = []
    agg = aggregate_word(comp.aggregate_basis)
    arms = list(dict.fromkeys(c.arm for r in recs for c in r.claims if c.kind == "verdict" and c.arm))
    for arm in arms:
        claims = next((r.claims for r in recs if any(c.arm == arm and c.metric == "output_tok_s"
                                                      and c.kind in ("gain", "loss") for c in r.claims)), [])
        gain = next((c for c in claims if c.kind == "gain" and c.metric == "output_tok_s" and c.arm == arm), None)
        loss = next((c for c in claims if c.kind == "loss" and c.metric == "output_tok_s" and c.arm == arm), None)
        cross = next((c for c in claims if c.kind == "crossover" and c.arm == arm), None)
        parts = []
        if gain:
            parts.append(f"raises {agg} at {join_and([str(c) for c in gain.levels])} ({_values(gain)})")
        if loss:
            parts.append(f"lowers it at {join_and([str(c) for c in loss.levels])} ({_values(loss)})")
        if not parts:
            parts.append(f"changes {agg} credibly at no tested level")
        text = f"**{md_text(arm)}** " + " and ".join(parts)
        if cross and cross.bounds:
            text += f"; the fitted curve crosses 0 near {cross.at:.0f}, between the tested {cross.bounds[0]} and {cross.bounds[1]}"
        lines.append(text + ".")
    groups: dict[tuple[str, str, str, str], list[ScreenRow]] = {}
    for r in decision_rows(comp, recs):
        # a range an SLO narrowed is part of the decision: said beside it, not far below
        narrowed = r.enable_at if "SLO" in r.enable_at else ""
        groups.setdefault((r.decision, r.arm or "", r.deciding_metric, narrowed), []).append(r)
    for (decision, arm, metric, narrowed), rows in groups.items():
        who = join_and([md_text(r.profile) for r in rows])
        what = rows[0].kind.words(rows[0].x, arm=md_text(arm), about=True) if arm else decision
        what += f" at {md_text(narrowed)}" if narrowed else ""
        lines.append(f"{who}: **{what}**" + (f" (decided by {md_text(metric)})" if metric else "") + ".")
    lines += _why_they_differ(decision_rows(comp, recs))
    return "\n\n".join(lines)


def _why_they_differ(rows: Sequence[ScreenRow]) -> list[str]:
    """Where one profile keeps speculation off and another enables it: the reason beside the two
    decisions (what the first weighs, with its figure, that the others do not) — not far below."""
    on = [r for r in rows if r.kind.enables]
    off = [r for r in rows if r.kind == DecisionKind.KEEP_OFF and r.deciding_metric]
    if not on or not off:
        return []
    judged = join_and(sorted({md_text(r.deciding_metric) for r in on if r.deciding_metric})) or "other figures"
    return [f"Why {md_text(r.profile)} differs: it keeps speculation off on {md_text(r.deciding_figure)}, which "
            f"{join_and([md_text(o.profile) for o in on])} {'does' if len(on) == 1 else 'do'} not weigh "
            f"({'it judges' if len(on) == 1 else 'they judge'} {judged})." for r in off]
