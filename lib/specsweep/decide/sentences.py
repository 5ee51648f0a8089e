"""The sentences of a recommendation, rendered from its decision and claims: the headline, the reasons
(throughput, per-user speed, the objective, SLOs, ties) and the waits a latency verdict weighs.

Each sentence is written once, complete; a claim (:mod:`specsweep.decide.claims`) carries the one it
states. The caps' sentences are in :mod:`specsweep.decide.caps`, the caveats in :mod:`specsweep.decide.caveats`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import pandas as pd

from specsweep.analyze.compare import ESTIMATED_WAIT, Comparison, info
from specsweep.analyze.curves import smallest_detectable_pct
from specsweep.decide.caps import cap_sentences
from specsweep.decide.caveats import drift_sentences
from specsweep.decide.claims import Claim, delta_claim, join_and, pct, value_text, with_sentence
from specsweep.decide.ends import end_headline
from specsweep.decide.judge import _levels_of, _lookup, _meets, _sign, _slo_checks, _wait_size, wait_metrics
from specsweep.decide.profiles import Profile
from specsweep.decide.result import Band, Decision
from specsweep.decide.text import (
    WAIT_WORDS,
    _levels_text,
    _num,
    _range_pct,
    aggregate_word,
    band_text,
    basis_suffix,
    deciding_word,
    tested_bracket,
)
from specsweep.decide.ties import first_difference, tie_sentence
from specsweep.decide.verdicts import Verdict, decision_class
from specsweep.markup import md_text


def _delta_claims(comp: Comparison, arm: str, metric: str, judged: pd.DataFrame, min_effect: float,
                  profile: str = "") -> tuple[list[dict], list[int], list[Claim]]:
    """The metric's delta rows at the judged levels, their signs, and one claim per sign present
    (gain: credibly better; loss: credibly worse; no-difference: neither), sentences not yet set."""
    d = comp.delta(arm, metric)
    rows = [r for r in d.to_dict("records") if r["concurrency"] in set(judged["concurrency"])]
    signs = [_sign(r, min_effect) for r in rows]
    claims = []
    for s, kind in ((1, "gain"), (-1, "loss"), (0, "no-difference")):
        part = [r for r, x in zip(rows, signs) if x == s]
        if part:
            claims.append(delta_claim(kind, arm, metric, part, credible=s != 0, profile=profile))  # type: ignore[arg-type]
    return rows, signs, claims


def _span(lo: float, hi: float) -> str:
    """'+12% to +57%', or '+30%' when both ends print the same."""
    return pct(lo) if pct(lo) == pct(hi) else f"{pct(lo)} to {pct(hi)}"


def _at_list(claim: Claim) -> str:
    return ", ".join(f"{value_text(claim, i)} at {c}" for i, c in enumerate(claim.levels))


def _throughput_sentence(comp: Comparison, arm: str, label: str, judged: pd.DataFrame, min_effect: float,
                         profile: str = "") -> tuple[str, list[Claim]]:
    """The sentence on aggregate throughput at the judged levels, and its claims (each with its clause;
    the crossovers with their own sentence)."""
    _, _, claims = _delta_claims(comp, arm, "output_tok_s", judged, min_effect, profile)
    # the figure the verdict reads: wall-clock tok/s, or the basis the comparison decides on
    agg = "aggregate output throughput" + basis_suffix(comp.aggregate_basis)
    clauses = {"gain": "credibly raises {it} ({})",
               "loss": "credibly lowers {it} ({})",
               "no-difference": "does not credibly change {it} ({}: within the band or ±" + f"{min_effect:g}%)"}
    out = []
    for i, c in enumerate(claims):
        it = "it" if i else agg
        out.append(with_sentence(c, clauses[c.kind].format(_at_list(c), it=it)))
    text = f"{label} " + (join_and([c.sentence for c in out])
                          or f"was not compared on {aggregate_word(comp.aggregate_basis)}") + "."
    cx_claims = []
    for _, r in comp.crossover(arm, "output_tok_s").iterrows():
        # the bracket is the tested levels around X, as everywhere X is named (not the credible levels
        # the search ran between, which may have a neutral level inside)
        lo, hi = tested_bracket(comp.shared_levels(arm), float(r.crossover_concurrency))
        sentence = (f"The aggregate crossover is at about {r.crossover_concurrency:.0f} concurrent requests "
                    f"(where the fitted delta curve crosses 0, between the tested {lo} and {hi}).")
        text += " " + sentence
        cx_claims.append(Claim(kind="crossover", arm=arm, metric="output_tok_s", levels=(int(r.c_low), int(r.c_high)),
                               values=(float(r.delta_low_pct), float(r.delta_high_pct)), credible=True,
                               sentence=sentence, at=float(r.crossover_concurrency), bounds=(lo, hi), profile=profile))
    return text, out + cx_claims


def _user_sentence(comp: Comparison, arm: str, label: str, judged: pd.DataFrame, min_effect: float,
                   profile: str = "") -> tuple[str, list[Claim]]:
    """The sentence on per-user (per-request) speed at the judged levels, and its claims."""
    minfo = info(comp.user_metric)
    rows, signs, claims = _delta_claims(comp, arm, comp.user_metric, judged, min_effect, profile)
    if not rows:
        return "", []
    vals = [v for c in claims for v in c.values]  # a gain's figures point its way (see delta_claim)
    lo, hi = min(vals), max(vals)
    what = minfo.label[0].lower() + minfo.label[1:]
    where = "every level both arms measured" if any(comp.unshared_levels(arm).values()) else "every tested level"
    if len(claims) == 1:
        c = claims[0]
        if c.kind == "gain":
            text = f"{label} makes each request credibly faster at {where}: {what} {_span(lo, hi)}."
        elif c.kind == "loss":
            text = f"{label} makes each request credibly slower at {where}: {what} {_span(lo, hi)}."
        else:
            text = (f"{label}'s {what} differs by {_span(lo, hi)}, but at no level credibly "
                    f"(within the band or ±{min_effect:g}%).")
        return text, [with_sentence(c, text)]
    word = {"gain": "credibly faster", "loss": "credibly slower", "no-difference": "within noise"}
    clauses = [with_sentence(c, f"{word[c.kind]}: {_at_list(c)}") for c in claims]
    text = f"{label}'s effect on {what}: " + "; ".join(c.sentence for c in clauses) + "."
    return text, clauses


def deciding_metric(comp: Comparison, arm: str, judged: pd.DataFrame, i: int, fallback: str) -> str:
    """The metric that decided judged row ``i`` when it is a metric with delta rows, else ``fallback``
    (a rule such as an SLO decided: the SLO's metric is the caller's fallback)."""
    m = str(judged["decided_by"].iloc[i])
    return m if comp.delta_rows(arm, m) else fallback


def _point_text(comp: Comparison, arm: str, metric_at: Mapping[int, str], cs: Sequence[int],
                x: float) -> tuple[str, tuple[int, int]]:
    """'about 37 concurrent requests, between the tested 32 and 64 (aggregate throughput: +11% […] at 32,
    -32% […] at 64)', or '32 concurrent requests (tested; …)' when ``x`` is a tested level. Each level
    is quoted on the metric that decided it (``metric_at``), as the table beside it says."""
    def quote(c: int) -> str:
        return f"{band_text(comp.delta_rows(arm, metric_at[c]).get(c))} at {c}"

    def word(c: int) -> str:
        return deciding_word(metric_at[c], comp.aggregate_basis)

    if round(x) in cs:  # X rounds to a tested level: say what was measured there
        c = int(round(x))
        exact = abs(x - c) < 1e-9
        return (f"{'' if exact else 'about '}{c} concurrent requests (measured there: {word(c)} "
                f"{band_text(comp.delta_rows(arm, metric_at[c]).get(c))})", (c, c))
    lo, hi = tested_bracket(cs, x)
    if metric_at[lo] == metric_at[hi]:
        at = f"{word(lo)}: {quote(lo)}, {quote(hi)}"
    else:
        at = f"{word(lo)} {quote(lo)}, {word(hi)} {quote(hi)}"
    return f"about {x:.0f} concurrent requests, between the tested {lo} and {hi} ({at})", (lo, hi)


def _headline(verdict: Verdict, label: str, criterion: str, judged: pd.DataFrame, span: str,
              up_to: float | None, from_c: float | None, slo: str | None, *, comp: Comparison | None = None,
              arm: str = "", fallback_metric: str = "output_tok_s", profile: str = "",
              where: str = "every tested concurrency", noise_metric: str | None = None) -> Claim:
    """The verdict's headline as a claim: its decision class, the deciding metric, the levels it names.

    ``criterion`` is what the profile judges on, without its SLO (``slo``: the SLOs' names, or None);
    ``where`` names the levels of a verdict that holds at all of them; with ``noise_metric`` a 'no
    measurable difference' says the smallest difference that metric's data could detect.
    "Up to / from about X" names the tested levels bounding X and shows the deciding metric's Δ
    with its band at both (X itself need not have been measured).
    """
    gains, losses = _levels_of(judged, "gain"), _levels_of(judged, "loss")
    cs = [int(c) for c in judged["concurrency"]]
    point = up_to if verdict == Verdict.ENABLE_UP_TO else from_c if verdict == Verdict.ENABLE_FROM else None
    full = criterion + (" under the SLO" if slo else "")

    def claim(text: str, metric: str | None = None, bounds: tuple[int, int] | None = None) -> Claim:
        return Claim(kind="verdict", arm=arm, metric=metric or _headline_metric(comp, arm, verdict, judged, fallback_metric),
                     levels=tuple(cs), sentence=text, credible=bool(gains or losses), profile=profile,
                     decision=decision_class(verdict, judged), at=point, bounds=bounds)

    if point is not None and comp is not None:
        metric = deciding_metric(comp, arm, judged, cs.index(min(losses) if verdict == Verdict.ENABLE_UP_TO
                                                              else max(losses)), fallback_metric)
        metric_at = {c: deciding_metric(comp, arm, judged, i, fallback_metric) for i, c in enumerate(cs)}
        at, bounds = _point_text(comp, arm, metric_at, cs, point)
        if verdict == Verdict.ENABLE_UP_TO:
            return claim(f"Enable {label} up to {at}; above that it loses on {criterion} — keep it off there (or "
                         "route high-concurrency traffic to a pool without it).", metric, bounds)
        return claim(f"Enable {label} from {at} up; below that it loses on {full}.", metric, bounds)
    if verdict == Verdict.ENABLE and slo:
        return claim(_slo_enable_text(label, slo, judged, comp.aggregate_basis if comp is not None else None))
    if verdict == Verdict.ENABLE:
        return claim(_range_text(f"Enable {label}: it wins on {full}", gains, _levels_of(judged, "neutral"), where, span))
    if verdict == Verdict.DISABLE and not losses:
        size = _no_difference_size(comp, arm, noise_metric) if comp is not None and noise_metric else ""
        return claim(f"No measurable difference on {full} across concurrency {span}: keep speculation off unless "
                     f"more data shows a gain{size}.")
    if verdict == Verdict.DISABLE:
        return claim(_range_text(f"Keep speculation off: it loses on {full}", losses, _levels_of(judged, "neutral"),
                                 where, span))
    ends = end_headline(comp, arm, label, full, judged) if comp is not None else None
    if ends is not None:  # an end level's own measurement points the other way (decide.ends)
        return claim(ends)
    return claim(f"Mixed: {label} wins on {full} at concurrency {_at(gains)} and loses at {_at(losses)}; "
                 "no single range is established — see the levels.")


def _at(cs: Sequence[int]) -> str:
    return ", ".join(map(str, cs))


def _headline_metric(comp: Comparison | None, arm: str, verdict: Verdict, judged: pd.DataFrame, fallback: str) -> str:
    """The metric most of the decisive levels were decided by: the gains for enable, the losses for
    keep off, the neutral levels for no measurable difference (``fallback`` without a comparison)."""
    key = "gain" if verdict == Verdict.ENABLE else "loss" if (judged["outcome"] == "loss").any() else "neutral"
    decisive = [deciding_metric(comp, arm, judged, i, fallback) if comp is not None else fallback
                for i, o in enumerate(judged["outcome"]) if o == key]
    return max(dict.fromkeys(decisive), key=decisive.count) if decisive else fallback


def _range_text(head: str, decisive: Sequence[int], flat: Sequence[int], where: str, span: str) -> str:
    """'<head> at every tested concurrency in 1–64.', or '<head> at concurrency 1, 4 and makes no
    measurable difference at 16.' where some levels (``flat``) are neutral."""
    if not flat:
        return f"{head} at {where} in {span}."
    return f"{head} at concurrency {_at(decisive)} and makes no measurable difference at {_at(flat)}."


def _slo_enable_text(label: str, slo: str, judged: pd.DataFrame, basis: str | None = None) -> str:
    """The headline of 'enable' under an SLO: where only the arm keeps it, where both do, where neither
    (``basis``: the comparison's ``aggregate_basis``)."""
    gains = _levels_of(judged, "gain")
    kept = _levels_of(judged, "gain", "arm meets the SLOs, the baseline does not")
    both = [c for c in gains if c not in kept]
    neither = _levels_of(judged, "neutral", "both break an SLO")
    rest = [c for c in _levels_of(judged, "neutral") if c not in neither]
    parts = []
    if kept:
        parts.append(f"it keeps the SLO ({slo}) where the baseline does not (concurrency {_at(kept)})")
    if both:
        parts.append(f"it delivers more {aggregate_word(basis)} where both keep it ({_at(both)})")
    if neither:
        parts.append(f"neither arm keeps it at {_at(neither)}")
    if rest:
        parts.append(f"no measurable difference at {_at(rest)}")
    return f"Enable {label}: " + "; ".join(parts) + "."


def criterion_text(comp: Comparison, profile: Profile, arm: str) -> str:
    """What a profile judges on, as its headline says it (without its SLO)."""
    if profile.objective == "throughput":
        return aggregate_word(comp.aggregate_basis)
    if profile.objective == "balanced":
        return f"per-user speed at no more than {profile.max_throughput_loss_pct:g}% aggregate loss"
    waits = ("end-to-end time, a Little's-law estimate" if wait_metrics(comp, arm) == [ESTIMATED_WAIT]
             else "TTFT, end-to-end time")
    return f"what a user waits for ({waits}), weighed against per-user speed"


def headline_sentences(comp: Comparison, profile: Profile, d: Decision, metric: str) -> tuple[str, list[Claim]]:
    """The headline of a profile's recommendation and the claims it states: the verdict (``metric``: the
    profile's deciding metric where no level names one), then what a user waits for (latency) or the
    the levels only one arm measured. (The aggregate Δ with its bands is a reason, so that two profiles
    over the same levels say it once: :func:`reason_sentences`.)"""
    label = md_text(d.arm)  # prose names arms by their short name; the label is given once, in Setup
    cs = d.judged["concurrency"].tolist()
    checks = _slo_checks(profile, comp)
    one_side = [f"{', '.join(map(str, v))} ({'only ' + label if k == 'arm' else 'only the baseline'})"
                for k, v in comp.unshared_levels(d.arm).items() if v]
    head = _headline(d.verdict, label, criterion_text(comp, profile, d.arm), d.judged,
                     f"{cs[0]}–{cs[-1]}" if len(cs) > 1 else f"{cs[0]}", d.up_to, d.from_c,
                     " and ".join(c[0] for c in checks) if checks else None, comp=comp, arm=d.arm,
                     fallback_metric=metric, profile=profile.name,
                     where="every level both arms measured" if one_side else "every tested concurrency",
                     noise_metric="output_tok_s" if profile.objective == "throughput" else comp.user_metric)
    parts, claims = [head.sentence], [head]
    if profile.objective == "latency":
        note, note_claims = _wait_note(comp, d.arm, d.judged, profile.min_effect_pct, profile.name)
        claims += note_claims
        if note:
            parts.append(wait_sentence(label, note))
    if one_side:
        parts.append("Not compared at " + " and ".join(one_side) + ": measured on one arm only.")
    return " ".join(parts), claims


def withheld_sentences(comp: Comparison, why: Literal["chunks", "controls"],
                       refused: Sequence[str]) -> tuple[str, list[str], list[str]]:
    """(headline, caveats, next experiments) of a profile no arm can be judged for: the token counts of
    the ``refused`` arms came from SSE chunks (``chunks``), or every arm besides the baseline is a control."""
    if why == "chunks":
        who = ", ".join(md_text(a) for a in refused)
        return ((f"No verdict: the token counts of {who} came from SSE chunks (the server reported none), so "
                 "aggregate throughput, per-user speed and acceptance cannot be trusted for this objective."), [],
                ["Re-measure with a server (or API flavour) that reports token counts (usage with "
                 "continuous_usage_stats, or SGLang meta_info)."])
    who = ", ".join(md_text(a) for a in comp.controls)
    return ((f"No verdict: every arm besides the baseline is a control arm ({who}), configured like the "
             "baseline; its difference from the baseline measures noise and drift, not a configuration."),
            drift_sentences(comp), ["Add the configuration to compare as another arm of the study."])


def reason_sentences(comp: Comparison, profile: Profile, d: Decision) -> tuple[list[str], list[Claim], Claim | None]:
    """The reasons of a profile's recommendation in order, the claims they state, and the advice (a
    configuration change to test) the cap sentences lead to, if any."""
    arm, judged, label, effect = d.arm, d.judged, md_text(d.arm), profile.min_effect_pct
    thr_text, thr_claims = _throughput_sentence(comp, arm, label, judged, effect, profile.name)
    user_text, user_claims = _user_sentence(comp, arm, label, judged, effect, profile.name)
    quote = aggregate_quote(comp, arm, [int(c) for c in judged["concurrency"]]) if profile.objective != "latency" else ""
    reasons = [r for r in (quote, thr_text, user_text) if r]
    reasons += objective_reasons(comp, profile, arm, judged) + failed_level_reasons(label, judged)
    reasons += _slo_sentences(comp, profile, arm, label, judged)
    cap_claims, advice = cap_sentences(comp, arm, label, judged, effect, profile.name)
    reasons += [c.sentence for c in cap_claims]
    if d.tied_with:
        reasons.append(tie_sentence(comp, arm, d.tied_with, d.verdict, d.per_arm))
    others = [a for a in d.per_arm if a != arm and a not in d.tied_with]
    if others:
        reasons.append(others_sentence(comp, profile, d, others))
    return reasons, thr_claims + user_claims + cap_claims, advice


def _margins(a: float, b: float) -> tuple[str, str]:
    """Two mean deciding margins (Δ %) written apart: one more decimal where the page's rounding makes them equal."""
    if pct(a) != pct(b):
        return pct(a), pct(b)
    return f"{a:+.2f}%", f"{b:+.2f}%"


def others_sentence(comp: Comparison, profile: Profile, d: Decision, others: Sequence[str]) -> str:
    """Why the arms not tied with the recommended one are not named: where each credibly differs from
    it (:func:`specsweep.decide.ties.first_difference`), and the mean deciding margins the choice
    rests on — never a 'scored lower' between arms the data cannot tell apart (those are tied)."""
    arm = d.arm
    parts = []
    for a in others:
        mine, theirs = _margins(float(d.per_arm[arm]["margin"].mean()), float(d.per_arm[a]["margin"].mean()))
        where = first_difference(comp, profile, arm, a, d.per_arm)
        diff = (f"differs credibly from {md_text(arm)} ({deciding_word(where[0], comp.aggregate_basis)} "
                f"{pct(where[2])} at {where[1]})"
                if where else f"could not be compared with {md_text(arm)} directly")
        parts.append(f"{md_text(a)} {diff}; its mean deciding Δ is {theirs} against {mine}")
    return "Not tied: " + "; ".join(parts) + "."


def objective_reasons(comp: Comparison, profile: Profile, arm: str, judged: pd.DataFrame) -> list[str]:
    """What the profile's objective weighs, and for a latency profile what it costs in capacity."""
    agg = aggregate_word(comp.aggregate_basis)
    if profile.objective == "latency":
        return _latency_reasons(comp, arm, judged, profile.min_effect_pct)
    if profile.objective == "throughput" and _slo_checks(profile, comp):
        return [f"Under an SLO, what counts is the {agg} a configuration delivers while it "
                "keeps the SLO; a level where only one arm keeps it goes to that arm if the difference in the "
                "SLO's metric is credible."]
    if profile.objective == "throughput":
        what = agg if comp.aggregate_basis else "aggregate throughput (the tokens per second the hardware delivers)"
        return [f"For batch or offline work, {what} is what counts; per-request speed does not."]
    return [f"Balanced: per-user speed should improve while {agg} drops by at most "
            f"{profile.max_throughput_loss_pct:g}%."]


def _latency_reasons(comp: Comparison, arm: str, judged: pd.DataFrame, min_effect: float) -> list[str]:
    """How a latency profile judges a level, how the wait is estimated without percentiles, and the
    capacity the arm costs where its aggregate throughput is lowest."""
    waits = wait_metrics(comp, arm)
    agg = aggregate_word(comp.aggregate_basis)
    names = ", ".join(deciding_word(m) for m in waits)
    out = [f"Latency-sensitive use is judged on the whole wait — {names} — and on per-user speed: a level "
           "is lost where any wait is credibly longer (for TTFT: by more than the minimum effect as a share "
           "of the baseline's end-to-end time), won where per-user speed (or a wait) is credibly better and "
           "no wait's fitted increase outweighs the per-user gain. The table names the metric that decided "
           "each level."]
    if waits == [ESTIMATED_WAIT]:
        out.append("These data have no latency percentiles, so the wait is estimated by Little's law (see the "
                   "glossary): mean request time = concurrency × output tokens ÷ aggregate tok/s. It is an "
                   f"estimate, and at the same concurrency it moves exactly inversely to {agg}.")
    # only a credible loss prices capacity: a Δ inside its band is no evidence of fewer tokens per server
    credible = judged["aggregate_sign"] < 0 if "aggregate_sign" in judged else True
    worst = judged[(judged["aggregate_delta_pct"] < -min_effect) & (judged["aggregate_delta_pct"] > -100) & credible]
    if len(worst):
        r = worst.loc[worst["aggregate_delta_pct"].idxmin()]
        need = 1.0 / (1.0 + r["aggregate_delta_pct"] / 100.0)
        times = f"{need:.2f}" if need < 2 else f"{need:.1f}"  # 1.05×, not a rounded-up 1.1×
        out.append(f"The price is capacity: at concurrency {int(r['concurrency'])} the same hardware delivers "
                   f"{-r['aggregate_delta_pct']:.0f}% less {agg}, so serving the same token rate there "
                   f"would need about {times}× the servers.")
    return out


def failed_level_reasons(label: str, judged: pd.DataFrame) -> list[str]:
    """One sentence per level the arm lost by a rule: no successful requests, no per-user figure, more failures."""
    failed = judged[judged["rule"].isin(["no successful requests", "no per-user figure"])
                    | judged["rule"].fillna("").str.startswith("fails more requests")]
    return [f"At concurrency {row.concurrency} {label} counts as a loss: {row.rule}." for row in failed.itertuples()]


def band_sentences(judged: pd.DataFrame, arm: str, label: str) -> list[Band]:
    """Runs of consecutive judged levels with the same outcome (and rule), each with its sentence."""
    key = judged["outcome"] + "|" + judged["rule"].fillna("")
    bands: list[Band] = []
    for _, grp in judged.groupby((key != key.shift()).cumsum()):
        cs = grp["concurrency"].tolist()
        ag = (grp["aggregate_delta_pct"].min(), grp["aggregate_delta_pct"].max())
        us = (grp["user_delta_pct"].min(), grp["user_delta_pct"].max())
        outcome = grp["outcome"].iloc[0]
        rule = grp["rule"].iloc[0] if isinstance(grp["rule"].iloc[0], str) else None
        span = f"{cs[0]}" if len(cs) == 1 else f"{cs[0]}–{cs[-1]}"
        word = {"gain": "pays off", "loss": "costs", "neutral": "makes no measurable difference"}[outcome]
        because = f" ({rule})" if rule else ""
        bands.append(Band(arm, cs[0], cs[-1], outcome, ag, us,
                          f"At concurrency {span}, {label} {word}{because}: aggregate {_range_pct(ag)}, "
                          f"per-user {_range_pct(us)}.", rule))
    return bands


def _slo_sentences(comp: Comparison, profile: Profile, arm: str, label: str, judged: pd.DataFrame) -> list[str]:
    checks = _slo_checks(profile, comp)
    if not checks:
        return []
    names = " and ".join(c[0] for c in checks)
    out = []
    best: dict[str, tuple[int, float] | None] = {}
    for a in (comp.baseline, arm):
        ok = [c for c in judged["concurrency"] if _meets(comp.levels, a, int(c), checks)]
        if ok:
            lv = comp.arm_levels(a).set_index("concurrency")
            top = max(ok, key=lambda c: lv.at[c, "output_tok_s"])
            best[a] = (int(top), float(lv.at[top, "output_tok_s"]))
        else:
            best[a] = None
    unknown = [c for c in judged["concurrency"] if _meets(comp.levels, arm, int(c), checks) is None]
    if unknown:
        out.append(f"The SLO ({names}) could not be checked at {_levels_text(unknown)}: the data lacks the metric.")
    b, s = best[comp.baseline], best[arm]
    def where(x: tuple[int, float] | None, who: str) -> str:
        return (f"{who} meets it at best at concurrency {x[0]} ({_num(x[1])} tok/s aggregate)" if x
                else f"{who} meets it at no tested level")
    out.append(f"Under the SLO ({names}): {where(b, 'the baseline')}; {where(s, label)}.")
    if b and s:
        noisy = [int(c) for c in judged.loc[judged["rule"] == "within noise of the SLO", "concurrency"]]
        out.append(f"So {label} carries {s[1] / b[1]:.2f}× the SLO-compliant throughput of the baseline"
                   + (f" as measured — but at {_levels_text(noisy)} which side of the SLO line a level falls is "
                      "within noise, so this ratio is not established." if noisy else "."))
    return out


#: a wait that looks longer but not credibly so (the verb phrase after "each request")
WAIT_MAYBE: dict[str, str] = {
    "ttft_p50_s": "may wait longer for its first token (TTFT p50)",
    "ttft_p99_s": "may wait longer for its first token at the tail (TTFT p99)",
    "e2e_p50_s": "may take longer end to end (e2e p50)",
    "e2e_p99_s": "may take longer end to end at the tail (e2e p99)",
    "e2e_mean_est_s": "may take longer per request in total (Little's-law estimate)",
}


def _wait_note(comp: Comparison, arm: str, judged: pd.DataFrame, min_effect: float,
               profile: str = "") -> tuple[str, list[Claim]]:
    """'is faster once running (+62% per-user at 128), but it waits longer for its first token (TTFT p50):
    +106% at 128', and its claims.

    Empty unless a wait metric decided (or held back) a level. Only credible differences are said
    with "faster" / "longer"; one within noise is said as such ("may take longer …: … (within noise)",
    "not credibly faster at …"), never listed as a gain or a loss.
    """
    sure_waits: dict[str, list[dict]] = {}
    maybe_waits: dict[str, list[dict]] = {}
    faster: list[dict] = []
    unsure: list[dict] = []
    waits = wait_metrics(comp, arm)
    urows = _lookup(comp, arm, comp.user_metric)
    for r in judged.itertuples():
        if r.decided_by not in WAIT_WORDS or r.outcome == "gain":
            continue
        c = int(r.concurrency)
        rows = {m: _lookup(comp, arm, m).get(c) for m in waits}
        for m in waits:  # every wait that is credibly longer here, and the one that decided
            row = rows[m]
            if row is None:
                continue
            credible = _sign(row, 0.0) < 0 and _wait_size(rows, m) > min_effect
            if credible:
                sure_waits.setdefault(m, []).append(row)
            elif m == r.decided_by:
                maybe_waits.setdefault(m, []).append(row)
        if not math.isnan(r.user_fit_pct) and r.user_fit_pct > min_effect:
            urow = urows.get(c)
            if urow is not None:
                (faster if _sign(urow, min_effect) > 0 else unsure).append(urow)
    if not sure_waits and not maybe_waits:
        return "", []
    claims: list[Claim] = []
    um = comp.user_metric
    head = ""
    if faster:
        claim = delta_claim("gain", arm, um, faster, credible=True, profile=profile)
        claims.append(with_sentence(claim, "is faster once running (" + ", ".join(
            f"{value_text(claim, i)} per-user at {lv}" for i, lv in enumerate(claim.levels)) + ")"))
        head = claims[-1].sentence
    if unsure:
        claim = delta_claim("no-difference", arm, um, unsure, credible=False, profile=profile)
        text = ("not credibly faster at " if faster else "is not credibly faster once running at ") + join_and(
            [str(x) for x in claim.levels]) + " (" + ", ".join(f"{pct(v)} per-user" for v in claim.values) + ", within noise)"
        claims.append(with_sentence(claim, text))
        head = f"{head}, {text}" if head else text
    parts = []
    for m in waits:
        if m in sure_waits:
            claim = delta_claim("loss", arm, m, sure_waits[m], credible=True, profile=profile)
            claims.append(with_sentence(claim, f"{WAIT_WORDS[m]}: {_at_list(claim)}"))
            parts.append(claims[-1].sentence)
        if m in maybe_waits:
            claim = delta_claim("no-difference", arm, m, maybe_waits[m], credible=False, profile=profile)
            claims.append(with_sentence(claim, f"{WAIT_MAYBE[m]}: {_at_list(claim)} (within noise)"))
            parts.append(claims[-1].sentence)
    note = (f"{head}, but it " if head else "") + "; ".join(parts)
    return note, claims


def wait_sentence(label: str, note: str) -> str:
    """The headline's wait sentence for any arm label (a name, a noun phrase, one starting with a
    verb): the label is never the sentence's subject, each request is (``note`` from :func:`_wait_note`)."""
    return f"With {label}, each request {note}."


def aggregate_quote(comp: Comparison, arm: str, levels: Sequence[int] | None = None) -> str:
    """The largest and smallest aggregate Δ over ``levels`` (default: all shared), each with its band."""
    rows = _lookup(comp, arm, "output_tok_s")
    cs = [c for c in (levels if levels is not None else sorted(rows)) if c in rows]
    if not cs:
        return ""
    hi = max(cs, key=lambda c: rows[c]["delta_pct"])
    lo = min(cs, key=lambda c: rows[c]["delta_pct"])
    picks = [hi] if hi == lo else [hi, lo]
    return (f"Aggregate Δ{basis_suffix(comp.aggregate_basis)}: " + "; ".join(f"{band_text(rows[c])} at {c}" for c in picks)
            + " (95% simultaneous band of the fitted curve in brackets).")


def _no_difference_size(comp: Comparison, arm: str, metric: str) -> str:
    curve = comp.curve(arm, metric)
    if curve is None:
        return " (too few levels and no repeats to estimate the noise)"
    return (f" (the smallest difference these data could detect is about ±{smallest_detectable_pct(curve):.0f}% "
            f"at the best-measured level)")
