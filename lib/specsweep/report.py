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
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from specsweep import __version__
from specsweep.compare import Comparison
from specsweep.markup import markdown, md_text, script_json
from specsweep.metrics import METRICS, metric_info
from specsweep.recommend import Recommendation

REPO_ROOT = Path(__file__).resolve().parents[2]
REPORT_NOTEBOOK = REPO_ROOT / "notebooks" / "report.ipynb"
RENDERER = "specsweep-offline"


# ------------------------------------------------------------------------------ offline charts


def vega_bundle() -> str:
    """The vega + vega-lite + vega-embed bundle that matches Altair's schema, from vl-convert (~900 KB)."""
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    return vlc.javascript_bundle(vl_version=vl_version_for_vl_convert())


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


def key_numbers(comp: Comparison) -> pd.DataFrame:
    """Per spec arm and concurrency: aggregate and per-user speed of both arms and their Δ%."""
    rows = []
    um = comp.user_metric
    for arm in comp.spec_arms:
        agg, usr = comp.delta(arm, "output_tok_s").set_index("concurrency"), comp.delta(arm, um).set_index("concurrency")
        for c in agg.index:
            row = {
                "arm": comp.labels[arm], "concurrency": int(c),
                "aggregate baseline (tok/s)": agg.at[c, "baseline_value"],
                "aggregate arm (tok/s)": agg.at[c, "arm_value"],
                "aggregate Δ%": agg.at[c, "delta_pct"],
            }
            if c in usr.index:
                row.update({
                    "per-user baseline (tok/s)": usr.at[c, "baseline_value"],
                    "per-user arm (tok/s)": usr.at[c, "arm_value"],
                    "per-user Δ%": usr.at[c, "delta_pct"],
                })
            for metric, name in (("output_tok_s", "aggregate"), (um, "per-user")):
                d = comp.delta(arm, metric).set_index("concurrency")
                if c in d.index and d.at[c, "ci_kind"] != "none":
                    row[f"{name} Δ% 95% CI"] = f"[{d.at[c, 'ci_low_pct']:+.1f}, {d.at[c, 'ci_high_pct']:+.1f}]"
            rows.append(row)
    frame = pd.DataFrame(rows)
    for col in frame.columns:
        if col.endswith("Δ%"):
            frame[col] = frame[col].map(lambda v: f"{v:+.1f}%")
        elif "(tok/s)" in col:
            frame[col] = frame[col].map(lambda v: _fmt(float(v)))
    return frame


def verdict_markdown(comp: Comparison, recs: Sequence[Recommendation]) -> str:
    """The report's opening: one line per profile, then the crossover and where per-user speed stands."""
    lines = ["## Verdict", ""]
    for r in recs:
        lines.append(f"- **{r.profile.name}** — {r.headline}")
    lines.append("")
    for arm in comp.spec_arms:
        cx = comp.crossover(arm, "output_tok_s")
        label = comp.labels[arm]
        if len(cx):
            for _, c in cx.iterrows():
                way = "gains" if c.direction == "loss_to_gain" else "loses"
                lines.append(f"{label} {way} aggregate throughput above about **{c.crossover_concurrency:.0f}** concurrent "
                             f"requests (between {c.c_low} and {c.c_high}, interpolated in log2).")
        else:
            d = comp.delta(arm, "output_tok_s")["delta_pct"]
            if len(d):
                side = "above" if (d > 0).all() else "below" if (d < 0).all() else "around"
                lines.append(f"{label}'s aggregate throughput stays {side} the baseline's at every tested level "
                             f"({d.min():+.0f}% to {d.max():+.0f}%).")
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
        ("API", lambda m: m.get("api")),
        ("endpoint", lambda m: m.get("endpoint")),
        ("workload", lambda m: f"{m['workload'].get('kind')}, {m['workload'].get('input_tokens')} in / {m['workload'].get('output_tokens')} out"),
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


def differences_markdown(comp: Comparison) -> str:
    """Which settings differ between the arms (the thing the comparison is about), and any notes."""
    table = setup_table(comp)
    skip = {"label", "description", "measured (UTC)", "source", "endpoint", "tool"}
    diffs = [idx for idx, row in table.iterrows() if idx not in skip and row.nunique() > 1]
    lines = []
    if diffs:
        lines.append("What differs between the arms: " + "; ".join(
            f"**{d}** (" + ", ".join(f"{arm}: {table.at[d, arm]}" for arm in table.columns) + ")" for d in diffs) + ".")
    else:
        lines.append("The arms' recorded settings do not differ; check that the speculative settings were captured.")
    from specsweep.compare import workload_differences

    differing = [a for a in comp.spec_arms if workload_differences(comp.metas[a]["workload"], comp.workload)]
    if differing:
        lines.append("⚠ The arms' workloads differ (" + ", ".join(differing) + " vs the baseline); see the notes below.")
    else:
        lines.append(f"All arms used the same workload shape: {comp.workload.get('kind')}, {comp.workload.get('input_tokens')} "
                     f"input and {comp.workload.get('output_tokens')} output tokens per request.")
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
                     "aggregate tok/s ÷ per-request tok/s (Little's law with the per-request speed standing in for "
                     "1 / time in service). If the per-request figure excludes queueing, this counts requests being "
                     "decoded; if it includes queueing, requests in flight.")
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
    if "spec_accept_length" in lv and lv["spec_accept_length"].notna().any():
        acc = lv.dropna(subset=["spec_accept_length"])
        lines.append("Server-side acceptance length per level: " + "; ".join(
            f"{comp.labels[a]}: " + ", ".join(f"{r.spec_accept_length:.2f} at {int(r.concurrency)}" for r in g.itertuples())
            for a, g in acc.groupby("arm")) + ".")
    if "token_source" in lv and (lv["token_source"] == "chunks").any():
        lines.append("⚠ Some levels counted tokens from chunks because the server reported no counts; those throughput "
                     "figures are lower bounds under speculation.")
    return "\n\n".join(lines)


def data_table(comp: Comparison) -> pd.DataFrame:
    """Every metric of every arm and level (averaged over repeats), rounded for reading."""
    lv = comp.levels.copy()
    lv.insert(0, "arm", lv.pop("arm").map(comp.labels))
    keep = [c for c in lv.columns if not lv[c].isna().all()]
    return lv[keep].round(4)


def definitions_markdown(comp: Comparison) -> str:
    """Definitions of every metric the report shows, from the metric registry and the data's own notes."""
    shown = [c for c in comp.levels.columns if c in METRICS and comp.levels[c].notna().any()]
    lines = ["| metric | unit | better | definition |", "|---|---|---|---|"]
    for c in shown:
        i = metric_info(c)
        lines.append(f"| `{c}` | {i.unit} | {i.better} | {i.definition} |")
    lines += [
        "",
        "- **Δ%** = (arm ÷ baseline − 1) × 100 at the same concurrency. Intervals are 95% percentile-bootstrap "
        "intervals of that ratio (over repeats, else over per-request samples); a delta whose interval spans 0 is "
        "within noise. Without either, a level is a single run and has no interval.",
        "- **Crossover**: where the aggregate Δ% changes sign between two tested levels, interpolated linearly in "
        "log2(concurrency).",
        "- **Pareto frontier**: (per-user speed, aggregate tok/s) points that no other arm or level beats on one axis "
        "without losing on the other.",
        "- Tokens are the server's own counts (`usage.completion_tokens`, SGLang `meta_info.completion_tokens`), never "
        "SSE chunks: under speculation one chunk carries several tokens.",
    ]
    for arm in comp.arms:
        for col, text in (comp.metas[arm].get("metric_definitions") or {}).items():
            lines.append(f"- In arm *{comp.labels[arm]}*, `{col}`: {text}.")
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
    if workload.get("kind") not in (None, "random-ids"):
        if not workload.get("path"):
            return None  # a prompt file whose path was not recorded: no command can name it
        params["workload"] = repo_relative(workload["path"])
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
    return pm.execute_notebook(str(notebook), str(output), parameters=parameters, cwd=str(REPO_ROOT),
                               kernel_name="python3", progress_bar=False, log_output=False,
                               kernel_manager_class=kernel_manager_class(), **extra)


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
    execute_notebook(notebook, executed, params)
    return export_html(executed, out_dir / f"{name}.html")


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
    path = build_report(args.result_sets, args.name, baseline=args.baseline, title=args.title,
                        profiles=args.profiles, allow_workload_mismatch=args.allow_workload_mismatch,
                        out_dir=args.out_dir)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

