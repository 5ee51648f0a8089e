"""Offline chart rendering and the tables and number formats the notebook shows."""
from __future__ import annotations

import hashlib
import itertools
import math
from typing import Any

import pandas as pd

from specsweep.decide.claims import pct
from specsweep.markup import inert, markdown, script_json

RENDERER = "specsweep-offline"


def vega_bundle() -> str:
    """The vega + vega-lite + vega-embed bundle that matches Altair's schema, from vl-convert (~900 KB)."""
    from specsweep.runtime import vega_bundle_cached

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
    """Notebook defaults for reports: specsweep's chart theme, offline charts, readable tables, no
    row limit for charts."""
    from specsweep.report import chartdata
    from specsweep.report.charts import use_chart_defaults

    use_chart_defaults()
    enable_offline_charts()
    chartdata.disable_max_rows()
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
    :func:`~specsweep.markup.inert` and HTML-escaped (``to_html(escape=True)``), so strings from result
    sets or servers stay text.
    """
    from IPython.display import HTML

    def clean(v: Any) -> Any:
        return inert(v) if isinstance(v, str) else v

    shown = frame.copy()
    for col in shown.columns:
        if pd.api.types.is_numeric_dtype(shown[col]) and not pd.api.types.is_bool_dtype(shown[col]):
            shown[col] = shown[col].map(human_number)
        else:
            shown[col] = shown[col].map(clean)
    shown = shown.rename(columns=clean, index=clean)
    return HTML(shown.to_html(index=index, na_rep="—", border=0, escape=True))


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:,.{digits}f}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _band(lo: Any, hi: Any) -> str:
    """A 95 % band of Δ% rounded as every sentence rounds it (:func:`specsweep.decide.claims.pct`)."""
    if lo is None or pd.isna(lo):
        return "—"
    return f"[{pct(float(lo))}, {pct(float(hi))}]"


def _pct_or_dash(v: Any) -> str:
    """A Δ% as every sentence writes it ('+13%' for 12.5, one rounding on the whole page), or '—'."""
    return "—" if v is None or pd.isna(v) else pct(float(v))


def show(chart: Any, missing: str) -> None:
    """Display a chart, or a short note saying why there is none."""
    from IPython.display import display

    display(chart if chart is not None else markdown(f"*{missing}*"))
