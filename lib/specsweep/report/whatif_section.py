"""The report's "What if" section: the cap question, the speedup decomposition, the validation, and the
next experiment — Markdown built from computed figures (never typed), plus an Altair chart.

``markdown(comp, sets)`` returns the section's Markdown (every name from a result set escaped with
:func:`specsweep.markup.md_text`); ``chart(comp, sets)`` the decomposition and prediction chart;
``next_experiment(comp, sets)`` the untested setting whose prediction is least certain and could
change the verdict. ``build(comp, sets)`` computes everything once and returns all three.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.whatif.decompose import FACTORS, decompose, decomposition_sentence
from specsweep.analyze.whatif.experiment import CAP_CANDIDATES, least_certain
from specsweep.analyze.whatif.model import ArmModel
from specsweep.analyze.whatif.observe import WhatIfError
from specsweep.analyze.whatif.predict import predict
from specsweep.analyze.whatif.setting import CONTEXT_ASSUMPTION, FOOTPRINT_ASSUMPTION, model_for
from specsweep.analyze.whatif.validate import comparable_pairs, cross_arm, loo, loo_summary
from specsweep.decide.caps import cap_argv, server_kind
from specsweep.markup import md_text
from specsweep.report.charts import WIDTH, validated_once
from specsweep.results.store import ResultSet

__all__ = ["Section", "build", "chart", "markdown", "next_experiment"]

@dataclass
class Section:
    """Everything the section shows, computed once."""

    markdown: str
    chart: alt.TopLevelMixin | None
    next_experiment: dict[str, Any] | None
    validation: dict[str, Any] = field(default_factory=dict)
    cap_predictions: dict[str, pd.DataFrame] = field(default_factory=dict)
    decompositions: dict[str, pd.DataFrame] = field(default_factory=dict)


def _n(x: float, unit: str = "") -> str:
    if not math.isfinite(x):
        return "—"
    if abs(x - round(x)) < 1e-9:
        return f"{x:,.0f}{unit}"
    text = f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:,.2f}"
    return text + unit


def _band(row: dict[str, Any] | pd.Series, fig: str, unit: str = "") -> str:
    if row.get("refused") or not math.isfinite(row.get(fig, math.nan)):
        return "refused"
    return f"{_n(row[fig])} [{_n(row[fig + '_lo'])}–{_n(row[fig + '_hi'])}]{unit}"


def next_experiment(comp: Comparison, sets: Sequence[ResultSet] | None = None, *,
                    models: dict[str, ArmModel] | None = None) -> dict[str, Any] | None:
    """:func:`~specsweep.analyze.whatif.experiment.least_certain`, with the sentence the page shows (``sentence``)."""
    item = least_certain(comp, sets, models=models)
    if item is not None:
        meta = comp.metas.get(item["arm"])
        item["sentence"] = _next_sentence(item, server_kind(meta.server) if meta is not None else "sglang")
    return item


def _setting_words(s: dict[str, Any], kind: str = "sglang") -> str:
    """The setting in the arm's own server's words (``kind``: :func:`specsweep.decide.caps.server_kind`)."""
    if "max_running_requests" in s:
        return " ".join(cap_argv(kind, int(s["max_running_requests"])))
    if "max_total_num_tokens" in s:
        return f"a KV pool of {s['max_total_num_tokens']:,} tokens (the baseline's; e.g. its mem_fraction_static)"
    return "its current settings"


def _next_sentence(item: dict[str, Any], kind: str = "sglang") -> str:
    row, arm = item["prediction"], md_text(item["arm"])
    c = int(item["concurrency"])
    what = f"measure {arm} with {_setting_words(item['setting'], kind)} at {c} concurrent requests"
    if row["refused"]:
        return (f"Next experiment: {what}. The model cannot predict it — {md_text(row['why'])} — and there {arm} "
                f"loses aggregate throughput to the baseline ({_n(item['baseline_aggregate_tok_s'])} tok/s), so only "
                "a measurement can say whether the setting reverses the verdict.")
    return (f"Next experiment: {what}. Predicted aggregate {_band(row, 'aggregate_tok_s', ' tok/s')}: the band "
            f"contains the baseline's {_n(item['baseline_aggregate_tok_s'])} tok/s, so the sign of the delta there is "
            "unknown until it is measured (the least certain such prediction).")


def _cap_question(comp: Comparison, arm: str, m: ArmModel, base_max: float) -> tuple[str, pd.DataFrame | None]:
    d = m.data
    cap = d.cap
    target = int(max(CAP_CANDIDATES[2], 2 ** math.ceil(math.log2(max(base_max, 1)))))
    high = [float(c) for c in d.concurrency if c > cap] if cap else []
    if not cap or not high:
        return "", None
    p = predict(comp, arm, concurrency=high, max_running_requests=target, model=m)
    lines = [f"**{md_text(arm)}: would raising max_running_requests from {cap} to {target} restore aggregate "
             "throughput?** "]
    parts = []
    for row in p.to_dict("records"):
        c = int(row["concurrency"])
        if row["refused"]:
            parts.append(f"at {c}: not predicted — {md_text(row['why'])}")
            continue
        meas = float(d.replicates["output_tok_s"][0, int(np.flatnonzero(np.isclose(d.concurrency, c))[0])])
        delta = (row["aggregate_tok_s"] / meas - 1) * 100
        parts.append(f"at {c}: {_band(row, 'aggregate_tok_s', ' tok/s')} ({delta:+.1f} % against its measured "
                     f"{_n(meas)}), {_n(row['running_requests'])} requests running, held by the {row['limited_by']}")
    lines.append("; ".join(parts) + ".")
    binds = set(p.loc[~p["refused"], "limited_by"])
    if m.pool_limit is not None and "KV pool" in binds:
        why = (f" The arm never ran more than {_n(m.pool_limit)} requests at once although its cap allowed {cap}: "
               "a limit below the cap held it — ")
        if d.level_only:
            why += ("the KV pool, by assumption (level-only data show the plateau, not its cause) — so raising the cap "
                    "alone is predicted to change nothing.")
        else:
            why += ("the KV pool (the server's running-requests gauge stopped there with clients queued) — so the cap "
                    "is not what costs aggregate throughput.")
        lines.append(why)
    return "".join(lines), p


def _noise_floor(comp: Comparison, models: dict[str, ArmModel]) -> str:
    """What a control arm is in this section: the baseline measured again, its step time's largest
    difference from the baseline's (%, at the batch sizes both ran) the noise floor of the fits —
    never a setting to change, so it gets no cap question, decomposition or next experiment."""
    base = models[comp.baseline]
    lo, hi = base.n_range
    parts = []
    for a in comp.controls:
        m = models[a]
        both = [(float(n), float(s)) for n, s in zip(m.batch, m.step_s[0]) if lo <= n <= hi]
        diffs = [abs(s / float(base.at("step_s", n)[0]) - 1) * 100 for n, s in both]
        diffs = [d for d in diffs if math.isfinite(d)]
        parts.append(f"{md_text(a)} is the baseline's configuration measured again (control: true)"
                     + (f": its step time differs from the baseline's by up to {_n(max(diffs), ' %')} at the batch "
                        "sizes both ran, the noise floor of these fits" if diffs else "")
                     + "; it has no setting to change, so it gets no cap question, decomposition or next experiment.")
    return " ".join(parts)


def _step_table(comp: Comparison, models: dict[str, ArmModel]) -> str:
    """Each arm's decode step time as a straight line through its batch sizes (a summary; predictions
    interpolate), and what a control arm's line is (:func:`_noise_floor`)."""
    rows = ["| arm | batch sizes run | step time: fixed + per running request | per batched token (verify width) "
            "| prefill share at its largest batch |", "|---|---|---|---|---|"]
    for a in comp.arms:
        m = models[a]
        fit = m.step_fit
        width = m.data.draft_tokens if m.data.speculative and m.data.draft_tokens else 1
        lo, hi = m.n_range
        share = float(m.prefill_share[0, -1]) * 100
        per_tok = fit["per_request_ms"] / width
        if m.data.speculative and not m.data.accept_measured:
            rows.append(f"| {md_text(a)} | {_n(lo)}–{_n(hi)} | accept length not measured: time per token "
                        f"{_n(fit['fixed_ms'], ' ms')} + {fit['per_request_ms']:.3f} ms × n | — | — |")
            continue
        if fit["note"].startswith("refused"):
            rows.append(f"| {md_text(a)} | {_n(lo)}–{_n(hi)} | {fit['note']} | — | — |")
            continue
        rows.append(f"| {md_text(a)} | {_n(lo)}–{_n(hi)} | {_n(fit['fixed_ms'], ' ms')} + "
                    f"{fit['per_request_ms']:.3f} ms × n" + (f" ({fit['note']})" if fit["note"] else "")
                    + f" | {per_tok:.3f} ms (width n × {width}) | "
                    + ("— |" if m.data.level_only else f"{share:.0f} % |"))
    note = ("Step time t(n) = time per token × accept length ÷ the stall mix (prefill steps of other requests); "
            "level-only data fold prefill into it.")
    floor = _noise_floor(comp, models)
    return "\n".join(rows) + "\n\n" + note + (" " + floor if floor else "")


def _validation_md(comp: Comparison, models: dict[str, ArmModel], sets: Sequence[ResultSet] | None
                   ) -> tuple[str, dict[str, Any]]:
    rows = ["| arm | levels predicted | aggregate: mean / worst abs error | per-user: mean / worst abs error |",
            "|---|---|---|---|"]
    out: dict[str, Any] = {"arms": {}, "pairs": []}
    for a in comp.arms:
        t = loo(models[a])
        s = loo_summary(t)
        out["arms"][a] = {"table": t, "summary": s}
        rows.append(f"| {md_text(a)} | {s['predicted']} of {s['levels']} | "
                    f"{_n(s['aggregate_tok_s_mean_abs_pct'], ' %')} / {_n(s['aggregate_tok_s_worst_abs_pct'], ' %')} | "
                    f"{_n(s['user_tok_s_mean_abs_pct'], ' %')} / {_n(s['user_tok_s_worst_abs_pct'], ' %')} |")
    text = ("**How good the predictions are.** Leave-one-level-out: each measured level predicted from the arm's other "
            "levels (the smallest and largest batch cannot be, without extrapolating, and are not counted):\n\n"
            + "\n".join(rows))
    pair_lines = []
    for src, dst, diff in comparable_pairs(comp):
        t = cross_arm(comp, src, dst, sets, source_model=models[src])
        s = loo_summary(t)
        out["pairs"].append({"source": src, "target": dst, "differs": diff, "table": t, "summary": s})
        per = ", ".join(f"{int(r['concurrency'])}: {r['aggregate_tok_s_err_pct']:+.1f} %"
                        for r in t.to_dict("records") if math.isfinite(r["aggregate_tok_s_err_pct"]))
        pair_lines.append(f"- {md_text(dst)} predicted from {md_text(src)} (they differ in {', '.join(diff)}): "
                          f"aggregate error mean {_n(s['aggregate_tok_s_mean_abs_pct'], ' %')}, worst "
                          f"{_n(s['aggregate_tok_s_worst_abs_pct'], ' %')} ({per}); per-user mean "
                          f"{_n(s['user_tok_s_mean_abs_pct'], ' %')}; {s['predicted']} of {s['levels']} levels predicted.")
    if pair_lines:
        text += "\n\nCross-arm (one arm's model predicting another's measurement):\n\n" + "\n".join(pair_lines)
    return text, out


def build(comp: Comparison, sets: Sequence[ResultSet] | None = None, *, n_boot: int = 200) -> Section:
    """Compute the whole section once."""
    try:
        models = {a: model_for(comp, a, sets, n_boot=n_boot) for a in comp.arms}
    except WhatIfError as exc:  # the page is still written, saying what the model lacks
        return Section(markdown="## What if\n\nNo prediction on this page: " + md_text(str(exc)) + ".",
                       chart=None, next_experiment=None)
    base_max = float(np.max(models[comp.baseline].data.admitted))
    out = ["## What if", "",
           "Each arm's serving is modelled from its own measurements: running requests = min(offered concurrency, "
           "max_running_requests, what the KV pool held), the time per token at that batch interpolated between the "
           "batch sizes the arm ran (never extrapolated), accept length as measured, and Little's law for the queue "
           "in the closed loop. Bands: 95 %, a bootstrap over each level's requests widened by the arm's own "
           "leave-one-level-out error. Assumptions: " + FOOTPRINT_ASSUMPTION + "; " + CONTEXT_ASSUMPTION + "."]
    out += ["", _step_table(comp, models)]
    level_only = [a for a in comp.arms if models[a].data.level_only]
    if level_only:
        out.append("")
        out.append(f"Level-only data ({', '.join(md_text(a) for a in level_only)}) get the reduced model they "
                   "support; its assumptions: " + "; ".join(sorted({x for a in level_only
                                                                    for x in models[a].data.assumptions})) + ".")
    caps: dict[str, pd.DataFrame] = {}
    for a in comp.candidate_arms:  # a control is the baseline again: no cap of its own to raise
        text, p = _cap_question(comp, a, models[a], base_max)
        if text:
            out += ["", text]
            caps[a] = p  # type: ignore[assignment]
    decs: dict[str, pd.DataFrame] = {}
    why = []
    for a in comp.candidate_arms:  # a control has no speedup to explain: its difference is noise
        d = decompose(comp, a, sets, models=models)
        if d.empty:
            continue
        decs[a] = d
        why.append(decomposition_sentence(d.iloc[-1], md_text(a), md_text(comp.baseline)))
    if why:  # the heading once, then one sentence per arm
        out += ["", "**Why the speedup is what it is.** " + " ".join(why)]
    vtext, validation = _validation_md(comp, models, sets)
    out += ["", vtext]
    nxt = next_experiment(comp, sets, models=models)
    out += ["", nxt["sentence"] if nxt else "Next experiment: every untested setting the model can see is predicted "
            "with a band that keeps the verdict as it is."]
    return Section(markdown="\n".join(out) + "\n", chart=_chart(comp, decs), next_experiment=nxt,
                   validation=validation, cap_predictions=caps, decompositions=decs)


@validated_once
def _chart(comp: Comparison, decs: dict[str, pd.DataFrame]) -> alt.TopLevelMixin | None:
    frames = []
    for a, d in decs.items():
        for f, what in FACTORS.items():
            col = f.replace("_factor", "_points")
            sub = d[["concurrency", col, "aggregate_delta_pct"]].rename(columns={col: "points"})
            sub["factor"] = what
            sub["arm"] = a
            frames.append(sub)
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True).dropna(subset=["points"])
    df["concurrency"] = df["concurrency"].astype(int).astype(str)
    order = [str(c) for c in sorted({int(c) for d in decs.values() for c in d["concurrency"]})]
    # as wide as the other charts (the panels share it), the factors' legend below in full, never cut
    width = max(240, (WIDTH - 40 * (len(decs) - 1)) // len(decs))
    return (alt.Chart(df).mark_bar().encode(
        x=alt.X("concurrency:N", sort=order, title="Concurrent requests"),
        y=alt.Y("points:Q", title="Points of the aggregate Δ %", stack="zero"),
        color=alt.Color("factor:N", title="Factor", legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
        column=alt.Column("arm:N", title=None),
        tooltip=[alt.Tooltip("arm"), alt.Tooltip("concurrency"), alt.Tooltip("factor"), alt.Tooltip("points:Q", format="+.1f"),
                 alt.Tooltip("aggregate_delta_pct:Q", format="+.1f", title="aggregate Δ %")],
    ).properties(width=width, height=220, title="Where each speculative arm's aggregate Δ comes from"))


def markdown(comp: Comparison, sets: Sequence[ResultSet] | None = None, *, n_boot: int = 200) -> str:
    """The section's Markdown."""
    return build(comp, sets, n_boot=n_boot).markdown


def chart(comp: Comparison, sets: Sequence[ResultSet] | None = None) -> alt.TopLevelMixin | None:
    """The decomposition chart (stacked points of each level's aggregate Δ, per speculative arm)."""
    return build(comp, sets, n_boot=20).chart
