"""The arm's running-request cap against the levels it lost: the claims about it, what the server's
gauges said above it, and the configuration change that would test it (an advice claim whose
arguments run on that server).

Inputs: a comparison, the arm (by its short name and its label as the sentences name it) and its
judged levels. Units: concurrency and running requests in requests, memory fractions of the GPU's.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.decide.claims import Claim
from specsweep.decide.text import aggregate_word

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
    # 'llamacpp' is specsweep's own launcher (python -m specsweep.engines.llamacpp), whose slots flag
    # is --slots; 'llama.cpp' is llama-server, whose flag is --parallel (-np)
    flag = {"vllm": "--max-num-seqs", "llama.cpp": "--parallel", "llamacpp": "--slots",
            "trtllm": "--max_batch_size"}.get(kind, "--max-running-requests")
    return (flag, str(n))


def memory_argv(kind: str, fraction: float) -> tuple[str, ...]:
    """The server arguments that give the speculative server ``fraction`` of GPU memory for weights and KV.

    The embedded reference server takes it as a profile override (its own argparse has no
    ``--mem-fraction-static``); SGLang as ``--mem-fraction-static``; vLLM as ``--gpu-memory-utilization``;
    TensorRT-LLM's trtllm-serve as ``--kv_cache_free_gpu_memory_fraction``.
    """
    if kind == "refserver":
        return ("--set", f"speculative.mem_fraction_static={fraction:.2f}")
    if kind == "vllm":
        return ("--gpu-memory-utilization", f"{fraction:.2f}")
    if kind == "trtllm":  # trtllm-serve: the KV cache's share of the memory left after the weights
        return ("--kv_cache_free_gpu_memory_fraction", f"{fraction:.2f}")
    return ("--mem-fraction-static", f"{fraction:.2f}")


def _argv_text(argv: Sequence[str]) -> str:
    return "`" + " ".join(argv) + "`"


@dataclass(frozen=True)
class _Estimate:
    """How many requests the arm served at once at the levels from its first lost one above the cap:
    the measured decoding concurrency where the data have it, else the estimate from speeds."""

    column: str
    kind: str
    how: str
    levels: pd.DataFrame
    #: the median over those levels (requests; NaN where there is none)
    plateau: float
    #: its range as the sentence says it ('48', '40–46', '?')
    about: str


def _estimate(lv: pd.DataFrame, above: Sequence[int]) -> _Estimate:
    measured = "decoding_concurrency" in lv and lv["decoding_concurrency"].notna().any()
    col = "decoding_concurrency" if measured else "concurrency_estimate"
    high = lv[lv["concurrency"] >= min(above)]
    est = high[col].dropna() if col in high else pd.Series(dtype=float)
    about = (f"{est.min():.0f}" if round(est.min()) == round(est.max()) else f"{est.min():.0f}–{est.max():.0f}") \
        if len(est) else "?"
    return _Estimate(col, "measured decoding concurrency" if measured else "estimated effective concurrency",
                     "Σ decode time ÷ window" if measured else "aggregate ÷ per-request tok/s", high,
                     float(est.median()) if len(est) else math.nan, about)


def cap_sentences(comp: Comparison, arm: str, label: str, judged: pd.DataFrame,
                   min_effect: float, profile: str = "") -> tuple[list[Claim], Claim | None]:
    """Claims about the arm's running-request cap (each with its sentence), and the advice that would test it."""
    cap = comp.caps.get(arm)
    if cap is None:  # a server that states none (vLLM): the ceiling its gauges showed while requests waited
        cap = comp.observed_caps.get(arm)
    losses = judged.loc[judged["aggregate_delta_pct"] < -min_effect, "concurrency"].tolist()
    max_c = int(comp.levels["concurrency"].max())
    if cap is None or cap >= max_c or not losses:
        return [], None
    above = [int(c) for c in losses if c > cap]
    if not above:
        return [], None
    out = [_cap_claim(comp, arm, label, cap, above, len(above) == len(losses), profile)]
    lv = comp.arm_levels(arm)
    est = _estimate(lv, above)
    kind_of_server = server_kind(comp.metas[arm].server)
    agg = aggregate_word(comp.aggregate_basis)
    if not math.isnan(est.plateau) and est.plateau < WELL_BELOW_CAP * cap:
        claims, memory_bound = _below_cap_claims(comp, arm, label, cap, above, est, profile)
        out += claims
        if memory_bound:
            return out, _memory_advice(comp, arm, label, kind_of_server, profile)
        at_cap = any(c.kind == "gauge" and c.extra.get("gauge_max", -1) >= cap for c in claims)
        # where the gauge ran at the cap it overrules the estimate, and the expectation follows the gauge
        expect = (f"the server's gauge ran at the cap, so if the cap binds, {agg} above it should rise"
                  if at_cap else
                  f"the {est.kind} (about {est.about}) is well below {cap}, so if throughput at "
                  f"{', '.join(map(str, above))} stays near today's, the cap is not the cause and the limit lies elsewhere")
    else:
        if not math.isnan(est.plateau):
            out.append(Claim(kind="cap", arm=arm, metric=est.column, levels=tuple(int(c) for c in est.levels["concurrency"]),
                             values=tuple(float(v) for v in est.levels[est.column]), profile=profile,
                             extra={"cap": cap, "estimate": est.plateau, "below": False}, sentence=(
                f"The {est.kind} of {label} ({est.how}) sits near the cap at those levels (about {est.about} of {cap}), "
                "consistent with the cap binding.")))
        out.extend(_server_gauge_sentences(lv, above, cap, label, estimate_below=False if not math.isnan(est.plateau) else None,
                                           arm=arm, profile=profile)[0])
        expect = f"if the cap binds, {agg} above it should rise"
    argv = cap_argv(kind_of_server, max_c)
    return out, Claim(kind="advice", arm=arm, profile=profile, argv=argv, server=kind_of_server, levels=tuple(above),
                      sentence=(f"Re-run {label} with {_argv_text(argv)} to test whether the cap causes the lower "
                                f"throughput: {expect}. Watch the running and queued request gauges and KV usage "
                                "during the run."))


def _cap_claim(comp: Comparison, arm: str, label: str, cap: int, above: list[int], every: bool, profile: str) -> Claim:
    """The cap as the leading hypothesis for the lower throughput at the levels ``above`` it (``every``
    level where the arm's aggregate throughput is lower, or only the lowest ones)."""
    base_cap = comp.caps.get(comp.baseline)
    agg = comp.delta_rows(arm, "output_tok_s")
    observed = comp.caps.get(arm) is None
    return Claim(
        kind="cap", arm=arm, metric="output_tok_s", levels=tuple(above),
        values=tuple(float(agg[c]["delta_pct"]) for c in above if c in agg), credible=True, profile=profile,
        extra={"cap": cap, "observed": observed}, sentence=(
            (f"The {label} server states no running-request cap, but its gauges never showed more than {cap} "
             "requests running while others waited" if observed else
             f"The {label} server ran with max_running_requests = {cap}")
            + (f" (the baseline's was {base_cap})" if base_cap else " (the baseline set none)")
            + f", below the {int(comp.levels['concurrency'].max())} concurrent requests tested; "
            + (f"every level where its {aggregate_word(comp.aggregate_basis)} is lower" if every
               else "the levels where it is lowest")
            + f" ({', '.join(map(str, above))}) " + ("lies" if every else "lie")
            + " above that cap, so the cap is the leading hypothesis for the lower throughput there: "
            "requests beyond it queue instead of joining the batch."))


def _below_cap_claims(comp: Comparison, arm: str, label: str, cap: int, above: list[int], est: _Estimate,
                      profile: str) -> tuple[list[Claim], bool]:
    """Where fewer requests ran at once than the cap allows: that estimate, the other candidate causes,
    the server's gauges, the baseline's figure; and whether the gauges show admission limited by memory."""
    lv = comp.arm_levels(arm)
    meta_server = comp.metas[arm].server
    # the figures quoted are those of the range stated ("about 31–35"), nothing from below it
    vals = ", ".join(f"{v:.1f} at {int(c)}" for c, v in zip(lv["concurrency"], lv[est.column])
                     if c >= min(above) and not math.isnan(v))
    out = [Claim(kind="cap", arm=arm, metric=est.column, levels=tuple(int(c) for c in est.levels["concurrency"]),
                 values=tuple(float(v) for v in est.levels[est.column]), profile=profile,
                 extra={"cap": cap, "estimate": est.plateau, "below": True}, sentence=(
        f"But the {est.kind} of {label} ({est.how}) levels off at about {est.about} ({vals}), well below the cap of "
        f"{cap}: fewer requests were being served at once than the cap allows, so the cap cannot be the whole story."))]
    out.append(Claim(kind="cap", arm=arm, profile=profile,
                     sentence="Other candidates: " + "; ".join(_other_causes(comp, arm, meta_server)) + "."))
    gauge, memory_bound = _server_gauge_sentences(lv, above, cap, label, estimate_below=True, arm=arm, profile=profile)
    out.extend(gauge)
    base_lv = comp.arm_levels(comp.baseline)
    bvals = base_lv[base_lv["concurrency"].isin(above)][est.column].dropna() if est.column in base_lv \
        else pd.Series(dtype=float)
    if len(bvals):
        out.append(Claim(kind="cap", arm=comp.baseline, metric=est.column, profile=profile, sentence=(
            f"For comparison, the baseline reaches {', '.join(f'{v:.0f}' for v in bvals)} at "
            f"{', '.join(map(str, base_lv[base_lv['concurrency'].isin(above)]['concurrency']))}.")))
    return out, memory_bound


def _other_causes(comp: Comparison, arm: str, meta_server: dict) -> list[str]:
    """What else can keep fewer requests running than the cap allows."""
    out = []
    if meta_server.get("mem_fraction_static") is not None:
        out.append(f"a smaller KV cache (mem_fraction_static {meta_server['mem_fraction_static']:g}"
                   + (f", draft model {meta_server['draft_memory_gb_per_rank']:g} GB per rank"
                      if meta_server.get("draft_memory_gb_per_rank") else "")
                   + ") that admits fewer requests")
    else:
        out.append("KV-cache or state memory that admits fewer requests than the cap")
    out.append("the extra draft and verify compute per step once the GPU is saturated")
    if any("not published" in v for v in comp.metas[arm].metric_definitions.values()):
        out.append("the unknown definition of the published per-request metric, which moves this estimate")
    return out


def _memory_advice(comp: Comparison, arm: str, label: str, kind_of_server: str, profile: str) -> Claim:
    """Where the gauges show a full KV pool below the cap: give the arm more memory rather than a higher cap."""
    mf = comp.metas[arm].server.get("mem_fraction_static")
    target = min(0.95, round(float(mf) + 0.05, 2)) if mf else 0.9
    argv = memory_argv(kind_of_server, target)
    # the conclusion (memory, not the cap) is the gauge sentence's: the advice follows it without restating it
    return Claim(kind="advice", arm=arm, profile=profile, argv=argv, server=kind_of_server, sentence=(
        f"Give {label} more KV memory rather than a higher cap: re-run it with {_argv_text(argv)}"
        + (f" (now {mf:g})" if mf else "") + " or a smaller draft configuration, and watch "
        "the token-usage and running-requests gauges."))


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
            # "the cap did bind" only where the gauge reached the cap: below it, the pool sentence concludes
            text = (f"The server's own gauge disagrees with that estimate: {what}. The gauge counts the requests "
                    "that ran; the estimate is a ratio of speeds, so trust the gauge"
                    + (": the cap did bind." if not below_cap else "."))
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


