"""Altair charts from a :class:`~specsweep.compare.Comparison`. No I/O.

Every function returns a chart an analyst can restyle (``.properties(...)``, ``.configure_*``,
or by editing the layers); ``None`` where the data has nothing to draw. Concurrency axes are log2
with a tick at every tested level. Every mark carries a tooltip.
"""
from __future__ import annotations

from typing import Sequence

import altair as alt
import pandas as pd

from specsweep.compare import Comparison
from specsweep.metrics import metric_info

WIDTH, HEIGHT = 420, 260
BASELINE_COLOUR = "#6b7280"
ARM_COLOURS = ["#d97706", "#2563eb", "#059669", "#db2777", "#7c3aed", "#0891b2"]


def arm_colours(comp: Comparison, *, spec_only: bool = False) -> alt.Scale:
    """A colour scale with the baseline in grey and each other arm in a fixed colour.

    ``spec_only`` leaves the baseline out (for charts of deltas against it); colours stay the same.
    """
    domain = [comp.labels[a] for a in comp.arms]
    colours = [BASELINE_COLOUR] + ARM_COLOURS[: len(domain) - 1]
    if spec_only:
        domain, colours = domain[1:], colours[1:]
    return alt.Scale(domain=domain, range=colours)


def _levels(comp: Comparison) -> list[int]:
    return sorted(int(c) for c in comp.levels["concurrency"].unique())


def log2_scale(comp: Comparison) -> alt.Scale:
    """Log2 scale spanning the tested concurrency levels with a little margin."""
    levels = _levels(comp)
    return alt.Scale(type="log", base=2, domain=[min(levels) / 1.3, max(levels) * 1.3], nice=False)


def concurrency_x(comp: Comparison, title: str = "Concurrent requests (log2)") -> alt.X:
    """The shared log2 concurrency axis."""
    return alt.X("concurrency:Q", title=title, scale=log2_scale(comp),
                 axis=alt.Axis(values=_levels(comp), format="d", grid=False))


def _with_labels(comp: Comparison, frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    out["arm_label"] = out["arm"].map(comp.labels)
    return out


def _metric_lines(comp: Comparison, metric: str, title: str | None = None) -> alt.Chart:
    info = metric_info(metric)
    data = _with_labels(comp, comp.levels[["arm", "concurrency", metric]].dropna())
    base = alt.Chart(data).encode(
        x=concurrency_x(comp),
        y=alt.Y(f"{metric}:Q", title=f"{info.label} ({info.unit})", scale=alt.Scale(zero=True)),
        color=alt.Color("arm_label:N", title="Arm", scale=arm_colours(comp), legend=alt.Legend(orient="bottom")),
        tooltip=[
            alt.Tooltip("arm_label:N", title="arm"),
            alt.Tooltip("concurrency:Q", title="concurrency"),
            alt.Tooltip(f"{metric}:Q", title=f"{info.label} ({info.unit})", format=",.1f"),
        ],
    )
    return (base.mark_line(strokeWidth=2) + base.mark_point(filled=True, size=60)).properties(
        width=WIDTH, height=HEIGHT, title=title or info.label
    )


def throughput_chart(comp: Comparison) -> alt.Chart:
    """Aggregate output tok/s against concurrency, one line per arm."""
    return _metric_lines(comp, "output_tok_s", "Aggregate output throughput")


def user_speed_chart(comp: Comparison) -> alt.Chart:
    """Per-user speed (1/TPOT when measured, else the published per-request tok/s) against concurrency."""
    return _metric_lines(comp, comp.user_metric, metric_info(comp.user_metric).label)


def delta_chart(comp: Comparison, metrics: Sequence[str] | None = None) -> alt.HConcatChart:
    """Δ% against the baseline per concurrency, one panel per metric: zero rule, intervals, crossover."""
    metrics = list(metrics or ["output_tok_s", comp.user_metric])
    panels = []
    for metric in metrics:
        info = metric_info(metric)
        d = _with_labels(comp, comp.deltas[comp.deltas["metric"] == metric])
        d["interval"] = d.apply(
            lambda r: "single run, no interval" if r["ci_kind"] == "none"
            else f"[{r['ci_low_pct']:+.1f}%, {r['ci_high_pct']:+.1f}%] ({r['ci_kind']})", axis=1,
        ) if len(d) else pd.Series(dtype=str)
        tips = [
            alt.Tooltip("arm_label:N", title="arm"),
            alt.Tooltip("concurrency:Q", title="concurrency"),
            alt.Tooltip("delta_pct:Q", title="Δ% vs baseline", format="+.1f"),
            alt.Tooltip("baseline_value:Q", title=f"baseline ({info.unit})", format=",.1f"),
            alt.Tooltip("arm_value:Q", title=f"arm ({info.unit})", format=",.1f"),
            alt.Tooltip("interval:N", title="95% interval"),
        ]
        base = alt.Chart(d).encode(
            x=concurrency_x(comp),
            y=alt.Y("delta_pct:Q", title="Δ% vs baseline"),
            color=alt.Color("arm_label:N", title="Arm", scale=arm_colours(comp, spec_only=True), legend=alt.Legend(orient="bottom")),
            tooltip=tips,
        )
        layers = [
            alt.Chart(pd.DataFrame({"y": [0]})).mark_rule(color="black", strokeWidth=1).encode(y="y:Q"),
            base.mark_line(strokeWidth=2),
            base.mark_point(filled=True, size=60),
        ]
        ci = d[d["ci_kind"] != "none"] if len(d) else d
        if len(ci):
            layers.append(alt.Chart(ci).mark_errorbar(ticks=True).encode(
                x=concurrency_x(comp), y=alt.Y("ci_low_pct:Q", title="Δ% vs baseline"), y2="ci_high_pct:Q",
                color=alt.Color("arm_label:N", scale=arm_colours(comp, spec_only=True)), tooltip=tips,
            ))
        cx = _with_labels(comp, comp.crossovers[comp.crossovers["metric"] == metric])
        if len(cx):
            cx = cx.assign(label=cx["crossover_concurrency"].map(lambda v: f"crossover ≈ {v:.0f}"))
            rule = alt.Chart(cx).encode(
                x=alt.X("crossover_concurrency:Q", scale=log2_scale(comp)),
                tooltip=[alt.Tooltip("arm_label:N", title="arm"),
                         alt.Tooltip("crossover_concurrency:Q", title="crossover (interpolated in log2)", format=".1f"),
                         alt.Tooltip("c_low:Q", title="between"), alt.Tooltip("c_high:Q", title="and")],
            )
            layers.append(rule.mark_rule(strokeDash=[5, 4], color="#b91c1c"))
            layers.append(rule.mark_text(align="left", dx=4, dy=-6, color="#b91c1c").encode(
                y=alt.value(12), text="label:N"))
        panels.append(alt.layer(*layers).properties(width=WIDTH, height=HEIGHT, title=f"Δ {info.label}"))
    return alt.hconcat(*panels).resolve_scale(y="independent")


def latency_chart(comp: Comparison) -> alt.HConcatChart | None:
    """TTFT and end-to-end latency p50 / p99 against concurrency; None without latency data."""
    cols = [c for c in ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s") if c in comp.levels]
    if not cols or comp.levels[cols].isna().all().all():
        return None
    long = comp.levels.melt(id_vars=["arm", "concurrency"], value_vars=cols, var_name="metric", value_name="seconds").dropna()
    long["latency"] = long["metric"].str.split("_").str[0].map({"ttft": "Time to first token", "e2e": "End-to-end"})
    long["percentile"] = long["metric"].str.split("_").str[1]
    long = _with_labels(comp, long)
    panels = []
    for which in ("Time to first token", "End-to-end"):
        part = long[long["latency"] == which]
        if part.empty:
            continue
        base = alt.Chart(part).encode(
            x=concurrency_x(comp),
            y=alt.Y("seconds:Q", title=f"{which} (s)"),
            color=alt.Color("arm_label:N", title="Arm", scale=arm_colours(comp), legend=alt.Legend(orient="bottom")),
            strokeDash=alt.StrokeDash("percentile:N", title="Percentile", sort=["p50", "p99"]),
            tooltip=[alt.Tooltip("arm_label:N", title="arm"), alt.Tooltip("concurrency:Q"),
                     alt.Tooltip("percentile:N"), alt.Tooltip("seconds:Q", format=".3f", title=f"{which} (s)")],
        )
        panels.append((base.mark_line(strokeWidth=2) + base.mark_point(filled=True, size=40))
                      .properties(width=WIDTH, height=HEIGHT, title=f"{which}, p50 and p99"))
    return alt.hconcat(*panels).resolve_scale(y="independent")


def pareto_chart(comp: Comparison) -> alt.LayerChart:
    """Throughput against interactivity: aggregate tok/s vs per-user speed, points labelled by concurrency."""
    um = comp.user_metric
    uinfo = metric_info(um)
    data = _with_labels(comp, comp.pareto.dropna(subset=[um, "output_tok_s"]))
    data["frontier"] = data["on_frontier"].map({True: "on the frontier", False: "dominated"})
    base = alt.Chart(data).encode(
        x=alt.X(f"{um}:Q", title=f"{uinfo.label} ({uinfo.unit}) — interactivity", scale=alt.Scale(zero=False)),
        y=alt.Y("output_tok_s:Q", title="Aggregate output throughput (tok/s)", scale=alt.Scale(zero=False)),
        color=alt.Color("arm_label:N", title="Arm", scale=arm_colours(comp), legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("arm_label:N", title="arm"), alt.Tooltip("concurrency:Q"),
                 alt.Tooltip("output_tok_s:Q", title="aggregate (tok/s)", format=",.0f"),
                 alt.Tooltip(f"{um}:Q", title=f"per-user ({uinfo.unit})", format=",.1f"),
                 alt.Tooltip("frontier:N", title="Pareto")],
    )
    frontier = data[data["on_frontier"]].sort_values(um)
    line = alt.Chart(frontier).mark_line(color="black", strokeDash=[2, 3], opacity=0.6).encode(
        x=f"{um}:Q", y="output_tok_s:Q", order=f"{um}:Q")
    points = base.mark_point(size=80, filled=True).encode(
        shape=alt.Shape("frontier:N", title="Pareto", scale=alt.Scale(domain=["on the frontier", "dominated"], range=["circle", "triangle"])))
    labels = base.mark_text(dx=9, dy=-7, fontSize=10).encode(text="concurrency:Q")
    return alt.layer(line, points, labels).properties(
        width=WIDTH + 100, height=HEIGHT + 60, title="Throughput vs interactivity (labels: concurrency)")


def concurrency_chart(comp: Comparison) -> alt.LayerChart:
    """Diagnostics: requests actually served at once vs offered concurrency, with y = x and each arm's cap."""
    lv = _with_labels(comp, comp.levels)
    measured = "decoding_concurrency" in lv and lv["decoding_concurrency"].notna().any()
    col = "decoding_concurrency" if measured else "concurrency_estimate"
    title = ("Decoding concurrency (Σ decode time ÷ window)" if measured
             else "Estimated effective concurrency (aggregate ÷ per-request tok/s)")
    data = lv[["arm_label", "concurrency", col]].dropna().rename(columns={col: "served"})
    levels = _levels(comp)
    ident = alt.Chart(pd.DataFrame({"concurrency": levels, "served": levels})).mark_line(
        color="#9ca3af", strokeDash=[4, 4]).encode(x=concurrency_x(comp, "Offered concurrency (log2)"), y="served:Q",
                                                   tooltip=[alt.Tooltip("concurrency:Q", title="served = offered")])
    base = alt.Chart(data).encode(
        x=concurrency_x(comp, "Offered concurrency (log2)"),
        y=alt.Y("served:Q", title=title, scale=alt.Scale(type="log", base=2)),
        color=alt.Color("arm_label:N", title="Arm", scale=arm_colours(comp), legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("arm_label:N", title="arm"), alt.Tooltip("concurrency:Q", title="offered"),
                 alt.Tooltip("served:Q", title="served at once", format=".1f")],
    )
    layers = [ident, base.mark_line(strokeWidth=2), base.mark_point(filled=True, size=60)]
    caps = pd.DataFrame([{"arm_label": comp.labels[a], "cap": c, "text": f"{comp.labels[a]} cap {c}"}
                         for a, c in comp.caps.items() if c])
    if len(caps):
        rule = alt.Chart(caps).encode(y="cap:Q", color=alt.Color("arm_label:N", scale=arm_colours(comp)),
                                      tooltip=[alt.Tooltip("text:N", title="max_running_requests")])
        layers += [rule.mark_rule(strokeDash=[6, 3]), rule.mark_text(align="left", x=4, dy=-6).encode(text="text:N")]
    return alt.layer(*layers).properties(width=WIDTH, height=HEIGHT, title="Requests served at once vs offered")


def acceptance_chart(comp: Comparison) -> alt.LayerChart | None:
    """Server-side acceptance length per level for speculative arms; None when not measured."""
    if "spec_accept_length" not in comp.levels or comp.levels["spec_accept_length"].isna().all():
        return None
    return _metric_lines(comp, "spec_accept_length", "Acceptance length under load")


def error_chart(comp: Comparison) -> alt.LayerChart | None:
    """Error rate per level; None when no errors were recorded."""
    if "error_rate" not in comp.levels or not (comp.levels["error_rate"].fillna(0) > 0).any():
        return None
    return _metric_lines(comp, "error_rate", "Error rate")


def tokens_per_chunk_chart(comp: Comparison) -> alt.LayerChart | None:
    """Tokens per streamed chunk (> 1 under speculation); None when not measured."""
    if "tokens_per_chunk_mean" not in comp.levels or comp.levels["tokens_per_chunk_mean"].isna().all():
        return None
    return _metric_lines(comp, "tokens_per_chunk_mean", "Tokens per streamed chunk")


def delta_fit_chart(comp: Comparison, metrics: Sequence[str] | None = None) -> alt.HConcatChart | None:
    """The fitted delta curve per arm and metric: fitted line, its 95% simultaneous band, measured Δ% points.

    Self-contained (its own log2 axis) so it does not depend on the other charts' helpers. None when no
    curve could be fitted. The band is evaluated at the tested levels and joined by straight lines.
    """
    metrics = list(metrics or ["output_tok_s", comp.user_metric])
    levels = sorted(int(c) for c in comp.levels["concurrency"].unique())
    x = alt.X("concurrency:Q", title="Concurrent requests (log2)",
              scale=alt.Scale(type="log", base=2, domain=[min(levels) / 1.3, max(levels) * 1.3], nice=False),
              axis=alt.Axis(values=levels, format="d", grid=False))
    labels = [comp.labels[a] for a in comp.spec_arms]
    colour = alt.Color("arm_label:N", title="Arm", legend=alt.Legend(orient="bottom"),
                       scale=alt.Scale(domain=labels, range=ARM_COLOURS[: len(labels)]))
    panels = []
    for metric in metrics:
        d = comp.deltas[(comp.deltas["metric"] == metric) & comp.deltas["fit_delta_pct"].notna()].copy()
        if d.empty:
            continue
        d["arm_label"] = d["arm"].map(comp.labels)
        d["method"] = d["ci_kind"]
        tips = [alt.Tooltip("arm_label:N", title="arm"), alt.Tooltip("concurrency:Q", title="concurrency"),
                alt.Tooltip("delta_pct:Q", title="measured Δ%", format="+.1f"),
                alt.Tooltip("fit_delta_pct:Q", title="fitted Δ%", format="+.1f"),
                alt.Tooltip("ci_low_pct:Q", title="band low", format="+.1f"),
                alt.Tooltip("ci_high_pct:Q", title="band high", format="+.1f"),
                alt.Tooltip("method:N", title="model")]
        base = alt.Chart(d).encode(x=x, color=colour, tooltip=tips)
        layers = [
            alt.Chart(pd.DataFrame({"y": [0]})).mark_rule(color="black", strokeWidth=1).encode(y="y:Q"),
            base.mark_area(opacity=0.18).encode(y=alt.Y("ci_low_pct:Q", title="Δ% vs baseline"), y2="ci_high_pct:Q"),
            base.mark_line(strokeWidth=2).encode(y="fit_delta_pct:Q"),
            base.mark_point(filled=True, size=50).encode(y="delta_pct:Q"),
        ]
        panels.append(alt.layer(*layers).properties(width=WIDTH, height=HEIGHT,
                                                    title=f"Fitted Δ {metric_info(metric).label} (band: 95% simultaneous)"))
    return alt.hconcat(*panels).resolve_scale(y="independent") if panels else None
