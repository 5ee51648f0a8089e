"""Where to measure next: untested levels where a fitted delta's sign is least certain, and the
next experiments of a recommendation (each a sentence; those that name levels or a change also a claim)."""
from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.crossover import curve_crossovers
from specsweep.decide.claims import Claim
from specsweep.decide.profiles import SYNTHETIC_KINDS, Profile
from specsweep.decide.text import deciding_word, tested_bracket


def _candidate_levels(tested: Sequence[int], lo: float, hi: float) -> list[int]:
    """Unmeasured integer levels between ``lo`` and ``hi``: geometric midpoints and powers of two."""
    out = set()
    for a, b in zip(tested, tested[1:]):
        for k in (1, 2, 3):
            out.add(int(round(2 ** (math.log2(a) + k * (math.log2(b) - math.log2(a)) / 4))))
    out |= {2 ** k for k in range(0, 14)}
    return sorted(c for c in out if lo < c < hi and c not in set(tested))


def _where_uncertain(comp: Comparison, arm: str, metric: str, lo: float, hi: float, n: int = 3) -> list[int]:
    """Up to ``n`` unmeasured levels in (lo, hi) where the fitted curve's sign is least certain (|fit| / se smallest)."""
    curve = comp.curve(arm, metric)
    cands = _candidate_levels(comp.shared_levels(arm), lo, hi)
    if curve is None or not cands:
        return cands[:n]
    def score(c: int) -> float:
        f, se = curve.predict(c)
        return abs(f) / se if se > 0 else math.inf
    return sorted(sorted(cands, key=score)[:n])


def next_experiments(comp: Comparison, profile: Profile, arm: str, judged: pd.DataFrame, metric: str,
                     advice: Claim | None) -> tuple[list[str], list[Claim]]:
    """The next experiments of a profile's recommendation, in order, and the claims among them:
    ``advice`` (a configuration change to test, from the cap sentences), where the profile's deciding
    ``metric`` crosses 0 or is least certain, repeats, real prompts, per-request samples."""
    claims = [advice] if advice is not None else []
    decided = bool((judged["outcome"] != "neutral").any())
    claims += _crossover_experiments(comp, arm, judged, metric, profile.concurrency_min,
                                     profile.concurrency_max or 10**9, profile.name, decided)
    out = [c.sentence for c in claims]
    if comp.single_run():
        out.append("Repeat every level at least 3 times (repeats=3): the noise is then measured from the "
                   "repeats rather than " + (f"assumed ({comp.assumed_noise_pct:g}% per run)"
                                             if comp.assumed_noise_pct else "taken from the curve's residuals") + ".")
    if comp.workload.kind in SYNTHETIC_KINDS:
        out.append("Re-measure both arms with prompts from real traffic (workload = a prompt file) to see "
                   "acceptance, and so the gain, on the text you actually serve.")
    if any(comp.metas[a].level_only for a in comp.arms):
        out.append("Re-measure with specsweep's sweep to get per-request samples (TTFT, TPOT, end-to-end "
                   "percentiles) and the server's running-request and acceptance gauges per level.")
    return out, claims


def _crossover_experiments(comp: Comparison, arm: str, judged: pd.DataFrame, metric: str, lo_c: float,
                           hi_c: float, profile: str, decided: bool) -> list[Claim]:
    """Where to measure next for this profile: around the break-even of the profile's own deciding
    metric (``metric``: aggregate throughput for a throughput profile, the wait for a latency one),
    or, with no credible level at all, where that metric's fitted delta is least certain."""
    out = []
    word = deciding_word(metric, comp.aggregate_basis)
    curve = comp.curve(arm, metric)
    crossings = curve_crossovers(curve) if curve is not None else []
    for r in crossings:
        mids = _where_uncertain(comp, arm, metric, r["c_low"], r["c_high"])
        if mids:
            x = float(r["crossover_concurrency"])
            lo, hi = tested_bracket(comp.shared_levels(arm), x)  # X's one bracket, as every sentence names it
            out.append(Claim(kind="experiment", arm=arm, metric=metric, levels=tuple(mids), profile=profile,
                             at=x, bounds=(lo, hi),
                             sentence=(f"Measure at {', '.join(map(str, mids))} (not yet measured, where the fitted "
                                       f"{word} delta's sign is least certain) to pin down the crossover of {word}, "
                                       f"now placed at about {x:.0f}, between the tested {lo} and {hi}.")))
    if not crossings and not decided:
        tested = comp.shared_levels(arm)
        mids = _where_uncertain(comp, arm, metric, max(lo_c, min(tested)) - 1e-9, min(hi_c, max(tested)) + 1e-9)
        if mids:
            out.append(Claim(kind="experiment", arm=arm, metric=metric, levels=tuple(mids), profile=profile,
                             sentence=(f"Levels not yet measured where the fitted {word} delta is least certain: "
                                       f"{', '.join(map(str, mids))}.")))
    return out
