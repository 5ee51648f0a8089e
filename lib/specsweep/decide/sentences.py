"""The sentences behind a verdict: headline, throughput and per-user, caps, SLOs, drift, caveats."""
from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from specsweep.analyze.compare import Comparison, info
from specsweep.analyze.curves import smallest_detectable_pct
from specsweep.decide.claims import Claim, delta_claim, join_and, pct, value_text, with_sentence
from specsweep.decide.judge import _levels_of, _lookup, _meets, _sign, _slo_checks, _wait_size, wait_metrics
from specsweep.decide.profiles import SYNTHETIC_KINDS, Profile, Verdict
from specsweep.decide.text import _DECIDING, WAIT_WORDS, _band_text, _levels_text, _num
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
    clauses = {"gain": "credibly raises aggregate output throughput ({})",
               "loss": "credibly lowers {it} ({})",
               "no-difference": "does not credibly change {it} ({}: within the band or ±" + f"{min_effect:g}%)"}
    out = []
    for i, c in enumerate(claims):
        it = "it" if i else "aggregate output throughput"
        out.append(with_sentence(c, clauses[c.kind].format(_at_list(c), it=it)))
    text = f"{label} " + (join_and([c.sentence for c in out]) or "was not compared on aggregate throughput") + "."
    cx_claims = []
    for _, r in comp.crossover(arm, "output_tok_s").iterrows():
        sentence = (f"The aggregate crossover is at about {r.crossover_concurrency:.0f} concurrent requests "
                    f"(where the fitted delta curve crosses 0, between the tested {r.c_low} and {r.c_high}).")
        text += " " + sentence
        cx_claims.append(Claim(kind="crossover", arm=arm, metric="output_tok_s", levels=(int(r.c_low), int(r.c_high)),
                               values=(float(r.delta_low_pct), float(r.delta_high_pct)), credible=True,
                               sentence=sentence, at=float(r.crossover_concurrency),
                               bounds=(int(r.c_low), int(r.c_high)), profile=profile))
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


#: the decision class a verdict is shown as on the first screen and in the summary
DECISION_CLASSES: tuple[str, ...] = ("enable", "enable up to X", "enable from X", "keep off",
                                     "no measurable difference", "not established")


def decision_class(verdict: Verdict, judged: pd.DataFrame | None, up_to: float | None = None,
                   from_c: float | None = None) -> str:
    """The decision as an operator reads it: enable / enable up to X / enable from X / keep off /
    no measurable difference / not established (X in concurrent requests, rounded)."""
    has_loss = judged is not None and not judged.empty and (judged["outcome"] == "loss").any()
    if verdict == "enable":
        return "enable"
    if verdict == "enable_up_to":
        return f"enable up to {up_to:.0f}" if up_to is not None else "enable up to X"
    if verdict == "enable_from":
        return f"enable from {from_c:.0f}" if from_c is not None else "enable from X"
    if verdict == "disable":
        return "keep off" if has_loss else "no measurable difference"
    return "not established"


def deciding_metric(comp: Comparison, arm: str, judged: pd.DataFrame, i: int, fallback: str) -> str:
    """The metric that decided judged row ``i`` when it is a metric with delta rows, else ``fallback``
    (a rule such as an SLO decided: the SLO's metric is the caller's fallback)."""
    m = str(judged["decided_by"].iloc[i])
    return m if comp.delta_rows(arm, m) else fallback


def _bounds(cs: Sequence[int], x: float) -> tuple[int, int]:
    """The tested levels at or just below and at or just above ``x``."""
    lo = max((c for c in cs if c <= x + 1e-9), default=min(cs))
    hi = min((c for c in cs if c >= x - 1e-9), default=max(cs))
    return int(lo), int(hi)


def _point_text(comp: Comparison, arm: str, metric: str, cs: Sequence[int], x: float) -> tuple[str, tuple[int, int]]:
    """'about 37 concurrent requests, between the tested 32 and 64 (aggregate throughput: +11% […] at 32,
    -32% […] at 64)', or '32 concurrent requests (tested; …)' when ``x`` is a tested level."""
    rows = comp.delta_rows(arm, metric)
    word = _DECIDING.get(metric, metric)
    if round(x) in cs:  # X rounds to a tested level: say what was measured there
        c = int(round(x))
        exact = abs(x - c) < 1e-9
        return (f"{'' if exact else 'about '}{c} concurrent requests (measured there: {word} "
                f"{_band_text(rows.get(c))})", (c, c))
    lo, hi = _bounds(cs, x)
    at = [f"{_band_text(rows.get(c))} at {c}" for c in (lo, hi) if c in rows]
    return (f"about {x:.0f} concurrent requests, between the tested {lo} and {hi} ({word}: {', '.join(at)})",
            (lo, hi))


def _headline(verdict: Verdict, label: str, criterion: str, judged: pd.DataFrame, span: str,
              up_to: float | None, from_c: float | None, slo: str | None, *, comp: Comparison | None = None,
              arm: str = "", fallback_metric: str = "output_tok_s", profile: str = "") -> Claim:
    """The verdict's headline as a claim: its decision class, the deciding metric, the levels it names.

    "Up to / from about X" names the tested levels bounding X and shows the deciding metric's Δ
    with its band at both (X itself need not have been measured).
    """
    gains, losses, flat = (_levels_of(judged, o) for o in ("gain", "loss", "neutral"))
    cs = [int(c) for c in judged["concurrency"]]
    decision = decision_class(verdict, judged, up_to, from_c)

    def at(cs: list[int]) -> str:
        return ", ".join(map(str, cs))

    # the metric the decisive levels were decided by (the gains for enable, the losses for keep off)
    key = "gain" if verdict == "enable" else "loss" if losses else "neutral"
    decisive = [deciding_metric(comp, arm, judged, i, fallback_metric) if comp is not None else fallback_metric
                for i, o in enumerate(judged["outcome"]) if o == key]
    main_metric = max(dict.fromkeys(decisive), key=decisive.count) if decisive else fallback_metric

    def claim(text: str, metric: str = main_metric, levels: Sequence[int] = (), **kw: object) -> Claim:
        return Claim(kind="verdict", arm=arm, metric=metric, levels=tuple(levels or cs), sentence=text,
                     credible=bool(gains or losses), profile=profile, decision=decision, **kw)  # type: ignore[arg-type]

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
        return claim(f"Enable {label}: " + "; ".join(parts) + ".")
    if verdict == "enable":
        if not flat:
            return claim(f"Enable {label}: it wins on {criterion} at every tested concurrency in {span}.")
        return claim(f"Enable {label}: it wins on {criterion} at concurrency {at(gains)} and makes no measurable "
                     f"difference at {at(flat)}.")
    if verdict == "disable":
        if not losses:
            return claim(f"No measurable difference on {criterion} across concurrency {span}: keep speculation off "
                         "unless more data shows a gain.")
        if not flat:
            return claim(f"Keep speculation off: it loses on {criterion} at every tested concurrency in {span}.")
        return claim(f"Keep speculation off: it loses on {criterion} at concurrency {at(losses)} and makes no "
                     f"measurable difference at {at(flat)}.")
    if verdict in ("enable_up_to", "enable_from") and comp is not None:
        x = float(up_to if verdict == "enable_up_to" else from_c)  # type: ignore[arg-type]
        j = cs.index(min(losses)) if verdict == "enable_up_to" else cs.index(max(losses))
        metric = deciding_metric(comp, arm, judged, j, fallback_metric)
        where, bounds = _point_text(comp, arm, metric, cs, x)
        if verdict == "enable_up_to":
            text = (f"Enable {label} up to {where}; above that it loses on {criterion.split(' under')[0]} — keep it "
                    "off there (or route high-concurrency traffic to a pool without it).")
        else:
            text = f"Enable {label} from {where} up; below that it loses on {criterion}."
        return claim(text, metric, at=x, bounds=bounds)
    return claim(f"Mixed: {label} wins on {criterion} at concurrency {at(gains)} and loses at {at(losses)}; "
                 "no single range is established — see the levels.")


#: a running-request figure below this share of the cap counts as "well below" it (estimate and gauge alike)
WELL_BELOW_CAP: float = 0.75


def server_kind(meta_server: dict) -> str:
    """'refserver' for specsweep's simulated reference server, else the server's name ('sglang', 'vllm',
    'llama.cpp'…; 'sglang' when unnamed, as the seed's tables)."""
    if meta_server.get("simulated"):
        return "refserver"
    return str(meta_server.get("name") or "sglang")


def cap_argv(kind: str, n: int) -> tuple[str, ...]:
    """The server arguments that set the running-request cap to ``n`` on a server ``kind``."""
    flag = {"vllm": "--max-num-seqs", "llama.cpp": "--parallel", "llamacpp": "--parallel"}.get(kind, "--max-running-requests")
    return (flag, str(n))


def memory_argv(kind: str, fraction: float) -> tuple[str, ...]:
    """The server arguments that give the speculative server ``fraction`` of GPU memory for weights and KV.

    The embedded reference server takes it as a profile override (its own argparse has no
    ``--mem-fraction-static``); SGLang as ``--mem-fraction-static``; vLLM as ``--gpu-memory-utilization``.
    """
    if kind == "refserver":
        return ("--set", f"speculative.mem_fraction_static={fraction:.2f}")
    if kind == "vllm":
        return ("--gpu-memory-utilization", f"{fraction:.2f}")
    return ("--mem-fraction-static", f"{fraction:.2f}")


def _argv_text(argv: Sequence[str]) -> str:
    return "`" + " ".join(argv) + "`"


def _cap_sentences(comp: Comparison, arm: str, label: str, judged: pd.DataFrame,
                   min_effect: float, profile: str = "") -> tuple[list[Claim], Claim | None]:
    """Claims about the arm's running-request cap (each with its sentence), and the advice that would test it."""
    cap = comp.caps.get(arm)
    base_cap = comp.caps.get(comp.baseline)
    losses = judged.loc[judged["aggregate_delta_pct"] < -min_effect, "concurrency"].tolist()
    max_c = int(comp.levels["concurrency"].max())
    if cap is None or cap >= max_c or not losses:
        return [], None
    above = [int(c) for c in losses if c > cap]
    if not above:
        return [], None
    meta_server = comp.metas[arm].get("server") or {}
    kind_of_server = server_kind(meta_server)
    agg = comp.delta_rows(arm, "output_tok_s")
    out: list[Claim] = [Claim(
        kind="cap", arm=arm, metric="output_tok_s", levels=tuple(above),
        values=tuple(float(agg[c]["delta_pct"]) for c in above if c in agg), credible=True, profile=profile,
        extra={"cap": cap}, sentence=(
            f"The {label} server ran with max_running_requests = {cap}"
            + (f" (the baseline's was {base_cap})" if base_cap else " (the baseline set none)")
            + f", below the {max_c} concurrent requests tested; "
            + ("every level where its aggregate throughput is lower" if len(above) == len(losses) else "the levels where it is lowest")
            + f" ({', '.join(map(str, above))}) " + ("lies" if len(above) == len(losses) else "lie")
            + " above that cap, so the cap is the leading hypothesis for the lower throughput there: "
            "requests beyond it queue instead of joining the batch."))]
    lv = comp.arm_levels(arm)
    measured = lv["decoding_concurrency"] if "decoding_concurrency" in lv and lv["decoding_concurrency"].notna().any() else None
    col = "decoding_concurrency" if measured is not None else "concurrency_estimate"
    kind = "measured decoding concurrency" if measured is not None else "estimated effective concurrency"
    how = "Σ decode time ÷ window" if measured is not None else "aggregate ÷ per-request tok/s"
    high = lv[lv["concurrency"] >= min(above)]
    est = high[col].dropna() if col in high else pd.Series(dtype=float)
    plateau = float(est.median()) if len(est) else math.nan
    about = (f"{est.min():.0f}" if round(est.min()) == round(est.max()) else f"{est.min():.0f}–{est.max():.0f}") if len(est) else "?"
    memory_bound = False
    if not math.isnan(plateau) and plateau < WELL_BELOW_CAP * cap:
        vals = ", ".join(f"{v:.1f} at {int(c)}" for c, v in zip(lv["concurrency"], lv[col]) if c >= min(above) or v >= 0.75 * plateau)
        out.append(Claim(kind="cap", arm=arm, metric=col, levels=tuple(int(c) for c in high["concurrency"]),
                         values=tuple(float(v) for v in high[col]), profile=profile,
                         extra={"cap": cap, "estimate": plateau, "below": True}, sentence=(
            f"But the {kind} of {label} ({how}) levels off at about {about} ({vals}), well below the cap of {cap}: "
            "fewer requests were being served at once than the cap allows, so the cap cannot be the whole story.")))
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
        out.append(Claim(kind="cap", arm=arm, profile=profile, sentence="Other candidates: " + "; ".join(others) + "."))
        gauge, memory_bound = _server_gauge_sentences(lv, above, cap, label, estimate_below=True, arm=arm, profile=profile)
        out.extend(gauge)
        base_lv = comp.arm_levels(comp.baseline)
        bvals = base_lv[base_lv["concurrency"].isin(above)][col].dropna() if col in base_lv else pd.Series(dtype=float)
        if len(bvals):
            out.append(Claim(kind="cap", arm=comp.baseline, metric=col, profile=profile, sentence=(
                f"For comparison, the baseline reaches {', '.join(f'{v:.0f}' for v in bvals)} at "
                f"{', '.join(map(str, base_lv[base_lv['concurrency'].isin(above)]['concurrency']))}.")))
        expect = (f"the {kind} (about {about}) is well below {cap}, so if throughput at "
                  f"{', '.join(map(str, above))} stays near today's, the cap is not the cause and the limit lies elsewhere")
        if memory_bound:
            mf = meta_server.get("mem_fraction_static")
            target = min(0.95, round(float(mf) + 0.05, 2)) if mf else 0.9
            argv = memory_argv(kind_of_server, target)
            return out, Claim(kind="advice", arm=arm, profile=profile, argv=argv, server=kind_of_server, sentence=(
                f"The cap did not bind — the server's gauges show a full KV pool below it — so give {label} "
                f"more KV memory rather than a higher cap: re-run it with {_argv_text(argv)}"
                + (f" (now {mf:g})" if mf else "") + " or a smaller draft configuration, and watch "
                "the token-usage and running-requests gauges."))
    else:
        if not math.isnan(plateau):
            out.append(Claim(kind="cap", arm=arm, metric=col, levels=tuple(int(c) for c in high["concurrency"]),
                             values=tuple(float(v) for v in high[col]), profile=profile,
                             extra={"cap": cap, "estimate": plateau, "below": False}, sentence=(
                f"The {kind} of {label} ({how}) sits near the cap at those levels (about {about} of {cap}), "
                "consistent with the cap binding.")))
        out.extend(_server_gauge_sentences(lv, above, cap, label, estimate_below=False if not math.isnan(plateau) else None,
                                           arm=arm, profile=profile)[0])
        expect = "if the cap binds, aggregate throughput above it should rise"
    argv = cap_argv(kind_of_server, max_c)
    return out, Claim(kind="advice", arm=arm, profile=profile, argv=argv, server=kind_of_server, levels=tuple(above),
                      sentence=(f"Re-run {label} with {_argv_text(argv)} to test whether the cap causes the lower "
                                f"throughput: {expect}. Watch the running and queued request gauges and KV usage "
                                "during the run."))


def _server_gauge_sentences(lv: pd.DataFrame, above: list[int], cap: int, label: str, *,
                            estimate_below: bool | None = None, arm: str = "",
                            profile: str = "") -> tuple[list[Claim], bool]:
    """What the server's own gauges said at the levels above the cap (measured runs only), and
    whether they show admission limited by memory (running below the cap with a full pool).

    The gauge is said to agree with the estimate only where both put the running requests on the
    same side of :data:`WELL_BELOW_CAP` × cap; where they differ the sentence says the gauge
    disagrees and which to believe (the gauge counts what ran; the estimate is a ratio).
    """
    out: list[Claim] = []
    below_cap = full = False
    high = lv[lv["concurrency"].isin(above)]
    where = ", ".join(map(str, above))
    if "server_running_max" in high and high["server_running_max"].notna().any():
        most = int(high["server_running_max"].max())
        below_cap = most < cap
        gauge_low = most < WELL_BELOW_CAP * cap
        agrees = None if estimate_below is None else gauge_low == estimate_below
        what = (f"{label} never ran more than {most} requests at once at {where} (running-requests gauge, polled "
                f"during the levels), " + ("well below" if gauge_low else "below" if below_cap else "at") + f" its cap of {cap}"
                if below_cap else
                f"{label} ran up to its cap of {cap} requests at once at {where} (running-requests gauge, polled "
                "during the levels)")
        if agrees is None:
            text = f"The server's own gauge: {what}."
        elif agrees:
            text = f"The server's own gauge agrees: {what}."
        else:
            text = (f"The server's own gauge disagrees with that estimate: {what}. The gauge counts the requests "
                    "that ran; the estimate is a ratio of speeds, so trust the gauge"
                    + (": the cap did bind." if not gauge_low else "."))
        out.append(Claim(kind="gauge", arm=arm, metric="server_running_max", levels=tuple(above), values=(float(most),),
                         agrees=agrees, profile=profile, sentence=text,
                         extra={"gauge_max": most, "cap": cap, "estimate_below": estimate_below}))
    if "server_kv_usage_max" in high and high["server_kv_usage_max"].notna().any():
        usage = float(high["server_kv_usage_max"].max())
        if usage >= 0.9:
            full = True
            text = (f"Its KV/token pool was {usage:.0%} full there: memory, not the cap, limited admission."
                    if below_cap else
                    f"Its KV/token pool was also {usage:.0%} full there, so lifting the cap alone would soon "
                    "run into memory.")
        else:
            text = f"Its KV/token pool peaked at {usage:.0%} there, so memory did not limit admission."
        out.append(Claim(kind="gauge", arm=arm, metric="server_kv_usage_max", levels=tuple(above),
                         values=(usage * 100,), profile=profile, sentence=text))
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
        where = ", ".join(f"{md_text(a)} at {', '.join(str(c) for c in g['concurrency'])}"
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
        out.append(f"Control arm {md_text(a)} is configured like the baseline: it differs from it "
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
        c = delta_claim("gain", arm, um, faster, credible=True, profile=profile)
        claims.append(with_sentence(c, "is faster once running (" + ", ".join(
            f"{value_text(c, i)} per-user at {lv}" for i, lv in enumerate(c.levels)) + ")"))
        head = claims[-1].sentence
    if unsure:
        c = delta_claim("no-difference", arm, um, unsure, credible=False, profile=profile)
        text = ("not credibly faster at " if faster else "is not credibly faster once running at ") + join_and(
            [str(x) for x in c.levels]) + " (" + ", ".join(f"{pct(v)} per-user" for v in c.values) + ", within noise)"
        claims.append(with_sentence(c, text))
        head = f"{head}, {text}" if head else text
    parts = []
    for m in waits:
        if m in sure_waits:
            c = delta_claim("loss", arm, m, sure_waits[m], credible=True, profile=profile)
            claims.append(with_sentence(c, f"{WAIT_WORDS[m]}: {_at_list(c)}"))
            parts.append(claims[-1].sentence)
        if m in maybe_waits:
            c = delta_claim("no-difference", arm, m, maybe_waits[m], credible=False, profile=profile)
            claims.append(with_sentence(c, f"{WAIT_MAYBE[m]}: {_at_list(c)} (within noise)"))
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
    return ("Aggregate Δ: " + "; ".join(f"{_band_text(rows[c])} at {c}" for c in picks)
            + " (95% simultaneous band of the fitted curve in brackets).")


def _no_difference_size(comp: Comparison, arm: str, metric: str) -> str:
    curve = comp.curve(arm, metric)
    if curve is None:
        return " (too few levels and no repeats to estimate the noise)"
    return (f" (the smallest difference these data could detect is about ±{smallest_detectable_pct(curve):.0f}% "
            f"at the best-measured level)")
