"""What a recommendation cannot rule out: drift between arms, the noise of single runs, metrics not
fully defined, the workload and server, and what the data lack or got wrong (each a sentence).

Inputs: a comparison and the arms a recommendation judged; nothing here depends on the profile.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from specsweep.analyze.compare import Comparison, info
from specsweep.analyze.control import bounds_drift
from specsweep.analyze.drift import arms_interleaved, level_times
from specsweep.decide.profiles import SYNTHETIC_KINDS
from specsweep.decide.text import aggregate_word
from specsweep.markup import md_text


def drift_sentences(comp: Comparison) -> list[str]:
    """What the data say about drift and noise between arms: the sentinel's drift estimate, the
    control arms' deviation, or (neither, and no interleaved repeats) the risk and how to remove it."""
    out = []
    d = comp.drift
    agg = aggregate_word(comp.aggregate_basis)  # the figure the verdict reads
    if d is not None:
        where = ", ".join(f"{md_text(a)} at {', '.join(str(c) for c in g['concurrency'])}"
                          for a, g in d.pairs.groupby("arm"))
        if d.corrected:
            pct, se = d.total_pct("output_tok_s")
            minutes = d.span_s / 60
            what = (f"a drift of {pct:+.1f}% ± {se:.1f}% in {agg} over the study's {minutes:.0f} minutes"
                    if d.credible() else f"no measurable drift in {agg} ({pct:+.1f}% ± {se:.1f}% over "
                    f"{minutes:.0f} minutes)")
            out.append(f"Sentinel runs ({where}, measured again at the end) show {what}; every run was corrected for "
                       "it, linearly in time, and each band widened by what that correction leaves uncertain.")
        else:
            worst = float(d.pairs["delta_pct"].abs().max())
            out.append(f"Sentinel runs ({where}, measured again at the end) differ from the earlier runs by up to "
                       f"{worst:.1f}% in {agg}; without timestamps the runs cannot be corrected, so "
                       "every band is at least that wide.")
    bounded = control_bounds_drift(comp)
    for a, dev in comp.control_deviation("output_tok_s").items():
        out.append(f"Control arm {md_text(a)} is configured like the baseline: it differs from it "
                   f"by up to {dev:.1f}% in {agg} from noise and drift alone. It is never a candidate, "
                   "every other arm's band is at least as wide as its deviation, and a difference it shows too is "
                   "not established." + ("" if bounded else
                   " It was measured nearer in time to the baseline than the arms it is compared with, so it does "
                   "not bound the drift between them: the drift it shows is carried, with its uncertainty, to when "
                   "each arm was measured (wider bands); measure the control last, or around the arms, to bound it.")
                   + _one_sided(comp, a))
    if unguarded(comp):
        out.append("The arms were measured one after the other with no sentinel run and no control arm: a slow drift "
                   "of the machine between them (heat, a noisy neighbour, a growing cache) would read as a difference "
                   "between the arms. To measure it, re-measure the baseline at one or two levels at the end (a "
                   "study's sentinel setting) or add a control arm configured like the baseline (control: true); to "
                   "cancel it, interleave the arms (order: abba, or repeats ≥ 2).")
    return out


#: fewest levels at which a control arm's deviation keeping one sign is worth saying
ONE_SIDED_LEVELS: int = 4


def _one_sided(comp: Comparison, control: str) -> str:
    """A sentence where the control's measured aggregate Δ has the same sign at every level (at least
    ``ONE_SIDED_LEVELS``), with the chance of that if it were noise around zero; else ''."""
    rows = comp.delta_rows(control, "output_tok_s")
    picked = [r.get("level_delta_pct", r.get("delta_pct")) for r in rows.values()]
    vals = [float(v) for v in picked if v is not None and math.isfinite(float(v))]
    if len(vals) < ONE_SIDED_LEVELS or not (all(v < 0 for v in vals) or all(v > 0 for v in vals)):
        return ""
    side = "below" if vals[0] < 0 else "above"
    chance = 2 * 0.5 ** len(vals) * 100
    return (f" Its measured deviation is {side} the baseline at all {len(vals)} levels ({min(vals):+.1f}% to "
            f"{max(vals):+.1f}%; a chance of {chance:.0f}% if it were noise around zero): possibly an offset between "
            "two identical configurations, whose cause this study does not measure.")


def control_bounds_drift(comp: Comparison) -> bool:
    """Whether the control arms were measured after or around every candidate (as far from the
    baseline in time at every level), so their deviation bounds the drift; True without times."""
    return not comp.controls or bounds_drift(level_times(comp.raw_levels), comp.candidate_arms, comp.controls,
                                             comp.baseline)


def unguarded(comp: Comparison) -> bool:
    """Whether nothing guards the arms' difference against drift: no sentinel run, no control arm, and
    the arms measured one after the other (:func:`arms_interleaved_in`)."""
    return comp.drift is None and not comp.controls and not arms_interleaved_in(comp)


#: what the first screen and the Markdown summary add to an 'enable' or 'keep off' that nothing
#: guards against drift (every level moving one way is what a slow drift between the arms looks like)
DRIFT_NOT_EXCLUDED: str = ("drift not excluded: the arms ran one after the other with no sentinel run or control "
                           "arm, and a slow drift between them would read the same")


def arms_interleaved_in(comp: Comparison) -> bool:
    """Whether the arms were interleaved in time, read from the runs' start times (the study's
    stated order, repeats ≥ 2, only where the data carry no times)."""
    seen = arms_interleaved({a: lv for a, lv in comp.raw_levels.items() if a in comp.arms})
    if seen is not None:
        return seen
    study = comp.metas[comp.baseline].study
    return study is not None and int(study.repeats or 1) >= 2


def caveat_sentences(comp: Comparison, arms: Sequence[str]) -> list[str]:
    """The caveats of a recommendation judging ``arms``: drift, the noise of single runs, metrics not
    fully defined, the workload and server, and what the data lack or got wrong."""
    return (drift_sentences(comp) + _noise_caveats(comp, arms) + _definition_caveats(comp)
            + _setup_caveats(comp, arms) + _data_caveats(comp))


def _noise_caveats(comp: Comparison, arms: Sequence[str]) -> list[str]:
    """With one run per level: where the noise figure comes from, and how to measure it."""
    if not comp.single_run():
        return []
    noises = [c.noise for (a, m), c in comp.curves.items() if m == "output_tok_s" and a in arms]
    if comp.assumed_noise_pct and any(n.startswith("the levels' scatter") for n in noises):
        return [f"One run per level: run-to-run noise cannot be measured, and the levels scatter about a "
                f"smooth curve more than the assumed {comp.assumed_noise_pct:g}% per run would explain, so "
                "that larger scatter is used (see Definitions) and the bands are wider for it. Ask for 3 runs "
                "per level (repeats=3) to measure the noise."]
    if comp.assumed_noise_pct:
        checked = any("too few to check" in n for n in noises)
        return [f"One run per level: run-to-run noise cannot be measured, so {comp.assumed_noise_pct:g}% per "
                "run is assumed (for per-request statistics, at least that or the spread of each run's "
                "requests)" + ("; with so few levels the data cannot check it against their own scatter" if
                               checked else "") + ". Were the real noise larger, the bands would be too narrow. "
                "Ask for 3 runs per level (repeats=3) to measure it."]
    return ["One run per level: run-to-run noise cannot be measured, so it is estimated from the residuals "
            "of the fitted curve (and, for per-request statistics, from each run's requests, which cannot "
            "see run-to-run variation). Ask for 3 runs per level (repeats=3) to measure it."]


def _definition_caveats(comp: Comparison) -> list[str]:
    """One caveat per metric whose definition an arm's source did not fully publish."""
    unclear: dict[tuple[str, str], list[str]] = {}
    for a in comp.arms:
        for col, text in comp.metas[a].metric_definitions.items():
            if "not published" in text or "unknown" in text:
                unclear.setdefault((col, text), []).append(a)
    out = []
    for (col, _), who in unclear.items():
        whose = "all arms" if len(who) == len(comp.arms) else "arm " + ", ".join(f"'{a}'" for a in who)
        name = info(col).label[0].lower() + info(col).label[1:]
        out.append(f"The definition of {name} was not fully published for {whose} (see Definitions), so compare "
                   "it with other tools' figures with care.")
    return out


def _setup_caveats(comp: Comparison, arms: Sequence[str]) -> list[str]:
    """Synthetic prompts, an acceptance length from outside the sweep, a simulated server."""
    out = []
    kind = comp.workload.kind
    if kind in SYNTHETIC_KINDS:
        out.append(f"Prompts were synthetic token IDs ('{kind}') with a fixed output length. Speculative acceptance on such "
                   "prompts is not representative of real traffic — it is often inflated, because degenerate, repetitive "
                   "continuations are easy to draft — so gains on real prompts can be smaller.")
    for a in arms:
        seen = comp.metas[a].server.get("observed_accept_length")
        if seen:
            out.append(f"Arm '{a}': the only acceptance-length figure is {seen:.2f}, from a smoke test outside the sweep, not per level.")
    if any(comp.metas[a].server.get("simulated") for a in comp.arms):
        out.append("Measured against specsweep's simulated reference server, not a real GPU server: the numbers show the "
                   "method and the model's behaviour, not any hardware's.")
    return out


def _data_caveats(comp: Comparison) -> list[str]:
    """Failed requests, outputs shorter than asked, no latency percentiles, a busy client."""
    out = []
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
