"""Turn a comparison and a workload profile into a recommendation with its reasons.

Every sentence is computed from the comparison: the numbers quoted are the data's, and which
sentences appear depends on what the data shows (caps, effective concurrency, SLOs, intervals,
workload kind). Nothing here knows about any particular data set.

Judging one level (an arm against the baseline at one concurrency both measured), on the fitted
delta curves of :mod:`specsweep.compare`:

- A delta counts as a *gain* or a *loss* only where it is credible — its 95 % simultaneous band
  excludes 0 — and its fitted value exceeds ``min_effect_pct``; otherwise it is *neutral* (no
  measurable difference).
- An arm with no successful requests (or no per-user figure) at a level loses it; so does one that
  fails more requests than the baseline by more than ``max_error_rate_increase``.
- ``throughput``: the aggregate output tok/s delta decides.
- ``latency``: the whole wait — TTFT and end-to-end p50/p99, or the Little's-law estimate of the
  mean request time for level-only data — and per-user speed. Loss where any wait is credibly
  longer (TTFT sized by its extra seconds as a share of the baseline's e2e), else where per-user
  speed is credibly slower; gain where per-user speed (or a wait) is credibly better, no end-to-end
  wait's fitted value is longer and no TTFT's fitted increase outweighs the per-user gain. On
  level-only data (the wait is the Little's-law estimate, the inverse of aggregate throughput) a
  gain needs that wait credibly shorter, so the latency crossover is the aggregate crossover.
  ``decided_by`` names the deciding metric.
- Control arms (:attr:`Comparison.controls`) are never candidates.
- ``balanced``: a gain needs per-user speed credibly up and aggregate not credibly down by more than
  ``max_throughput_loss_pct``; a loss is per-user speed credibly down, or aggregate down by more.
- SLOs come first, but only a credible difference in the SLO's own metric moves a level across the
  line: where the arm breaks an SLO the baseline meets, a loss; where it meets every SLO the
  baseline breaks, a gain; otherwise neutral ("within noise of the SLO", "both break an SLO").
- Arms whose token counts came from SSE chunks get no throughput, balanced or per-user-SLO verdict
  (``no_verdict``); their latency verdict uses the waits only.

The verdict follows the outcomes over the profile's range: all gains (or neutral) → enable; all
losses or neutral → disable; gains then losses → enable up to X, where X is where the deciding
metric's fitted curve crosses 0 between the last gain and the first loss (the last gain when it
does not cross there); losses then gains → enable from X; anything else → mixed, level by level.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specsweep.compare import ESTIMATED_WAIT, WAIT_METRICS, Comparison, info, smallest_detectable_pct, zero_between
from specsweep.markup import md_text
from specsweep.metrics import metric_info

Objective = Literal["latency", "throughput", "balanced"]
Outcome = Literal["gain", "loss", "neutral"]
Verdict = Literal["enable", "disable", "enable_up_to", "enable_from", "mixed", "no_verdict"]
SYNTHETIC_KINDS = {"random-ids", "fixed-ids", "random-text"}


class Profile(BaseModel):
    """What the operator cares about. Units: concurrency in requests, speeds in tok/s, times in s."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    objective: Objective
    concurrency_min: int = Field(1, ge=1)
    concurrency_max: int | None = Field(None, ge=1)
    min_user_tok_s: float | None = Field(None, gt=0, description="SLO: per-user speed at least this (tok/s)")
    max_ttft_p99_s: float | None = Field(None, gt=0, description="SLO: TTFT p99 at most this (s)")
    max_e2e_p99_s: float | None = Field(None, gt=0, description="SLO: end-to-end p99 at most this (s)")
    max_throughput_loss_pct: float = Field(5.0, ge=0, description="balanced: tolerated aggregate loss (%)")
    min_effect_pct: float = Field(2.0, ge=0, description="smaller deltas count as no difference (%), intervals or not")
    max_error_rate_increase: float = Field(0.01, ge=0, le=1, description="more failed requests than the baseline by this fraction loses a level")
    description: str = ""

    @model_validator(mode="after")
    def _range(self) -> "Profile":
        if self.concurrency_max is not None and self.concurrency_max < self.concurrency_min:
            raise ValueError(f"concurrency_max ({self.concurrency_max}) is below concurrency_min ({self.concurrency_min})")
        return self


def parse_profile(raw: dict[str, Any] | Profile) -> Profile:
    """Validate a profile given as a dict (e.g. a notebook parameter); errors name the field."""
    if isinstance(raw, Profile):
        return raw
    if not isinstance(raw, dict):
        raise ValueError(f"profile must be a mapping with at least 'name' and 'objective', got {raw!r}")
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"'{'.'.join(map(str, e['loc'])) or 'profile'}': {e['msg']}" for e in exc.errors())
        raise ValueError(f"profile {raw.get('name', '?')!r}: {problems} "
                         "(objective is one of latency, throughput, balanced)") from exc


@dataclass
class Band:
    """Consecutive tested levels where an arm has the same outcome for a profile."""

    arm: str
    c_from: int
    c_to: int
    outcome: Outcome
    aggregate_delta_pct: tuple[float, float]
    user_delta_pct: tuple[float, float]
    sentence: str
    #: set when a rule (no successful requests, more failures, an SLO) decided the outcome rather
    #: than the profile's deltas
    rule: str | None = None


@dataclass
class Recommendation:
    """A verdict for one profile, with the evidence behind it."""

    profile: Profile
    verdict: Verdict
    arm: str | None
    up_to_concurrency: float | None
    from_concurrency: float | None
    headline: str
    bands: list[Band]
    reasons: list[str]
    caveats: list[str]
    next_experiments: list[str]
    #: one row per (arm, concurrency) in range: deltas, SLO status, outcome
    levels: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def next_experiment(self) -> str | None:
        return self.next_experiments[0] if self.next_experiments else None

    def to_markdown(self, omit: Sequence[str] = ()) -> str:
        """The recommendation as Markdown: headline, one row per level, reasons, caveats, next experiments.

        Lines in ``omit`` (shown once for every profile elsewhere) are left out.
        """
        lines = [f"### {md_text(self.profile.name)}", "", f"**{self.headline}**", ""]
        if self.profile.description:
            lines += [f"*{md_text(self.profile.description)}*", ""]
        if not self.levels.empty and self.arm is not None or (not self.levels.empty and self.verdict == "disable"):
            lv = self.levels[self.levels["arm"] == (self.arm or self.levels["arm"].iloc[0])]
            lines += ["| concurrency | outcome | decided by | aggregate Δ [95% band] | per-user Δ |", "|---|---|---|---|---|"]
            for r in lv.itertuples():
                decided = r.decided_by if isinstance(r.rule, str) else _DECIDING.get(r.decided_by, r.decided_by)
                lines.append(f"| {r.concurrency} | {r.outcome} | {decided} | {r.aggregate_band} | "
                             f"{_pct(r.user_delta_pct) if not math.isnan(r.user_delta_pct) else 'n/a'} |")
            lines.append("")
        if self.reasons:
            lines += ["**Why**", ""] + [f"- {r}" for r in self.reasons if r not in omit] + [""]
        caveats = [c for c in self.caveats if c not in omit]
        if caveats:
            lines += ["**Caveats for this profile**", ""] + [f"- {c}" for c in caveats] + [""]
        experiments = [e for e in self.next_experiments if e not in omit]
        if experiments:
            lines += ["**Next experiment**", ""] + [f"{i}. {e}" for i, e in enumerate(experiments, start=1)]
        return "\n".join(lines)


# ------------------------------------------------------------------------------------- helpers


def _pct(x: float) -> str:
    return f"{x:+.0f}%" if abs(x) >= 9.5 else f"{x:+.1f}%"


def _range_pct(r: tuple[float, float]) -> str:
    lo, hi = r
    if math.isnan(lo):
        return "n/a"
    return _pct(lo) if abs(hi - lo) < 0.05 else f"{_pct(lo)} to {_pct(hi)}"


def _levels_text(cs: Sequence[int]) -> str:
    cs = list(cs)
    if len(cs) == 1:
        return f"concurrency {cs[0]}"
    return f"concurrency {', '.join(map(str, cs[:-1]))} and {cs[-1]}"


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


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


WAIT_WORDS: dict[str, str] = {
    "ttft_p50_s": "waits longer for its first token (TTFT p50)",
    "ttft_p99_s": "waits longer for its first token at the tail (TTFT p99)",
    "e2e_p50_s": "takes longer end to end (e2e p50)",
    "e2e_p99_s": "takes longer end to end at the tail (e2e p99)",
    ESTIMATED_WAIT: "takes longer per request in total, queueing included (Little's-law estimate)",
}


_DECIDING: dict[str, str] = {
    "output_tok_s": "aggregate throughput", "user_tok_s_mean": "per-user decode speed",
    "request_tok_s_mean": "per-request speed", ESTIMATED_WAIT: "e2e (Little's-law estimate)",
    "ttft_p50_s": "TTFT p50", "ttft_p99_s": "TTFT p99", "e2e_p50_s": "e2e p50", "e2e_p99_s": "e2e p99",
}


def wait_metrics(comp: Comparison, arm: str) -> list[str]:
    """The wait metrics a latency verdict judges for an arm: TTFT/e2e percentiles, else Little's law."""
    measured = [m for m in WAIT_METRICS if comp.delta_rows(arm, m)]
    return measured or ([ESTIMATED_WAIT] if comp.delta_rows(arm, ESTIMATED_WAIT) else [])


def _fit(row: pd.Series | dict[str, Any] | None) -> float:
    if row is None:
        return math.nan
    return float(row["fit_delta_pct"]) if not pd.isna(row["fit_delta_pct"]) else float(row["delta_pct"])


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
    rows = {(str(r["arm"]), int(r["concurrency"])): r for r in levels.to_dict("records")}
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


# ---------------------------------------------------------------------------------- judgement


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
    ``max_error_rate_increase`` loses it; then the SLOs (see the module docstring).
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
            "aggregate_band": _band_text(agg[c]),
            "ttft_p99_delta_pct": float(ttft[c]["delta_pct"]) if c in ttft else math.nan,
            "arm_meets_slo": arm_ok, "baseline_meets_slo": base_ok, "rule": rule,
            "decided_by": decided if rule is None else rule,
            "margin": margin if rule is None and not math.isnan(margin) else (1.0 if outcome > 0 else -1.0 if outcome < 0 else 0.0),
            "outcome": {1: "gain", -1: "loss", 0: "neutral"}[outcome],
        })
    return pd.DataFrame(rows)


def _band_text(row: pd.Series | dict[str, Any] | None) -> str:
    """'+12% [+3%, +21%]' for a delta row with a band, '+12% (no interval)' without."""
    if row is None:
        return "n/a"
    if pd.isna(row["ci_low_pct"]):
        return f"{_pct(row['delta_pct'])} (no interval)"
    band = f"[{_pct(row['ci_low_pct'])}, {_pct(row['ci_high_pct'])}]"
    if abs(_fit(row) - row["delta_pct"]) >= 0.5:  # the band is around the fitted curve: show both
        return f"{_pct(row['delta_pct'])} (fitted {_pct(_fit(row))} {band})"
    return f"{_pct(row['delta_pct'])} {band}"


def _bands(judged: pd.DataFrame, arm: str, label: str) -> list[Band]:
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


def _verdict(judged: pd.DataFrame) -> tuple[Verdict, float | None, float | None]:
    outs = judged["outcome"].tolist()
    cs = judged["concurrency"].tolist()
    margins = judged["margin"].tolist()
    if not outs:
        return "disable", None, None
    if "loss" not in outs:
        return ("enable", None, None) if "gain" in outs else ("disable", None, None)
    if "gain" not in outs:
        return "disable", None, None
    gains = [i for i, o in enumerate(outs) if o == "gain"]
    losses = [i for i, o in enumerate(outs) if o == "loss"]
    if max(gains) < min(losses):
        # only neutral levels can lie between the last gain and the first loss: X is where the
        # deciding margin crosses zero just before that loss
        return "enable_up_to", _crossing(cs, margins, min(losses) - 1), None
    if max(losses) < min(gains):
        j = min(gains)
        return "enable_from", None, _crossing(cs, margins, j - 1)
    return "mixed", None, None


# ------------------------------------------------------------------------------------ sentences


def _throughput_sentence(comp: Comparison, arm: str, label: str, judged: pd.DataFrame, min_effect: float) -> str:
    d = comp.delta(arm, "output_tok_s")
    d = d[d["concurrency"].isin(judged["concurrency"])]
    signs = [_sign(r, min_effect) for _, r in d.iterrows()]
    ups = [f"{_pct(r.delta_pct)} at {int(r.concurrency)}" for (_, r), s in zip(d.iterrows(), signs) if s > 0]
    downs = [f"{_pct(r.delta_pct)} at {int(r.concurrency)}" for (_, r), s in zip(d.iterrows(), signs) if s < 0]
    flat = [f"{_pct(r.delta_pct)} at {int(r.concurrency)}" for (_, r), s in zip(d.iterrows(), signs) if s == 0]
    parts = []
    if ups:
        parts.append(f"credibly raises aggregate output throughput ({', '.join(ups)})")
    if downs:
        parts.append(f"credibly lowers it ({', '.join(downs)})")
    if flat:
        what = "it" if parts else "aggregate output throughput"
        parts.append(f"does not credibly change {what} ({', '.join(flat)}: within the band or ±{min_effect:g}%)")
    joined = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1] if parts else ""
    text = f"{label} " + (joined or "was not compared on aggregate throughput") + "."
    cx = comp.crossover(arm, "output_tok_s")
    for _, r in cx.iterrows():
        text += (f" The aggregate crossover is at about {r.crossover_concurrency:.0f} concurrent requests "
                 f"(where the fitted delta curve crosses 0, between {r.c_low} and {r.c_high}).")
    return text


def _user_sentence(comp: Comparison, arm: str, label: str, judged: pd.DataFrame, min_effect: float) -> str:
    minfo = info(comp.user_metric)
    d = comp.delta(arm, comp.user_metric)
    d = d[d["concurrency"].isin(judged["concurrency"])]
    if d.empty:
        return ""
    lo, hi = d["delta_pct"].min(), d["delta_pct"].max()
    what = minfo.label[0].lower() + minfo.label[1:]
    where = "every level both arms measured" if any(comp.unshared_levels(arm).values()) else "every tested level"
    signs = [_sign(r, min_effect) for _, r in d.iterrows()]
    if all(x > 0 for x in signs):
        return f"{label} makes each request credibly faster at {where}: {what} {_pct(lo)} to {_pct(hi)}."
    if all(x < 0 for x in signs):
        return f"{label} makes each request credibly slower at {where}: {what} {_pct(lo)} to {_pct(hi)}."
    if all(x == 0 for x in signs):
        return (f"{label}'s {what} differs by {_pct(lo)} to {_pct(hi)}, but at no level credibly "
                f"(within the band or ±{min_effect:g}%).")
    word = {1: "faster", -1: "slower", 0: "no measurable difference"}
    return (f"{label}'s effect on {what}: "
            + ", ".join(f"{_pct(r.delta_pct)} at {int(r.concurrency)} ({word[x]})" for (_, r), x in zip(d.iterrows(), signs))
            + ".")


def _levels_of(judged: pd.DataFrame, outcome: str, rule: str | None = "any") -> list[int]:
    sel = judged["outcome"] == outcome
    if rule is None:
        sel &= judged["rule"].isna()
    elif rule != "any":
        sel &= judged["rule"] == rule
    return [int(c) for c in judged.loc[sel, "concurrency"]]


def _headline(verdict: Verdict, label: str, criterion: str, judged: pd.DataFrame, span: str,
              up_to: float | None, from_c: float | None, slo: str | None) -> str:
    gains, losses, flat = (_levels_of(judged, o) for o in ("gain", "loss", "neutral"))

    def at(cs: list[int]) -> str:
        return ", ".join(map(str, cs))

    if verdict == "enable" and slo:
        kept = _levels_of(judged, "gain", "arm meets the SLOs, the baseline does not")
        both = [c for c in gains if c not in kept]
        parts = []
        if kept:
            parts.append(f"it keeps the SLO ({slo}) where the baseline does not (concurrency {at(kept)})")
        if both:
            parts.append(f"it delivers more aggregate throughput where both keep it ({at(both)})")
        neither = _levels_of(judged, "neutral", "both break an SLO")
        if neither:
            parts.append(f"neither arm keeps it at {at(neither)}")
        rest = [c for c in flat if c not in neither]
        if rest:
            parts.append(f"no measurable difference at {at(rest)}")
        return f"Enable {label}: " + "; ".join(parts) + "."
    if verdict == "enable":
        if not flat:
            return f"Enable {label}: it wins on {criterion} at every tested concurrency in {span}."
        return (f"Enable {label}: it wins on {criterion} at concurrency {at(gains)} and makes no measurable "
                f"difference at {at(flat)}.")
    if verdict == "disable":
        if not losses:
            return (f"No measurable difference on {criterion} across concurrency {span}: keep speculation off "
                    "unless more data shows a gain.")
        if not flat:
            return f"Keep speculation off: it loses on {criterion} at every tested concurrency in {span}."
        return (f"Keep speculation off: it loses on {criterion} at concurrency {at(losses)} and makes no "
                f"measurable difference at {at(flat)}.")
    if verdict == "enable_up_to":
        return (f"Enable {label} up to about {up_to:.0f} concurrent requests; above that it loses on "
                f"{criterion.split(' under')[0]} — keep it off there (or route high-concurrency traffic to a pool "
                "without it).")
    if verdict == "enable_from":
        return f"Enable {label} from about {from_c:.0f} concurrent requests up; below that it loses on {criterion}."
    return (f"Mixed: {label} wins on {criterion} at concurrency {at(gains)} and loses at {at(losses)}; "
            "see the bands.")


def _cap_sentences(comp: Comparison, arm: str, label: str, judged: pd.DataFrame,
                   min_effect: float) -> tuple[list[str], str | None]:
    """Reasons about the arm's running-request cap, and the experiment that would test it."""
    cap = comp.caps.get(arm)
    base_cap = comp.caps.get(comp.baseline)
    losses = judged.loc[judged["aggregate_delta_pct"] < -min_effect, "concurrency"].tolist()
    max_c = int(comp.levels["concurrency"].max())
    if cap is None or cap >= max_c or not losses:
        return [], None
    above = [c for c in losses if c > cap]
    if not above:
        return [], None
    meta_server = comp.metas[arm].get("server") or {}
    reasons = [
        f"The {label} server ran with max_running_requests = {cap}"
        + (f" (the baseline's was {base_cap})" if base_cap else " (the baseline set none)")
        + f", below the {max_c} concurrent requests tested; "
        + ("every level where its aggregate throughput is lower" if len(above) == len(losses) else "the levels where it is lowest")
        + f" ({', '.join(map(str, above))}) " + ("lies" if len(above) == len(losses) else "lie")
        + " above that cap, so the cap is the leading hypothesis for the lower throughput there: "
        "requests beyond it queue instead of joining the batch."
    ]
    lv = comp.arm_levels(arm)
    measured = lv["decoding_concurrency"] if "decoding_concurrency" in lv and lv["decoding_concurrency"].notna().any() else None
    col = "decoding_concurrency" if measured is not None else "concurrency_estimate"
    kind = "measured decoding concurrency" if measured is not None else "estimated effective concurrency"
    how = "Σ decode time ÷ window" if measured is not None else "aggregate ÷ per-request tok/s"
    high = lv[lv["concurrency"] >= min(above)]
    est = high[col].dropna()
    plateau = float(est.median()) if len(est) else math.nan
    about = (f"{est.min():.0f}" if round(est.min()) == round(est.max()) else f"{est.min():.0f}–{est.max():.0f}") if len(est) else "?"
    if not math.isnan(plateau) and plateau < 0.75 * cap:
        vals = ", ".join(f"{v:.1f} at {int(c)}" for c, v in zip(lv["concurrency"], lv[col]) if c >= min(above) or v >= 0.75 * plateau)
        why = [f"But the {kind} of {label} ({how}) levels off at about {about} ({vals}), well below the cap of {cap}: "
               "fewer requests were being served at once than the cap allows, so the cap cannot be the whole story."]
        others = []
        if meta_server.get("mem_fraction_static") is not None:
            others.append(f"a smaller KV cache (mem_fraction_static {meta_server['mem_fraction_static']:g}"
                          + (f", draft model {meta_server['draft_memory_gb_per_rank']:g} GB per rank" if meta_server.get("draft_memory_gb_per_rank") else "")
                          + ") that admits fewer requests")
        else:
            others.append("KV-cache or state memory that admits fewer requests than the cap")
        others.append("the extra draft and verify compute per step once the GPU is saturated")
        if any("not published" in v for v in (comp.metas[arm].get("metric_definitions") or {}).values()):
            others.append("the unknown definition of the published per-request metric, which moves this estimate")
        why.append("Other candidates: " + "; ".join(others) + ".")
        gauge_sentences, memory_bound = _server_gauge_sentences(lv, above, cap, label)
        why.extend(gauge_sentences)
        base_lv = comp.arm_levels(comp.baseline)
        bvals = base_lv[base_lv["concurrency"].isin(above)][col].dropna()
        if len(bvals):
            why.append(f"For comparison, the baseline reaches {', '.join(f'{v:.0f}' for v in bvals)} at "
                       f"{', '.join(map(str, base_lv[base_lv['concurrency'].isin(above)]['concurrency']))}.")
        reasons.extend(why)
        expect = (f"the {kind} (about {about}) is well below {cap}, so if throughput at "
                  f"{', '.join(map(str, above))} stays near today's, the cap is not the cause and the limit lies elsewhere")
        if memory_bound:
            mf = meta_server.get("mem_fraction_static")
            return reasons, (f"The cap did not bind — the server's gauges show a full KV pool below it — so give {label} "
                             "more KV memory rather than a higher cap: re-run with a larger --mem-fraction-static"
                             + (f" (now {mf:g})" if mf else "") + " or a smaller draft configuration, and watch "
                             "the token-usage and running-requests gauges.")
    else:
        if not math.isnan(plateau):
            reasons.append(f"The {kind} of {label} ({how}) sits near the cap at those levels (about {about} of {cap}), "
                           "consistent with the cap binding.")
        reasons.extend(_server_gauge_sentences(lv, above, cap, label)[0])
        expect = "if the cap binds, aggregate throughput above it should rise"
    flag = "--max-running-requests" if (meta_server.get("name") or "sglang") == "sglang" else "the running-request limit (vLLM --max-num-seqs)"
    experiment = (f"Re-run {label} with {flag} {max_c} to test whether the cap causes the lower throughput: {expect}. "
                  "Watch the running and queued request gauges and KV usage during the run.")
    return reasons, experiment


def _server_gauge_sentences(lv: pd.DataFrame, above: list[int], cap: int, label: str) -> tuple[list[str], bool]:
    """What the server's own gauges said at the levels above the cap (measured runs only), and
    whether they show admission limited by memory (running below the cap with a full pool)."""
    out = []
    below_cap = full = False
    high = lv[lv["concurrency"].isin(above)]
    if "server_running_max" in high and high["server_running_max"].notna().any():
        most = int(high["server_running_max"].max())
        below_cap = most < cap
        where = ", ".join(map(str, above))
        if below_cap:
            out.append(f"The server's own gauge agrees: {label} never ran more than {most} requests at once at "
                       f"{where} (running-requests gauge, polled during the levels), below its cap of {cap}.")
        else:
            out.append(f"The server's own gauge agrees: {label} ran up to its cap of {cap} requests at once at "
                       f"{where} (running-requests gauge, polled during the levels).")
    if "server_kv_usage_max" in high and high["server_kv_usage_max"].notna().any():
        usage = float(high["server_kv_usage_max"].max())
        if usage >= 0.9:
            full = True
            out.append(f"Its KV/token pool was {usage:.0%} full there: memory, not the cap, limited admission."
                       if below_cap else
                       f"Its KV/token pool was also {usage:.0%} full there, so lifting the cap alone would soon "
                       "run into memory.")
        else:
            out.append(f"Its KV/token pool peaked at {usage:.0%} there, so memory did not limit admission.")
    return out, below_cap and full


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


def drift_sentences(comp: Comparison) -> list[str]:
    """What the data say about drift and noise between arms: the sentinel's drift estimate, the
    control arms' deviation, or (neither, and no interleaved repeats) the risk and how to remove it."""
    out = []
    d = comp.drift
    if d is not None:
        where = ", ".join(f"{md_text(comp.labels.get(a, a))} at {', '.join(str(c) for c in g['concurrency'])}"
                          for a, g in d.pairs.groupby("arm"))
        if d.corrected:
            pct, se = d.total_pct("output_tok_s")
            minutes = d.span_s / 60
            what = (f"a drift of {pct:+.1f}% ± {se:.1f}% in aggregate throughput over the study's {minutes:.0f} minutes"
                    if d.credible() else f"no measurable drift in aggregate throughput ({pct:+.1f}% ± {se:.1f}% over "
                    f"{minutes:.0f} minutes)")
            out.append(f"Sentinel runs ({where}, measured again at the end) show {what}; every run was corrected for "
                       "it, linearly in time, and each band widened by what that correction leaves uncertain.")
        else:
            worst = float(d.pairs["delta_pct"].abs().max())
            out.append(f"Sentinel runs ({where}, measured again at the end) differ from the earlier runs by up to "
                       f"{worst:.1f}% in aggregate throughput; without timestamps the runs cannot be corrected, so "
                       "every band is at least that wide.")
    for a, dev in comp.control_deviation("output_tok_s").items():
        out.append(f"Control arm {md_text(comp.labels.get(a, a))} is configured like the baseline: it differs from it "
                   f"by up to {dev:.1f}% in aggregate throughput from noise and drift alone. It is never a candidate, "
                   "every other arm's band is at least as wide as its deviation, and a difference it shows too is "
                   "not established.")
    study = comp.metas.get(comp.baseline, {}).get("study") or {}
    interleaved = isinstance(study, dict) and int(study.get("repeats") or 1) >= 2
    if d is None and not comp.controls and not interleaved:
        out.append("The arms were measured one after the other with no sentinel run and no control arm: a slow drift "
                   "of the machine between them (heat, a noisy neighbour, a growing cache) would read as a difference "
                   "between the arms. To measure it, re-measure the baseline at one or two levels at the end (a "
                   "study's sentinel setting) or add a control arm configured like the baseline (control: true); to "
                   "cancel it, interleave the arms (order: abba, or repeats ≥ 2).")
    return out


def _caveats(comp: Comparison, profile: Profile, arms: Sequence[str]) -> list[str]:
    out: list[str] = drift_sentences(comp)
    if comp.single_run():
        noises = [c.noise for (a, m), c in comp.curves.items() if m == "output_tok_s" and a in arms]
        if comp.assumed_noise_pct and any(n.startswith("the levels' scatter") for n in noises):
            out.append(f"One run per level: run-to-run noise cannot be measured, and the levels scatter about a "
                       f"smooth curve more than the assumed {comp.assumed_noise_pct:g}% per run would explain, so "
                       "that larger scatter is used (see Definitions) and the bands are wider for it. Ask for 3 runs "
                       "per level (repeats=3) to measure the noise.")
        elif comp.assumed_noise_pct:
            checked = any("too few to check" in n for n in noises)
            out.append(f"One run per level: run-to-run noise cannot be measured, so {comp.assumed_noise_pct:g}% per "
                       "run is assumed (for per-request statistics, at least that or the spread of each run's "
                       "requests)" + ("; with so few levels the data cannot check it against their own scatter" if
                                      checked else "") + ". Were the real noise larger, the bands would be too narrow. "
                       "Ask for 3 runs per level (repeats=3) to measure it.")
        else:
            out.append("One run per level: run-to-run noise cannot be measured, so it is estimated from the residuals "
                       "of the fitted curve (and, for per-request statistics, from each run's requests, which cannot "
                       "see run-to-run variation). Ask for 3 runs per level (repeats=3) to measure it.")
    unclear: dict[tuple[str, str], list[str]] = {}
    for a in comp.arms:
        for col, text in (comp.metas[a].get("metric_definitions") or {}).items():
            if "not published" in text or "unknown" in text:
                unclear.setdefault((col, text), []).append(a)
    for (col, text), who in unclear.items():
        whose = "all arms" if len(who) == len(comp.arms) else "arm " + ", ".join(f"'{a}'" for a in who)
        name = info(col).label[0].lower() + info(col).label[1:]
        out.append(f"The definition of {name} was not fully published for {whose} (see Definitions), so compare "
                   "it with other tools' figures with care.")
    kind = comp.workload.get("kind")
    if kind in SYNTHETIC_KINDS:
        out.append(f"Prompts were synthetic token IDs ('{kind}') with a fixed output length. Speculative acceptance on such "
                   "prompts is not representative of real traffic — it is often inflated, because degenerate, repetitive "
                   "continuations are easy to draft — so gains on real prompts can be smaller.")
    for a in arms:
        m = comp.metas[a]
        seen = (m.get("server") or {}).get("observed_accept_length")
        if seen:
            out.append(f"Arm '{a}': the only acceptance-length figure is {seen:.2f}, from a smoke test outside the sweep, not per level.")
    if any((comp.metas[a].get("server") or {}).get("simulated") for a in comp.arms):
        out.append("Measured against specsweep's simulated reference server, not a real GPU server: the numbers show the "
                   "method and the model's behaviour, not any hardware's.")
    lv = comp.levels
    if "error_rate" in lv and (lv["error_rate"].fillna(0) > 0).any():
        bad = lv[lv["error_rate"].fillna(0) > 0]
        out.append("Some requests failed (" + ", ".join(f"{r.arm} at {int(r.concurrency)}: {r.error_rate:.1%}" for r in bad.itertuples()) + "); throughput counts successful requests only.")
    if "short_outputs" in lv and (lv["short_outputs"].fillna(0) > 0).any():
        bad = lv[lv["short_outputs"].fillna(0) > 0]
        out.append("The server returned fewer tokens than requested (ignore_eos not honoured) for some requests ("
                   + ", ".join(f"{r.arm} at {int(r.concurrency)}: {int(r.short_outputs)}" for r in bad.itertuples()) + ").")
    if "ttft_p99_s" not in lv or lv["ttft_p99_s"].isna().all():
        out.append("No latency percentiles (TTFT, end-to-end) are in the data: the wait is a Little's-law estimate from "
                   "aggregate throughput, so latency verdicts rest on per-request speed and that estimate.")
    if "client_cpu_cores" in lv and (lv["client_cpu_cores"].fillna(0) > 0.7).any():
        out.append("The benchmark client used more than 0.7 of a core at some levels; its timestamps may lag there.")
    return out


# ----------------------------------------------------------------------------------------- main


def _deciding_word(comp: Comparison, metric: str) -> str:
    """A short name for the metric that decided a level."""
    return _DECIDING.get(metric, metric)


def _wait_note(comp: Comparison, arm: str, judged: pd.DataFrame, min_effect: float) -> str:
    """'faster once running (+62% per-user at 128), but waits longer for its first token (TTFT p50): +106% at 128'.

    Empty unless a wait metric decided (or held back) a level. Fitted deltas; "within noise" where not credible.
    """
    by_metric: dict[str, list[str]] = {}
    faster = []
    waits = wait_metrics(comp, arm)
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
            if credible or m == r.decided_by:
                by_metric.setdefault(m, []).append(f"{_pct(row['delta_pct'])} at {c}" + ("" if credible else " (within noise)"))
        if not math.isnan(r.user_fit_pct) and r.user_fit_pct > min_effect:
            urow = _lookup(comp, arm, comp.user_metric).get(int(r.concurrency))
            sure = urow is not None and _sign(urow, min_effect) > 0
            faster.append(f"{_pct(r.user_delta_pct)} per-user at {int(r.concurrency)}" + ("" if sure else " (within noise)"))
    if not by_metric:
        return ""
    head = f"is faster once running ({', '.join(faster)}), but it " if faster else ""
    if faster and all(f.endswith("(within noise)") for f in faster):
        head = "looks faster once running (" + ", ".join(f.removesuffix(" (within noise)") for f in faster) + "; within noise), but it "
    return head + "; ".join(f"{WAIT_WORDS[m]}: {', '.join(by_metric[m])}" for m in waits if m in by_metric)


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
    return ("Aggregate Δ: " + "; ".join(f"{_band_text(rows[c])} at {c}" for c in picks)
            + " (95% simultaneous band of the fitted curve in brackets).")


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


def _no_difference_size(comp: Comparison, arm: str, metric: str) -> str:
    curve = comp.curve(arm, metric)
    if curve is None:
        return " (too few levels and no repeats to estimate the noise)"
    return (f" (the smallest difference these data could detect is about ±{smallest_detectable_pct(curve):.0f}% "
            f"at the best-measured level)")


@dataclass
class Decision:
    """The judgement behind a recommendation, without its sentences."""

    verdict: Verdict
    arm: str
    judged: pd.DataFrame
    per_arm: dict[str, pd.DataFrame]
    up_to: float | None
    from_c: float | None


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
    return Decision(verdict, arm, judged, per_arm, up_to, from_c)


def recommend(comp: Comparison, profile: Profile | dict[str, Any]) -> Recommendation:
    """The recommendation for one profile (see the module docstring for the rules)."""
    profile = parse_profile(profile)
    checks = _slo_checks(profile, comp)
    token_based = profile.objective in ("throughput", "balanced") or any(col == comp.user_metric for _, col, _, _ in checks)
    refused = {a: w for a, w in comp.chunk_counted.items() if a in comp.spec_arms or a == comp.baseline}
    candidates = [a for a in comp.candidate_arms if not (token_based and (a in refused or comp.baseline in refused))]
    if token_based and not candidates and comp.spec_arms:
        who = ", ".join(md_text(comp.labels.get(a, a)) for a in refused)
        return Recommendation(
            profile=profile, verdict="no_verdict", arm=None, up_to_concurrency=None, from_concurrency=None,
            headline=(f"No verdict: the token counts of {who} came from SSE chunks (the server reported none), so "
                      "aggregate throughput, per-user speed and acceptance cannot be trusted for this objective."),
            bands=[], reasons=[], caveats=[], next_experiments=[
                "Re-measure with a server (or API flavour) that reports token counts (usage with "
                "continuous_usage_stats, or SGLang meta_info)."])
    if not candidates and comp.controls and not (token_based and refused):
        who = ", ".join(md_text(comp.labels.get(a, a)) for a in comp.controls)
        return Recommendation(
            profile=profile, verdict="no_verdict", arm=None, up_to_concurrency=None, from_concurrency=None,
            headline=(f"No verdict: every arm besides the baseline is a control arm ({who}), configured like the "
                      "baseline; its difference from the baseline measures noise and drift, not a configuration."),
            bands=[], reasons=[], caveats=drift_sentences(comp), next_experiments=[
                "Add the configuration to compare as another arm of the study."])
    d = decide(comp, profile, candidates)
    per_arm, arm, judged, verdict, up_to, from_c = d.per_arm, d.arm, d.judged, d.verdict, d.up_to, d.from_c
    label = md_text(comp.labels.get(arm, arm))
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
    headline = _headline(verdict, label, criterion, judged, span, up_to, from_c, slo)
    if verdict == "disable" and not losses:
        deciding = "output_tok_s" if profile.objective == "throughput" else comp.user_metric
        headline = headline.rstrip(".") + _no_difference_size(comp, arm, deciding) + "."
    if profile.objective == "latency":
        note = _wait_note(comp, arm, judged, profile.min_effect_pct)
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

    reasons = [_throughput_sentence(comp, arm, label, judged, profile.min_effect_pct),
               _user_sentence(comp, arm, label, judged, profile.min_effect_pct)]
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
    cap_reasons, cap_experiment = _cap_sentences(comp, arm, label, judged, profile.min_effect_pct)
    reasons += cap_reasons
    others = [a for a in per_arm if a != arm]
    if others:
        reasons.append("Other arms scored lower for this profile: " + ", ".join(
            f"{md_text(comp.labels.get(a, a))} (mean deciding delta {_pct(per_arm[a]['margin'].mean())})" for a in others) + ".")

    experiments = []
    if cap_experiment:
        experiments.append(cap_experiment)
    lo_c, hi_c = profile.concurrency_min, profile.concurrency_max or 10**9
    for _, r in comp.crossover(arm, "output_tok_s").iterrows():
        mids = _where_uncertain(comp, arm, "output_tok_s", r.c_low, r.c_high)
        if mids:
            experiments.append(f"Measure at {', '.join(map(str, mids))} (not yet measured, between {r.c_low} and "
                               f"{r.c_high}, where the fitted aggregate delta's sign is least certain) to pin down "
                               f"the crossover, now placed at about {r.crossover_concurrency:.0f}.")
    if comp.crossover(arm, "output_tok_s").empty and not gains and not losses:
        tested = comp.shared_levels(arm)
        mids = _where_uncertain(comp, arm, "output_tok_s", max(lo_c, min(tested)) - 1e-9, min(hi_c, max(tested)) + 1e-9)
        if mids:
            experiments.append(f"Levels not yet measured where the fitted aggregate delta is least certain: "
                               f"{', '.join(map(str, mids))}.")
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
        next_experiments=experiments, levels=pd.concat(per_arm.values(), ignore_index=True),
    )


DEFAULT_PROFILES: list[dict[str, Any]] = [
    {"name": "Latency-sensitive (interactive, agentic)", "objective": "latency",
     "description": "Each user's speed matters most; aggregate throughput only as capacity."},
    {"name": "Batch throughput", "objective": "throughput",
     "description": "Offline or batch work: tokens per GPU-second matter, per-request speed does not."},
    {"name": "Interactive SLO: at least 60 tok/s per user", "objective": "throughput", "min_user_tok_s": 60,
     "description": "Most aggregate throughput while the mean per-user speed stays at or above 60 tok/s."},
]
