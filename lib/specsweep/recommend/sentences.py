"""The sentences behind a verdict: headline, throughput and per-user, caps, SLOs, drift, caveats."""
from __future__ import annotations

import math
from typing import Sequence
import pandas as pd
from specsweep.compare import Comparison, info, smallest_detectable_pct
from specsweep.markup import md_text
from specsweep.recommend.judge import _levels_of, _lookup, _meets, _sign, _slo_checks, _wait_size, wait_metrics
from specsweep.recommend.profiles import Profile, SYNTHETIC_KINDS, Verdict
from specsweep.recommend.text import WAIT_WORDS, _DECIDING, _band_text, _levels_text, _num, _pct


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


def _no_difference_size(comp: Comparison, arm: str, metric: str) -> str:
    curve = comp.curve(arm, metric)
    if curve is None:
        return " (too few levels and no repeats to estimate the noise)"
    return (f" (the smallest difference these data could detect is about ±{smallest_detectable_pct(curve):.0f}% "
            f"at the best-measured level)")
