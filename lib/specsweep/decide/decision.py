"""Deciding among arms for one profile (controls excluded), then the recommendation built from it.

:func:`decide` judges the candidate arms and returns the :class:`~specsweep.decide.result.Decision`
(data only); :func:`recommend` adds what the page says about it, rendered from its claims by
:mod:`specsweep.decide.sentences` and :mod:`specsweep.decide.experiments`, each sentence written once.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.crossover import zero_between
from specsweep.analyze.join import token_figures_compared
from specsweep.decide.caveats import caveat_sentences
from specsweep.decide.ends import unsettled_ends
from specsweep.decide.experiments import next_experiments
from specsweep.decide.judge import _slo_checks, _verdict, carried_by_one, judge_levels, wait_metrics
from specsweep.decide.profiles import Profile, parse_profile
from specsweep.decide.result import Decision, Recommendation
from specsweep.decide.sentences import band_sentences, headline_sentences, reason_sentences, withheld_sentences
from specsweep.decide.text import band_text
from specsweep.decide.ties import resolve_tie
from specsweep.decide.verdicts import DecisionKind, Verdict
from specsweep.errors import InputError
from specsweep.markup import md_text


class OneArmError(InputError, ValueError):
    """Only the baseline arm was given: there is nothing to compare it with."""


def one_arm_message(baseline: str) -> str:
    """What to do when the result sets hold the baseline arm alone (one line)."""
    return (f"only the baseline arm {baseline!r} was given: a report compares other arms with it; add the result set "
            "of a second arm (e.g. the same server measured with speculative decoding)")


def decide(comp: Comparison, profile: Profile | dict[str, Any], candidates: Sequence[str] | None = None) -> Decision:
    """Judge every candidate arm (default: every speculative arm) and pick the verdict (no sentences).

    ``up_to`` / ``from_c`` lie where the deciding metric's fitted curve crosses 0 between the last
    gain and the first loss (the same curve the report's crossover comes from).
    """
    profile = parse_profile(profile)
    candidates = comp.candidate_arms if candidates is None else [a for a in candidates if a not in comp.controls]
    if not comp.spec_arms:
        raise OneArmError(one_arm_message(comp.baseline))
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
    arm, tied = _choose_arm(comp, profile, per_arm)
    judged = per_arm[arm]
    verdict, up_to, from_c = _verdict(judged)
    if verdict in (Verdict.ENABLE, Verdict.DISABLE) and unsettled_ends(comp, arm, judged, verdict):
        verdict = Verdict.NO_VERDICT
    if verdict in (Verdict.ENABLE_UP_TO, Verdict.ENABLE_FROM):
        x = _crossover(comp, arm, judged, up=verdict == Verdict.ENABLE_UP_TO)
        up_to, from_c = (x, None) if verdict == Verdict.ENABLE_UP_TO else (None, x)
    return Decision(verdict, arm, judged, per_arm, up_to, from_c, tied)


def _choose_arm(comp: Comparison, profile: Profile, per_arm: dict[str, pd.DataFrame]) -> tuple[str, list[str]]:
    """(the arm to judge, the arms tied with it): the best mean deciding margin, then of the arms not
    credibly different from it the simplest (:mod:`specsweep.decide.ties`)."""
    if len(per_arm) == 1:
        return next(iter(per_arm)), []
    best = max(per_arm, key=lambda a: per_arm[a]["margin"].clip(-100, 100).mean())
    return resolve_tie(comp, profile, best, list(per_arm), per_arm)


def _crossover(comp: Comparison, arm: str, judged: pd.DataFrame, *, up: bool) -> float:
    """X of 'enable up to X' (``up``) or 'enable from X' (concurrent requests): where the deciding
    metric's fitted curve crosses 0 between the last gain and the first loss (up) or the last loss
    and the first gain — the same curve the crossover is drawn from, so the headline and the
    crossover agree — else the tested level on the winning side."""
    gains = [i for i, o in enumerate(judged["outcome"]) if o == "gain"]
    losses = [i for i, o in enumerate(judged["outcome"]) if o == "loss"]
    cs = judged["concurrency"].tolist()
    i, j = (max(gains), min(losses)) if up else (max(losses), min(gains))
    curve = comp.curve(arm, str(judged["decided_by"].iloc[j if up else i]))
    x = zero_between(curve, cs[i], cs[j]) if curve is not None else None
    if x is None:  # the deciding curve does not cross 0 between them: say only what was measured
        x = float(cs[i] if up else cs[j])
    return x


def recommend(comp: Comparison, profile: Profile | dict[str, Any]) -> Recommendation:
    """The recommendation for one profile (see the docstring of specsweep.decide for the rules): the
    decision and its arm, ties, range, bands and levels, with the claims its sentences state."""
    profile = parse_profile(profile)
    d = judgement(comp, profile)
    if isinstance(d, Recommendation):
        return d
    metric = _profile_metric(comp, profile, d.arm)
    checks = _slo_checks(profile, comp)
    headline, head_claims = headline_sentences(comp, profile, d, metric)
    reasons, reason_claims, advice = reason_sentences(comp, profile, d)
    experiments, experiment_claims = next_experiments(comp, profile, d.arm, d.judged, metric, advice)
    lone = carried_by_one(d.judged)
    if lone is not None:  # a stall or a pause in one level's runs reads exactly like this
        experiments = [f"Re-measure concurrency {lone}: it alone carries this verdict, its neighbours show nothing; "
                       f"repeat it (or name it as a sentinel level) before relying on the verdict.", *experiments]
    levels = pd.concat(d.per_arm.values(), ignore_index=True)
    return Recommendation(
        profile=profile, verdict=d.verdict, decision=d.decision, arm=None if d.verdict == Verdict.DISABLE else d.arm,
        up_to_concurrency=d.up_to, from_concurrency=d.from_c, headline=headline,
        bands=band_sentences(d.judged, d.arm, md_text(d.arm)), reasons=reasons, caveats=caveat_sentences(comp, [d.arm]),
        next_experiments=experiments,
        levels=_with_deciding_band(comp, levels, metric, checks[0][1] if checks else metric),
        claims=head_claims + reason_claims + experiment_claims, tied_with=list(d.tied_with),
        aggregate_basis=comp.aggregate_basis,
    )


def judgement(comp: Comparison, profile: Profile | dict[str, Any]) -> Decision | Recommendation:
    """What :func:`recommend` decides before it words anything: the :class:`Decision`, or the
    recommendation withheld where no arm can be judged (token counts not compared or from chunks,
    only control arms). The decision table's fast path (:func:`specsweep.decide.decisions.decided_row`,
    re-deciding resampled studies) reads it without the sentences."""
    profile = parse_profile(profile)
    if not token_figures_compared(comp.levels):
        return _withheld_counts(comp, profile)
    refused = _chunk_counted(comp)
    candidates = _candidates(comp, profile, refused)
    if not candidates:
        withheld = _withheld(comp, profile, refused)
        if withheld is not None:
            return withheld
    return decide(comp, profile, candidates)


def _profile_metric(comp: Comparison, profile: Profile, arm: str) -> str:
    """The metric a profile's verdict rests on where no level names another: aggregate tok/s
    (throughput), per-user speed (balanced), the last wait judged (latency; per-user speed without one)."""
    if profile.objective == "throughput":
        return "output_tok_s"
    if profile.objective == "balanced":
        return comp.user_metric
    return (wait_metrics(comp, arm) or [comp.user_metric])[-1]


def _token_based(comp: Comparison, profile: Profile) -> bool:
    """Whether the profile's verdict reads token counts (aggregate or per-user speed, or an SLO on it)."""
    return profile.objective in ("throughput", "balanced") or \
        any(col == comp.user_metric for _, col, _, _ in _slo_checks(profile, comp))


def _chunk_counted(comp: Comparison) -> list[str]:
    """The speculative arms and the baseline whose token counts came from SSE chunks."""
    return [a for a in comp.chunk_counted if a in comp.spec_arms or a == comp.baseline]


def _candidates(comp: Comparison, profile: Profile, refused: Sequence[str]) -> list[str]:
    """The arms the profile can judge: every candidate, less those whose token counts (or the
    baseline's) came from chunks where the profile reads token counts."""
    if not _token_based(comp, profile):
        return list(comp.candidate_arms)
    return [a for a in comp.candidate_arms if a not in refused and comp.baseline not in refused]


def _withheld_counts(comp: Comparison, profile: Profile) -> Recommendation:
    """The recommendation where the arms count output tokens differently (tools or token-count
    modes): no verdict, since every verdict reads a token rate; the waits are still compared."""
    return Recommendation(
        profile=profile, verdict=Verdict.NO_VERDICT, decision=DecisionKind.NOT_ESTABLISHED, arm=None,
        up_to_concurrency=None, from_concurrency=None,
        headline=("No verdict: the arms count output tokens differently (different tools or token-count modes), so "
                  "aggregate throughput and per-user speed are not compared; time to first token and end-to-end "
                  "time are (see the notes)."),
        bands=[], reasons=[], caveats=[],
        next_experiments=["Measure every arm with one tool and one token-count mode (the server's usage counts) to "
                          "compare throughput."])


def _withheld(comp: Comparison, profile: Profile, refused: Sequence[str]) -> Recommendation | None:
    """The recommendation of a profile no arm can be judged for — the token counts came from chunks,
    or every arm besides the baseline is a control — or None where neither is why."""
    token_based = _token_based(comp, profile)
    why: Literal["chunks", "controls"]
    if token_based and comp.spec_arms:
        why = "chunks"
    elif comp.controls and not (token_based and refused):
        why = "controls"
    else:
        return None
    headline, caveats, experiments = withheld_sentences(comp, why, refused)
    return Recommendation(
        profile=profile, verdict=Verdict.NO_VERDICT, decision=DecisionKind.NOT_ESTABLISHED, arm=None,
        up_to_concurrency=None, from_concurrency=None, headline=headline, bands=[], reasons=[], caveats=caveats,
        next_experiments=experiments)


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
        bands.append(band_text(comp.delta_rows(r.arm, m).get(int(r.concurrency))))
    out["deciding_metric"], out["deciding_band"] = metrics, bands
    return out
