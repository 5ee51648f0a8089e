"""Judging each level an arm and the baseline both measured, and the verdict over a profile's range."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from specsweep.analyze.compare import ESTIMATED_WAIT, WAIT_METRICS, Comparison, records
from specsweep.decide.profiles import Profile
from specsweep.decide.text import _fit, band_text, deciding_word
from specsweep.decide.verdicts import Verdict


def _sign(row: pd.Series | dict[str, Any] | None, min_effect: float) -> int:
    """+1 gain, −1 loss, 0 neutral for one delta row (direction-aware).

    A delta counts only where its simultaneous band excludes 0 (``credible``) and the fitted delta
    exceeds ``min_effect`` (%) in size. Rows without a fitted curve count as neutral.
    """
    if row is None:
        return 0
    flip = -1 if row["better"] == "lower" else 1
    fit = row["fit_delta_pct"] if "fit_delta_pct" in row and not pd.isna(row["fit_delta_pct"]) else row["delta_pct"]
    if pd.isna(fit) or abs(fit) <= min_effect:
        return 0  # too small to matter, however tight its band
    if "credible" in row:
        cred = int(row["credible"]) if not pd.isna(row["credible"]) else 0
    elif row.get("ci_kind", "none") != "none" and not pd.isna(row["ci_low_pct"]):
        cred = 1 if row["ci_low_pct"] > 0 else -1 if row["ci_high_pct"] < 0 else 0
    else:
        cred = 0
    return flip * cred if cred * fit > 0 else 0


def _lookup(comp: Comparison, arm: str, metric: str) -> dict[int, dict[str, Any]]:
    """{concurrency: delta row} of one arm and metric."""
    return comp.delta_rows(arm, metric)


def wait_metrics(comp: Comparison, arm: str) -> list[str]:
    """The wait metrics a latency verdict judges for an arm: TTFT/e2e percentiles, else Little's law."""
    measured = [m for m in WAIT_METRICS if comp.delta_rows(arm, m)]
    return measured or ([ESTIMATED_WAIT] if comp.delta_rows(arm, ESTIMATED_WAIT) else [])


def _wait_size(rows: dict[str, Any], m: str) -> float:
    """How much longer a user waits, in % (fitted): for e2e its own Δ%; for TTFT the extra seconds before the
    first token as a share of the baseline's end-to-end time at the same percentile, when the data has it."""
    row = rows.get(m)
    if row is None:
        return math.nan
    e2e = rows.get("e2e_" + m[len("ttft_"):]) if m.startswith("ttft_") else None
    if e2e is None or not e2e["baseline_value"]:
        return _fit(row)
    extra = float(row["baseline_value"]) * _fit(row) / 100.0
    return extra / float(e2e["baseline_value"]) * 100.0


def _latency_outcome(rows: dict[str, Any], user: str, waits: list[str],
                     min_effect: float, trust_tokens: bool) -> tuple[int, str, float]:
    """(outcome, deciding metric, signed margin %) of the latency objective at one level.

    A wait counts as longer where its band says so (credible) and its size (:func:`_wait_size`: Δ% for
    e2e, the extra TTFT as a share of the baseline's e2e for TTFT) exceeds ``min_effect``. Loss: any
    wait longer, else per-user decode speed credibly slower. Gain: decode speed (or a wait) credibly
    better, and no wait whose fitted size exceeds both ``min_effect`` and the per-user gain.
    Otherwise neutral; the deciding metric is then the one that held it back.
    """
    size = {m: _wait_size(rows, m) for m in waits}
    signs = {m: _sign(rows.get(m), 0.0) if abs(size[m]) > min_effect else 0 for m in waits}
    worse = [m for m in waits if signs[m] < 0]
    if worse:
        m = max(worse, key=lambda w: size[w])
        return -1, m, -size[m]
    su = _sign(rows.get(user), min_effect) if trust_tokens else 0
    if su < 0:
        return -1, user, _fit(rows.get(user))
    if waits == [ESTIMATED_WAIT] and su > 0 and signs[ESTIMATED_WAIT] <= 0:
        # level-only data: the wait is the Little's-law estimate, the inverse of aggregate
        # throughput; faster decoding is a latency gain only where that wait is credibly shorter
        return 0, ESTIMATED_WAIT, 0.0
    # an end-to-end wait whose fitted value is longer holds a gain back, credible or not: a
    # latency-sensitive user cares what they wait for, and on level-only data the wait (Little's
    # law) is exactly the inverse of aggregate throughput, so its zero is the aggregate crossover.
    # TTFT, a part of that wait, holds a gain back when its fitted share of the e2e time outweighs
    # the per-user gain.
    gain = max(_fit(rows.get(user)), min_effect) if trust_tokens and su > 0 else min_effect
    doubtful = [m for m in waits if size[m] > (gain if m.startswith("ttft_") else 0.0)]
    better = [m for m in waits if signs[m] > 0]
    if su > 0 or better:
        if doubtful:
            return 0, max(doubtful, key=lambda w: size[w]), 0.0
        if su > 0:
            return 1, user, _fit(rows.get(user))
        m = min(better, key=lambda w: size[w])
        return 1, m, -size[m]
    if doubtful:  # nothing credible, but a wait looks longer: name it, so the page says so
        return 0, max(doubtful, key=lambda w: size[w]), 0.0
    return 0, user if trust_tokens else (waits[0] if waits else user), 0.0


def _slo_checks(profile: Profile, comp: Comparison) -> list[tuple[str, str, float, str]]:
    """(label, column, threshold, 'min'|'max') for each SLO the profile sets."""
    checks = []
    if profile.min_user_tok_s is not None:
        checks.append((f"mean per-user speed ≥ {profile.min_user_tok_s:g} tok/s", comp.user_metric, profile.min_user_tok_s, "min"))
    if profile.max_ttft_p99_s is not None:
        checks.append((f"TTFT p99 ≤ {profile.max_ttft_p99_s:g} s", "ttft_p99_s", profile.max_ttft_p99_s, "max"))
    if profile.max_e2e_p99_s is not None:
        checks.append((f"end-to-end p99 ≤ {profile.max_e2e_p99_s:g} s", "e2e_p99_s", profile.max_e2e_p99_s, "max"))
    return checks


_ROWS: dict[int, tuple[pd.DataFrame, dict[tuple[str, int], dict[str, Any]]]] = {}


def _level_rows(levels: pd.DataFrame) -> dict[tuple[str, int], dict[str, Any]]:
    """{(arm, concurrency): row} of a comparison's levels, built once per frame."""
    hit = _ROWS.get(id(levels))
    if hit is not None and hit[0] is levels:
        return hit[1]
    if len(_ROWS) > 16:
        _ROWS.clear()
    rows = {(str(r["arm"]), int(r["concurrency"])): r for r in records(levels)}
    _ROWS[id(levels)] = (levels, rows)
    return rows


def _meets(levels: pd.DataFrame, arm: str, c: int, checks: list[tuple[str, str, float, str]]) -> bool | None:
    """Whether an arm meets every SLO at a level; None when an SLO's metric is missing."""
    row = _level_rows(levels).get((arm, int(c)))
    if row is None:
        return None
    ok = True
    for _, col, thr, kind in checks:
        if col not in row or pd.isna(row[col]):
            return None
        v = float(row[col])
        ok &= v >= thr if kind == "min" else v <= thr
    return ok


def _crossing(cs: Sequence[int], margins: Sequence[float], i: int) -> float:
    """Where the margin crosses 0 between levels i and i+1, interpolated in log2(concurrency)."""
    c1, c2, m1, m2 = cs[i], cs[i + 1], margins[i], margins[i + 1]
    if any(math.isnan(v) for v in (m1, m2)) or m1 == m2 or (m1 > 0) == (m2 > 0):
        return float(c1)
    x1, x2 = math.log2(c1), math.log2(c2)
    return 2 ** (x1 + (0 - m1) * (x2 - x1) / (m2 - m1))


def _level_value(levels: pd.DataFrame, arm: str, c: int, col: str) -> float:
    row = _level_rows(levels).get((arm, int(c)))
    if row is None or col not in row:
        return math.nan
    return float(row[col])


def judge_levels(comp: Comparison, profile: Profile, arm: str) -> pd.DataFrame:
    """One row per concurrency in the profile's range measured by both arms: outcome and why.

    Each delta counts only where it is credible (its simultaneous band excludes 0) and larger than
    ``min_effect_pct``; ``decided_by`` names the metric that decided. Rules that override the
    profile's deltas, in order: an arm with no successful requests, or no per-user figure, at a
    level loses it; an arm that fails more requests than the baseline by more than
    ``max_error_rate_increase`` loses it; then the SLOs (see the docstring of specsweep.decide).
    """
    um = comp.user_metric
    trust = arm not in comp.chunk_counted
    agg, user = _lookup(comp, arm, "output_tok_s"), _lookup(comp, arm, um)
    waits = wait_metrics(comp, arm)
    wait_rows = {m: _lookup(comp, arm, m) for m in waits}
    ttft = _lookup(comp, arm, "ttft_p99_s")
    checks = _slo_checks(profile, comp)
    hi = profile.concurrency_max or 10**9
    rows = []
    for c in sorted(agg):
        if not profile.concurrency_min <= c <= hi:
            continue
        da = float(agg[c]["delta_pct"])
        du = float(user[c]["delta_pct"]) if c in user else math.nan
        sa, su = _sign(agg[c], profile.min_effect_pct), _sign(user.get(c), profile.min_effect_pct)
        fa, fu = _fit(agg[c]), _fit(user.get(c))
        if profile.objective == "throughput":
            outcome, decided, margin = sa, "output_tok_s", fa
        elif profile.objective == "latency":
            level_rows = {m: wait_rows[m].get(c) for m in waits} | {um: user.get(c)}
            outcome, decided, margin = _latency_outcome(level_rows, um, waits, profile.min_effect_pct, trust)
        else:
            too_costly = sa < 0 and fa < -profile.max_throughput_loss_pct
            outcome = -1 if su < 0 or too_costly else (1 if su > 0 else 0)
            decided = "output_tok_s" if too_costly else um
            margin = min(fu, fa + profile.max_throughput_loss_pct)
        rule = None
        n_ok = _level_value(comp.levels, arm, c, "n_ok")
        err_a = _level_value(comp.levels, arm, c, "error_rate")
        err_b = _level_value(comp.levels, comp.baseline, c, "error_rate")
        if n_ok == 0 or (c not in user and comp.baseline in comp.arms):
            outcome, rule = -1, "no successful requests" if n_ok == 0 else "no per-user figure"
        elif not math.isnan(err_a) and err_a - (0.0 if math.isnan(err_b) else err_b) > profile.max_error_rate_increase:
            outcome, rule = -1, f"fails more requests ({err_a:.1%} vs {0.0 if math.isnan(err_b) else err_b:.1%})"
        arm_ok = _meets(comp.levels, arm, c, checks) if checks else None
        base_ok = _meets(comp.levels, comp.baseline, c, checks) if checks else None
        if rule is None and checks and arm_ok is not None and base_ok is not None and arm_ok != base_ok:
            # only a credible difference in the SLO's own metric moves a level across the line
            slo_signs = [_sign(_lookup(comp, arm, col).get(c), 0.0) for _, col, _, _ in checks]
            if base_ok and not arm_ok:
                outcome, rule = (-1, "arm breaks an SLO the baseline meets") if min(slo_signs) < 0 else \
                    (0, "within noise of the SLO")
            else:
                outcome, rule = (1, "arm meets the SLOs, the baseline does not") if max(slo_signs) > 0 else \
                    (0, "within noise of the SLO")
        elif rule is None and checks and arm_ok is False and base_ok is False:
            outcome, rule = 0, "both break an SLO"
        rows.append({
            "arm": arm, "concurrency": c,
            "aggregate_delta_pct": da, "user_delta_pct": du,
            "aggregate_fit_pct": fa, "user_fit_pct": fu,
            "aggregate_band": band_text(agg[c]),
            "aggregate_sign": sa,  # +1/−1 where the aggregate Δ is credible and beyond the minimum effect, else 0
            "ttft_p99_delta_pct": float(ttft[c]["delta_pct"]) if c in ttft else math.nan,
            "arm_meets_slo": arm_ok, "baseline_meets_slo": base_ok, "rule": rule,
            "decided_by": decided if rule is None else rule,
            "margin": margin if rule is None and not math.isnan(margin) else (1.0 if outcome > 0 else -1.0 if outcome < 0 else 0.0),
            "outcome": {1: "gain", -1: "loss", 0: "neutral"}[outcome],
        })
    return pd.DataFrame(rows)


def _verdict(judged: pd.DataFrame) -> tuple[Verdict, float | None, float | None]:
    outs = judged["outcome"].tolist()
    cs = judged["concurrency"].tolist()
    margins = judged["margin"].tolist()
    if not outs:
        return Verdict.DISABLE, None, None
    if "loss" not in outs:
        return (Verdict.ENABLE, None, None) if "gain" in outs else (Verdict.DISABLE, None, None)
    if "gain" not in outs:
        return Verdict.DISABLE, None, None
    gains = [i for i, o in enumerate(outs) if o == "gain"]
    losses = [i for i, o in enumerate(outs) if o == "loss"]
    if max(gains) < min(losses):
        # only neutral levels can lie between the last gain and the first loss: X is where the
        # deciding margin crosses zero just before that loss
        return Verdict.ENABLE_UP_TO, _crossing(cs, margins, min(losses) - 1), None
    if max(losses) < min(gains):
        j = min(gains)
        return Verdict.ENABLE_FROM, None, _crossing(cs, margins, j - 1)
    return Verdict.MIXED, None, None


def _levels_of(judged: pd.DataFrame, outcome: str, rule: str | None = "any") -> list[int]:
    sel = judged["outcome"] == outcome
    if rule is None:
        sel &= judged["rule"].isna()
    elif rule != "any":
        sel &= judged["rule"] == rule
    return [int(c) for c in judged.loc[sel, "concurrency"]]


def carried_by_one(judged: pd.DataFrame) -> int | None:
    """The one level a verdict rests on, where exactly one of three or more judged levels is a gain or
    a loss and its neighbours show nothing (a stall or a pause in one level's runs reads exactly like
    this); None otherwise."""
    outs = judged["outcome"].tolist()
    decisive = [i for i, o in enumerate(outs) if o != "neutral"]
    if len(outs) < 3 or len(decisive) != 1:
        return None
    return int(judged["concurrency"].iloc[decisive[0]])


#: the words beside a neutral level's band for the rules that leave a level neutral, whatever its band says
NEUTRAL_RULE_WORDS: dict[str, str] = {
    "both break an SLO": "both arms miss the SLO here",
    "within noise of the SLO": "the SLO line lies within noise here",
}


def why_neutral(judged: pd.DataFrame, c: int, row: dict[str, Any] | pd.Series | None, min_effect_pct: float,
                basis: str | None = None) -> str:
    """Why the neutral level ``c`` of ``judged`` counts for nothing, in the words the page puts beside
    its delta ``row``: 'not credible' only where the band reaches 0 (or there is none); for a band clear
    of 0 the rule that held the level (both arms miss the SLO, …), its size below ``min_effect_pct`` (%),
    or the metric that decided it instead; '' where the band's own text already says why (its own
    measured Δ points the other way). ``basis``: the comparison's ``aggregate_basis``."""
    level = judged[judged["concurrency"] == c]
    rule = level["rule"].iloc[0] if not level.empty else None
    if isinstance(rule, str):
        return NEUTRAL_RULE_WORDS.get(rule, rule)
    if row is None or pd.isna(row["ci_low_pct"]) or row["ci_low_pct"] <= 0 <= row["ci_high_pct"]:
        return "not credible"
    if row.get("credible", 1) == 0:
        return ""
    if abs(_fit(row)) <= min_effect_pct:
        return f"smaller than the {min_effect_pct:g}% minimum effect"
    decided = level["decided_by"].iloc[0] if not level.empty else None
    return f"held back by {deciding_word(str(decided), basis)}" if decided else "neutral"
