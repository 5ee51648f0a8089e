"""The report: offline chart rendering, the notebook's text blocks, and HTML export.

``python -m specsweep.report --result-set DIR [--result-set DIR ...] --name NAME`` runs
``notebooks/report.ipynb`` through papermill and exports ``./reports/NAME.html`` with nbconvert:
no code cells, no CDN scripts (the Vega bundle that ships with vl-convert is inlined once), so
the page opens with no network and its charts keep their tooltips.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import re
import shlex
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from specsweep import __version__
from specsweep.compare import DERIVED, METHOD, Comparison, DeltaCurve, info
from specsweep.markup import markdown, md_text, script_json
from specsweep.metrics import METRICS, metric_info
from specsweep.recommend import Recommendation, aggregate_quote

REPO_ROOT = Path(__file__).resolve().parents[2]
REPORT_NOTEBOOK = REPO_ROOT / "notebooks" / "report.ipynb"
RENDERER = "specsweep-offline"


# ------------------------------------------------------------------------------ offline charts


def vega_bundle() -> str:
    """The vega + vega-lite + vega-embed bundle that matches Altair's schema, from vl-convert (~900 KB)."""
    from specsweep.startup import vega_bundle_cached

    return vega_bundle_cached()  # made once per vl-convert/Altair version, then read from the cache


_CHART_SEQ = itertools.count()


def _render(spec: dict[str, Any], **meta: Any) -> dict[str, str]:
    """Altair renderer: a ``<div>`` and a ``<script>`` that embeds ``spec`` with the inlined bundle.

    The element id comes from the chart's position in the kernel session and its spec, never
    from randomness, so building the same report twice gives byte-identical HTML.
    """
    spec_json = script_json(spec, sort_keys=True)
    digest = hashlib.sha256(f"{next(_CHART_SEQ)}:{spec_json}".encode()).hexdigest()[:16]
    div = "vl-" + digest
    options = script_json(meta.get("embed_options") or {"actions": False})
    return {"text/html": (
        f'<div id="{div}" class="specsweep-chart"></div><script>vegaEmbed("#{div}", {spec_json}, {options})'
        f'.catch(e => {{ document.getElementById("{div}").innerText = "chart failed: " + e; }});</script>'
    )}


def enable_offline_charts() -> None:
    """Inline the Vega bundle once into the notebook's output and render charts against it.

    Call once, early; keep that cell's output (it is the bundle). Charts after it embed only
    their own spec and data.
    """
    import altair as alt
    from IPython.display import HTML, display

    display(HTML("<script>(function(){" + vega_bundle() + "\nwindow.vegaEmbed = vegaEmbed;})();</script>"))
    alt.renderers.register(RENDERER, _render)
    alt.renderers.enable(RENDERER)


def setup_notebook() -> None:
    """Notebook defaults for reports: offline charts, readable tables, no row limit for charts."""
    import altair as alt

    enable_offline_charts()
    alt.data_transformers.disable_max_rows()
    pd.set_option("display.max_columns", 60)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_colwidth", None)
    pd.set_option("display.float_format", human_number)


def human_number(value: Any, significant: int = 4) -> str:
    """A number as people read it: thousands separators, no exponent, about ``significant`` digits.

    ``16380.2`` → ``16,380``; ``1.63812`` → ``1.638``; ``0.012345`` → ``0.01235``; ``48.0`` → ``48``;
    NaN/None → ``—``. Values of 10^(significant−1) and more show as whole numbers; at most 6 decimals.
    """
    if value is None or isinstance(value, bool):
        return "—" if value is None else str(value)
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "—"
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if v == 0:
        return "0"
    decimals = min(6, max(0, significant - 1 - math.floor(math.log10(abs(v)))))
    text = f"{v:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def table(frame: pd.DataFrame, *, index: bool = False) -> Any:
    """A frame as an HTML table for the report (no row numbers unless ``index``).

    Numbers are formatted for people (:func:`human_number`); every cell, header and index label is
    HTML-escaped (``to_html(escape=True)``), so strings from result sets or servers stay text.
    """
    from IPython.display import HTML

    shown = frame.copy()
    for col in shown.columns:
        if pd.api.types.is_numeric_dtype(shown[col]) and not pd.api.types.is_bool_dtype(shown[col]):
            shown[col] = shown[col].map(human_number)
    return HTML(shown.to_html(index=index, na_rep="—", border=0, escape=True))


# ---------------------------------------------------------------------------- text for notebook


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:,.{digits}f}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _band(lo: Any, hi: Any) -> str:
    if lo is None or pd.isna(lo):
        return "—"
    return f"[{lo:+.1f}%, {hi:+.1f}%]"


def _pct_or_dash(v: Any) -> str:
    return "—" if v is None or pd.isna(v) else f"{v:+.1f}%"


def key_numbers(comp: Comparison) -> pd.DataFrame:
    """Per spec arm and shared concurrency: aggregate and per-user speed of both arms, Δ% and its band.

    "fitted" is the delta curve's value at the level and the band its 95 % simultaneous band (see the
    definitions); "—" where no curve could be fitted.
    """
    rows = []
    um = comp.user_metric
    for arm in comp.spec_arms:
        agg, usr = comp.delta_rows(arm, "output_tok_s"), comp.delta_rows(arm, um)
        for c, a in sorted(agg.items()):
            row: dict[str, Any] = {
                "arm": comp.labels[arm], "concurrency": int(c),
                "aggregate baseline (tok/s)": _fmt(float(a["baseline_value"])),
                "aggregate arm (tok/s)": _fmt(float(a["arm_value"])),
                "aggregate Δ%": f"{a['delta_pct']:+.1f}%",
                "aggregate Δ% fitted": _pct_or_dash(a["fit_delta_pct"]),
                "aggregate Δ 95% band": _band(a["ci_low_pct"], a["ci_high_pct"]),
            }
            u = usr.get(c)
            if u is not None:
                row.update({
                    "per-user baseline (tok/s)": _fmt(float(u["baseline_value"])),
                    "per-user arm (tok/s)": _fmt(float(u["arm_value"])),
                    "per-user Δ%": f"{u['delta_pct']:+.1f}%",
                    "per-user Δ% fitted": _pct_or_dash(u["fit_delta_pct"]),
                    "per-user Δ 95% band": _band(u["ci_low_pct"], u["ci_high_pct"]),
                })
            rows.append(row)
    return pd.DataFrame(rows)


def top_warnings(comp: Comparison) -> list[str]:
    """Warnings that belong at the top of the report: chunk-counted tokens, meta.json warnings."""
    out = []
    for arm, where in comp.chunk_counted.items():
        out.append(f"⚠ **{md_text(comp.labels[arm])}**: token counts came from SSE chunks ({where}), not from the "
                   "server's own counts, because the server reported none. Under speculation one chunk carries "
                   "several tokens, so its aggregate throughput, per-user speed and acceptance are not trusted: no "
                   "throughput or acceptance verdict is given for it.")
    by_text: dict[str, list[str]] = {}  # the same warning on several arms is said once, naming them all
    for arm, text in comp.warnings:
        by_text.setdefault(text, []).append(arm)
    for text, arms in by_text.items():
        names = ", ".join(f"**{md_text(comp.labels[a])}**" for a in arms)
        where = "its meta.json" if len(arms) == 1 else "each one's meta.json"
        out.append(f"⚠ {names} (recorded in {where}): {md_text(text)}")
    return out


def _crossover_line(comp: Comparison, arm: str) -> str:
    """The aggregate delta curve of an arm in two sentences: where it stands or crosses, then its extremes with bands."""
    line = _curve_sentence(comp, arm)
    return f"{line} {aggregate_quote(comp, arm)}" if line else ""


def _curve_sentence(comp: Comparison, arm: str) -> str:
    """One sentence on the aggregate delta curve of an arm: its credible crossovers, or where it stands."""
    label = md_text(comp.labels[arm])
    cx = comp.crossover(arm, "output_tok_s")
    if len(cx):
        parts = []
        for _, c in cx.iterrows():
            way = "lower" if c.direction == "gain_to_loss" else "higher"
            parts.append(f"credibly {way} than the baseline's above about **{c.crossover_concurrency:.0f}** concurrent "
                         f"requests (the fitted delta curve crosses 0 between {c.c_low} and {c.c_high})")
        return f"{label}'s aggregate throughput is " + "; then ".join(parts) + "."
    rows = comp.delta(arm, "output_tok_s")
    if rows.empty:
        return ""
    unshared = comp.unshared_levels(arm)
    where = ("every level both arms measured" if any(unshared.values()) else "every tested level")
    cred = rows["credible"].to_numpy()
    span = f"({rows['delta_pct'].min():+.0f}% to {rows['delta_pct'].max():+.0f}%)"
    if (cred > 0).all():
        return f"{label}'s aggregate throughput is credibly above the baseline's at {where} {span}."
    if (cred < 0).all():
        return f"{label}'s aggregate throughput is credibly below the baseline's at {where} {span}."
    sure = [str(int(c)) for c in rows.loc[cred != 0, "concurrency"]]
    return (f"{label}'s aggregate Δ ranges {span[1:-1]}, but it is credibly different from the baseline's "
            + (f"only at {', '.join(sure)}" if sure else "at no level") + ", so no crossover is claimed.")


#: workload kinds whose content is synthetic: a drafter's acceptance on them says little about real traffic
#: (``fixed-ids``: published reference data measured with fixed token IDs)
SYNTHETIC_WORKLOADS: tuple[str, ...] = ("random-ids", "random-text", "fixed-ids")


def workload_caveat(comp: Comparison) -> str | None:
    """A caveat when any arm's workload is synthetic (:data:`SYNTHETIC_WORKLOADS`: random token IDs,
    random text, fixed token IDs), else None: speculation's gain follows acceptance, and acceptance
    on synthetic content is not that of real traffic."""
    kinds = sorted({str((m.get("workload") or {}).get("kind")) for m in comp.metas.values()}
                   & set(SYNTHETIC_WORKLOADS))
    if not kinds:
        return None
    return (f"⚠ The workload is {' and '.join(kinds)}: synthetic content, on which a drafter's acceptance (and so "
            "speculation's gain) is not representative of real traffic. These numbers bound capacity; measure a "
            "prompt set like your traffic (e.g. `workload=builtin`, or your own file) before deciding.")


def verdict_markdown(comp: Comparison, recs: Sequence[Recommendation]) -> str:
    """The report's opening: top warnings, one line per profile, then each arm's aggregate curve in a sentence."""
    lines = ["## Verdict", ""]
    warnings = top_warnings(comp)
    caveat = workload_caveat(comp)
    if caveat:
        warnings.append(caveat)
    if warnings:
        lines += warnings + [""]
    for r in recs:
        lines.append(f"- **{md_text(r.profile.name)}** — {r.headline}")
    lines.append("")
    for arm in comp.spec_arms:
        line = _crossover_line(comp, arm)
        if line:
            lines.append(line)
    return "\n".join(lines)


def shared_lines(recs: Sequence[Recommendation]) -> list[str]:
    """Reasons, caveats and next experiments that every profile's recommendation carries (shown once)."""
    if len(recs) < 2:
        return []
    def items(r: Recommendation) -> list[str]:
        return list(r.caveats) + list(r.next_experiments) + list(r.reasons)
    first = items(recs[0])
    return [x for x in dict.fromkeys(first) if all(x in items(r) for r in recs[1:])]


def shared_markdown(comp: Comparison, recs: Sequence[Recommendation]) -> str:
    """What applies to every profile, said once: shared caveats, reasons and next experiments."""
    shared = shared_lines(recs)
    if not shared:
        return ""
    first = recs[0]
    caveats = [c for c in first.caveats if c in shared]
    reasons = [r for r in first.reasons if r in shared]
    experiments = [e for e in first.next_experiments if e in shared]
    lines = ["### For every profile", ""]
    if reasons:
        lines += ["**Findings**", ""] + [f"- {r}" for r in reasons] + [""]
    if caveats:
        lines += ["**Caveats**", ""] + [f"- {c}" for c in caveats] + [""]
    if experiments:
        lines += ["**Next experiments**", ""] + [f"{i}. {e}" for i, e in enumerate(experiments, start=1)]
    return "\n".join(lines)


def _server_field(meta: dict[str, Any], key: str) -> Any:
    server = meta.get("server") or {}
    if key in server:
        return server[key]
    return (server.get("server_info") or {}).get(key)


def _hardware(meta: dict[str, Any]) -> str | None:
    hw = dict(meta.get("hardware") or {})
    if not hw:
        return None
    head = " ".join(str(x) for x in (f"{hw.pop('gpus')}×" if "gpus" in hw else None, hw.pop("gpu_model", None)) if x)
    tp = hw.pop("tp_size", None)
    rest = [head] if head else []
    if tp:
        rest.append(f"TP {tp}")
    rest += [f"{k} {v}" for k, v in hw.items()]
    return ", ".join(rest)


def _server_name(meta: dict[str, Any]) -> str:
    text = " ".join(str(x) for x in (_server_field(meta, "name"), _server_field(meta, "version")) if x)
    if _server_field(meta, "simulated") and "simulated" not in text:
        text += " (simulated)"
    return text


def _requests_per_level(meta: dict[str, Any]) -> str | None:
    sweep = meta.get("sweep") or {}
    value = sweep.get("requests_per_level")
    if isinstance(value, dict):
        rule = sweep.get("requests_per_level_rule")
        text = ", ".join(str(v) for v in value.values())
        return text + (" (auto: max(4, 2 × concurrency))" if rule == "auto" else "")
    return None if value is None else str(value)


def _workload_line(meta: dict[str, Any]) -> str:
    """The setup table's workload cell: the ``workload`` value, its description and why it was chosen;
    for result sets written before those were recorded, kind and token lengths."""
    w = meta.get("workload") or {}
    head = _workload_value(str(w["value"])) if w.get("value") else str(w.get("kind") or "unknown")
    desc = w.get("description")
    if not desc:
        lengths = [f"{w[k]} {word}" for k, word in (("input_tokens", "in"), ("output_tokens", "out"))
                   if w.get(k) is not None]
        desc = " / ".join(lengths) if lengths else None
    text = f"{head}: {desc}" if desc else head
    chosen = w.get("chosen_by")
    if chosen and chosen != "given":
        text += f" (chosen: {chosen})"
    if w.get("output_length") and w.get("output_length") != "fixed" and "output" not in str(desc):
        text += f"; output length {w['output_length']}"
    return text


#: flags whose next value (or ``=value``) a shown command line masks
_SECRET_FLAG = re.compile(r"key|token|secret|password|passwd|credential|auth", re.IGNORECASE)


def masked_argv(argv: Sequence[Any]) -> list[str]:
    """``argv`` with secret values replaced by ``***``: the value after a flag whose name says key,
    token, secret, password, … (``--api-key K``, ``--hf-token=T``) and the ``SPECSWEEP_API_KEY``
    value wherever it appears."""
    from specsweep.redact import redact_text

    out: list[str] = []
    hide_next = False
    for raw in map(str, argv):
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        if raw.startswith("-") and "=" in raw and _SECRET_FLAG.search(raw.split("=", 1)[0]):
            out.append(raw.split("=", 1)[0] + "=***")
            continue
        hide_next = raw.startswith("-") and bool(_SECRET_FLAG.search(raw))
        out.append(redact_text(raw))
    return out


def server_command(meta: dict[str, Any]) -> str | None:
    """How the arm's server was started, as one shell line (secrets masked), or None where the
    result set does not say: the argv ``specsweep.engines.llamacpp`` recorded in ``/props``
    (``server.launch.argv``; for llama.cpp the only record of its speculative settings), a
    ``serve.argv`` recorded with the run, or the embedded reference server's arguments."""
    launch = _server_field(meta, "launch")
    serve = meta.get("serve")
    argv = None
    if isinstance(launch, dict) and isinstance(launch.get("argv"), list):
        argv = launch["argv"]
    elif isinstance(serve, dict) and isinstance(serve.get("argv"), list):
        argv = serve["argv"]
    elif isinstance(meta.get("embedded_server"), dict):
        e = meta["embedded_server"]
        argv = ["python", "-m", "specsweep.refserver", *[str(x) for x in e.get("argv") or e.get("args") or []]]
    return shell_line(masked_argv(argv)) if argv else None


def _prompt_cache_line(meta: dict[str, Any]) -> str | None:
    how = meta.get("prefix_cache_flush")
    if how:
        return f"emptied before every level: {how}"
    if (meta.get("sweep") or {}).get("flush_cache") is False and _server_field(meta, "name") == "llamacpp":
        return "not emptied between levels (flush_cache=false)"
    return None


def setup_table(comp: Comparison) -> pd.DataFrame:
    """One column per arm: what was measured, against which server, with which settings."""
    fields: list[tuple[str, Any]] = [
        ("label", lambda m: m.get("label") or m["arm"]),
        ("description", lambda m: m.get("description")),
        ("kind", lambda m: "published reference data" if m.get("kind") == "reference" else "measured by specsweep"),
        ("model", lambda m: m.get("model")),
        ("hardware", _hardware),
        ("server", _server_name),
        ("speculative algorithm", lambda m: _server_field(m, "speculative_algorithm") or "off"),
        ("speculative steps / draft tokens", lambda m: "/".join(str(_server_field(m, k)) for k in ("speculative_num_steps", "speculative_num_draft_tokens")) if _server_field(m, "speculative_num_steps") else None),
        ("max_running_requests", lambda m: _server_field(m, "max_running_requests")),
        ("mem_fraction_static", lambda m: _server_field(m, "mem_fraction_static")),
        ("server command", server_command),
        ("prompt cache", _prompt_cache_line),
        ("API", lambda m: m.get("api") + (" (auto: the model's chat template)" if m.get("api_chosen_by") else "")
         if m.get("api") else None),
        ("endpoint", lambda m: m.get("endpoint")),
        ("workload", _workload_line),
        ("concurrency levels", lambda m: ", ".join(map(str, (m.get("sweep") or {}).get("concurrency") or []))),
        ("repeats", lambda m: (m.get("sweep") or {}).get("repeats")),
        ("requests per level", _requests_per_level),
        ("per-request samples", lambda m: "no (level-level figures only)" if m.get("level_only") else "yes"),
        ("measured (UTC)", lambda m: m.get("started_utc")),
        ("tool", lambda m: " ".join(str(x) for x in ((m.get("tool") or {}).get("name"), (m.get("tool") or {}).get("version")) if x)),
        ("source", lambda m: (m.get("source") or {}).get("citation")),
    ]
    data = {}
    for arm in comp.arms:
        meta = comp.metas[arm]
        data[comp.labels[arm]] = [fn(meta) for _, fn in fields]
    frame = pd.DataFrame(data, index=[name for name, _ in fields])
    frame = frame[frame.apply(lambda r: any(v not in (None, "", "None") for v in r), axis=1)]
    return frame.fillna("—").astype(str).replace({"None": "—", "": "—"})


def manual_agreement_markdown(sets: Sequence[Any], baseline: str = "baseline") -> str:
    """Output agreement with the baseline for result sets that no study measured (a study's report
    has it in its study section): per arm and level, identical outputs for the same prompts
    (:mod:`specsweep.agreement`, paired by repeat and prompt). Empty when a study measured them, the
    baseline is absent, or no request row carries an output digest. Names are escaped."""
    from specsweep.agreement import agreement_markdown, output_agreement

    if not sets or any(isinstance(getattr(rs, "meta", {}).get("study"), dict) for rs in sets):
        return ""
    table = output_agreement(sets, baseline)
    if table.empty:
        return ""
    return ("Each sweep sent the same prompts in the same order for the same parameters, so the arms' "
            "outputs can be compared prompt by prompt (temperature 0 should give identical text):\n\n"
            + agreement_markdown(table, baseline))


def differences_markdown(comp: Comparison) -> str:
    """Which settings differ between the arms (the thing the comparison is about), and any notes."""
    table = setup_table(comp)
    skip = {"label", "description", "measured (UTC)", "source", "endpoint", "tool"}
    diffs = [idx for idx, row in table.iterrows() if idx not in skip and row.nunique() > 1]
    lines = []
    if diffs:
        lines.append("What differs between the arms: " + "; ".join(
            f"**{d}** (" + ", ".join(f"{md_text(arm)}: {md_text(table.at[d, arm])}" for arm in table.columns) + ")"
            for d in diffs) + ".")
    else:
        lines.append("The arms' recorded settings do not differ; check that the speculative settings were captured.")
    from specsweep.compare import workload_differences

    differing = [a for a in comp.spec_arms if workload_differences(comp.metas[a]["workload"], comp.workload)]
    if differing:
        lines.append("⚠ The arms' workloads differ (" + ", ".join(differing) + " vs the baseline); see the notes below.")
    else:
        lines.append(f"All arms used the same workload: {md_text(_workload_line({'workload': comp.workload}))}.")
    lines.extend(comp.notes)
    return "\n\n".join(lines)


def diagnostics_markdown(comp: Comparison) -> str:
    """What the diagnostics show, from the numbers: served vs offered concurrency, caps, tokens per chunk."""
    lv = comp.levels
    measured = "decoding_concurrency" in lv and lv["decoding_concurrency"].notna().any()
    col = "decoding_concurrency" if measured else "concurrency_estimate"
    lines = []
    if measured:
        lines.append("Decoding concurrency is Σ (e2e − TTFT) ÷ window: how many requests were, on average, between "
                     "their first and last token. Effective concurrency (Little's law, Σ (t_end − t_start) ÷ window) "
                     "counts queued requests too; in a closed loop it stays near the offered concurrency unless the "
                     "client falls behind.")
    else:
        lines.append("Only level-level figures are available, so the requests served at once are **estimated** as "
                     "aggregate tok/s ÷ per-request tok/s (Little's law with output tokens ÷ per-request speed standing "
                     "in for the time a request spends being served). If the per-request figure excluded queueing, "
                     "this counts requests being decoded; had it included queueing, it would come out near the offered "
                     "concurrency — so an estimate far below the offered concurrency suggests the published per-request "
                     "figure leaves queueing out.")
    bullets = []
    for arm in comp.arms:
        a = comp.arm_levels(arm)
        pairs = ", ".join(f"{v:.1f} at {int(c)}" for c, v in zip(a["concurrency"], a[col]) if not pd.isna(v))
        cap = comp.caps.get(arm)
        top = a.iloc[-1]
        line = f"- {comp.labels[arm]}: {pairs}."
        if cap and top["concurrency"] > cap:
            line += f" Its cap is {cap}; at {int(top['concurrency'])} offered it serves {top[col]:.1f} ({top[col] / cap:.0%} of the cap)."
        if "effective_concurrency" in a and a["effective_concurrency"].notna().any():
            low = a[a["effective_concurrency"] < 0.9 * a["concurrency"]]
            if len(low):
                held = ("client_max_in_flight" in low and (low["client_max_in_flight"] >= low["concurrency"]).all()
                        and ("client_cpu_cores" not in low or (low["client_cpu_cores"].fillna(0) < 0.7).all()))
                why = ("ramp-up and drain: the client did hold all C in flight, with an idle core, but with "
                       "few requests per slot the start and end of a level weigh a lot" if held
                       else "ramp-up and drain, or a client that fell behind")
                line += (" On average fewer requests were in flight than offered at "
                         + ", ".join(f"{int(r.concurrency)} ({r.effective_concurrency:.1f})" for r in low.itertuples())
                         + f" — {why}.")
        bullets.append(line)
    lines.append("\n".join(bullets))
    if "tokens_per_chunk_mean" in lv and lv["tokens_per_chunk_mean"].notna().any():
        tpc = lv.groupby("arm")["tokens_per_chunk_mean"].mean()
        lines.append("Tokens per streamed chunk (mean over levels): " + ", ".join(
            f"{comp.labels[a]} {tpc[a]:.2f}" for a in comp.arms if a in tpc and not pd.isna(tpc[a]))
                     + ". Counting chunks as tokens would understate a speculative arm by that factor; specsweep counts "
                     "the server's own token counts.")
    if "spec_accept_length" in lv and lv[~lv["arm"].isin(list(comp.chunk_counted))]["spec_accept_length"].notna().any():
        acc = lv[~lv["arm"].isin(list(comp.chunk_counted))].dropna(subset=["spec_accept_length"])
        src = {a: ", ".join(sorted(set(g.get("spec_accept_length_source", pd.Series()).dropna().astype(str)))) for a, g in acc.groupby("arm")}
        lines.append("Server-side acceptance length per level: " + "; ".join(
            f"{comp.labels[a]}: " + ", ".join(f"{r.spec_accept_length:.2f} at {int(r.concurrency)}" for r in g.itertuples())
            + (f" — {md_text(src[a])}" if src[a] else "")
            for a, g in acc.groupby("arm")) + ".")
    if comp.chunk_counted:
        lines.append("⚠ Tokens were counted from SSE chunks, because the server reported no counts, for "
                     + ", ".join(f"{md_text(comp.labels[a])} ({w})" for a, w in comp.chunk_counted.items())
                     + ": under speculation those throughput figures are lower bounds, and no throughput or acceptance "
                     "verdict is given for them.")
    return "\n\n".join(lines)


# ------------------------------------------------------------------------------- categories

def _category_levels(comp: Comparison, arm: str) -> list[int]:
    """The levels a category view shows for one arm: the lowest level both it and the baseline measured,
    and the two levels around its first aggregate crossover, or else the highest shared level."""
    shared = comp.shared_levels(arm)
    if not shared:
        return []
    cx = comp.crossover(arm, "output_tok_s")
    around = [int(cx.iloc[0]["c_low"]), int(cx.iloc[0]["c_high"])] if len(cx) else [shared[-1]]
    return sorted({shared[0], *around})


def has_categories(sets: Sequence[Any]) -> bool:
    """True when the result sets' measured requests carry more than one prompt category."""
    from specsweep.datasets import with_category

    seen: set[str] = set()
    for rs in sets:
        req = getattr(rs, "requests", None)
        if req is None or req.empty:
            continue
        req = with_category(req)
        if "warmup" in req.columns:
            req = req[~req["warmup"].astype(bool)]
        seen.update(str(c) for c in req["category"].unique())
    return len(seen) > 1


def _repeat_interval(arm_values: Sequence[float], base_values: Sequence[float]) -> tuple[float, float]:
    """95 % interval of Δ% = (arm / baseline − 1) × 100 from per-repeat values: a two-sample t
    interval on ln(value) (pooled variance, n_arm + n_base − 2 degrees of freedom), mapped back to %.
    (nan, nan) unless both sides have two or more positive repeats."""
    from scipy import stats

    a = np.log([v for v in arm_values if v > 0 and not math.isnan(v)])
    b = np.log([v for v in base_values if v > 0 and not math.isnan(v)])
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan
    dof = len(a) + len(b) - 2
    pooled = ((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / dof
    se = math.sqrt(pooled * (1 / len(a) + 1 / len(b)))
    diff, t = float(a.mean() - b.mean()), float(stats.t.ppf(0.975, dof))
    return (math.exp(diff - t * se) - 1) * 100, (math.exp(diff + t * se) - 1) * 100


#: a category gets its own delta curves (and may get a crossover) only where it was measured at this
#: many levels shared with the baseline, with at least ``compare.MIN_REQUESTS`` measured requests of
#: the category in every run of the level on both arms
MIN_CATEGORY_LEVELS: int = 3
#: the category view's two figures: (key in the frames, title)
CATEGORY_FIGURES: tuple[tuple[str, str], ...] = (("aggregate", "aggregate share"), ("user", "per-user speed"))


@dataclass
class CategoryFit:
    """The delta curve of one figure (``"aggregate"`` share or ``"user"`` speed) of one prompt
    category, one speculative arm against the baseline: the levels it was fitted on (those with
    enough requests of the category, see :data:`MIN_CATEGORY_LEVELS`) and the curve, or None
    when there were too few of them."""

    arm: str
    category: str
    figure: str
    levels: list[int]
    curve: DeltaCurve | None
    #: how many category curves share the arm's 5 % error budget (2 figures × fitted categories)
    family: int = 0


def _category_column(comp: Comparison, figure: str) -> str:
    """The level-metric column behind a category figure: the comparison's per-user metric or output tok/s."""
    return comp.user_metric if figure == "user" else "output_tok_s"


def _enough_requests(req: pd.DataFrame, concurrency: int, category: str) -> bool:
    """True when every run of the level has at least ``compare.MIN_REQUESTS`` measured requests of the category."""
    from specsweep.compare import MIN_REQUESTS

    level = req[req["concurrency"] == concurrency]
    runs = level["repeat"].unique() if "repeat" in level else [0]
    if not len(runs):
        return False
    part = level[level["category"] == category]
    counts = part.groupby("repeat").size() if "repeat" in part else pd.Series({0: len(part)})
    return all(int(counts.get(r, 0)) >= MIN_REQUESTS for r in runs)


def category_curves(comp: Comparison, sets: Sequence[Any], *, n_boot: int = 400,
                    seed: int = 0) -> dict[tuple[str, str, str], CategoryFit]:
    """Per spec arm, prompt category and figure (``"aggregate"``, ``"user"``): the category's delta
    curve, fitted exactly as the whole-run verdict's (:func:`specsweep.compare.fit_metric`: the
    same model, noise sources and 95 % simultaneous band, ``comp.assumed_noise_pct`` where there
    are no repeats) over the category's rows of :func:`specsweep.datasets.category_metrics`.

    A category is fitted only on the levels shared with the baseline where every run has at least
    ``compare.MIN_REQUESTS`` measured requests of it on both arms, and only when there are at least
    :data:`MIN_CATEGORY_LEVELS` such levels (else ``curve`` is None). The band's Bonferroni family
    is 2 figures × the arm's fitted categories (``CategoryFit.family``), so a claim about any
    category keeps the 5 % error budget. Keys: (arm, category, figure). Empty without categories.
    """
    from specsweep.compare import fit_metric, measured_requests
    from specsweep.datasets import category_metrics, with_category

    if not has_categories(sets):
        return {}
    by_arm = {rs.arm: rs for rs in sets}
    data: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}
    for arm in comp.arms:
        rs = by_arm.get(arm)
        ok = measured_requests(rs) if rs is not None else None
        if ok is None or ok.empty:
            continue
        data[arm] = (category_metrics(rs.requests), with_category(ok))
    if comp.baseline not in data:
        return {}
    cm_b, req_b = data[comp.baseline]
    rng = np.random.default_rng(seed)
    out: dict[tuple[str, str, str], CategoryFit] = {}
    for arm in comp.spec_arms:
        if arm not in data:
            continue
        cm_a, req_a = data[arm]
        shared = comp.shared_levels(arm)
        cats = sorted(set(cm_a["category"]) & set(cm_b["category"]))
        levels = {cat: [c for c in shared if _enough_requests(req_a, c, cat) and _enough_requests(req_b, c, cat)]
                  for cat in cats}
        fitted = [cat for cat in cats if len(levels[cat]) >= MIN_CATEGORY_LEVELS]
        family = len(CATEGORY_FIGURES) * len(fitted)
        for cat in cats:
            for figure, _ in CATEGORY_FIGURES:
                col = _category_column(comp, figure)
                curve = None
                if cat in fitted and col in cm_a and col in cm_b:
                    curve = fit_metric(col, levels[cat], cm_a[cm_a["category"] == cat], cm_b[cm_b["category"] == cat],
                                       req_a[req_a["category"] == cat], req_b[req_b["category"] == cat], n_boot, rng,
                                       family, comp.assumed_noise_pct)
                    if curve is not None and len(curve.concurrency) < MIN_CATEGORY_LEVELS:
                        curve = None
                    if curve is not None:
                        curve.family_label = "category curves"
                out[(arm, cat, figure)] = CategoryFit(arm, cat, figure, levels[cat], curve, family)
    return out


def category_crossovers(comp: Comparison, sets: Sequence[Any],
                        curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> pd.DataFrame:
    """One row per spec arm, category and figure: where the category's fitted delta curve
    credibly crosses 0, by the whole-run rule (:func:`specsweep.compare.curve_crossovers`: credibly
    positive at one level and credibly negative at a later one, or the reverse, with no credible
    level between; placed at the curve's zero on log2(concurrency)).

    ``status``: ``"crossover"`` (the first one: ``c_low``, ``c_high``, ``crossover_concurrency``,
    ``direction``; ``n_crossovers`` counts them), ``"none"`` (a curve, no credible sign change)
    or ``"too few levels"`` (no curve: fewer than :data:`MIN_CATEGORY_LEVELS` levels with enough
    requests). ``above`` / ``below``: the levels where the band lies above / below 0;
    ``fit_min_pct`` / ``fit_max_pct``: the fitted Δ% range over the levels (%). ``curves``:
    :func:`category_curves` already computed for these sets.
    """
    from specsweep.compare import curve_crossovers

    fits = category_curves(comp, sets) if curves is None else curves
    columns = ["arm", "category", "figure", "n_levels", "levels", "status", "n_crossovers", "c_low", "c_high",
               "crossover_concurrency", "direction", "above", "below", "fit_min_pct", "fit_max_pct", "method"]
    rows = []
    for (arm, cat, figure), fit in fits.items():
        row: dict[str, Any] = {"arm": arm, "category": cat, "figure": figure, "n_levels": len(fit.levels),
                               "levels": list(fit.levels), "status": "too few levels", "n_crossovers": 0,
                               "c_low": None, "c_high": None, "crossover_concurrency": math.nan, "direction": None,
                               "above": [], "below": [], "fit_min_pct": math.nan, "fit_max_pct": math.nan,
                               "method": None}
        curve = fit.curve
        if curve is not None:
            cred = curve.credible
            pct = (np.exp(curve.fitted) - 1) * 100
            row.update(status="none", method=curve.method(), fit_min_pct=float(pct.min()), fit_max_pct=float(pct.max()),
                       above=[int(c) for c, s in zip(curve.concurrency, cred) if s > 0],
                       below=[int(c) for c, s in zip(curve.concurrency, cred) if s < 0])
            cx = curve_crossovers(curve)
            if cx:
                first = cx[0]
                row.update(status="crossover", n_crossovers=len(cx), c_low=first["c_low"], c_high=first["c_high"],
                           crossover_concurrency=first["crossover_concurrency"], direction=first["direction"])
        rows.append(row)
    order = {name: i for i, (name, _) in enumerate(CATEGORY_FIGURES)}
    frame = pd.DataFrame(rows, columns=columns)
    if frame.empty:
        return frame
    frame["_o"] = frame["figure"].map(order)
    return frame.sort_values(["arm", "_o", "category"]).drop(columns="_o").reset_index(drop=True)


def category_deltas(comp: Comparison, sets: Sequence[Any],
                    curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> pd.DataFrame:
    """Per spec arm, shown level (:func:`_category_levels`) and prompt category: the category's
    acceptance length on the arm, and its per-user speed and aggregate share on both arms with Δ%.

    Every figure is :func:`specsweep.datasets.category_metrics` over the arm's measured requests,
    averaged over repeats; Δ% = (arm / baseline − 1) × 100 as for whole levels. The aggregate share
    is the category's output tokens ÷ its own window inside the level (tok/s): a share of the
    level's throughput, not what the category would get on its own.

    Intervals (``*_ci_low_pct`` / ``*_ci_high_pct``, %; ``*_ci_kind`` says which): where the
    category has a fitted delta curve at the level (:func:`category_curves`), its 95 %
    simultaneous band (``"band"``; ``*_fit_pct`` is the fitted Δ% there), as the verdict's;
    else a 95 % interval from repeats (``"repeats"``, :func:`_repeat_interval`); else none
    (``"none"``, NaN: one run and too few levels for a curve). ``curves``: :func:`category_curves`
    already computed for these sets. Empty when the requests carry one category or none.
    """
    from specsweep.datasets import category_metrics

    columns = ["arm", "concurrency", "category", "category_share", "accept_length", "accept_length_baseline",
               "n_repeats"]
    for name in ("user", "aggregate"):
        columns += [f"{name}_baseline", f"{name}_arm", f"{name}_delta_pct", f"{name}_fit_pct", f"{name}_ci_low_pct",
                    f"{name}_ci_high_pct", f"{name}_ci_kind"]
    if not has_categories(sets):
        return pd.DataFrame(columns=columns)
    fits = category_curves(comp, sets) if curves is None else curves
    by_arm = {rs.arm: rs for rs in sets}
    per_arm: dict[str, pd.DataFrame] = {}
    for arm in comp.arms:
        rs = by_arm.get(arm)
        if rs is not None and rs.requests is not None and not rs.requests.empty:
            per_arm[arm] = category_metrics(rs.requests)
    base = per_arm.get(comp.baseline)
    um = comp.user_metric
    rows = []
    for arm in comp.spec_arms:
        cm = per_arm.get(arm)
        if cm is None or base is None or um not in cm or um not in base:
            continue
        for c in _category_levels(comp, arm):
            a_lv, b_lv = cm[cm["concurrency"] == c], base[base["concurrency"] == c]
            for cat in sorted(set(a_lv["category"]) & set(b_lv["category"])):
                a, b = a_lv[a_lv["category"] == cat], b_lv[b_lv["category"] == cat]
                row: dict[str, Any] = {
                    "arm": arm, "concurrency": int(c), "category": cat,
                    "category_share": float(a["category_share"].mean()),
                    "accept_length": float(a["spec_accept_length"].mean()),
                    "accept_length_baseline": float(b["spec_accept_length"].mean()),
                    "n_repeats": int(min(a["repeat"].nunique(), b["repeat"].nunique())) if "repeat" in a else 1,
                }
                for name in ("user", "aggregate"):
                    col = _category_column(comp, name)
                    av, bv = float(a[col].mean()), float(b[col].mean())
                    lo, hi = _repeat_interval(a[col].tolist(), b[col].tolist())
                    kind, fit_pct = ("none" if math.isnan(lo) else "repeats"), math.nan
                    fit = fits.get((arm, cat, name))
                    at = ([int(x) for x in fit.curve.concurrency].index(int(c))
                          if fit is not None and fit.curve is not None and int(c) in fit.curve.concurrency else None)
                    if at is not None:
                        f, h = fit.curve.fitted[at], fit.curve.half_width[at]
                        fit_pct, lo, hi = ((math.exp(z) - 1) * 100 for z in (f, f - h, f + h))
                        kind = "band"
                    row.update({f"{name}_baseline": bv, f"{name}_arm": av,
                                f"{name}_delta_pct": (av / bv - 1) * 100 if bv else math.nan,
                                f"{name}_fit_pct": fit_pct, f"{name}_ci_low_pct": lo, f"{name}_ci_high_pct": hi,
                                f"{name}_ci_kind": kind})
                rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _interval_cell(r: dict[str, Any], name: str) -> str:
    """A category row's Δ interval for reading: the fitted curve's band (with the fitted Δ%), a
    repeat interval, or "single run"."""
    lo, hi, kind = r[f"{name}_ci_low_pct"], r[f"{name}_ci_high_pct"], r.get(f"{name}_ci_kind")
    if pd.isna(lo):
        return "single run"
    if kind == "band":
        return f"{_band(lo, hi)} around fitted {_pct_or_dash(r[f'{name}_fit_pct'])}"
    return f"{_band(lo, hi)} (repeats)"


def category_table(comp: Comparison, sets: Sequence[Any], deltas: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`category_deltas` for reading: one row per (arm, level, category), Δ% with its 95 %
    interval (the category curve's band around its fitted Δ%, an interval from repeats, or
    "single run"). Show it with :func:`table` (category names are escaped). ``deltas``:
    :func:`category_deltas` already computed for these sets."""
    d = category_deltas(comp, sets) if deltas is None else deltas
    rows = []
    for r in d.to_dict("records"):
        row: dict[str, Any] = {
            "arm": comp.labels[r["arm"]], "concurrency": r["concurrency"], "category": r["category"],
            "share of requests": f"{r['category_share']:.0%}",
            "accept length (arm)": _fmt(r["accept_length"], 2),
        }
        for name, title in (("user", "per-user"), ("aggregate", "aggregate share")):
            unit = "tok/s"
            row[f"{title} baseline ({unit})"] = _fmt(r[f"{name}_baseline"])
            row[f"{title} arm ({unit})"] = _fmt(r[f"{name}_arm"])
            row[f"{title} Δ%"] = _pct_or_dash(r[f"{name}_delta_pct"])
            row[f"{title} Δ 95% interval"] = _interval_cell(r, name)
        rows.append(row)
    return pd.DataFrame(rows)


def _pays(r: dict[str, Any]) -> str:
    """'pays', 'does not pay' or 'within noise' for one category row: pays where per-user and
    aggregate Δ are both above 0, does not where either is below. With an interval (the category
    curve's band, else repeats) a Δ counts only where the interval excludes 0, and a row with only
    such uncounted Δs is within noise; without one, the measured Δ% decides."""
    signs = []
    for name in ("user", "aggregate"):
        lo, hi, d = r[f"{name}_ci_low_pct"], r[f"{name}_ci_high_pct"], r[f"{name}_delta_pct"]
        if pd.isna(d):
            continue
        if not pd.isna(lo):
            signs.append(1 if lo > 0 else -1 if hi < 0 else 0)
        else:
            signs.append(1 if d > 0 else -1)
    if any(s < 0 for s in signs):
        return "does not pay"
    if signs and all(s > 0 for s in signs):
        return "pays"
    return "within noise"


def _quoted(r: dict[str, Any], name: str) -> float:
    """The Δ% a sentence quotes for a category row: the fitted one where a band judged it, else the measured one."""
    fit = r.get(f"{name}_fit_pct")
    return float(fit) if r.get(f"{name}_ci_kind") == "band" and fit is not None and not pd.isna(fit) \
        else float(r[f"{name}_delta_pct"])


def _quoted_pct(r: dict[str, Any], name: str) -> str:
    """:func:`_quoted` as text (whole %, never "-0%"), "fitted" before it where it is the fitted Δ%."""
    quoted = _quoted(r, name)
    if pd.isna(quoted):  # no successful request of this category on one side: nothing to quote
        return "no measured Δ"
    value = round(quoted) or 0.0
    return ("fitted " if r.get(f"{name}_ci_kind") == "band" else "") + f"{value:+.0f}%"


def category_sentences(comp: Comparison, sets: Sequence[Any], deltas: pd.DataFrame | None = None) -> list[str]:
    """One plain sentence per spec arm and shown level, from :func:`category_deltas`: the categories
    where speculation pays (per-user and aggregate Δ both above 0, by :func:`_pays`) and where it
    does not, best first, with the category of the highest and of the lowest per-user Δ% named.
    Every Δ% is the one that judged its category: the fitted Δ% where its curve's band did (said
    as "fitted"), else the measured one. ``deltas``: as for :func:`category_table`."""
    d = category_deltas(comp, sets) if deltas is None else deltas
    out = []
    for (arm, c), g in d.groupby(["arm", "concurrency"], sort=True):
        g = g.assign(_quoted=[_quoted(r, "user") for r in g.to_dict("records")])
        g = g.sort_values("_quoted", ascending=False, kind="stable")
        recs = g.to_dict("records")
        verdicts = {r["category"]: _pays(r) for r in recs}

        def named(rs: list[dict[str, Any]]) -> str:
            def one(r: dict[str, Any]) -> str:
                return (f"{md_text(r['category'])} ({_quoted_pct(r, 'user')} per user, "
                        f"{_quoted_pct(r, 'aggregate')} aggregate share)")
            return ", ".join(one(r) for r in rs)

        pays = [r for r in recs if verdicts[r["category"]] == "pays"]
        not_pays = [r for r in recs if verdicts[r["category"]] == "does not pay"]
        noise = [r for r in recs if verdicts[r["category"]] == "within noise"]
        best, worst = recs[0], recs[-1]
        parts = [f"At concurrency {int(c)}, {md_text(comp.labels[arm])} pays"
                 + (f" for {named(pays)}" if pays else " for no category")]
        parts.append(f"it does not for {named(not_pays)}" if not_pays else "it loses on none")
        text = "; ".join(parts)
        if noise:
            text += f"; within noise for {named(noise)}"
        text += (f". Per-user gain is highest for {md_text(best['category'])} ({_quoted_pct(best, 'user')}) and "
                 f"lowest for {md_text(worst['category'])} ({_quoted_pct(worst, 'user')})")
        acc = g.dropna(subset=["accept_length"])
        if len(acc) > 1:
            hi, lo = acc.loc[acc["accept_length"].idxmax()], acc.loc[acc["accept_length"].idxmin()]
            text += (f"; accept length runs from {lo['accept_length']:.2f} ({md_text(lo['category'])}) to "
                     f"{hi['accept_length']:.2f} ({md_text(hi['category'])})")
        single = bool(pd.isna(g["user_ci_low_pct"]).all())
        out.append(text + (" (single run: point estimates, no interval)." if single else "."))
    return out


def _levels_text(levels: Sequence[int]) -> str:
    return ", ".join(str(int(c)) for c in levels) if len(levels) else "no level"


def category_crossover_sentences(comp: Comparison, crossovers: pd.DataFrame) -> list[str]:
    """One sentence per spec arm and figure from :func:`category_crossovers`: the categories whose
    fitted delta curve credibly crosses 0 (where, between which levels), those with a curve and no
    crossover (where the band lies above and below 0), and those with too few levels for a curve."""
    out = []
    if crossovers is None or crossovers.empty:
        return out
    titles = dict(CATEGORY_FIGURES)
    for arm in comp.spec_arms:
        for figure, _ in CATEGORY_FIGURES:
            g = crossovers[(crossovers["arm"] == arm) & (crossovers["figure"] == figure)]
            if g.empty:
                continue
            parts = []
            for r in g[g["status"] == "crossover"].to_dict("records"):
                way = "lower" if r["direction"] == "gain_to_loss" else "higher"
                extra = r["n_crossovers"] - 1
                more = f" (and {extra} more sign change{'s' if extra > 1 else ''} after it)" if extra else ""
                parts.append(f"for {md_text(r['category'])} it is credibly {way} than on the baseline above about "
                             f"**{r['crossover_concurrency']:.0f}** concurrent requests (its fitted curve crosses 0 "
                             f"between {int(r['c_low'])} and {int(r['c_high'])}){more}")
            none = g[g["status"] == "none"].to_dict("records")
            if none:
                parts.append("no crossover is claimed for " + "; ".join(
                    f"{md_text(r['category'])} (credibly above 0 at {_levels_text(r['above'])}, below at "
                    f"{_levels_text(r['below'])})" for r in none))
            few = g[g["status"] == "too few levels"].to_dict("records")
            if few:
                parts.append(f"too few levels for a curve for {', '.join(md_text(r['category']) for r in few)} "
                             f"(fewer than {MIN_CATEGORY_LEVELS} levels with enough requests of the category on both "
                             "arms), so no crossover is claimed there")
            out.append(f"{titles[figure].capitalize()} by category, {md_text(comp.labels[arm])}: " + "; ".join(parts)
                       + ".")
    return out


def category_crossover_table(comp: Comparison, sets: Sequence[Any],
                             curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> pd.DataFrame:
    """The numbers behind :func:`category_crossover_sentences`: one row per (arm, figure,
    category), the fitted Δ% and its 95 % simultaneous band at each level the category was fitted
    on ("—" elsewhere), and the crossover (or why there is none). Show it with :func:`table`.
    ``curves``: :func:`category_curves` already computed for these sets."""
    curves = category_curves(comp, sets) if curves is None else curves
    crossovers = category_crossovers(comp, sets, curves)
    rows = []
    titles = dict(CATEGORY_FIGURES)
    levels = sorted({int(c) for fit in curves.values() for c in fit.levels})
    for r in crossovers.to_dict("records"):
        fit = curves[(r["arm"], r["category"], r["figure"])]
        row: dict[str, Any] = {"arm": comp.labels[r["arm"]], "Δ of": titles[r["figure"]], "category": r["category"]}
        cells = {}
        if fit.curve is not None:
            curve = fit.curve
            for i, c in enumerate(curve.concurrency):
                f, h = curve.fitted[i], curve.half_width[i]
                lo, mid, hi = ((math.exp(z) - 1) * 100 for z in (f - h, f, f + h))
                cells[int(c)] = f"{mid:+.0f}% [{lo:+.0f}, {hi:+.0f}]"
        for c in levels:
            row[f"C={c}"] = cells.get(c, "—")
        if r["status"] == "crossover":
            way = "gain → loss" if r["direction"] == "gain_to_loss" else "loss → gain"
            row["crossover"] = (f"≈{r['crossover_concurrency']:.0f} ({way}, between {int(r['c_low'])} and "
                                f"{int(r['c_high'])})")
        elif r["status"] == "none":
            row["crossover"] = "none claimed"
        else:
            row["crossover"] = f"too few levels ({r['n_levels']})"
        rows.append(row)
    return pd.DataFrame(rows)


def category_markdown(comp: Comparison, sets: Sequence[Any], deltas: pd.DataFrame | None = None,
                      curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> str:
    """The category view's text in one block: a one-line note when the requests carry a single
    category, else :func:`category_intro_markdown`, :func:`category_crossover_markdown` and
    :func:`category_levels_markdown` (the notebook shows each above its table). ``deltas`` /
    ``curves``: :func:`category_deltas` / :func:`category_curves` already computed for these sets."""
    if not has_categories(sets):
        return ("The requests carry a single prompt category (`all`), so there is no per-category view; a "
                "categorised workload (e.g. `workload=builtin`) gives one.")
    fits = category_curves(comp, sets) if curves is None else curves
    d = category_deltas(comp, sets, fits) if deltas is None else deltas
    if d.empty:
        return ("The requests carry several prompt categories, but no speculative arm and the baseline both have "
                "per-request data for them at a shared level, so no per-category Δ can be given.")
    return "\n\n".join([category_intro_markdown(comp), category_crossover_markdown(comp, sets, fits),
                         category_levels_markdown(comp, sets, d)])


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def category_intro_markdown(comp: Comparison) -> str:
    """What every figure of the category view is (the per-user metric, the aggregate share)."""
    return ("Each category's figures are the level metrics over that category's requests alone (the same "
            "definitions, grouped by category). Per-user speed is "
            f"{md_text(_lower_first(metric_info(comp.user_metric).label))}. The aggregate is the category's output tokens ÷ its "
            "own window inside the level — a **share** of the level's throughput, not what the category would get "
            "on its own: it also depends on which requests the category shared the server with, and in what order "
            "they were admitted.")


def category_crossover_markdown(comp: Comparison, sets: Sequence[Any],
                                curves: dict[tuple[str, str, str], CategoryFit] | None = None) -> str:
    """How a category's crossover is decided, then :func:`category_crossover_sentences` as a list."""
    from specsweep.compare import MIN_REQUESTS

    fits = category_curves(comp, sets) if curves is None else curves
    families = sorted({fit.family for fit in fits.values() if fit.curve is not None})
    family = (f" ({' or '.join(str(f) for f in families)} curves: 2 figures × the fitted categories)"
              if families else "")
    lines = [
        f"Where a category was measured at {MIN_CATEGORY_LEVELS} or more levels with at least {MIN_REQUESTS} of its "
        "requests in "
        "every run on both arms, its Δ% against the baseline is modelled exactly as the verdict's (see "
        "Definitions: the same curve, noise source and 95% simultaneous band), with the band's Bonferroni "
        f"correction taken over every category curve of the arm{family}. A crossover is claimed only between "
        "credible levels of opposite sign. The table gives each fitted Δ% with its band; \"—\" where the "
        "category was not fitted at that level.",
        "",
    ]
    lines += [f"- {s}" for s in category_crossover_sentences(comp, category_crossovers(comp, sets, fits))]
    return "\n".join(lines)


def category_levels_markdown(comp: Comparison, sets: Sequence[Any], deltas: pd.DataFrame | None = None) -> str:
    """What the per-level category table shows, then :func:`category_sentences` as a list."""
    d = category_deltas(comp, sets) if deltas is None else deltas
    lines = [
        "Each category at the lowest level both arms measured and around the aggregate crossover (or at the "
        "highest shared level where there is none). Intervals: the category curve's 95% band around its fitted "
        "Δ% where there is a curve, else 95% t intervals on ln(value) from repeats, else none (one run). A "
        "category pays where its per-user and aggregate-share Δ are both above 0 — with an interval, only where "
        "the interval excludes 0.",
        "",
    ]
    lines += [f"- {s}" for s in category_sentences(comp, sets, d)]
    return "\n".join(lines)


#: per-draft-position columns shown in the full-data table (the rest stay in levels.parquet)
DATA_TABLE_POSITIONS = 4
_POSITION_COLUMN = re.compile(r"^spec_accept(?:_rate|ed)_pos_(\d+)$")


def data_table(comp: Comparison) -> pd.DataFrame:
    """Every metric of every arm and level (averaged over repeats), rounded for reading; of the
    per-draft-position acceptance columns only the first :data:`DATA_TABLE_POSITIONS` are shown
    (an n-gram drafter of 48–64 tokens has that many, which would flood the table)."""
    lv = comp.levels.copy()
    lv.insert(0, "arm", lv.pop("arm").map(comp.labels))
    keep = [c for c in lv.columns if not lv[c].isna().all()
            and not ((m := _POSITION_COLUMN.match(str(c))) and int(m.group(1)) >= DATA_TABLE_POSITIONS)]
    return lv[keep].round(4)


GLOSSARY: dict[str, str] = {
    "Concurrency": "how many requests the client keeps in flight at once (a closed loop: each finished request "
                   "starts the next).",
    "Aggregate throughput": "output tokens per second summed over all requests in flight (the server's capacity).",
    "TPOT": "time per output token after the first: (end-to-end time − TTFT) ÷ (output tokens − 1), in seconds.",
    "Per-user decode speed": "1 ÷ TPOT, in tok/s: how fast one request streams once its first token has arrived.",
    "TTFT": "time to first token: from sending a request to the first chunk that carries a token (queueing and "
            "prefill included).",
    "End-to-end time (e2e)": "from sending a request to its last token; p50 and p99 are the median and the 99th "
                             "percentile over requests.",
    "Speculative decoding": "a cheap *draft* proposes several tokens and the model checks them in one *verify* pass; "
                            "accepted tokens are emitted together, so one step can yield several tokens.",
    "Draft model": "a separate small model that proposes the draft tokens.",
    "MTP / NEXTN": "multi-token prediction: the model's own extra prediction head(s) draft the next tokens; SGLang "
                   "calls the algorithm NEXTN (it reports it as EAGLE internally).",
    "EAGLE": "a speculative method whose light draft head reads the model's hidden states to propose a tree of tokens.",
    "n-gram": "speculation that drafts by looking up the continuation of the latest tokens in the prompt and output "
              "so far; no draft model.",
    "Accept length": "tokens emitted per verify step (1 + accepted draft tokens), averaged; higher means more of the "
                     "draft was right.",
    "Little's law": "in a steady system, requests in flight = arrival rate × mean time in the system. In a closed loop "
                    "of C requests this gives the mean request time W = C × output tokens ÷ aggregate tok/s.",
    "Δ% and the 95% band": "Δ% = (arm ÷ baseline − 1) × 100 at the same concurrency; the band is where the fitted "
                           "delta curve lies with 95% confidence at all tested levels at once (see Definitions).",
    "Credible": "a difference whose 95% simultaneous band excludes 0 (and that exceeds the profile's minimum effect); "
                "anything else is *no measurable difference*.",
}


def glossary_markdown(comp: Comparison) -> str:
    """The terms the report uses, defined once, before they are needed."""
    return "\n".join(["## Terms", ""] + [f"- **{k}**: {v}" for k, v in GLOSSARY.items()])


def _metric_definition(comp: Comparison, col: str) -> str:
    """The one definition of a metric in this report: the data's own where every arm states it, else ours."""
    own = {comp.labels[a]: (comp.metas[a].get("metric_definitions") or {}).get(col) for a in comp.arms}
    given = {a: t for a, t in own.items() if t}
    if given and len(set(given.values())) == 1 and len(given) == len(own):
        return md_text(next(iter(given.values())))
    if given:
        return "; ".join(f"{md_text(a)}: {md_text(t) if t else md_text(info(col).definition)}" for a, t in own.items())
    return info(col).definition


def definitions_markdown(comp: Comparison) -> str:
    """One definition per number on the page: metrics, Δ%, the curve model and band, crossover, Little's law,
    and how often the verdicts were right on synthetic data with known answers."""
    from specsweep import draws

    shown = [c for c in comp.levels.columns
             if (c in METRICS or c in DERIVED) and comp.levels[c].notna().any()]
    lines = ["| metric | unit | better | definition |", "|---|---|---|---|"]
    for c in shown:
        i = info(c)
        lines.append(f"| `{c}` | {i.unit} | {i.better} | {_metric_definition(comp, c)} |")
    methods = [f"{md_text(comp.labels[a])}, {info(m).label[0].lower() + info(m).label[1:]}: {curve.method()}"
               for (a, m), curve in comp.curves.items() if m in ("output_tok_s", comp.user_metric)]
    lines += [
        "",
        "- **Δ%** = (arm ÷ baseline − 1) × 100 at the same concurrency, from values averaged over repeats.",
        f"- **Delta curve and 95% band**: {METHOD}",
    ]
    if methods:
        lines.append("- In this report: " + "; ".join(methods) + ".")
    lines += [
        "- **Verdict per level**: a level is a gain or a loss for a profile only where the deciding delta is credible "
        "(its band excludes 0) and its fitted value exceeds the profile's minimum effect (2% by default). Throughput "
        "profiles decide on aggregate throughput. Latency profiles lose a level where any wait (TTFT p50/p99, e2e "
        "p50/p99, or the Little's-law estimate when those are absent) is credibly longer by more than the minimum "
        "effect (for TTFT, the extra seconds as a share of the baseline's end-to-end time at the same percentile, so "
        "a few milliseconds more before a long answer do not count), and win it where per-user "
        "speed or a wait is credibly better, no end-to-end wait's fitted value is longer and no TTFT's fitted increase "
        "outweighs the per-user gain; on level-only data, where the wait is the Little's-law estimate, a gain needs "
        "that wait credibly shorter, so the latency crossover is the aggregate crossover. A control arm is never "
        "recommended. The recommendation names the deciding metric per level. An SLO moves a level only where the difference in the SLO's metric is credible.",
        "- **Crossover**: only where the fitted aggregate delta is credibly positive at one level and credibly "
        "negative at a later one (or the reverse) with no credible level between; placed where the fitted curve "
        "crosses 0 between them, on log2(concurrency). *Enable up to X* uses the same curve.",
        "- **Little's law** (level-only data): with C requests always in flight, requests complete at λ = aggregate "
        "tok/s ÷ output tokens per request, so the mean request time is W = C ÷ λ = C × output tokens ÷ aggregate "
        "tok/s, queueing included. It is an estimate (ramp-up and drain ignored) and, at one concurrency, the arm's W "
        "÷ the baseline's W = the baseline's aggregate ÷ the arm's.",
        "- **Smallest detectable difference**: (band critical value + 0.84) × the smallest standard error of the "
        "fitted curve, as a %: the delta that would be called credible with 80% power at the best-measured level.",
        "- **Pareto frontier**: (per-user speed, aggregate tok/s) points that no other arm or level beats on one axis "
        "without losing on the other.",
        "- Tokens are the server's own counts (`usage.completion_tokens`, SGLang `meta_info.completion_tokens`), never "
        "SSE chunks: under speculation one chunk carries several tokens.",
    ]
    if draws.QUOTED:
        lines.append("- **How often these verdicts are right**, measured by the test suite (`tests/test_verdict_draws.py`) "
                     "on 500 fresh synthetic arm pairs per case from this noise model: " + draws.MODEL_TEXT)
        lines += ["", "| case | form | result | share of draws |", "|---|---|---|---|"]
        for (case, form), figures in draws.QUOTED.items():
            for what, share in figures.items():
                lines.append(f"| {draws.CASE_TEXT[case]} | {draws.FORM_TEXT[form]} | {draws.RESULT_TEXT[what]} | {share:.1%} |")
    if draws.HARD_QUOTED:
        lines.append("")
        lines.append(f"- **Harder cases** (`tests/test_verdict_draws_hard.py`, {draws.HARD_N} fresh synthetic studies "
                     "per case, measured in time order): " + draws.HARD_MODEL_TEXT)
        lines += ["", "| case | result | share of draws |", "|---|---|---|"]
        for case, figures in draws.HARD_QUOTED.items():
            for what, share in figures.items():
                lines.append(f"| {draws.HARD_CASE_TEXT[case]} | {draws.HARD_RESULT_TEXT[what]} | {share:.1%} |")
    return "\n".join(lines)


def repo_relative(path: str | Path) -> str:
    """``path`` as a command run from the repository root should spell it.

    Inside the checkout: relative to its root (``data/runs/x``), so no path of the machine that
    built the report appears on the page. Outside it: absolute, the only spelling that works.
    """
    p = Path(path)
    absolute = p if p.is_absolute() else (Path.cwd() / p)
    absolute = Path(*absolute.parts)  # normalise
    try:
        return absolute.resolve().relative_to(REPO_ROOT).as_posix() or "."
    except ValueError:
        return str(absolute.resolve())


def _code_block(lines: Sequence[str], lang: str = "sh") -> list[str]:
    """A fenced code block whose fence no backtick run inside it can close."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, *lines, fence]


def report_command(parameters: dict[str, Any]) -> list[str]:
    """The argv of ``python -m specsweep.report`` that rebuilds a report from its notebook parameters.

    Paths are repository-relative where they can be (:func:`repo_relative`); the interpreter is the
    checkout's ``.venv/bin/python`` (``make setup``).
    """
    argv = [".venv/bin/python", "-m", "specsweep.report"]
    for path in parameters.get("result_sets") or []:
        argv += ["--result-set", repo_relative(path)]
    argv += ["--name", str(parameters.get("output_name") or "report")]
    if parameters.get("baseline") not in (None, "baseline"):
        argv += ["--baseline", str(parameters["baseline"])]
    if parameters.get("title"):
        argv += ["--title", str(parameters["title"])]
    if parameters.get("profiles") is not None:
        argv += ["--profiles", json.dumps(parameters["profiles"], ensure_ascii=False)]
    if parameters.get("allow_workload_mismatch"):
        argv.append("--allow-workload-mismatch")
    return argv


def papermill_command(parameters: dict[str, Any], output: str = "out.ipynb") -> list[str]:
    """The argv of the papermill command that runs ``notebooks/report.ipynb`` with these parameters.

    They travel as one YAML document (``-y``) written as JSON (which is YAML), so ``yaml.safe_load``
    reads back exactly ``parameters`` (with paths made repository-relative).
    """
    params = dict(parameters)
    if params.get("result_sets") is not None:
        params["result_sets"] = [repo_relative(p) for p in params["result_sets"]]
    text = json.dumps(params, ensure_ascii=False)
    return [".venv/bin/papermill", "notebooks/report.ipynb", output, "-y", text]


def shell_line(argv: Sequence[str]) -> str:
    """``argv`` as one POSIX shell command line, every word quoted where it needs it."""
    return " ".join(shlex.quote(str(a)) for a in argv)


def _same_for_all(values: dict[str, Any], rule: Any) -> Any:
    """A per-level setting as the notebook parameter that produced it: one integer, or None for auto/mixed."""
    if rule == "auto" or not values:
        return None
    distinct = set(values.values())
    return distinct.pop() if len(distinct) == 1 else None


def _workload_value(value: str) -> str:
    """A recorded ``workload`` parameter as a command should spell it: a file path in it (alone, or
    after a ``format:`` prefix such as ``sharegpt:``) relative to the repository where it lies inside."""
    prefix, sep, rest = value.partition(":")
    if sep and "/" not in prefix and Path(rest).is_absolute():
        return f"{prefix}:{repo_relative(rest)}"
    return repo_relative(value) if Path(value).is_absolute() else value


def sweep_parameters(meta: dict[str, Any], out_dir: str) -> dict[str, Any] | None:
    """The ``notebooks/sweep.ipynb`` parameters that measure this arm again, from its ``meta.json``;
    None for published reference data (measured outside specsweep) or a prompt file of unknown
    path. Only what differs from the notebook's defaults, plus arm, label, levels and workload
    lengths; per-level warm-up counts are left to the notebook's rule."""
    if meta.get("kind") != "run":
        return None
    sweep, workload = meta.get("sweep") or {}, meta.get("workload") or {}
    params: dict[str, Any] = {"arm": meta.get("arm")}
    if meta.get("label") and meta.get("label") != meta.get("arm"):
        params["label"] = meta["label"]
    embedded = meta.get("embedded_server")
    if embedded:
        params.update(embedded_profile=embedded.get("profile"), embedded_spec=embedded.get("spec"))
        if embedded.get("args"):
            params["embedded_args"] = list(embedded["args"])
    else:
        params["endpoint"] = meta.get("endpoint")
        if meta.get("model"):
            params["model"] = meta["model"]
    params.update(concurrency=list(sweep.get("concurrency") or []), input_tokens=workload.get("input_tokens"),
                  output_tokens=workload.get("output_tokens"))
    value = workload.get("value")
    if value:
        params["workload"] = _workload_value(str(value))
    elif workload.get("kind") not in (None, "random-ids"):
        if not workload.get("path"):
            return None  # a prompt file whose path was not recorded: no command can name it
        params["workload"] = repo_relative(workload["path"])
    if workload.get("output_length") not in (None, "fixed"):
        params["output_length"] = workload["output_length"]
    fixed = _same_for_all(sweep.get("requests_per_level") or {}, sweep.get("requests_per_level_rule"))
    if fixed is not None:
        params["requests_per_level"] = fixed
    for key, default in (("api", "auto"), ("repeats", 1), ("request_timeout_s", 600.0), ("seed", 0),
                         ("temperature", 0.0), ("client_workers", 1)):
        if sweep.get(key) is not None and sweep.get(key) != default:
            params[key] = sweep[key]
    params["out_dir"] = out_dir
    return {k: v for k, v in params.items() if v is not None}


def sweep_command(params: dict[str, Any]) -> list[str]:
    """The argv of the papermill command that runs ``notebooks/sweep.ipynb`` with ``params`` (one ``-y``
    JSON document, which YAML reads back exactly), its progress streamed to the terminal."""
    return [".venv/bin/papermill", "notebooks/sweep.ipynb", f"out-{params.get('arm', 'arm')}.ipynb",
            "--stdout-file", "/dev/stdout", "--stderr-file", "/dev/stderr",
            "-y", json.dumps(params, ensure_ascii=False)]


def _remeasure_lines(parameters: dict[str, Any]) -> list[str]:
    from specsweep.store import find_result_sets, load_result_set

    commands, reference = [], []
    for given in parameters.get("result_sets") or []:
        for folder in find_result_sets(given):
            rs = load_result_set(folder)
            params = sweep_parameters(rs.meta, repo_relative(Path(folder).absolute().parent))
            if params is None:
                reference.append(str(rs.meta.get("label") or rs.arm))
            else:
                commands.append(shell_line(sweep_command(params)))
    lines: list[str] = []
    if commands:
        lines += ["", "Measure the arms again (one sweep per arm; the embedded server needs nothing else, "
                  "another server must be running at its endpoint):", "", *_code_block(commands)]
    if reference:
        lines += ["", "Published reference data (" + ", ".join(md_text(r) for r in reference)
                  + ") was measured outside specsweep; its source is in the Setup table."]
    return lines


def reproduce_markdown(parameters: dict[str, Any]) -> str:
    """How to rebuild this report: commands to paste into a shell at the repository root.

    No build time or machine path appears (the page is byte-identical when rebuilt from the same
    data and code); every word is shell-quoted, so titles with quotes or ``$`` survive. Arms that
    specsweep measured get the sweep command that measures them again.
    """
    return "\n".join([
        f"Built by specsweep {__version__}. Rebuild it from the repository root, after `make setup`:",
        "",
        *_code_block([shell_line(report_command(parameters))]),
        "",
        "or run the notebook yourself (then open `out.ipynb` in JupyterLab):",
        "",
        *_code_block([shell_line(papermill_command(parameters))]),
        *_remeasure_lines(parameters),
    ])


def show(chart: Any, missing: str) -> None:
    """Display a chart, or a short note saying why there is none."""
    from IPython.display import display

    display(chart if chart is not None else markdown(f"*{missing}*"))


# ---------------------------------------------------------------------------------- building


def template_dir() -> Path:
    """Folder holding specsweep's nbconvert templates (``offline``)."""
    return Path(str(resources.files("specsweep") / "templates"))


def kernel_manager_class() -> type:
    """The kernel manager papermill should use: one that does not print ipykernel's TCP warning.

    ipykernel warns "Kernel is running over TCP without encryption" on stderr whenever the
    manager does not provision CurveZMQ keys; jupyter_client provisions them with
    ``transport_encryption="auto"`` when pyzmq has Curve (it does in the wheels). Without Curve,
    or with a jupyter_client too old to know the setting, the default manager is returned.
    """
    import zmq
    from jupyter_client import AsyncKernelManager

    if not zmq.has("curve") or "transport_encryption" not in AsyncKernelManager.class_trait_names():
        return AsyncKernelManager

    class EncryptedKernelManager(AsyncKernelManager):  # type: ignore[misc,valid-type]
        """AsyncKernelManager with CurveZMQ transport encryption provisioned when the kernel supports it."""

        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("transport_encryption", "auto")
            super().__init__(**kwargs)

    return EncryptedKernelManager


def execute_notebook(notebook: Path, output: Path, parameters: dict[str, Any], *, stream: bool = False) -> Any:
    """Run ``notebook`` with papermill in the repository root; ``stream`` copies the kernel's
    stdout/stderr (progress bars included) to this process's terminal as it runs."""
    import papermill as pm

    extra: dict[str, Any] = {"stdout_file": sys.stdout, "stderr_file": sys.stderr} if stream else {}
    # unless streamed (a long run someone watches), the notebook is written once at the end (and on
    # error), not after every cell: each save re-encodes the whole notebook, the 900 KB bundle included
    return pm.execute_notebook(str(notebook), str(output), parameters=parameters, cwd=str(REPO_ROOT),
                               kernel_name="python3", progress_bar=False, log_output=False,
                               request_save_on_cell_execute=stream,
                               kernel_manager_class=kernel_manager_class(), **extra)


_H1 = re.compile(r"<h1[^>]*>(.*?)</h1>", re.S | re.I)


def page_title(nb: Any) -> str | None:
    """The text of the first ``<h1>`` among the notebook's outputs (tags stripped, entities decoded):
    the report's own title, for the HTML page's ``<title>``; None when no output has one."""
    import html as _html

    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            m = _H1.search(str((out.get("data") or {}).get("text/html", "")))
            if m:
                text = _html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).strip()
                return " ".join(text.split()) or None
    return None


def export_html(notebook: Path | Any, html_path: Path) -> Path:
    """Export an executed notebook to self-contained HTML: no code, no stderr, no CDN scripts.

    Papermill's injected-parameters cell (no outputs, a random cell id) is dropped, so the same
    notebook outputs always give the same bytes.
    """
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(notebook), as_version=4) if isinstance(notebook, (str, Path)) else notebook
    nb.cells = [c for c in nb.cells if "injected-parameters" not in (c.get("metadata", {}).get("tags") or [])]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    heading = page_title(nb)
    if heading:
        nb.metadata["title"] = heading  # the browser tab and bookmarks show the report's title, not "Notebook"
    exporter = HTMLExporter(template_name="offline", extra_template_basedirs=[str(template_dir())], exclude_input=True)
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    body, _ = exporter.from_notebook_node(nb)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(body, encoding="utf-8")
    return html_path


def build_report(
    result_sets: Sequence[str | Path],
    name: str,
    *,
    baseline: str = "baseline",
    title: str | None = None,
    profiles: list[dict[str, Any]] | None = None,
    allow_workload_mismatch: bool = False,
    out_dir: Path | str = REPO_ROOT / "reports",
    notebook: Path = REPORT_NOTEBOOK,
) -> Path:
    """Run the report notebook with these parameters and export ``<out_dir>/<name>.html``.

    Relative ``result_sets`` and ``out_dir`` are taken relative to the current directory. The
    executed notebook is kept beside the page in ``<out_dir>/_build/<name>.ipynb`` for inspection.
    """
    if not name or any(ch in name for ch in "/\\") or name.startswith("."):
        raise ValueError(f"report name {name!r} must be a plain file name (no slashes, not hidden)")
    if not notebook.is_file():
        raise FileNotFoundError(f"{notebook}: report notebook not found; run from a specsweep checkout")
    out_dir = Path(out_dir).absolute()
    executed = out_dir / "_build" / f"{name}.ipynb"
    executed.parent.mkdir(parents=True, exist_ok=True)
    params: dict[str, Any] = {
        "result_sets": [str(Path(p).absolute()) for p in result_sets],
        "baseline": baseline,
        "output_name": name,
        "allow_workload_mismatch": allow_workload_mismatch,
    }
    if title:
        params["title"] = title
    if profiles is not None:
        params["profiles"] = profiles
    import papermill  # noqa: F401 - first, so that the threads below do not slow its import

    from specsweep.startup import import_in_background, warm_vega_bundle

    warm_vega_bundle()  # a first build makes the chart bundle while the kernel starts
    exporter = import_in_background("nbconvert.exporters.html")  # while the kernel runs
    nb = execute_notebook(notebook, executed, params)
    exporter.join()
    return export_html(nb, out_dir / f"{name}.html")  # the executed notebook as run, not read back


def _profiles_arg(text: str) -> list[dict[str, Any]]:
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"not valid YAML ({exc}); give a list such as "
                                         "'[{name: Chat, objective: latency}]'") from exc
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise argparse.ArgumentTypeError("must be a YAML list of profiles, e.g. '[{name: Chat, objective: latency}]'")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specsweep.report``: build one report; relative paths are relative to the current directory."""
    parser = argparse.ArgumentParser(prog="python -m specsweep.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--result-set", action="append", required=True, dest="result_sets",
                        help="result-set or study folder (repeatable; relative to the current directory)")
    parser.add_argument("--name", required=True, help="report name: writes OUT_DIR/NAME.html")
    parser.add_argument("--baseline", default="baseline", help="arm name of the baseline (default: baseline)")
    parser.add_argument("--title", default=None, help="report title (default: the notebook's)")
    parser.add_argument("--profiles", type=_profiles_arg, default=None,
                        help="workload profiles as a YAML list (default: the built-in three); see README")
    parser.add_argument("--out-dir", default="reports", help="where NAME.html goes (default: ./reports)")
    parser.add_argument("--allow-workload-mismatch", action="store_true")
    args = parser.parse_args(argv)
    from papermill.exceptions import PapermillExecutionError

    try:
        path = build_report(args.result_sets, args.name, baseline=args.baseline, title=args.title,
                            profiles=args.profiles, allow_workload_mismatch=args.allow_workload_mismatch,
                            out_dir=args.out_dir)
    except PapermillExecutionError as exc:  # the notebook's own error, without the kernel's traceback
        print(f"python -m specsweep.report: {exc.ename}: {exc.evalue}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError) as exc:
        print(f"python -m specsweep.report: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

