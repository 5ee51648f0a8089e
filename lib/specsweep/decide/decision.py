"""Deciding among arms for one profile (controls excluded) and building the recommendation."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from specsweep.analyze.compare import ESTIMATED_WAIT, Comparison
from specsweep.analyze.crossover import curve_crossovers, zero_between
from specsweep.decide.claims import Claim
from specsweep.decide.experiments import _where_uncertain
from specsweep.decide.judge import _bands, _slo_checks, _verdict, judge_levels, wait_metrics
from specsweep.decide.profiles import SYNTHETIC_KINDS, Profile, Verdict, parse_profile
from specsweep.decide.result import Recommendation
from specsweep.decide.sentences import (
    _cap_sentences,
    _caveats,
    _deciding_word,
    _headline,
    _no_difference_size,
    _slo_sentences,
    _throughput_sentence,
    _user_sentence,
    _wait_note,
    aggregate_quote,
    drift_sentences,
    wait_sentence,
)
from specsweep.decide.text import _DECIDING, _band_text, _pct
from specsweep.markup import md_text


@dataclass
class Decision:
    """The judgement behind a recommendation, without its sentences."""

    verdict: Verdict
    arm: str
    judged: pd.DataFrame
    per_arm: dict[str, pd.DataFrame]
    up_to: float | None
    from_c: float | None
    #: candidate arms not credibly different from ``arm`` for this profile (``arm`` is the simplest of them)
    tied_with: list[str] = field(default_factory=list)


def decide(comp: Comparison, profile: Profile | dict[str, Any], candidates: Sequence[str] | None = None) -> Decision:
    """Judge every candidate arm (default: every speculative arm) and pick the verdict (no sentences).

    ``up_to`` / ``from_c`` lie where the deciding metric's fitted curve crosses 0 between the last
    gain and the first loss (the same curve the report's crossover comes from).
    """
    profile = parse_profile(profile)
    candidates = comp.candidate_arms if candidates is None else [a for a in candidates if a not in comp.controls]
    if not candidates and comp.spec_arms:
        raise ValueError(f"profile {profile.name!r}: every arm besides the baseline is a control arm "
                         f"({', '.join(comp.controls)}); add an arm to compare, or drop 'control' from one")
    per_arm = {arm: judge_levels(comp, profile, arm) for arm in candidates}
    per_arm = {a: j for a, j in per_arm.items() if not j.empty}
    if not per_arm:
        tested = sorted(comp.levels["concurrency"].unique())
        raise ValueError(
            f"profile {profile.name!r}: no tested concurrency lies in its range "
            f"{profile.concurrency_min}–{profile.concurrency_max or '∞'} (tested: {', '.join(map(str, tested))})"
        )
    arm = next(iter(per_arm)) if len(per_arm) == 1 else \
        max(per_arm, key=lambda a: per_arm[a]["margin"].clip(-100, 100).mean())
    tied: list[str] = []
    if len(per_arm) > 1:  # arms not credibly different from the best: the simplest of them (recommend.ties)
        from specsweep.decide.ties import resolve_tie
        arm, tied = resolve_tie(comp, profile, arm, list(per_arm))
    judged = per_arm[arm]
    verdict, up_to, from_c = _verdict(judged)
    gains = [i for i, o in enumerate(judged["outcome"]) if o == "gain"]
    losses = [i for i, o in enumerate(judged["outcome"]) if o == "loss"]
    cs = judged["concurrency"].tolist()
    if verdict in ("enable_up_to", "enable_from"):
        # the same fitted curve the crossover is drawn from, so the headline and the crossover agree
        i, j = (max(gains), min(losses)) if verdict == "enable_up_to" else (max(losses), min(gains))
        curve = comp.curve(arm, str(judged["decided_by"].iloc[j if verdict == "enable_up_to" else i]))
        x = zero_between(curve, cs[i], cs[j]) if curve is not None else None
        if x is None:  # the deciding curve does not cross 0 between them: say only what was measured
            x = float(cs[i] if verdict == "enable_up_to" else cs[j])
        up_to, from_c = (x, None) if verdict == "enable_up_to" else (None, x)
    return Decision(verdict, arm, judged, per_arm, up_to, from_c, tied)


def recommend(comp: Comparison, profile: Profile | dict[str, Any]) -> Recommendation:
    """The recommendation for one profile (see the docstring of specsweep.decide for the rules)."""
    profile = parse_profile(profile)
    checks = _slo_checks(profile, comp)
    token_based = profile.objective in ("throughput", "balanced") or any(col == comp.user_metric for _, col, _, _ in checks)
    refused = {a: w for a, w in comp.chunk_counted.items() if a in comp.spec_arms or a == comp.baseline}
    candidates = [a for a in comp.candidate_arms if not (token_based and (a in refused or comp.baseline in refused))]
    if token_based and not candidates and comp.spec_arms:
        who = ", ".join(md_text(a) for a in refused)
        return Recommendation(
            profile=profile, verdict="no_verdict", arm=None, up_to_concurrency=None, from_concurrency=None,
            headline=(f"No verdict: the token counts of {who} came from SSE chunks (the server reported none), so "
                      "aggregate throughput, per-user speed and acceptance cannot be trusted for this objective."),
            bands=[], reasons=[], caveats=[], next_experiments=[
                "Re-measure with a server (or API flavour) that reports token counts (usage with "
                "continuous_usage_stats, or SGLang meta_info)."])
    if not candidates and comp.controls and not (token_based and refused):
        who = ", ".join(md_text(a) for a in comp.controls)
        return Recommendation(
            profile=profile, verdict="no_verdict", arm=None, up_to_concurrency=None, from_concurrency=None,
            headline=(f"No verdict: every arm besides the baseline is a control arm ({who}), configured like the "
                      "baseline; its difference from the baseline measures noise and drift, not a configuration."),
            bands=[], reasons=[], caveats=drift_sentences(comp), next_experiments=[
                "Add the configuration to compare as another arm of the study."])
    d = decide(comp, profile, candidates)
    per_arm, arm, judged, verdict, up_to, from_c = d.per_arm, d.arm, d.judged, d.verdict, d.up_to, d.from_c
    label = md_text(arm)  # prose names arms by their short name; the label is given once, in Setup
    gains = [i for i, o in enumerate(judged["outcome"]) if o == "gain"]
    losses = [i for i, o in enumerate(judged["outcome"]) if o == "loss"]
    cs = judged["concurrency"].tolist()
    span = f"{cs[0]}–{cs[-1]}" if len(cs) > 1 else f"{cs[0]}"
    criterion = {"throughput": "aggregate throughput",
                 "latency": "what a user waits for ("
                            + ("end-to-end time, a Little's-law estimate" if wait_metrics(comp, arm) == [ESTIMATED_WAIT]
                               else "TTFT, end-to-end time") + "), weighed against per-user speed",
                 "balanced": f"per-user speed at no more than {profile.max_throughput_loss_pct:g}% aggregate loss"}[profile.objective]
    slo = " and ".join(c[0] for c in checks) if checks else None
    if checks:
        criterion += " under the SLO"
    fallback = {"throughput": "output_tok_s", "balanced": comp.user_metric}.get(
        profile.objective, (wait_metrics(comp, arm) or [comp.user_metric])[-1])
    head_claim = _headline(verdict, label, criterion, judged, span, up_to, from_c, slo, comp=comp, arm=arm,
                           fallback_metric=fallback, profile=profile.name)
    claims: list[Claim] = [head_claim]
    headline = head_claim.sentence
    if verdict == "disable" and not losses:
        deciding = "output_tok_s" if profile.objective == "throughput" else comp.user_metric
        headline = headline.rstrip(".") + _no_difference_size(comp, arm, deciding) + "."
    if profile.objective == "latency":
        note, note_claims = _wait_note(comp, arm, judged, profile.min_effect_pct, profile.name)
        claims += note_claims
        if note:
            headline += " " + wait_sentence(label, note)
    else:
        headline += " " + aggregate_quote(comp, arm, [int(c) for c in judged["concurrency"]])
    unshared = comp.unshared_levels(arm)
    one_side = [f"{', '.join(map(str, v))} ({'only ' + label if k == 'arm' else 'only the baseline'})"
                for k, v in unshared.items() if v]
    if one_side:
        headline = headline.replace("at every tested concurrency in", "at every level both arms measured in")
        headline += " Not compared at " + " and ".join(one_side) + ": measured on one arm only."
    if comp.single_run():
        headline += " One run per level: repeat each level (repeats=3) before relying on this."

    thr_text, thr_claims = _throughput_sentence(comp, arm, label, judged, profile.min_effect_pct, profile.name)
    user_text, user_claims = _user_sentence(comp, arm, label, judged, profile.min_effect_pct, profile.name)
    claims += thr_claims + user_claims
    reasons = [thr_text, user_text]
    if profile.objective == "latency":
        waits = wait_metrics(comp, arm)
        names = ", ".join(_deciding_word(comp, m) for m in waits)
        reasons.append(f"Latency-sensitive use is judged on the whole wait — {names} — and on per-user speed: a level "
                       "is lost where any wait is credibly longer (for TTFT: by more than the minimum effect as a share "
                       "of the baseline's end-to-end time), won where per-user speed (or a wait) is credibly better and "
                       "no wait's fitted increase outweighs the per-user gain. The table names the metric that decided "
                       "each level.")
        if waits == [ESTIMATED_WAIT]:
            reasons.append("These data have no latency percentiles, so the wait is estimated by Little's law (see the "
                           "glossary): mean request time = concurrency × output tokens ÷ aggregate tok/s. It is an "
                           "estimate, and at the same concurrency it moves exactly inversely to aggregate throughput.")
        worst = judged[(judged["aggregate_delta_pct"] < -profile.min_effect_pct) & (judged["aggregate_delta_pct"] > -100)]
        if len(worst):
            r = worst.loc[worst["aggregate_delta_pct"].idxmin()]
            need = 1.0 / (1.0 + r["aggregate_delta_pct"] / 100.0)
            reasons.append(f"The price is capacity: at concurrency {int(r['concurrency'])} the same hardware delivers "
                           f"{-r['aggregate_delta_pct']:.0f}% less aggregate throughput, so serving the same token rate there "
                           f"would need about {need:.1f}× the servers.")
    elif profile.objective == "throughput" and checks:
        reasons.append("Under an SLO, what counts is the aggregate throughput a configuration delivers while it "
                       "keeps the SLO; a level where only one arm keeps it goes to that arm if the difference in the "
                       "SLO's metric is credible.")
    elif profile.objective == "throughput":
        reasons.append("For batch or offline work, aggregate throughput (tokens per GPU-second) is what counts; "
                       "per-request speed does not.")
    else:
        reasons.append(f"Balanced: per-user speed should improve while aggregate throughput drops by at most "
                       f"{profile.max_throughput_loss_pct:g}%.")
    failed = judged[judged["rule"].isin(["no successful requests", "no per-user figure"])
                    | judged["rule"].fillna("").str.startswith("fails more requests")]
    for row in failed.itertuples():
        reasons.append(f"At concurrency {row.concurrency} {label} counts as a loss: {row.rule}.")
    reasons = [r for r in reasons if r]
    reasons += _slo_sentences(comp, profile, arm, label, judged)
    cap_claims, cap_experiment = _cap_sentences(comp, arm, label, judged, profile.min_effect_pct, profile.name)
    claims += cap_claims
    reasons += [c.sentence for c in cap_claims]
    if d.tied_with:
        from specsweep.decide.ties import tie_sentence
        reasons.append(tie_sentence(comp, arm, d.tied_with, verdict))
    others = [a for a in per_arm if a != arm and a not in d.tied_with]
    if others:
        reasons.append("Other arms scored lower for this profile: " + ", ".join(
            f"{md_text(a)} (mean deciding delta {_pct(per_arm[a]['margin'].mean())})" for a in others) + ".")

    experiments = []
    if cap_experiment:
        claims.append(cap_experiment)
        experiments.append(cap_experiment.sentence)
    lo_c, hi_c = profile.concurrency_min, profile.concurrency_max or 10**9
    for c in _crossover_experiments(comp, arm, judged, fallback, lo_c, hi_c, profile.name, bool(gains or losses)):
        claims.append(c)
        experiments.append(c.sentence)
    if comp.single_run():
        experiments.append("Repeat every level at least 3 times (repeats=3): the noise is then measured from the "
                           "repeats rather than " + (f"assumed ({comp.assumed_noise_pct:g}% per run)"
                                                     if comp.assumed_noise_pct else "taken from the curve's residuals")
                           + ".")
    if comp.workload.get("kind") in SYNTHETIC_KINDS:
        experiments.append("Re-measure both arms with prompts from real traffic (workload = a prompt file) to see "
                           "acceptance, and so the gain, on the text you actually serve.")
    if any(comp.metas[a].get("level_only") for a in comp.arms):
        experiments.append("Re-measure with specsweep's sweep to get per-request samples (TTFT, TPOT, end-to-end "
                           "percentiles) and the server's running-request and acceptance gauges per level.")
    return Recommendation(
        profile=profile, verdict=verdict, arm=arm if verdict != "disable" else None,
        up_to_concurrency=up_to, from_concurrency=from_c, headline=headline,
        bands=_bands(judged, arm, label), reasons=reasons, caveats=_caveats(comp, profile, [arm]),
        next_experiments=experiments,
        levels=_with_deciding_band(comp, pd.concat(per_arm.values(), ignore_index=True), fallback,
                                   checks[0][1] if checks else fallback),
        claims=claims, tied_with=list(d.tied_with),
    )


def _with_deciding_band(comp: Comparison, levels: pd.DataFrame, fallback: str, slo_metric: str) -> pd.DataFrame:
    """``levels`` with ``deciding_metric`` (the metric that decided each level; for an SLO rule the
    SLO's metric, for another rule the profile's deciding metric) and ``deciding_band`` (its measured
    Δ with the 95 % band), so the table beside a verdict shows the number that decided it."""
    out = levels.copy()
    metrics, bands = [], []
    for r in out.itertuples():
        rule = r.rule if isinstance(r.rule, str) else ""
        m = (r.decided_by if comp.delta_rows(r.arm, r.decided_by) else
             slo_metric if "SLO" in rule else fallback)
        metrics.append(m)
        bands.append(_band_text(comp.delta_rows(r.arm, m).get(int(r.concurrency))))
    out["deciding_metric"], out["deciding_band"] = metrics, bands
    return out


def _crossover_experiments(comp: Comparison, arm: str, judged: pd.DataFrame, metric: str, lo_c: float,
                           hi_c: float, profile: str, decided: bool) -> list[Claim]:
    """Where to measure next for this profile: around the break-even of the profile's own deciding
    metric (``metric``: aggregate throughput for a throughput profile, the wait for a latency one),
    or, with no credible level at all, where that metric's fitted delta is least certain."""
    out = []
    word = _DECIDING.get(metric, metric)
    curve = comp.curve(arm, metric)
    crossings = curve_crossovers(curve) if curve is not None else []
    for r in crossings:
        mids = _where_uncertain(comp, arm, metric, r["c_low"], r["c_high"])
        if mids:
            out.append(Claim(kind="experiment", arm=arm, metric=metric, levels=tuple(mids), profile=profile,
                             at=float(r["crossover_concurrency"]), bounds=(int(r["c_low"]), int(r["c_high"])),
                             sentence=(f"Measure at {', '.join(map(str, mids))} (not yet measured, between the tested "
                                       f"{r['c_low']} and {r['c_high']}, where the fitted {word} delta's sign is least "
                                       f"certain) to pin down the crossover of {word}, now placed at about "
                                       f"{r['crossover_concurrency']:.0f}.")))
    if not crossings and not decided:
        tested = comp.shared_levels(arm)
        mids = _where_uncertain(comp, arm, metric, max(lo_c, min(tested)) - 1e-9, min(hi_c, max(tested)) + 1e-9)
        if mids:
            out.append(Claim(kind="experiment", arm=arm, metric=metric, levels=tuple(mids), profile=profile,
                             sentence=(f"Levels not yet measured where the fitted {word} delta is least certain: "
                                       f"{', '.join(map(str, mids))}.")))
    return out
