"""The verdict section's text blocks: key numbers, warnings, curve sentences, shared lines."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.decide import Recommendation
from specsweep.decide.claims import join_and
from specsweep.decide.text import aggregate_word, basis_suffix, deciding_word, tested_bracket
from specsweep.markup import md_text
from specsweep.report.display import _band, _fmt, _pct_or_dash
from specsweep.report.warnings import top_warnings, workload_caveat


def key_numbers(comp: Comparison) -> pd.DataFrame:
    """Per spec arm and shared concurrency: aggregate and per-user speed of both arms, Δ% and its band.

    "fitted" is the delta curve's value at the level and the band its 95 % simultaneous band (see the
    definitions); "—" where no curve could be fitted.
    """
    rows = []
    um = comp.user_metric
    for arm in comp.spec_arms:
        agg, usr = comp.delta_rows(arm, "output_tok_s"), comp.delta_rows(arm, um)
        for c, a in sorted(agg.items()):
            row: dict[str, Any] = {
                "arm": arm, "concurrency": int(c),  # the short name: the label is given once, in Setup
                "aggregate baseline (tok/s)": _fmt(float(a["baseline_value"])),
                "aggregate arm (tok/s)": _fmt(float(a["arm_value"])),
                "aggregate Δ%": _pct_or_dash(a["delta_pct"]),
                "aggregate Δ% fitted": _pct_or_dash(a["fit_delta_pct"]),
                "aggregate Δ 95% band": _band(a["ci_low_pct"], a["ci_high_pct"]),
            }
            u = usr.get(c)
            if u is not None:
                row.update({
                    "per-user baseline (tok/s)": _fmt(float(u["baseline_value"])),
                    "per-user arm (tok/s)": _fmt(float(u["arm_value"])),
                    "per-user Δ%": _pct_or_dash(u["delta_pct"]),
                    "per-user Δ% fitted": _pct_or_dash(u["fit_delta_pct"]),
                    "per-user Δ 95% band": _band(u["ci_low_pct"], u["ci_high_pct"]),
                })
            rows.append(row)
    return pd.DataFrame(rows)


def _crossover_line(comp: Comparison, arm: str) -> str:
    """The aggregate delta curve of an arm in a sentence: where it stands or crosses."""
    line = _curve_sentence(comp, arm)
    # the figures themselves stand in each profile's headline and the key numbers, not here again
    return line


def _curve_sentence(comp: Comparison, arm: str) -> str:
    """One sentence on the aggregate delta curve of an arm: its credible crossovers, or where it stands."""
    label = md_text(arm)  # the short name; the label is given once, in Setup
    agg = aggregate_word(comp.aggregate_basis)
    if arm in comp.controls:
        return _control_curve_sentence(comp, arm, agg)
    cx = comp.crossover(arm, "output_tok_s")
    if len(cx):
        parts = []
        for _, c in cx.iterrows():
            way = "lower" if c.direction == "gain_to_loss" else "higher"
            lo, hi = tested_bracket(comp.shared_levels(arm), float(c.crossover_concurrency))
            parts.append(f"credibly {way} than the baseline's above about **{c.crossover_concurrency:.0f}** concurrent "
                         f"requests (the fitted delta curve crosses 0 between the tested {lo} and {hi})")
        return f"{label}'s {agg} is " + "; then ".join(parts) + "."
    rows = comp.delta(arm, "output_tok_s")
    if rows.empty:
        return ""
    unshared = comp.unshared_levels(arm)
    where = ("every level both arms measured" if any(unshared.values()) else "every tested level")
    cred = rows["credible"].to_numpy()
    span = f"({rows['delta_pct'].min():+.0f}% to {rows['delta_pct'].max():+.0f}%)"
    if (cred > 0).all():
        return f"{label}'s {agg} is credibly above the baseline's at {where} {span}."
    if (cred < 0).all():
        return f"{label}'s {agg} is credibly below the baseline's at {where} {span}."
    sure = [str(int(c)) for c in rows.loc[cred != 0, "concurrency"]]
    return (f"{label}'s aggregate Δ{basis_suffix(comp.aggregate_basis)} ranges {span[1:-1]}, but it is credibly different from the baseline's "
            + (f"only at {', '.join(sure)}" if sure else "at no level") + ", so no crossover is claimed.")


def _control_curve_sentence(comp: Comparison, arm: str, agg: str) -> str:
    """A control arm's aggregate Δ in a sentence: the noise floor it measures (it is the baseline
    measured again), never a gain, a loss or a crossover."""
    rows = comp.delta(arm, "output_tok_s")
    if rows.empty:
        return ""
    lo, hi = float(rows["delta_pct"].min()), float(rows["delta_pct"].max())
    span = f"{lo:+.0f}%" if f"{lo:+.0f}" == f"{hi:+.0f}" else f"{lo:+.0f}% to {hi:+.0f}%"
    return (f"The control arm {md_text(arm)} (configured like the baseline) differs from it by {span} in {agg} — "
            "this machine's run-to-run noise, the floor every other arm's band is held to.")


#: workload kinds whose content is synthetic: a drafter's acceptance on them says little about real traffic
#: (``fixed-ids``: published reference data measured with fixed token IDs)
def verdict_markdown(comp: Comparison, recs: Sequence[Recommendation]) -> str:
    """The report's opening: top warnings, one line per profile, then each arm's aggregate curve in a sentence."""
    lines = ["## Verdict", ""]
    warnings = top_warnings(comp)
    caveat = workload_caveat(comp)
    if caveat:
        warnings.append(caveat)
    if warnings:
        lines += warnings + [""]
    for r in recs:
        lines.append(f"- **{md_text(r.profile.name)}** — {r.headline}")
    lines.append("")
    for arm in comp.spec_arms:
        line = _crossover_line(comp, arm)
        if line:
            lines.append(line)
    return "\n".join(lines)


def shared_lines(recs: Sequence[Recommendation]) -> list[str]:
    """Reasons, caveats and next experiments that every profile's recommendation carries (shown once)."""
    if len(recs) < 2:
        return []
    def items(r: Recommendation) -> list[str]:
        return list(r.caveats) + list(r.next_experiments) + list(r.reasons)
    first = items(recs[0])
    return [x for x in dict.fromkeys(first) if all(x in items(r) for r in recs[1:])]


def shared_markdown(comp: Comparison, recs: Sequence[Recommendation], refer: Mapping[str, str] | None = None) -> str:
    """What applies to every profile, said once: shared caveats, reasons and next experiments (those in
    ``refer`` replaced by their reference, :func:`answered_by_whatif`)."""
    shared = shared_lines(recs)
    if not shared:
        return ""
    first = recs[0]
    caveats = [c for c in first.caveats if c in shared]
    reasons = [r for r in first.reasons if r in shared]
    experiments = list(dict.fromkeys((refer or {}).get(e, e) for e in first.next_experiments if e in shared))
    lines = ["### For every profile", ""]
    if reasons:
        lines += ["**Findings**", ""] + [f"- {r}" for r in reasons] + [""]
    if caveats:
        lines += ["**Caveats**", ""] + [f"- {c}" for c in caveats] + [""]
    if experiments:
        lines += ["**Next experiments**", ""] + [f"{i}. {e}" for i, e in enumerate(experiments, start=1)]
    return "\n".join(lines)


#: the server settings a what-if next experiment varies, by the advice flags that set the same thing
_WHATIF_QUESTION: dict[str, tuple[str, ...]] = {
    "max_running_requests": ("--max-running-requests", "--max-num-seqs", "--parallel"),
    "max_total_num_tokens": ("--mem-fraction-static", "--gpu-memory-utilization", "--set"),
}


def answered_by_whatif(recs: Sequence[Recommendation], whatif_next: Mapping[str, Any] | None) -> dict[str, str]:
    """{advice sentence: its reference}: the profiles' configuration advice for the arm and setting the
    what-if section's next experiment already answers (one next experiment per question, the
    what-if's where it has one — it predicts the setting with a band)."""
    if not whatif_next or not whatif_next.get("sentence"):
        return {}
    arm, setting = str(whatif_next.get("arm")), dict(whatif_next.get("setting") or {})
    flags = {f for key in setting for f in _WHATIF_QUESTION.get(key, ())}
    ref = (f"For {md_text(arm)}'s {'cap' if 'max_running_requests' in setting else 'memory'} question, the next "
           "experiment is the what-if section's (it predicts the setting, with a band).")
    return {c.sentence: ref for r in recs for c in r.claims
            if c.kind == "advice" and c.arm == arm and c.argv and c.argv[0] in flags}


#: how the objectives' own reasons begin (decide.sentences.objective_reasons)
_OBJECTIVE_NOTE = re.compile(r"(For batch or offline work|Under an SLO, what counts|Balanced:|Latency-sensitive use)")
#: topics said once however many lines they stand for
_SINGULAR = frozenset({"aggregate Δ with its band", "note on what the objective weighs"})


def _plural(word: str, n: int) -> str:
    return word if n == 1 else word + "s"


def shared_topics(rec: Recommendation, lines: Sequence[str]) -> str:
    """What ``lines`` of ``rec`` (printed under an earlier profile) are, in a phrase: 'the finding on
    aggregate throughput, the drift caveat and the next experiment' — the reference that stands in
    for them, naming what they say rather than how many there are."""
    found: list[str] = []  # deciding words of the findings, in order
    other: dict[str, int] = {}  # 'caveat', 'next experiment', … → how many
    for line in lines:
        claim = next((c for c in rec.claims if c.sentence and c.sentence in line and c.kind != "experiment"), None)
        if line in rec.next_experiments:
            kind = "next experiment"
        elif line in rec.caveats:
            kind = "drift caveat" if "drift" in line.lower() else "caveat"
        elif line.startswith("Aggregate Δ"):
            kind = "aggregate Δ with its band"
        elif claim is not None and claim.kind in ("cap", "gauge", "advice"):
            kind = "cap finding"
        elif claim is not None and claim.metric:
            found.append(deciding_word(claim.metric, rec.aggregate_basis))
            continue
        else:
            kind = "note on what the objective weighs" if _OBJECTIVE_NOTE.match(line) else "finding"
        other[kind] = other.get(kind, 0) + 1
    words = list(dict.fromkeys(found))
    parts = [f"the {_plural('finding', len(words))} on {join_and(words)}"] if words else []
    order = ("aggregate Δ with its band", "note on what the objective weighs", "finding", "cap finding", "drift caveat",
             "caveat", "next experiment")
    parts += [f"the {k if k in _SINGULAR else _plural(k, other[k])}" for k in order if k in other]
    return join_and(parts)


def profile_sections(comp: Comparison, recs: Sequence[Recommendation],
                     refer: Mapping[str, str] | None = None) -> list[str]:
    """One Markdown section per profile with only what differs: lines every profile carries are in
    :func:`shared_markdown`; a line several (not all) carry is printed under the first of them, and a
    later one names what of its own stands there (:func:`shared_topics`) instead of repeating it. A
    next experiment in ``refer`` (:func:`answered_by_whatif`) is replaced by its reference."""
    shared = set(shared_lines(recs))
    shown: dict[str, str] = {}  # line -> the profile it was printed under
    out = []
    for rec in recs:
        lines = list(rec.reasons) + list(rec.caveats) + list(rec.next_experiments)
        earlier = [x for x in dict.fromkeys(lines) if x in shown and x not in shared]
        text = rec.to_markdown(omit=[*shared, *earlier], refer=refer)
        by_profile: dict[str, list[str]] = {}
        for x in earlier:
            by_profile.setdefault(shown[x], []).append(x)
        if by_profile:  # the profile's name makes each reference its own sentence (never a repeat)
            text += "\n\n" + " ".join(
                f"*Also for {md_text(rec.profile.name)} — {shared_topics(rec, xs)}, given under {md_text(p)} above.*"
                for p, xs in by_profile.items())
        for x in lines:
            shown.setdefault(x, rec.profile.name)
        out.append(text)
    return out
