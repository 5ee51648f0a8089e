"""Altair charts from a :class:`~specsweep.analyze.compare.Comparison`. No I/O.

Every function returns a chart an analyst can restyle; ``None`` where the data has nothing to
draw. Concurrency axes are log2 with a tick at every shown level. Every mark carries a tooltip.

Every chart function takes the same keyword arguments:

- ``arms``: the arms to show (names or labels); default all. Colours stay those of the full
  comparison, so one arm keeps its colour across charts.
- ``levels``: only these concurrency levels; ``concurrency=(low, high)``: only levels in that
  range (either end ``None``: open).
- ``colours``: ``{arm name or label: CSS colour}``, over the defaults (baseline grey, then
  :data:`ARM_COLOURS`).
- ``width``, ``height``: pixels of one panel (default: sized for a 1400 px page).

Arms are named by their short name (``charts.ARM_NAMES = "label"`` shows labels instead); legends
give every name whole, wrapped onto several lines past :data:`LEGEND_WRAP` characters. Each arm
keeps a colour and a line dash (:data:`ARM_DASHES`, drawn in the legend) in every chart, and each
arm after the first is drawn :data:`ARM_OFFSET_PX` px further right and up with slightly smaller
points, so arms with equal figures stay visible side by side (tooltips give exact values).
:func:`verdict_strip` draws the per-level verdicts of :mod:`specsweep.decide`.

The usual Altair restyling works too: ``.properties(width=..., height=...)`` on one-panel charts,
``.configure_range(category=[...])`` (the baseline takes the first colour, then the other arms in
order) unless ``colours`` was given, and any ``.configure_*`` (the default palette comes from
the ``specsweep`` Altair theme, which :func:`use_chart_defaults` enables unless another theme is
already active).

Each chart is built with Altair's per-object validation off (:func:`validated_once`); the whole
chart is validated against the Vega-Lite schema when it is shown or saved, as every chart is.
Its data frames become Vega-Lite values through :mod:`specsweep.report.chartdata` (the same values as
Altair's default data transformer, faster; enabled on import where Altair's default is active).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import altair as alt
import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.analyze.pareto import pareto_frontier
from specsweep.markup import inert
from specsweep.report import chartdata
from specsweep.results.columns import metric_info

if TYPE_CHECKING:  # the decision package is only a type here: importing charts does not load it
    from specsweep.decide import Recommendation

#: one-panel charts fill a 1400 px page; two side-by-side panels are PANEL_WIDTH each
WIDTH, HEIGHT = 860, 300
PANEL_WIDTH = 500
BASELINE_COLOUR = "#6b7280"
ARM_COLOURS = ["#d97706", "#2563eb", "#059669", "#db2777", "#7c3aed", "#0891b2"]
THEME = "specsweep"


@alt.theme.register(THEME, enable=False)
def specsweep_theme() -> alt.theme.ThemeConfig:
    """The ``specsweep`` Altair theme: the arm palette as the category range (baseline first, grey)."""
    return alt.theme.ThemeConfig({"config": {"range": {"category": [BASELINE_COLOUR, *ARM_COLOURS]}}})


def use_chart_defaults() -> None:
    """Turn on specsweep's chart defaults where Altair's own are active: the ``specsweep`` theme (the
    arm palette) and the :mod:`~specsweep.report.chartdata` transformer. A theme or transformer the
    analyst chose stays. :func:`specsweep.report.display.setup_notebook` calls it; importing this
    module changes nothing."""
    if alt.theme.active == "default":
        alt.theme.enable(THEME)
    chartdata.enable()


#: the stroke dash of each arm's lines, in the order of the colour domain (baseline first: solid)
ARM_DASHES: list[list[float]] = [[1, 0], [8, 4], [3, 3], [12, 3, 3, 3], [2, 5], [8, 3, 2, 3, 2, 3]]
#: the point shape of each arm where points carry the arm legend (latency chart), same order
ARM_SHAPES = ["circle", "square", "triangle-up", "diamond", "cross", "triangle-down"]
#: each arm after the first is drawn this many px right of and above the one before it, so
#: lines and points with equal values stay visible side by side (tooltips give exact values)
ARM_OFFSET_PX = 1.5
#: legend labels longer than this many characters are wrapped onto several lines (never cut)
LEGEND_WRAP = 36
#: how charts name arms: "short" (the arm's name, as the prose does) or "label" (its label)
NAMES = ("short", "label")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def validated_once(build: Callable[_P, _R]) -> Callable[_P, _R]:
    """``build`` run with Altair's debug mode off: the schema objects it makes (``alt.X``,
    ``alt.Scale``, each mark's encoding) are not each converted and validated as they are made.

    Altair validates the chart as a whole when it is shown or saved (``to_dict(validate=True)``:
    a notebook's display, ``save``, the report's page), so a chart this library builds is still
    checked against the Vega-Lite schema once; debug mode validated the same objects again at every
    step (264 schema validations for a seed report's charts instead of 40: 0.1-0.15 s of the
    kernel's CPU per report). Objects an analyst makes around the returned chart keep debug mode
    and its early errors. The output is the same spec, byte for byte.
    """
    @functools.wraps(build)
    def built(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with alt.utils.schemapi.debug_mode(False):
            return build(*args, **kwargs)

    return built


def _js_string(text: str) -> str:
    """``text`` as a Vega expression string literal (JSON-escaped: quotes, backslashes, control
    and non-ASCII characters), so an untrusted arm name cannot change the expression; :func:`inert`
    first, as :func:`~specsweep.markup.script_json` makes the data's strings it is matched against."""
    return json.dumps(inert(text), ensure_ascii=True)


def wrapped(text: str, width: int = LEGEND_WRAP) -> list[str]:
    """``text`` as lines of at most ``width`` characters (words kept whole where they fit)."""
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [text]


@dataclasses.dataclass(frozen=True)
class View:
    """What a chart shows: the comparison cut to the chosen arms and levels, and its arm styles."""

    comp: Comparison
    #: names of every arm of the full comparison as shown, baseline first (the colour domain)
    domain: list[str]
    #: explicit colours for ``domain``, or None to take them from the theme / ``configure_range``
    colours: list[str] | None
    #: arm → the name charts show for it (its short name, or its label: ``names=``)
    names: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def shown(self) -> list[str]:
        """Names of the arms shown, in domain order."""
        return [self.names[a] for a in self.comp.arms]

    def _values(self, spec_only: bool) -> list[str]:
        base = self.names[self.comp.baseline]
        return [n for n in self.shown if not (spec_only and n == base)]

    def legend(self, spec_only: bool = False, symbol: str | None = None) -> alt.Legend:
        """The arm legend: below the chart, every shown arm's full name, long ones wrapped onto
        several lines; ``symbol="stroke"`` draws each entry as a line in its arm's dash."""
        long = {n: wrapped(n) for n in self.domain if len(n) > LEGEND_WRAP}
        extra: dict[str, Any] = {}  # more Legend options, of several types
        if long:
            lookup = "{" + ", ".join(f"{_js_string(n)}: [{', '.join(map(_js_string, lines))}]"
                                     for n, lines in long.items()) + "}"
            extra["labelExpr"] = f"{lookup}[datum.label] || datum.label"
        if symbol == "stroke":
            extra |= {"symbolType": "stroke", "symbolStrokeWidth": 2.5, "symbolSize": 500, "symbolOpacity": 1}
        return alt.Legend(orient="bottom", values=self._values(spec_only), labelLimit=0, title="Arm",
                          columns=min(3, max(1, len(self._values(spec_only)))), **extra)

    def colour(self, spec_only: bool = False, legend: bool = True, symbol: str | None = None) -> alt.Color:
        """The ``arm_name`` colour encoding; ``spec_only`` leaves the baseline out of the legend."""
        scale = alt.Scale(domain=self.domain, range=self.colours) if self.colours else alt.Scale(domain=self.domain)
        return alt.Color("arm_name:N", title="Arm", scale=scale,
                         legend=self.legend(spec_only, symbol) if legend else None)

    def dash(self, spec_only: bool = False, legend: bool = True) -> alt.StrokeDash:
        """Each arm's line dash (:data:`ARM_DASHES`), in the same legend as its colour."""
        dashes = [ARM_DASHES[i % len(ARM_DASHES)] for i in range(len(self.domain))]
        return alt.StrokeDash("arm_name:N", title="Arm", scale=alt.Scale(domain=self.domain, range=dashes),
                              legend=self.legend(spec_only, "stroke") if legend else None)

    def shape(self, spec_only: bool = False) -> alt.Shape:
        """Each arm's point shape (:data:`ARM_SHAPES`), in the same legend as its colour."""
        shapes = [ARM_SHAPES[i % len(ARM_SHAPES)] for i in range(len(self.domain))]
        return alt.Shape("arm_name:N", title="Arm", scale=alt.Scale(domain=self.domain, range=shapes),
                         legend=self.legend(spec_only))

    def offset(self, name: str) -> float:
        """Pixels an arm's marks are moved right (and up) by: :data:`ARM_OFFSET_PX` per place in the domain."""
        return ARM_OFFSET_PX * self.domain.index(name)

    def point_size(self, name: str, size: float) -> float:
        """An arm's point area (px²): ``size`` for the baseline and the first other arm, then a
        quarter smaller per place in the domain (at least 40 %), so equal points nest, all visible."""
        return size * max(0.4, 1 - 0.25 * max(0, self.domain.index(name) - 1))

    def arm_layers(self, data: pd.DataFrame, encode: Mapping[str, Any], *, spec_only: bool = False,
                   point_size: float = 60, line: bool = True) -> list[alt.Chart]:
        """One line (in the arm's colour and dash) and one point layer per shown arm of ``data``,
        each arm moved by :meth:`offset`, its points sized by :meth:`point_size`; ``encode`` holds
        the shared channels (x, y, tooltip)."""
        layers = []
        for name in self._values(spec_only):
            if not (data["arm_name"] == name).any():
                continue
            dx, dy = self.offset(name), -self.offset(name)
            arm = alt.Chart(data).transform_filter(alt.FieldEqualPredicate(field="arm_name", equal=name)).encode(**encode)
            if line:
                layers.append(arm.mark_line(strokeWidth=2, xOffset=dx, yOffset=dy).encode(
                    color=self.colour(spec_only, symbol="stroke"), strokeDash=self.dash(spec_only)))
            # every layer carries the same legend (Vega-Lite drops a merged legend that one layer turns off)
            layers.append(arm.mark_point(filled=True, size=self.point_size(name, point_size), xOffset=dx, yOffset=dy).encode(
                color=self.colour(spec_only, symbol="stroke" if line else None)))
        return layers


def _resolve_arms(comp: Comparison, arms: Iterable[str] | None) -> list[str]:
    if arms is None:
        return list(comp.arms)
    by_label = {label: arm for arm, label in comp.labels.items()}
    chosen = []
    for a in ([arms] if isinstance(arms, str) else arms):
        arm = a if a in comp.labels else by_label.get(a)
        if arm is None:
            raise ValueError(f"arms: {a!r} is neither an arm nor a label of this comparison; "
                             f"arms: {', '.join(comp.arms)}")
        chosen.append(arm)
    return [a for a in comp.arms if a in chosen]


def select(
    comp: Comparison,
    arms: Iterable[str] | None = None,
    levels: Iterable[int] | None = None,
    concurrency: tuple[int | None, int | None] | None = None,
) -> Comparison:
    """``comp`` cut to some arms (names or labels) and concurrency levels (exact, or a range).

    The baseline stays the reference of every delta even when it is not shown; crossovers are
    kept where both levels around them are shown; the Pareto frontier is recomputed over the
    points shown.
    """
    keep_arms = _resolve_arms(comp, arms)
    all_levels = sorted(int(c) for c in comp.levels["concurrency"].unique())
    keep = set(all_levels if levels is None else (int(c) for c in levels))
    if concurrency is not None:
        low, high = concurrency
        keep = {c for c in keep if (low is None or c >= low) and (high is None or c <= high)}
    if not keep & set(all_levels):
        raise ValueError(f"levels/concurrency: none of the tested levels ({', '.join(map(str, all_levels))}) "
                         "is selected; choose at least one of them")

    def cut(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["arm"].isin(keep_arms) & frame["concurrency"].isin(keep)].reset_index(drop=True)

    cx = comp.crossovers
    cx = cx[cx["arm"].isin(keep_arms) & cx["c_low"].isin(keep) & cx["c_high"].isin(keep)].reset_index(drop=True)
    pareto = cut(comp.pareto)
    if len(pareto):
        pareto = pareto.assign(on_frontier=pareto_frontier(pareto, comp.user_metric, "output_tok_s"))
    return dataclasses.replace(comp, arms=keep_arms, levels=cut(comp.levels), deltas=cut(comp.deltas),
                               crossovers=cx, pareto=pareto)


#: how every chart names arms: "short" (each arm's name, as the report's prose does; its label is
#: given once, in Setup) or "label" (its label). Set ``charts.ARM_NAMES = "label"`` to change it.
ARM_NAMES = "short"


def arm_names(comp: Comparison, how: str | None = None) -> dict[str, str]:
    """arm → the name charts show for it (``how``: "short" or "label"; default :data:`ARM_NAMES`).

    Labels shared by several arms get the arm's name after them, so every arm keeps its own entry.
    """
    how = how or ARM_NAMES
    if how not in NAMES:
        raise ValueError(f"ARM_NAMES: {how!r} is neither 'short' nor 'label'")
    if how == "short":
        return {a: a for a in comp.labels}
    counts = pd.Series(list(comp.labels.values())).value_counts()
    return {a: lab if counts[lab] == 1 else f"{lab} ({a})" for a, lab in comp.labels.items()}


def _view(
    comp: Comparison,
    arms: Iterable[str] | None,
    levels: Iterable[int] | None,
    concurrency: tuple[int | None, int | None] | None,
    colours: Mapping[str, str] | None,
) -> View:
    order = [comp.baseline] + [a for a in comp.labels if a != comp.baseline]
    names = arm_names(comp)
    domain = [names[a] for a in order]
    explicit = None
    if colours:
        by_name = {names[a]: c for a, c in colours.items() if a in comp.labels}
        by_name.update({names[a]: c for a in order for k, c in colours.items() if k == comp.labels[a]})
        by_name.update({k: c for k, c in colours.items() if k in domain})
        unknown = [k for k in colours if k not in comp.labels and k not in domain and k not in comp.labels.values()]
        if unknown:
            raise ValueError(f"colours: {', '.join(map(repr, unknown))} name no arm or label; arms: {', '.join(order)}")
        defaults = [BASELINE_COLOUR] + [ARM_COLOURS[i % len(ARM_COLOURS)] for i in range(len(domain) - 1)]
        explicit = [by_name.get(n, d) for n, d in zip(domain, defaults)]
    return View(select(comp, arms, levels, concurrency), domain, explicit, names)


def arm_colours(comp: Comparison, *, spec_only: bool = False, colours: Mapping[str, str] | None = None) -> alt.Scale:
    """The colour scale of ``arm_name``: every arm's name as shown (:func:`arm_names`) as the domain, baseline first.

    Colours come from ``colours`` when given, else from the theme's category range (baseline
    grey), which ``.configure_range(category=...)`` replaces. ``spec_only`` is kept for callers of
    the old signature: the domain is the same either way, so colours never shift between charts.
    """
    v = _view(comp, None, None, None, colours)
    return alt.Scale(domain=v.domain, range=v.colours) if v.colours else alt.Scale(domain=v.domain)


def _levels(comp: Comparison) -> list[int]:
    return sorted(int(c) for c in comp.levels["concurrency"].unique())


def log2_scale(comp: Comparison) -> alt.Scale:
    """Log2 scale spanning the shown concurrency levels with a little margin."""
    levels = _levels(comp)
    return alt.Scale(type="log", base=2, domain=[min(levels) / 1.3, max(levels) * 1.3], nice=False)


def concurrency_x(comp: Comparison, title: str = "Concurrent requests (log2)") -> alt.X:
    """The shared log2 concurrency axis."""
    return alt.X("concurrency:Q", title=title, scale=log2_scale(comp),
                 axis=alt.Axis(values=_levels(comp), format="d", grid=False))


def _named(v: View, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``arm_name``: each arm's name as the chart shows it (:func:`arm_names`)."""
    out = frame.copy()
    out["arm_name"] = out["arm"].map(v.names)
    return out


def _metric_lines(v: View, metric: str, title: str | None, width: int | None, height: int | None) -> alt.LayerChart:
    """One line per arm (its colour and dash, :meth:`View.arm_layers`) of ``metric`` against concurrency."""
    comp = v.comp
    info = metric_info(metric)
    data = _named(v, comp.levels[["arm", "concurrency", metric]].dropna())
    encode = dict(
        x=concurrency_x(comp),
        y=alt.Y(f"{metric}:Q", title=f"{info.label} ({info.unit})", scale=alt.Scale(zero=True)),
        tooltip=[
            alt.Tooltip("arm_name:N", title="arm"),
            alt.Tooltip("concurrency:Q", title="concurrency"),
            alt.Tooltip(f"{metric}:Q", title=f"{info.label} ({info.unit})", format=",.1f"),
        ],
    )
    return alt.LayerChart(layer=v.arm_layers(data, encode),
        width=width or WIDTH, height=height or HEIGHT, title=title or info.label
    )


Arms = Iterable[str] | None
Levels = Iterable[int] | None
Range = tuple[int | None, int | None] | None
Colours = Mapping[str, str] | None


@validated_once
def throughput_chart(comp: Comparison, *, arms: Arms = None, levels: Levels = None, concurrency: Range = None,
                     colours: Colours = None, width: int | None = None, height: int | None = None) -> alt.LayerChart:
    """Aggregate output tok/s against concurrency, one line per arm (keyword arguments: module doc)."""
    v = _view(comp, arms, levels, concurrency, colours)
    return _metric_lines(v, "output_tok_s", "Aggregate output throughput", width, height)


@validated_once
def user_speed_chart(comp: Comparison, *, arms: Arms = None, levels: Levels = None, concurrency: Range = None,
                     colours: Colours = None, width: int | None = None, height: int | None = None) -> alt.LayerChart:
    """Per-user speed (1/TPOT when measured, else the published per-request tok/s) against concurrency."""
    v = _view(comp, arms, levels, concurrency, colours)
    return _metric_lines(v, comp.user_metric, metric_info(comp.user_metric).label, width, height)


def _independent_y() -> alt.Resolve:
    """Each panel its own y scale: ``resolve=`` of an ``alt.hconcat``, given where the chart is made.

    ``chart.resolve_scale(...)`` or ``.properties(...)`` on a layered or concatenated chart makes it
    again, and Altair deep-copies every layer twice each time it makes one (about a third of a seed
    report's chart building); given to the constructor, the same spec costs one copy.
    """
    return alt.Resolve(scale=alt.ScaleResolveMap(y="independent"))


def _zero_rule(scale: alt.Scale | None = None) -> alt.Chart:
    """The black Δ = 0 line of every delta panel (on the panel's y ``scale``, where it has one)."""
    return alt.Chart(pd.DataFrame({"y": [0]})).mark_rule(color="black", strokeWidth=1).encode(
        y=alt.Y("y:Q", scale=scale if scale is not None else alt.Undefined))


#: a delta panel's y axis reaches beyond its point estimates (and 0) by at most this share of their span,
#: and at least :data:`CLIP_MIN_PAD` points, to take in the intervals; an interval reaching further is
#: clipped at the panel's edge and marked there (:func:`clipped_ends`), so one wide band (a control arm's,
#: a single run's) cannot squash every point into a line or run off the panel
CLIP_PAD_SHARE = 0.5
CLIP_MIN_PAD = 10.0
#: the marker of an interval clipped at the top / the bottom of a panel
CLIP_SHAPES = {"top": "triangle-up", "bottom": "triangle-down"}
#: the subtitle of a panel where an interval is clipped
CLIP_NOTE = "▲ ▼ a 95% interval clipped at the panel's edge (hover for how far it runs)"


def _finite(values: Iterable[Any]) -> list[float]:
    return [float(x) for x in values if x is not None and not pd.isna(x) and math.isfinite(float(x))]


def delta_domain(points: Iterable[Any], lows: Iterable[Any], highs: Iterable[Any]) -> tuple[float, float]:
    """The y domain (Δ %) of a delta panel: its point estimates (``points``: measured and fitted Δ %)
    and 0, widened to take in the intervals' ends (``lows``, ``highs``) up to :data:`CLIP_PAD_SHARE` ×
    the points' span (at least :data:`CLIP_MIN_PAD` points) beyond them, with 4 % room at each end."""
    pts = _finite(points) + [0.0]
    lo, hi = min(pts), max(pts)
    pad = max(CLIP_PAD_SHARE * (hi - lo), CLIP_MIN_PAD)
    d_lo = max(min(_finite(lows) + [lo]), lo - pad)
    d_hi = min(max(_finite(highs) + [hi]), hi + pad)
    room = 0.04 * (d_hi - d_lo)
    return d_lo - room, d_hi + room


def clipped_ends(frame: pd.DataFrame, domain: tuple[float, float]) -> pd.DataFrame:
    """The interval ends of ``frame`` (``ci_low_pct``, ``ci_high_pct``, Δ %) beyond ``domain``: one
    row each, with ``frame``'s columns, ``clip_edge`` ('top' or 'bottom'), ``clip_y`` (the edge it is
    clipped at) and ``clipped`` ('interval clipped at +57%; it runs to +15,899%'); empty where none is."""
    lo, hi = domain
    rows = []
    for r in frame.to_dict("records"):
        for end, edge, y in (("ci_high_pct", "top", hi), ("ci_low_pct", "bottom", lo)):
            v = r.get(end)
            if v is None or pd.isna(v) or (v <= hi if edge == "top" else v >= lo):
                continue
            rows.append({**r, "clip_edge": edge, "clip_y": y,
                         "clipped": f"interval clipped at {y:+.0f}%; it runs to {v:+,.0f}%"})
    return pd.DataFrame(rows)


def _clip_marks(clipped: pd.DataFrame, encode: Mapping[str, Any], y_title: str, scale: alt.Scale,
                **mark: Any) -> list[alt.Chart]:
    """A triangle at the panel's edge where each interval of ``clipped`` (:func:`clipped_ends`) is cut,
    pointing the way it runs on; ``encode``: the layer's x (and x offset, colour) channels, ``mark``:
    its offsets."""
    out = []
    for edge, shape in CLIP_SHAPES.items():
        part = clipped[clipped["clip_edge"] == edge] if len(clipped) else clipped
        if part.empty:
            continue
        out.append(alt.Chart(part).mark_point(shape=shape, filled=True, size=70, opacity=1, **mark).encode(
            y=alt.Y("clip_y:Q", title=y_title, scale=scale), **encode,
            tooltip=[alt.Tooltip("arm_name:N", title="arm"), alt.Tooltip("concurrency:Q", title="concurrency"),
                     alt.Tooltip("clipped:N", title="95% interval")]))
    return out


#: :data:`CLIP_NOTE` for a small panel
CLIP_NOTE_SHORT = "▲ ▼ band clipped (hover)"


def _panel_title(title: str, clipped: bool, note: str = CLIP_NOTE) -> str | alt.TitleParams:
    """A panel's title, with ``note`` under it where one of its intervals is clipped."""
    return alt.TitleParams(text=title, subtitle=[note]) if clipped else title


def _delta_panels(comp: Comparison, metrics: Sequence[str] | None, arms: Arms, levels: Levels, concurrency: Range,
                  colours: Colours, width: int | None) -> tuple[View, list[str], int]:
    """The view, the metrics (default: aggregate and per-user speed) and each panel's width of a delta chart."""
    v = _view(comp, arms, levels, concurrency, colours)
    metrics = list(metrics or ["output_tok_s", v.comp.user_metric])
    return v, metrics, width or (PANEL_WIDTH if len(metrics) > 1 else WIDTH)


#: the colour of a crossover rule and label where one arm crosses
CROSSOVER_COLOUR = "#b91c1c"
#: font size (px) of the labels charts place themselves (crossovers), and the row pitch they stack at
LABEL_FONT_PX = 11
LABEL_ROW_PX = 14


def stack_labels(marks: pd.DataFrame, x: str, text: str, *, scale: alt.Scale, width: int,
                 font_px: float = LABEL_FONT_PX) -> pd.DataFrame:
    """Positions for labels written beside vertical rules at ``marks[x]`` (data units on ``scale``,
    a log2 or linear scale with an explicit domain, ``width`` px wide), so no two labels overlap.

    Each label (≈0.62 × ``font_px`` per character wide) starts 4 px right of its rule, or ends 4 px
    left of it where it would run past the plot's right edge (and, where it fits on neither side,
    lies against the nearer edge), and takes the first row from the top where it overlaps no label
    placed before it (in the order of ``marks``). Returns ``marks`` with ``label_x_px`` (where the
    text starts), ``label_row`` (0 = top) and ``label_y_px`` (its middle), in px from the plot's
    top left corner.
    """
    lo, hi = (float(d) for d in scale.domain)
    log = getattr(scale, "type", None) == "log"
    f = (lambda c: math.log2(c)) if log else (lambda c: c)
    span = (f(hi) - f(lo)) or 1.0
    rows: list[list[tuple[float, float]]] = []
    xs, row = [], []
    for _, r in marks.iterrows():
        px = width * (f(float(r[x])) - f(lo)) / span
        w = 0.62 * font_px * len(str(r[text]))
        if px + 4 + w <= width:
            start = px + 4
        elif px - 4 - w >= 0:
            start = px - 4 - w
        else:
            start = max(0.0, width - w) if px > width / 2 else 0.0
        box = (start, start + w)
        for k, taken in enumerate(rows):
            if all(box[1] + 4 <= a or box[0] >= b + 4 for a, b in taken):
                taken.append(box)
                break
        else:
            rows.append([box])
            k = len(rows) - 1
        xs.append(start)
        row.append(k)
    return marks.assign(label_x_px=xs, label_row=row, label_y_px=[LABEL_ROW_PX * (k + 1) - 2 for k in row])


@validated_once
def delta_chart(comp: Comparison, metrics: Sequence[str] | None = None, *, arms: Arms = None, levels: Levels = None,
                concurrency: Range = None, colours: Colours = None, width: int | None = None,
                height: int | None = None) -> alt.HConcatChart:
    """Δ% against the baseline per concurrency, one panel per metric: zero rule, intervals, crossover.

    ``width``/``height`` size each panel (default: two panels fill a 1400 px page).
    """
    v, metrics, width = _delta_panels(comp, metrics, arms, levels, concurrency, colours, width)
    comp = v.comp
    panels = []
    for metric in metrics:
        info = metric_info(metric)
        d = _named(v, comp.deltas[comp.deltas["metric"] == metric])
        d["interval"] = d.apply(
            lambda r: "single run, no interval" if r["ci_kind"] == "none"
            else f"[{r['ci_low_pct']:+.1f}%, {r['ci_high_pct']:+.1f}%] ({r['ci_kind']})", axis=1,
        ) if len(d) else pd.Series(dtype=str)
        tips = [
            alt.Tooltip("arm_name:N", title="arm"),
            alt.Tooltip("concurrency:Q", title="concurrency"),
            alt.Tooltip("delta_pct:Q", title="Δ% vs baseline", format="+.1f"),
            alt.Tooltip("baseline_value:Q", title=f"baseline ({info.unit})", format=",.1f"),
            alt.Tooltip("arm_value:Q", title=f"arm ({info.unit})", format=",.1f"),
            alt.Tooltip("interval:N", title="95% interval"),
        ]
        y_title = "Δ% vs baseline"
        ci = d[d["ci_kind"] != "none"] if len(d) else d
        domain = delta_domain(d.get("delta_pct", []), ci.get("ci_low_pct", []), ci.get("ci_high_pct", []))
        scale = alt.Scale(domain=list(domain), nice=False, zero=False)
        encode = dict(x=concurrency_x(comp), y=alt.Y("delta_pct:Q", title=y_title, scale=scale), tooltip=tips)
        layers: list[alt.Chart] = [_zero_rule(scale), *v.arm_layers(d, encode, spec_only=True)]
        bars, clipped = _interval_bars(v, ci, tips, y_title, scale, domain)
        layers += bars
        cx = _named(v, comp.crossovers[comp.crossovers["metric"] == metric])
        if len(cx):
            several = cx["arm"].nunique() > 1
            cx = cx.sort_values("crossover_concurrency").assign(label=[
                f"{n} crossover ≈ {c:.0f}" if several else f"crossover ≈ {c:.0f}"
                for n, c in zip(cx["arm_name"], cx["crossover_concurrency"])])
            cx = stack_labels(cx, "crossover_concurrency", "label", scale=log2_scale(comp), width=width)
            # red, as everywhere, for one arm; each arm's own colour when several cross
            colour = v.colour(spec_only=True, symbol="stroke") if several else alt.ColorValue(CROSSOVER_COLOUR)
            rule = alt.Chart(cx).encode(
                x=alt.X("crossover_concurrency:Q", scale=log2_scale(comp)),
                color=colour,
                tooltip=[alt.Tooltip("arm_name:N", title="arm"),
                         alt.Tooltip("crossover_concurrency:Q", title="crossover (interpolated in log2)", format=".1f"),
                         alt.Tooltip("c_low:Q", title="between"), alt.Tooltip("c_high:Q", title="and")],
            )
            layers.append(rule.mark_rule(strokeDash=[2, 3], strokeWidth=1.5))
            layers.append(rule.mark_text(align="left", baseline="middle", fontSize=LABEL_FONT_PX).encode(
                x=alt.X("label_x_px:Q", scale=None), y=alt.Y("label_y_px:Q", scale=None), text=alt.Text("label:N")))
        panels.append(alt.layer(*layers, width=width, height=height or HEIGHT,
                                title=_panel_title(f"Δ {info.label}", clipped)))
    return alt.hconcat(*panels, resolve=_independent_y())


def _interval_bars(v: View, ci: pd.DataFrame, tips: list[alt.Tooltip], y_title: str, scale: alt.Scale,
                   domain: tuple[float, float]) -> tuple[list[alt.Chart], bool]:
    """Each shown arm's 95 % intervals of a delta panel (``ci``: its rows with one) as error bars on
    ``scale``, clipped at the panel's ``domain`` with a triangle where cut (:func:`clipped_ends`), and
    whether any was."""
    layers: list[alt.Chart] = []
    clipped_any = False
    x = concurrency_x(v.comp)
    for name in v._values(spec_only=True):
        part = ci[ci["arm_name"] == name] if len(ci) else ci
        if part.empty:
            continue
        dx, dy = v.offset(name), -v.offset(name)
        colour = v.colour(spec_only=True, symbol="stroke")
        bar = alt.Chart(part).encode(x=x, color=colour, tooltip=tips)
        layers.append(bar.mark_rule(strokeWidth=1.5, xOffset=dx, yOffset=dy, clip=True).encode(
            y=alt.Y("ci_low_pct:Q", title=y_title, scale=scale), y2=alt.Y2("ci_high_pct:Q")))
        for end in ("ci_low_pct", "ci_high_pct"):
            layers.append(bar.mark_tick(orient="horizontal", size=8, thickness=1.5, xOffset=dx, yOffset=dy, clip=True)
                          .encode(y=alt.Y(f"{end}:Q", title=y_title, scale=scale)))
        clipped = clipped_ends(part, domain)
        clipped_any |= not clipped.empty
        layers += _clip_marks(clipped, {"x": x, "color": colour}, y_title, scale, xOffset=dx, yOffset=dy)
    return layers, clipped_any


@validated_once
def latency_chart(comp: Comparison, *, arms: Arms = None, levels: Levels = None, concurrency: Range = None,
                  colours: Colours = None, width: int | None = None,
                  height: int | None = None) -> alt.HConcatChart | None:
    """TTFT and end-to-end latency p50 / p99 against concurrency (one panel each); None without latency data."""
    v = _view(comp, arms, levels, concurrency, colours)
    comp = v.comp
    cols = [c for c in ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s") if c in comp.levels]
    if not cols or comp.levels[cols].isna().all().all():
        return None
    long = comp.levels.melt(id_vars=["arm", "concurrency"], value_vars=cols, var_name="metric", value_name="seconds").dropna()
    long["latency"] = long["metric"].str.split("_").str[0].map({"ttft": "Time to first token", "e2e": "End-to-end"})
    long["percentile"] = long["metric"].str.split("_").str[1]
    long = _named(v, long)
    panels = []
    # arms: colour, point shape and a small offset (legend "Arm"); percentiles: the line's dash
    # (legend "Percentile", drawn as lines: p50 solid, p99 dashed)
    pct = alt.StrokeDash("percentile:N", title="Percentile",
                         scale=alt.Scale(domain=["p50", "p99"], range=[[1, 0], [6, 4]]),
                         legend=alt.Legend(orient="bottom", symbolType="stroke", symbolStrokeColor="#374151",
                                           symbolStrokeWidth=2.5, symbolSize=500))
    for which in ("Time to first token", "End-to-end"):
        part = long[long["latency"] == which]
        if part.empty:
            continue
        encode: dict[str, Any] = dict(
            x=concurrency_x(comp),
            y=alt.Y("seconds:Q", title=f"{which} (s)"),
            tooltip=[alt.Tooltip("arm_name:N", title="arm"), alt.Tooltip("concurrency:Q"),
                     alt.Tooltip("percentile:N"), alt.Tooltip("seconds:Q", format=".3f", title=f"{which} (s)")],
        )
        layers = []
        for name in v.shown:
            if not (part["arm_name"] == name).any():
                continue
            dx, dy = v.offset(name), -v.offset(name)
            arm = alt.Chart(part).transform_filter(alt.FieldEqualPredicate(field="arm_name", equal=name)).encode(**encode)
            layers.append(arm.mark_line(strokeWidth=2, xOffset=dx, yOffset=dy).encode(
                color=v.colour(), strokeDash=pct, detail=alt.Detail("percentile:N")))
            layers.append(arm.mark_point(filled=True, size=v.point_size(name, 50), xOffset=dx, yOffset=dy).encode(
                color=v.colour(), shape=v.shape()))
        panels.append(alt.layer(*layers, width=width or PANEL_WIDTH, height=height or HEIGHT, title=f"{which}, p50 and p99"))
    return alt.hconcat(*panels, resolve=_independent_y())


#: label placements tried in turn for each Pareto point: (dx, dy) in px from the point, text alignment
_LABEL_SPOTS = ((9, -8, "left"), (9, 10, "left"), (-9, -8, "right"), (-9, 10, "right"),
                (0, -13, "center"), (0, 17, "center"), (16, 0, "left"), (-16, 0, "right"))


def place_labels(points: pd.DataFrame, x: str, y: str, text: str, *, width: int, height: int,
                 x_domain: tuple[float, float], y_domain: tuple[float, float],
                 lines: Sequence[Sequence[tuple[float, float]]] = (), font_px: float = 10.0) -> pd.DataFrame:
    """Greedy label placement on linear axes: each label takes the first spot of :data:`_LABEL_SPOTS`
    whose box (≈0.6 × font_px per character wide, font_px + 2 tall, in px) overlaps no placed label,
    no point (a 12 px square) and no drawn line (``lines``: polylines in data units); if none is
    free, the least-crowded one.

    Returns ``points`` with ``label_x``/``label_y`` (data units, where the text anchors) and
    ``label_align`` (left | right | center).
    """
    (x0, x1), (y0, y1) = x_domain, y_domain
    sx = width / ((x1 - x0) or 1.0)
    sy = height / ((y1 - y0) or 1.0)
    px = [((r[x] - x0) * sx, (y1 - r[y]) * sy) for _, r in points.iterrows()]
    boxes: list[tuple[float, float, float, float]] = [(cx - 6, cy - 6, cx + 6, cy + 6) for cx, cy in px]
    for line in lines:  # a line is a chain of small squares, one every ~4 px along it
        pts = [((a - x0) * sx, (y1 - b) * sy) for a, b in line]
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            steps = max(1, int(math.hypot(bx - ax, by - ay) / 4))
            boxes += [(ax + (bx - ax) * k / steps - 1.5, ay + (by - ay) * k / steps - 1.5,
                       ax + (bx - ax) * k / steps + 1.5, ay + (by - ay) * k / steps + 1.5) for k in range(steps + 1)]

    def overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
        w = min(a[2], b[2]) - max(a[0], b[0])
        h = min(a[3], b[3]) - max(a[1], b[1])
        return w * h if w > 0 and h > 0 else 0.0

    out = points.copy()
    lx, ly, al = [], [], []
    for (cx, cy), (_, row) in zip(px, points.iterrows()):
        w, h = 0.6 * font_px * len(str(row[text])), font_px + 2
        best, best_cost = None, math.inf
        for dx, dy, align in _LABEL_SPOTS:
            left = cx + dx - (w if align == "right" else w / 2 if align == "center" else 0)
            box = (left, cy + dy - h / 2, left + w, cy + dy + h / 2)
            outside = box[0] < 0 or box[2] > width or box[1] < 0 or box[3] > height
            cost = sum(overlap(box, b) for b in boxes) + (1e3 if outside else 0)
            if cost < best_cost:
                best, best_cost = (dx, dy, align, box), cost
            if cost == 0:
                break
        assert best is not None
        dx, dy, align, box = best
        boxes.append(box)
        lx.append(x0 + (cx + dx) / sx)
        ly.append(y1 - (cy + dy) / sy)
        al.append(align)
    return out.assign(label_x=lx, label_y=ly, label_align=al)


def _padded(values: pd.Series, pad: float = 0.08) -> tuple[float, float]:
    lo, hi = float(values.min()), float(values.max())
    span = (hi - lo) or max(abs(hi), 1.0)
    return lo - pad * span, hi + pad * span


@validated_once
def pareto_chart(comp: Comparison, *, arms: Arms = None, levels: Levels = None, concurrency: Range = None,
                 colours: Colours = None, width: int | None = None, height: int | None = None) -> alt.LayerChart:
    """Throughput against interactivity: aggregate tok/s vs per-user speed, points labelled ``C=<concurrency>``.

    Labels are placed so they do not overlap each other or the points (:func:`place_labels`), for
    the chart's own size; after ``.properties(width=...)`` they keep their data positions.
    """
    v = _view(comp, arms, levels, concurrency, colours)
    comp = v.comp
    width, height = width or WIDTH, height or HEIGHT + 120
    um = comp.user_metric
    uinfo = metric_info(um)
    data = _named(v, comp.pareto.dropna(subset=[um, "output_tok_s"]))
    data["frontier"] = data["on_frontier"].map({True: "on the frontier", False: "dominated"})
    data["label"] = data["concurrency"].map(lambda c: f"C={int(c)}")
    xd, yd = _padded(data[um]), _padded(data["output_tok_s"])
    frontier_line = [tuple(p) for p in data[data["on_frontier"]].sort_values(um)[[um, "output_tok_s"]].to_numpy()]
    data = place_labels(data.sort_values(["concurrency", "arm"]), um, "output_tok_s", "label",
                        width=width, height=height, x_domain=xd, y_domain=yd, lines=[frontier_line])
    x_scale = alt.Scale(domain=list(xd), nice=False, zero=False)
    y_scale = alt.Scale(domain=list(yd), nice=False, zero=False)
    tips = [alt.Tooltip("arm_name:N", title="arm"), alt.Tooltip("concurrency:Q"),
            alt.Tooltip("output_tok_s:Q", title="aggregate (tok/s)", format=",.0f"),
            alt.Tooltip(f"{um}:Q", title=f"per-user ({uinfo.unit})", format=",.1f"),
            alt.Tooltip("frontier:N", title="Pareto")]
    base = alt.Chart(data).encode(
        x=alt.X(f"{um}:Q", title=f"{uinfo.label} ({uinfo.unit}) — interactivity", scale=x_scale),
        y=alt.Y("output_tok_s:Q", title="Aggregate output throughput (tok/s)", scale=y_scale),
        color=v.colour(), tooltip=tips,
    )
    frontier = data[data["on_frontier"]].sort_values(um)
    line = alt.Chart(frontier).mark_line(color="black", strokeDash=[2, 3], opacity=0.6).encode(
        x=alt.X(f"{um}:Q", scale=x_scale), y=alt.Y("output_tok_s:Q", scale=y_scale), order=alt.Order(f"{um}:Q"))
    frontier_shape = alt.Shape("frontier:N", title="Pareto",
                               scale=alt.Scale(domain=["on the frontier", "dominated"], range=["circle", "triangle"]))
    points = [base.transform_filter(alt.FieldEqualPredicate(field="arm_name", equal=name))
              .mark_point(size=v.point_size(name, 80), filled=True, xOffset=v.offset(name), yOffset=-v.offset(name))
              .encode(shape=frontier_shape)
              for name in v.shown if (data["arm_name"] == name).any()]
    labels = [
        alt.Chart(data[data["label_align"] == align]).mark_text(align=align, baseline="middle", fontSize=10).encode(
            x=alt.X("label_x:Q", scale=x_scale), y=alt.Y("label_y:Q", scale=y_scale), text=alt.Text("label:N"),
            color=v.colour(legend=False), tooltip=tips)
        for align in ("left", "right", "center") if (data["label_align"] == align).any()
    ]
    return alt.LayerChart(layer=[line, *points, *labels],
        width=width, height=height, title="Throughput vs interactivity (labels: concurrency)")


@validated_once
def concurrency_chart(comp: Comparison, *, arms: Arms = None, levels: Levels = None, concurrency: Range = None,
                      colours: Colours = None, width: int | None = None,
                      height: int | None = None) -> alt.LayerChart:
    """Diagnostics: requests actually served at once vs offered concurrency, with y = x and each arm's cap."""
    v = _view(comp, arms, levels, concurrency, colours)
    comp = v.comp
    lv = _named(v, comp.levels)
    measured = "decoding_concurrency" in lv and lv["decoding_concurrency"].notna().any()
    col = "decoding_concurrency" if measured else "concurrency_estimate"
    title = ("Decoding concurrency (Σ decode time ÷ window)" if measured
             else "Estimated effective concurrency (aggregate ÷ per-request tok/s)")
    data = lv[["arm_name", "concurrency", col]].dropna().rename(columns={col: "served"})
    shown = _levels(comp)
    ident = alt.Chart(pd.DataFrame({"concurrency": shown, "served": shown})).mark_line(
        color="#9ca3af", strokeDash=[4, 4]).encode(x=concurrency_x(comp, "Offered concurrency (log2)"), y=alt.Y("served:Q"),
                                                   tooltip=[alt.Tooltip("concurrency:Q", title="served = offered")])
    width, height = width or WIDTH, height or HEIGHT
    caps = pd.DataFrame([{"arm_name": v.names[a], "cap": int(c)} for a, c in comp.caps.items() if c and a in comp.arms],
                        columns=["arm_name", "cap"])
    values = [*data["served"], *shown, *caps["cap"]]
    y_scale = alt.Scale(type="log", base=2, domain=[min(values) / 1.3, max(values) * 1.3], nice=False)
    encode = dict(
        x=concurrency_x(comp, "Offered concurrency (log2)"),
        y=alt.Y("served:Q", title=title, scale=y_scale),
        tooltip=[alt.Tooltip("arm_name:N", title="arm"), alt.Tooltip("concurrency:Q", title="offered"),
                 alt.Tooltip("served:Q", title="served at once", format=".1f")],
    )
    layers = [ident.encode(y=alt.Y("served:Q", scale=y_scale)), *v.arm_layers(data, encode)]
    if len(caps):
        # one dashed rule per arm (moved like its line, so equal caps stay visible), one label per
        # cap value naming its arms; labels whose caps lie closer than a row are set side by side
        for name in v.shown:
            if (caps["arm_name"] == name).any():
                layers.append(alt.Chart(caps).transform_filter(alt.FieldEqualPredicate(field="arm_name", equal=name))
                              .mark_rule(strokeDash=[6, 3], yOffset=-v.offset(name))
                              .encode(y=alt.Y("cap:Q", scale=y_scale), color=v.colour(symbol="stroke"),
                                      tooltip=[alt.Tooltip("arm_name:N", title="arm"),
                                               alt.Tooltip("cap:Q", title="max_running_requests")]))
        text = (caps.groupby("cap", sort=True)["arm_name"].agg(lambda n: ", ".join(n)).reset_index()
                .assign(text=lambda t: [f"cap {c}: {n}" for c, n in zip(t["cap"], t["arm_name"])]))
        lo, hi = (math.log2(d) for d in y_scale.domain)
        text["y_px"] = [height * (hi - math.log2(c)) / (hi - lo) for c in text["cap"]]
        xs: list[float] = []
        placed: list[tuple[float, float, float]] = []  # each label's left and right edge and its y (px)
        for y_px, label in zip(text["y_px"], text["text"]):
            x = 4.0
            for px0, px1, y0 in placed:
                if abs(y0 - y_px) < LABEL_ROW_PX and x < px1 + 12:
                    x = px1 + 12
            w = 0.62 * LABEL_FONT_PX * len(label)
            placed.append((x, x + w, y_px))
            xs.append(x)
        text["x_px"] = xs
        layers.append(alt.Chart(text).mark_text(align="left", baseline="bottom", dy=-3, fontSize=LABEL_FONT_PX,
                                                color="#374151").encode(
            x=alt.X("x_px:Q", scale=None), y=alt.Y("cap:Q", scale=y_scale), text=alt.Text("text:N"),
            tooltip=[alt.Tooltip("text:N", title="max_running_requests")]))
    return alt.LayerChart(layer=layers, width=width, height=height, title="Requests served at once vs offered")


def _optional_lines(comp: Comparison, metric: str, title: str, arms: Arms, levels: Levels, concurrency: Range,
                    colours: Colours, width: int | None, height: int | None,
                    present: bool) -> alt.LayerChart | None:
    if not present:
        return None
    return _metric_lines(_view(comp, arms, levels, concurrency, colours), metric, title, width, height)


@validated_once
def acceptance_chart(comp: Comparison, *, arms: Arms = None, levels: Levels = None, concurrency: Range = None,
                     colours: Colours = None, width: int | None = None,
                     height: int | None = None) -> alt.LayerChart | None:
    """Server-side acceptance length per level for speculative arms; None when not measured.

    Arms whose tokens were counted from chunks (``comp.chunk_counted``) are left out: their
    acceptance, tokens ÷ verify steps, would be counted from chunks too.
    """
    if comp.chunk_counted and "spec_accept_length" in comp.levels:
        levels_ = comp.levels.copy()
        levels_.loc[levels_["arm"].isin(list(comp.chunk_counted)), "spec_accept_length"] = float("nan")
        comp = dataclasses.replace(comp, levels=levels_)
    present = "spec_accept_length" in comp.levels and comp.levels["spec_accept_length"].notna().any()
    return _optional_lines(comp, "spec_accept_length", "Acceptance length under load", arms, levels, concurrency,
                           colours, width, height, bool(present))


@validated_once
def error_chart(comp: Comparison, *, arms: Arms = None, levels: Levels = None, concurrency: Range = None,
                colours: Colours = None, width: int | None = None, height: int | None = None) -> alt.LayerChart | None:
    """Error rate per level; None when no errors were recorded."""
    present = "error_rate" in comp.levels and (comp.levels["error_rate"].fillna(0) > 0).any()
    return _optional_lines(comp, "error_rate", "Error rate", arms, levels, concurrency, colours, width, height,
                           bool(present))


@validated_once
def tokens_per_chunk_chart(comp: Comparison, *, arms: Arms = None, levels: Levels = None, concurrency: Range = None,
                           colours: Colours = None, width: int | None = None,
                           height: int | None = None) -> alt.LayerChart | None:
    """Tokens per streamed chunk (> 1 under speculation); None when not measured."""
    present = "tokens_per_chunk_mean" in comp.levels and comp.levels["tokens_per_chunk_mean"].notna().any()
    return _optional_lines(comp, "tokens_per_chunk_mean", "Tokens per streamed chunk", arms, levels, concurrency,
                           colours, width, height, bool(present))


def fit_domain(d: pd.DataFrame) -> tuple[float, float]:
    """:func:`delta_domain` of a fitted-curve frame: its measured and fitted Δ % and its band's ends."""
    return delta_domain([*d["delta_pct"], *d["fit_delta_pct"]], d["ci_low_pct"], d["ci_high_pct"])


def _fit_layers(v: View, d: pd.DataFrame, x: alt.X, tips: list[alt.Tooltip], y_title: str, point_size: float,
                domain: tuple[float, float]) -> tuple[list[alt.Chart], bool]:
    """Per speculative arm of ``d``: its band (``ci_low_pct``–``ci_high_pct``, shaded, clipped at
    ``domain`` with a triangle where cut), fitted line (``fit_delta_pct``, in the arm's dash) and
    measured points (``delta_pct``), moved by the arm's offset; and whether a band was clipped."""
    scale = alt.Scale(domain=list(domain), nice=False, zero=False)
    layers: list[alt.Chart] = []
    clipped_any = False
    for name in v._values(spec_only=True):
        if not (d["arm_name"] == name).any():
            continue
        dx, dy = v.offset(name), -v.offset(name)
        arm = alt.Chart(d).transform_filter(alt.FieldEqualPredicate(field="arm_name", equal=name)).encode(
            x=x, tooltip=tips)
        clipped = clipped_ends(d[d["arm_name"] == name], domain)
        clipped_any |= not clipped.empty
        layers += _clip_marks(clipped, {"x": x, "color": v.colour(spec_only=True, symbol="stroke")}, y_title, scale,
                              xOffset=dx, yOffset=dy)
        layers += [
            arm.mark_area(opacity=0.18, xOffset=dx, yOffset=dy, clip=True).encode(
                y=alt.Y("ci_low_pct:Q", title=y_title, scale=scale), y2=alt.Y2("ci_high_pct:Q"),
                color=v.colour(spec_only=True, symbol="stroke")),
            arm.mark_line(strokeWidth=2, xOffset=dx, yOffset=dy, clip=True).encode(
                y=alt.Y("fit_delta_pct:Q", scale=scale), color=v.colour(spec_only=True, symbol="stroke"),
                strokeDash=v.dash(spec_only=True)),
            arm.mark_point(filled=True, size=v.point_size(name, point_size), xOffset=dx, yOffset=dy).encode(
                y=alt.Y("delta_pct:Q", scale=scale), color=v.colour(spec_only=True, symbol="stroke")),
        ]
    return layers, clipped_any


@validated_once
def delta_fit_chart(comp: Comparison, metrics: Sequence[str] | None = None, *, arms: Arms = None,
                    levels: Levels = None, concurrency: Range = None, colours: Colours = None,
                    width: int | None = None, height: int | None = None) -> alt.HConcatChart | None:
    """The fitted delta curve per arm and metric: fitted line, its 95% simultaneous band, measured Δ% points.

    The band is evaluated at the tested levels and joined by straight lines (``compare.METHOD``
    says how it is fitted). None when no curve could be fitted. ``width``/``height`` size each
    panel (default: two panels fill a 1400 px page).
    """
    v, metrics, width = _delta_panels(comp, metrics, arms, levels, concurrency, colours, width)
    comp = v.comp
    panels = []
    for metric in metrics:
        d = comp.deltas[(comp.deltas["metric"] == metric) & comp.deltas["fit_delta_pct"].notna()]
        if d.empty:
            continue
        d = _named(v, d)
        d["method"] = d["ci_kind"]
        tips = [alt.Tooltip("arm_name:N", title="arm"), alt.Tooltip("concurrency:Q", title="concurrency"),
                alt.Tooltip("delta_pct:Q", title="measured Δ%", format="+.1f"),
                alt.Tooltip("fit_delta_pct:Q", title="fitted Δ%", format="+.1f"),
                alt.Tooltip("ci_low_pct:Q", title="band low", format="+.1f"),
                alt.Tooltip("ci_high_pct:Q", title="band high", format="+.1f"),
                alt.Tooltip("method:N", title="model")]
        domain = fit_domain(d)
        fitted, clipped = _fit_layers(v, d, concurrency_x(comp), tips, "Δ% vs baseline", 50, domain)
        layers = [_zero_rule(alt.Scale(domain=list(domain), nice=False, zero=False)), *fitted]
        panels.append(alt.layer(*layers,
            width=width, height=height or HEIGHT,
            title=_panel_title(f"Fitted Δ {metric_info(metric).label} (band: 95% simultaneous)", clipped)))
    return alt.hconcat(*panels, resolve=_independent_y()) if panels else None


def _interval_text(lo: float, hi: float, kind: str, fit: float) -> str:
    """A category point's interval for its tooltip."""
    if pd.isna(lo):
        return "single run, no interval"
    if kind == "band":
        return f"[{lo:+.1f}%, {hi:+.1f}%] band around fitted {fit:+.1f}%"
    return f"[{lo:+.1f}%, {hi:+.1f}%] (repeats)"


@validated_once
def category_chart(comp: Comparison, categories: pd.DataFrame, *, arms: Arms = None, levels: Levels = None,
                   concurrency: Range = None, colours: Colours = None, width: int | None = None,
                   height: int | None = None) -> alt.HConcatChart | None:
    """Δ% against the baseline per prompt category: per-user speed and aggregate share, one panel each.

    ``categories`` is :func:`specsweep.report.category_deltas` (one row per arm, level and
    category). One point per (arm, level, category) at the measured Δ%, coloured by arm, shaped by
    level, with its 95 % interval as an error bar where there is one (the category curve's band
    around the fitted Δ%, else an interval from repeats). None when there is nothing to draw
    (one category only). ``width``/``height`` size each panel (keyword arguments: module doc).
    """
    if categories is None or categories.empty:
        return None
    v = _view(comp, arms, levels, concurrency, colours)
    comp = v.comp
    keep = categories["arm"].isin(comp.spec_arms) & categories["concurrency"].isin(_levels(comp))
    d = _named(v, categories[keep])
    if d.empty:
        return None
    d = d.assign(level=d["concurrency"].map(lambda c: f"C = {int(c)}"))
    level_order = [f"C = {int(c)}" for c in sorted(d["concurrency"].unique())]
    panels = []
    for name, title in (("user", f"Δ {metric_info(comp.user_metric).label} by category"),
                        ("aggregate", "Δ aggregate share by category")):
        kinds = d[f"{name}_ci_kind"] if f"{name}_ci_kind" in d else pd.Series("repeats", index=d.index)
        fits = d[f"{name}_fit_pct"] if f"{name}_fit_pct" in d else pd.Series(math.nan, index=d.index)
        part = d.assign(
            delta_pct=d[f"{name}_delta_pct"], ci_low_pct=d[f"{name}_ci_low_pct"], ci_high_pct=d[f"{name}_ci_high_pct"],
            interval=[_interval_text(lo, hi, kind, fit)
                      for lo, hi, kind, fit in zip(d[f"{name}_ci_low_pct"], d[f"{name}_ci_high_pct"], kinds, fits)])
        part = part[["arm_name", "level", "concurrency", "category", "delta_pct", "ci_low_pct", "ci_high_pct",
                     "interval", "accept_length"]]
        tips = [alt.Tooltip("arm_name:N", title="arm"), alt.Tooltip("category:N", title="category"),
                alt.Tooltip("concurrency:Q", title="concurrency"),
                alt.Tooltip("delta_pct:Q", title="Δ% vs baseline", format="+.1f"),
                alt.Tooltip("interval:N", title="95% interval"),
                alt.Tooltip("accept_length:Q", title="accept length (arm)", format=".2f")]
        x = alt.X("category:N", title="Prompt category", sort=sorted(part["category"].unique()))
        ci = part[part["ci_low_pct"].notna()]
        domain = delta_domain(part["delta_pct"], ci["ci_low_pct"], ci["ci_high_pct"])
        scale = alt.Scale(domain=list(domain), nice=False, zero=False)
        base = alt.Chart(part).encode(x=x, y=alt.Y("delta_pct:Q", title="Δ% vs baseline", scale=scale),
                                      color=v.colour(spec_only=True),
                                      shape=alt.Shape("level:N", title="Level", sort=level_order),
                                      xOffset=alt.XOffset("level:N", sort=level_order), tooltip=tips)
        layers = [_zero_rule(scale),
                  base.mark_point(filled=True, size=70)]
        clipped = clipped_ends(ci, domain)
        if len(ci):
            offset = alt.XOffset("level:N", sort=level_order)
            layers.append(alt.Chart(ci).mark_errorbar(ticks=True, clip=True).encode(
                x=x, xOffset=offset, y=alt.Y("ci_low_pct:Q", title="Δ% vs baseline", scale=scale),
                y2=alt.Y2("ci_high_pct:Q"), color=v.colour(spec_only=True), tooltip=tips))
            layers += _clip_marks(clipped, {"x": x, "xOffset": offset, "color": v.colour(spec_only=True)},
                                  "Δ% vs baseline", scale)
        panels.append(alt.layer(*layers, width=width or PANEL_WIDTH, height=height or HEIGHT,
                                title=_panel_title(title, not clipped.empty)))
    return alt.hconcat(*panels, resolve=_independent_y())


#: the category curve chart's panel size (one small panel per category and figure)
CATEGORY_PANEL = (150, 140)


@validated_once
def category_curve_chart(comp: Comparison, curves: Mapping[tuple[str, str, str], object], *, arms: Arms = None,
                         colours: Colours = None, width: int | None = None,
                         height: int | None = None) -> alt.VConcatChart | None:
    """Each prompt category's fitted delta curve: one small panel per category (columns) and figure
    (rows: aggregate share, per-user speed; the y axis says which) with the fitted Δ% (line), its 95 % simultaneous band
    (shaded, evaluated at the fitted levels and joined by straight lines), the measured Δ% (points)
    and a dashed red rule at each credible crossover.

    ``curves`` is :func:`specsweep.report.category_curves` ((arm, category, figure) →
    ``CategoryFit``). None when no category has a curve. ``width``/``height`` size each panel.
    """
    from specsweep.analyze.crossover import curve_crossovers  # noqa: PLC0415
    from specsweep.decide.text import tested_bracket  # noqa: PLC0415

    v = _view(comp, arms, None, None, colours)
    shown = set(v.comp.spec_arms)
    rows: dict[str, list[dict[str, object]]] = {}
    marks: dict[str, list[dict[str, object]]] = {}
    for (arm, cat, figure), fit in curves.items():
        curve = getattr(fit, "curve", None)
        if curve is None or arm not in shown:
            continue
        for i, c in enumerate(curve.concurrency):
            f, h = float(curve.fitted[i]), float(curve.half_width[i])
            rows.setdefault(figure, []).append({
                "arm": arm, "category": cat, "concurrency": int(c),
                "delta_pct": (math.exp(float(curve.observed[i])) - 1) * 100,
                "fit_delta_pct": (math.exp(f) - 1) * 100, "ci_low_pct": (math.exp(f - h) - 1) * 100,
                "ci_high_pct": (math.exp(f + h) - 1) * 100, "method": curve.method()})
        for cx in curve_crossovers(curve):
            # the one bracket every place names: the category's tested levels just around X
            lo, hi = tested_bracket([int(c) for c in curve.concurrency], float(cx["crossover_concurrency"]))
            marks.setdefault(figure, []).append({"arm": arm, "category": cat, "x": cx["crossover_concurrency"],
                                                 "between": f"{lo} and {hi}"})
    if not rows:
        return None
    pw, ph = width or CATEGORY_PANEL[0], height or CATEGORY_PANEL[1]
    titles = {"aggregate": "Δ% aggregate share", "user": "Δ% per-user speed"}
    figure_rows = []
    for figure in ("aggregate", "user"):
        if figure not in rows:
            continue
        frame = _named(v, pd.DataFrame(rows[figure]))
        levels = sorted(frame["concurrency"].unique())
        x_scale = alt.Scale(type="log", base=2, domain=[min(levels) / 1.3, max(levels) * 1.3], nice=False)
        x = alt.X("concurrency:Q", title="Concurrency (log2)", scale=x_scale,
                  axis=alt.Axis(values=[int(c) for c in levels], format="d", grid=False))
        domain = fit_domain(frame)  # one y axis per row of panels
        tips = [alt.Tooltip("arm_name:N", title="arm"), alt.Tooltip("category:N", title="category"),
                alt.Tooltip("concurrency:Q", title="concurrency"),
                alt.Tooltip("delta_pct:Q", title="measured Δ%", format="+.1f"),
                alt.Tooltip("fit_delta_pct:Q", title="fitted Δ%", format="+.1f"),
                alt.Tooltip("ci_low_pct:Q", title="band low", format="+.1f"),
                alt.Tooltip("ci_high_pct:Q", title="band high", format="+.1f"),
                alt.Tooltip("method:N", title="model")]
        panels = []
        for cat in sorted(frame["category"].unique()):
            part = frame[frame["category"] == cat]
            fitted, clipped = _fit_layers(v, part, x, tips, titles[figure], 35, domain)
            layers = [_zero_rule(alt.Scale(domain=list(domain), nice=False, zero=False)), *fitted]
            crossings = [m for m in marks.get(figure, []) if m["category"] == cat]
            if crossings:
                layers.append(alt.Chart(_named(v, pd.DataFrame(crossings))).mark_rule(
                    color="#dc2626", strokeDash=[5, 4], strokeWidth=1.5).encode(
                    x=alt.X("x:Q", scale=x_scale),
                    tooltip=[alt.Tooltip("arm_name:N", title="arm"), alt.Tooltip("category:N", title="category"),
                             alt.Tooltip("x:Q", title="crossover near", format=".0f"),
                             alt.Tooltip("between:N", title="between levels")]))
            panels.append(alt.layer(*layers, width=pw, height=ph, title=_panel_title(cat, clipped, CLIP_NOTE_SHORT)))
        figure_rows.append(alt.hconcat(*panels))
    return alt.vconcat(*figure_rows)


# ------------------------------------------------------------------------------ verdict strip

#: colours and meanings of a level's outcome in the verdict strip
OUTCOME_COLOURS = {"gain": "#15803d", "loss": "#b91c1c", "neutral": "#d1d5db"}
OUTCOME_MEANING = {
    "gain": "gain: credibly better for this profile",
    "loss": "loss: credibly worse for this profile",
    "neutral": "neutral: within noise",
}
STRIP_COLUMNS = ("profile", "arm", "concurrency", "outcome")
#: pixels per band (profile × arm) of the verdict strip
STRIP_BAND = 30


def verdict_strip_frame(comp: Comparison, recs: Sequence[Recommendation]) -> pd.DataFrame:
    """The verdict strip's frame from :class:`~specsweep.decide.Recommendation` objects.

    One row per (profile, arm, concurrency) of each ``rec.levels`` (arms by their short name, in
    the comparison's order; profiles in the order of ``recs``), with ``crossover`` (concurrency,
    requests) set on the recommended arm's rows to ``rec.up_to_concurrency`` or
    ``rec.from_concurrency`` and NaN elsewhere. Recommendations without levels (no verdict) add
    no rows. The extra columns of ``rec.levels`` (``decided_by``, ``aggregate_band``…) are kept.
    """
    order = {a: i for i, a in enumerate(comp.arms)}
    parts = []
    for i, rec in enumerate(recs):
        levels = getattr(rec, "levels", None)
        if levels is None or levels.empty:
            continue
        cross = rec.up_to_concurrency if rec.up_to_concurrency is not None else rec.from_concurrency
        part = levels.copy()
        part.insert(0, "profile", rec.profile.name)
        part["crossover"] = [float(cross) if cross is not None and a == rec.arm else math.nan for a in part["arm"]]
        part["_p"], part["_a"] = i, part["arm"].map(lambda a: order.get(a, len(order)))
        parts.append(part)
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in
                             zip((*STRIP_COLUMNS, "crossover"), (str, str, int, str, float))})
    out = pd.concat(parts, ignore_index=True).sort_values(["_p", "_a", "concurrency"], kind="stable")
    return out.drop(columns=["_p", "_a"]).reset_index(drop=True)


def _strip_edges(levels: Sequence[int]) -> dict[int, tuple[float, float]]:
    """Each tested level's cell on a log2 axis: from the geometric midpoint with the level below to
    the one with the level above (the end cells as wide as their neighbour's half-step)."""
    lv = sorted(set(levels))
    if len(lv) == 1:
        return {lv[0]: (lv[0] / math.sqrt(2), lv[0] * math.sqrt(2))}
    mids = [math.sqrt(a * b) for a, b in zip(lv, lv[1:])]
    lows = [lv[0] * lv[0] / mids[0], *mids]
    highs = [*mids, lv[-1] * lv[-1] / mids[-1]]
    return {c: (lo, hi) for c, lo, hi in zip(lv, lows, highs)}


@validated_once
def verdict_strip(strip: pd.DataFrame, *, width: int | None = None,
                  band_height: int | None = None) -> alt.LayerChart | None:
    """The verdict strip: concurrency (log2, a tick per tested level) across, one band per
    profile × arm, each tested level a cell coloured by its outcome (legend: what each means),
    a black tick at the crossover where there is one.

    ``strip`` has columns ``profile``, ``arm`` (short name), ``concurrency`` (requests),
    ``outcome`` (gain | loss | neutral) and optionally ``crossover`` (concurrency, NaN for
    none), ``decided_by`` and ``aggregate_band`` (shown in tooltips) — see
    :func:`verdict_strip_frame`. ``width`` is the plot's width in px, ``band_height`` each
    band's. None when ``strip`` has no rows.
    """
    missing = [c for c in STRIP_COLUMNS if c not in strip.columns]
    if missing:
        raise ValueError(f"verdict_strip: the frame lacks column(s) {', '.join(missing)}; "
                         f"it needs {', '.join(STRIP_COLUMNS)} (build it with charts.verdict_strip_frame)")
    if strip.empty:
        return None
    bad = sorted(set(map(str, strip["outcome"])) - set(OUTCOME_COLOURS))
    if bad:
        raise ValueError(f"verdict_strip: outcome {', '.join(map(repr, bad))} is not one of gain, loss, neutral")
    d = strip.copy()
    d["concurrency"] = d["concurrency"].astype(int)
    # the row key: profile and arm on two lines of the axis label
    d["band"] = d["profile"].astype(str) + "\n" + d["arm"].astype(str)
    bands = list(dict.fromkeys(d["band"]))
    edges = _strip_edges(d["concurrency"].tolist())
    d["x_low"] = d["concurrency"].map(lambda c: edges[c][0])
    d["x_high"] = d["concurrency"].map(lambda c: edges[c][1])
    d["meaning"] = d["outcome"].map(OUTCOME_MEANING)
    lv = sorted(edges)
    x_scale = alt.Scale(type="log", base=2, domain=[edges[lv[0]][0], edges[lv[-1]][1]], nice=False)
    y = alt.Y("band:N", sort=bands, title=None,
              axis=alt.Axis(labelExpr="split(datum.label, '\\n')", labelLimit=0, labelFontSize=11,
                            labelPadding=6, ticks=False, domain=False))
    keep = [c for c in ("profile", "arm", "concurrency", "meaning", "decided_by", "aggregate_band") if c in d]
    tips = [alt.Tooltip(f"{c}:{'Q' if c == 'concurrency' else 'N'}",
                        title={"meaning": "outcome", "decided_by": "decided by", "aggregate_band": "aggregate Δ"}.get(c, c))
            for c in keep]
    cols = list(dict.fromkeys(["band", "concurrency", "x_low", "x_high", "outcome", *keep]))
    cells = alt.Chart(d[cols]).mark_rect(stroke="white", strokeWidth=2).encode(
        x=alt.X("x_low:Q", scale=x_scale, title="Concurrent requests (log2)",
                axis=alt.Axis(values=lv, format="d", grid=False)),
        x2=alt.X2("x_high:Q"),
        y=y,
        color=alt.Color("outcome:N", title="Level outcome",
                        scale=alt.Scale(domain=list(OUTCOME_COLOURS), range=list(OUTCOME_COLOURS.values())),
                        legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0,
                                          labelExpr=" : ".join(f"datum.label == '{k}' ? '{v}'"
                                                               for k, v in OUTCOME_MEANING.items()) + " : datum.label")),
        tooltip=tips,
    )
    layers: list[alt.Chart] = [cells]
    if "crossover" in d and d["crossover"].notna().any():
        cx = d.dropna(subset=["crossover"]).drop_duplicates(["band"])[["band", "profile", "arm", "crossover"]]
        cx = cx.assign(marker="crossover (where the deciding delta crosses zero)")
        layers.append(alt.Chart(cx).mark_point(filled=True, size=(band_height or STRIP_BAND) ** 2 * 0.8,
                                               color="black", strokeWidth=3).encode(
            x=alt.X("crossover:Q", scale=x_scale),
            y=y,
            shape=alt.Shape("marker:N", title=None,
                            scale=alt.Scale(range=["M-0.12,-1H0.12V1H-0.12Z"]),
                            legend=alt.Legend(orient="bottom", labelLimit=0, symbolSize=120)),
            tooltip=[alt.Tooltip("profile:N"), alt.Tooltip("arm:N"),
                     alt.Tooltip("crossover:Q", title="crossover (concurrency)", format=".1f")]))
    return alt.LayerChart(layer=layers, resolve=alt.Resolve(legend=alt.LegendResolveMap(color="independent", shape="independent")),
        width=width or WIDTH, height=(band_height or STRIP_BAND) * len(bands),
        title="Verdict per concurrency level")


#: colour names a caption may use for the fixed colours charts draw with (hex, lower case)
COLOUR_NAMES: dict[str, str] = {CROSSOVER_COLOUR.lower(): "red", "black": "black", "#000000": "black"}


def line_style(dash: Sequence[float] | None) -> str:
    """'solid', 'dotted' (dashes no longer than 2 px) or 'dashed', from a mark's ``strokeDash``."""
    if not dash:
        return "solid"
    return "dotted" if max(dash[::2]) <= 2 else "dashed"


def _layers(spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    """Every unit spec inside a chart's dict (layers, concatenations), depth first."""
    for key in ("layer", "hconcat", "vconcat", "concat"):
        for sub in spec.get(key, []) or []:
            yield from _layers(sub)
    if "mark" in spec:
        yield spec


def _stroke(unit: Mapping[str, Any], what: str) -> str:
    """'red dotted line', 'dotted line in each arm's colour' (``what``: 'line'): how a rule or line is
    drawn, from its own encodings."""
    mark = unit["mark"] if isinstance(unit["mark"], dict) else {"type": unit["mark"]}
    colour = (unit.get("encoding") or {}).get("color") or {}
    style = line_style(mark.get("strokeDash"))
    if "value" in colour or "color" in mark:
        value = str(colour.get("value", mark.get("color"))).lower()
        return f"{COLOUR_NAMES.get(value, value)} {style} {what}"
    return f"{style} {what} in each arm's colour" if colour.get("field") else f"{style} {what}"


def crossover_caption(chart: alt.TopLevelMixin | None) -> str:
    """The delta chart's crossover sentence, written from the chart's own crossover rule (colour and dash):
    what marks a crossover, or that none is drawn."""
    if chart is None:
        return ""
    rules = [u for u in _layers(chart.to_dict()) if (u["mark"] if isinstance(u["mark"], str) else u["mark"]["type"]) == "rule"
             and any(t.get("field") == "crossover_concurrency" for t in (u.get("encoding") or {}).get("tooltip", []) or [])]
    if not rules:
        return "No crossover is drawn: no fitted delta is credibly positive on one side of a level and credibly negative on the other."
    return (f"A {_stroke(rules[0], 'vertical line')} marks a crossover only where the fitted delta is credibly positive on one "
            "side and credibly negative on the other.")


def pareto_caption(chart: alt.TopLevelMixin | None) -> str:
    """The Pareto chart's sentence on its frontier line, written from the line's own encodings."""
    lines = [u for u in _layers(chart.to_dict()) if (u["mark"] if isinstance(u["mark"], str) else u["mark"]["type"]) == "line"] \
        if chart is not None else []
    if not lines:
        return ""
    return f"The {_stroke(lines[0], 'line')} joins the Pareto frontier — the configurations worth running."
