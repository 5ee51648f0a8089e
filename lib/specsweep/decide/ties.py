"""Ties between arms: when two candidate arms are not credibly different, the simpler one is recommended.

Two arms a and b are compared directly, not through their bands against the baseline: the curve
of y = ln(a ÷ b) against log2(concurrency) is fitted over the levels both measured in the
profile's range, with :func:`specsweep.analyze.noise.fit_metric` — the same model, noise sources
(repeats; else a per-request bootstrap floored at the assumed run-to-run noise; else the assumed
noise per run and arm) and 95 % simultaneous band as every delta curve, the band shared over the
levels of every metric the profile reads (Bonferroni). A control arm's largest deviation from the
baseline floors the band, as it floors every arm's. The arms *differ* where, for any of those
metrics at any of those levels, the band excludes 0 and the fitted difference exceeds the
profile's ``min_effect_pct`` (the rule a level's gain or loss follows); otherwise they are *tied*.

Where both arms reach the same outcome (gain, loss, no difference) at every level both were judged at,
and gain somewhere, the levels compared are those gains — the levels where the recommendation runs
speculation. Beyond them the recommendation keeps speculation off, so a difference there (the demo's
mtp and mtp-cap128 differ only above mtp's cap of 48, where both lose) cannot change what the operator
runs; judged over the whole range, such a pair came out tied in one fresh run and not in the next.

Of tied arms the simpler configuration is recommended: the one with fewer settings changed from
the baseline (:func:`changed_settings`: the embedded server's profile, speculation mode and
arguments, else the server's own reported settings), then the one listed first in the study;
never the one whose noisy margin happened to be larger.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.curves import DeltaCurve
from specsweep.analyze.noise import fit_metric
from specsweep.decide.judge import _slo_checks, wait_metrics
from specsweep.decide.profiles import Profile
from specsweep.decide.verdicts import Verdict
from specsweep.markup import md_text

#: server settings (meta.json ``server``) compared where an arm does not say how it was configured
SERVER_SETTINGS: tuple[str, ...] = (
    "max_running_requests", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens", "mem_fraction_static", "max_total_num_tokens", "tp_size", "context_length",
    "draft_max", "draft_min", "draft_p_min", "speculative_types", "parallel_slots", "speculative_draft_model_path",
)


def profile_metrics(comp: Comparison, profile: Profile, arm: str) -> list[str]:
    """The metrics a profile's verdict reads for an arm: aggregate tok/s (throughput), per-user speed and
    the waits (latency), both (balanced), plus every SLO's metric."""
    if profile.objective == "throughput":
        out = ["output_tok_s"]
    elif profile.objective == "latency":
        out = [comp.user_metric, *wait_metrics(comp, arm)]
    else:
        out = [comp.user_metric, "output_tok_s"]
    out += [col for _, col, _, _ in _slo_checks(profile, comp)]
    return list(dict.fromkeys(out))


def _in_range(profile: Profile, cs: Sequence[int]) -> list[int]:
    hi = profile.concurrency_max or 10 ** 9
    return [int(c) for c in cs if profile.concurrency_min <= c <= hi]


def difference_curve(comp: Comparison, a: str, b: str, metric: str, levels: Sequence[int],
                     family: int = 1) -> DeltaCurve | None:
    """The fitted curve of ln(a ÷ b) for one metric over ``levels`` (those both arms measured), its band
    floored by the control arms' largest deviation; None where it cannot be fitted."""
    raw_a, raw_b = comp.raw_levels.get(a), comp.raw_levels.get(b)
    if raw_a is None or raw_b is None or metric not in raw_a or metric not in raw_b:
        return None
    both = sorted(set(int(c) for c in raw_a["concurrency"]) & set(int(c) for c in raw_b["concurrency"]) & set(levels))
    if not both:
        return None
    rng = np.random.default_rng(0)  # a fixed seed: the same data always give the same call
    curve = fit_metric(metric, both, raw_a, raw_b, comp.requests.get(a), comp.requests.get(b), comp.n_boot, rng,
                       family, comp.assumed_noise_pct)
    if curve is None:
        return None
    floor = [float(np.abs(c.fitted).max()) for ctl in comp.controls if (c := comp.curve(ctl, metric)) is not None]
    if floor:
        curve.half_width = np.maximum(curve.half_width, max(floor))
    return curve


#: each candidate arm's judged levels (``judge_levels``: concurrency, outcome, …), where known
Judged = dict[str, pd.DataFrame]


def gain_levels(judged: Judged | None, a: str, b: str) -> list[int] | None:
    """The levels where two arms' recommendation runs speculation — the levels either gains at — when
    both reach the same outcome at every level both were judged at and gain somewhere; None otherwise
    (compare them over the profile's whole range)."""
    if judged is None or a not in judged or b not in judged:
        return None
    oa = dict(zip(judged[a]["concurrency"].astype(int), judged[a]["outcome"]))
    ob = dict(zip(judged[b]["concurrency"].astype(int), judged[b]["outcome"]))
    shared = sorted(set(oa) & set(ob))
    if not shared or any(oa[c] != ob[c] for c in shared):
        return None
    gains = [c for c in shared if oa[c] == "gain"]
    return gains or None


def compared_levels(comp: Comparison, profile: Profile, a: str, b: str, judged: Judged | None = None) -> list[int]:
    """The levels two arms are compared at for a tie (see the module docstring)."""
    levels = _in_range(profile, sorted(set(comp.shared_levels(a)) & set(comp.shared_levels(b))))
    gains = gain_levels(judged, a, b)
    return [c for c in levels if c in gains] if gains else levels


def first_difference(comp: Comparison, profile: Profile, a: str, b: str,
                     judged: Judged | None = None) -> tuple[str, int, float] | None:
    """(metric, concurrency, fitted Δ% of ``b`` against ``a``) at the first place the two arms credibly
    differ for the profile (see the module docstring); None where they do not (or cannot be compared)."""
    levels = compared_levels(comp, profile, a, b, judged)
    metrics = [m for m in profile_metrics(comp, profile, a) if m in profile_metrics(comp, profile, b)]
    for metric in metrics if levels else []:
        curve = difference_curve(comp, a, b, metric, levels, family=max(len(metrics), 1))
        if curve is None:
            continue
        size = (np.exp(np.abs(curve.fitted)) - 1) * 100
        hits = np.flatnonzero((curve.credible != 0) & (size > profile.min_effect_pct))
        if len(hits):
            i = int(hits[np.argmax(size[hits])])
            return metric, int(curve.concurrency[i]), float((np.exp(-curve.fitted[i]) - 1) * 100)
    return None


def differs(comp: Comparison, profile: Profile, a: str, b: str, judged: Judged | None = None) -> bool | None:
    """True where arms ``a`` and ``b`` credibly differ for the profile (see the module docstring), False
    where they are tied, None where no level in the profile's range lets them be compared."""
    levels = compared_levels(comp, profile, a, b, judged)
    if not levels:
        return None
    metrics = [m for m in profile_metrics(comp, profile, a) if m in profile_metrics(comp, profile, b)]
    if not any(difference_curve(comp, a, b, m, levels, family=max(len(metrics), 1)) is not None for m in metrics):
        return None
    return first_difference(comp, profile, a, b, judged) is not None


def tied_with(comp: Comparison, profile: Profile, best: str, others: Sequence[str],
              judged: Judged | None = None) -> list[str]:
    """The arms of ``others`` that are not credibly different from ``best`` for the profile, in their order."""
    return [o for o in others if o != best and differs(comp, profile, best, o, judged) is False]


def _args_settings(args: Sequence[Any]) -> dict[str, str]:
    """{flag: value} of a server argument list (``--flag value``, ``--flag=value``, ``--set key=value``)."""
    out: dict[str, str] = {}
    items = [str(x) for x in args]
    i = 0
    while i < len(items):
        tok = items[i]
        if tok.startswith("-"):
            if "=" in tok:
                key, _, value = tok.partition("=")
                out[key] = value
            elif i + 1 < len(items) and not items[i + 1].startswith("--"):
                value = items[i + 1]
                key = f"{tok} {value.partition('=')[0]}" if tok == "--set" else tok
                out[key] = value
                i += 1
            else:
                out[tok] = "true"
        i += 1
    return out


def settings(comp: Comparison, arm: str) -> dict[str, str]:
    """The configuration of an arm as {setting: value}: the embedded server's profile, speculation
    mode and arguments when it was one, else the server's reported settings (:data:`SERVER_SETTINGS`)."""
    meta = comp.metas[arm]
    emb = meta.embedded_server
    if emb is not None:
        out = {"profile": str(emb.get("profile")), "spec": str(emb.get("spec"))}
        out.update(_args_settings(emb.get("args") or []))
        return out
    server = meta.server
    return {k: repr(server[k]) for k in SERVER_SETTINGS if k in server and server[k] is not None}


def changed_settings(comp: Comparison, arm: str) -> list[str]:
    """The settings of an arm that differ from the baseline's (added, removed or changed), sorted."""
    mine, base = settings(comp, arm), settings(comp, comp.baseline)
    return sorted(k for k in set(mine) | set(base) if mine.get(k) != base.get(k))


def simplest(comp: Comparison, arms: Sequence[str]) -> str:
    """The simplest of ``arms``: fewest settings changed from the baseline, then first in the comparison's order."""
    order = {a: i for i, a in enumerate(comp.arms)}
    return min(arms, key=lambda a: (len(changed_settings(comp, a)), order.get(a, math.inf), a))


def resolve_tie(comp: Comparison, profile: Profile, best: str, candidates: Sequence[str],
                judged: Judged | None = None) -> tuple[str, list[str]]:
    """(the arm to recommend, the arms tied with it): ``best`` (the highest scoring) and the candidates
    tied with it form a group; the simplest of the group is recommended, the rest are its ties."""
    group = [best, *tied_with(comp, profile, best, [a for a in candidates if a != best], judged)]
    if len(group) == 1:
        return best, []
    chosen = simplest(comp, group)
    return chosen, [a for a in group if a != chosen]


def tie_sentence(comp: Comparison, arm: str, tied: Sequence[str], verdict: Verdict | None = None,
                 judged: Judged | None = None) -> str:
    """One sentence saying which arms are tied with the recommended one and why it is the one named
    (``verdict`` 'disable': the simpler one is the one judged, not recommended)."""
    def name(a: str) -> str:
        return md_text(a)

    chosen = "is the one judged" if verdict in (Verdict.DISABLE, Verdict.NO_VERDICT) else "is recommended"

    n = len(changed_settings(comp, arm))
    counts = {t: len(changed_settings(comp, t)) for t in tied}
    who = ", ".join(name(t) for t in tied)
    gains = [g for t in tied if (g := gain_levels(judged, arm, t))]
    where = ("at any level in its range" if len(gains) < len(tied) else
             "where the recommendation runs speculation ("
             + ", ".join(str(c) for c in sorted(set().union(*gains))) + "; the same outcome at every level)")
    head = f"{name(arm)} and {who} are tied: no credible difference between them for this profile {where}, so "
    if all(c > n for c in counts.values()):
        return head + (f"the simpler configuration, {name(arm)}, {chosen} (it changes {n} setting"
                       f"{'s' if n != 1 else ''} from the baseline"
                       + "".join(f", {name(t)} {c}" for t, c in counts.items()) + ").")
    return head + (f"{name(arm)} {chosen}, as the simplest configuration listed first (every one of them changes "
                   f"{n} or more settings from the baseline).")
