"""Chart functions take the obvious arguments and restyle the usual Altair ways.

Charts are rendered to SVG/PNG with vl-convert (the same Vega that the report inlines), so a
restyle that changes nothing in the picture fails here.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import altair as alt
import pytest
import vl_convert as vlc

from helpers import ROOT, SEED
from specsweep.analyze.compare import Comparison, compare
from specsweep.report import charts
from specsweep.results.store import load_result_sets

pytestmark = [pytest.mark.fast, pytest.mark.usefixtures("chart_defaults")]  # charts as the notebooks draw them

if TYPE_CHECKING:
    import pandas as pd


@pytest.fixture(scope="module")
def comp() -> Comparison:
    return compare(load_result_sets([SEED]))


def png(chart: alt.TopLevelMixin) -> bytes:
    return vlc.vegalite_to_png(chart.to_dict(), scale=0.5)


def svg(chart: alt.TopLevelMixin) -> str:
    return vlc.vegalite_to_svg(chart.to_dict())


def fills(chart: alt.TopLevelMixin) -> set[str]:
    """Fill colours of the point marks in the rendered SVG."""
    marks = re.findall(r'<g class="mark-symbol role-mark[^"]*"[^>]*>(.*?)</g>', svg(chart), re.S)
    return {c.lower() for m in marks for c in re.findall(r'fill="(#[0-9a-fA-F]{6}|[a-z]+)"', m)}


def test_configure_range_restyles_the_arm_colours(comp: Comparison) -> None:
    """``.configure_range(category=...)`` changes the colours: a scale that carried its own range would ignore it."""
    for make in (charts.throughput_chart, charts.pareto_chart, charts.concurrency_chart):
        chart = make(comp)
        restyled = chart.configure_range(category=["#000000", "#ff0000"])
        assert png(restyled) != png(chart), f"{make.__name__}: configure_range changed nothing"
        assert {"#000000", "#ff0000"} <= fills(restyled), make.__name__
    # by default the baseline is grey and the first other arm amber, in every chart
    assert {charts.BASELINE_COLOUR, charts.ARM_COLOURS[0]} <= fills(charts.throughput_chart(comp))
    assert charts.ARM_COLOURS[0] in fills(charts.delta_chart(comp)) and charts.BASELINE_COLOUR not in fills(
        charts.delta_chart(comp))


def test_colours_argument(comp: Comparison) -> None:
    by_name = fills(charts.user_speed_chart(comp, colours={"mtp": "#123456"}))
    by_label = fills(charts.user_speed_chart(comp, colours={comp.labels["baseline"]: "#abcdef"}))
    assert "#123456" in by_name and charts.BASELINE_COLOUR in by_name
    assert "#abcdef" in by_label and charts.ARM_COLOURS[0] in by_label
    with pytest.raises(ValueError, match="colours: 'nope' name no arm or label"):
        charts.throughput_chart(comp, colours={"nope": "red"})


def test_arms_and_levels_arguments(comp: Comparison) -> None:
    chart = charts.throughput_chart(comp, arms=["mtp"], levels=[4, 16, 32])
    rows = [r for d in chart.to_dict()["datasets"].values() for r in d]
    assert {r["arm"] for r in rows} == {"mtp"} and {r["concurrency"] for r in rows} == {4, 16, 32}
    # the arm keeps its colour when shown alone
    assert fills(chart) == {charts.ARM_COLOURS[0]}
    ranged = charts.pareto_chart(comp, concurrency=(16, None))
    assert {r["concurrency"] for d in ranged.to_dict()["datasets"].values() for r in d if "concurrency" in r} == {16, 32, 64, 128}
    delta = charts.delta_chart(comp, levels=[1, 4, 16])  # the crossover (32..64) is outside: not drawn
    assert "crossover" not in svg(delta)
    assert "crossover" in svg(charts.delta_chart(comp))
    with pytest.raises(ValueError, match="arms: 'eagle' is neither an arm nor a label"):
        charts.throughput_chart(comp, arms=["eagle"])
    with pytest.raises(ValueError, match="levels/concurrency: none of the tested levels"):
        charts.throughput_chart(comp, levels=[3])


def svg_size(chart: alt.TopLevelMixin) -> tuple[float, float]:
    m = re.search(r'<svg[^>]*width="([\d.]+)"[^>]*height="([\d.]+)"', svg(chart))
    assert m
    return float(m.group(1)), float(m.group(2))


def test_sizes_fit_a_1400px_page_and_can_be_changed(comp: Comparison) -> None:
    for make in (charts.throughput_chart, charts.user_speed_chart, charts.delta_chart, charts.pareto_chart,
                 charts.concurrency_chart):
        w, h = svg_size(make(comp))
        assert 900 <= w <= 1300, (make.__name__, w)  # wide enough to read, narrow enough for the page
    small = svg_size(charts.throughput_chart(comp, width=300, height=150))
    assert small[0] < 500 and small[1] < 300
    assert svg_size(charts.throughput_chart(comp).properties(width=300, height=150)) == pytest.approx(small, abs=2)
    panels = svg_size(charts.delta_chart(comp, width=200))
    assert panels[0] < 700


def label_boxes(chart: alt.TopLevelMixin) -> list[tuple[str, float, float, float, float]]:
    """Boxes (text, x0, y0, x1, y1) of the text marks in the rendered SVG, 6 px per character, 11 px tall."""
    boxes = []
    for group in re.findall(r'<g class="mark-text role-mark[^"]*"[^>]*>(.*?)</g>', svg(chart), re.S):
        for attrs, text in re.findall(r"<text([^>]*)>([^<]*)</text>", group):
            x, y = map(float, re.search(r'translate\(([-\d.]+),\s*([-\d.]+)\)', attrs).groups())
            anchor = re.search(r'text-anchor="(\w+)"', attrs)
            w = 6.0 * len(text)
            x0 = x - w if anchor and anchor.group(1) == "end" else x - w / 2 if anchor and anchor.group(1) == "middle" else x
            boxes.append((text, x0, y - 11, x0 + w, y))
    return boxes


def test_pareto_labels_do_not_collide(comp: Comparison) -> None:
    """On the seed, MTP's 64 and 128 points sit 64 tok/s apart: overlapping labels would print as '12864'."""
    boxes = label_boxes(charts.pareto_chart(comp))
    assert len(boxes) == 12, boxes
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap = min(a[3], b[3]) - max(a[1], b[1]) > 0 and min(a[4], b[4]) - max(a[2], b[2]) > 0
            assert not overlap, (a, b)


def readme_snippet() -> str:
    text = (ROOT / "docs" / "reading-a-report.md").read_text()
    m = re.search(r"<!-- redraw-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/reading-a-report.md: the redraw snippet (marked <!-- redraw-snippet -->) is missing"
    return m.group(1)


def test_readme_redraw_snippet_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reading-a-report.md's 'load results, redraw one chart' lines, run from the repository root."""
    import specsweep.report

    code = readme_snippet().strip().splitlines()
    assert len(code) <= 5
    monkeypatch.chdir(ROOT)
    # its notebook set-up changes this process's pandas and Altair settings; a kernel runs it whole
    # (tests/report/test_redraw_offline.py)
    monkeypatch.setattr(specsweep.report, "setup_notebook", lambda: None)
    scope: dict[str, object] = {}
    exec(compile("\n".join(code[:-1]), "docs/reading-a-report.md", "exec"), scope)  # noqa: S102 - the doc's own code
    chart = eval(compile(code[-1], "docs/reading-a-report.md", "eval"), scope)  # noqa: S307 - its last line is the chart shown
    assert isinstance(chart, alt.TopLevelMixin)
    assert png(chart)[:4] == b"\x89PNG"
    assert not Path(ROOT / "throughput.html").exists()


# ------------------------------------------------------------------------------------- verdict strip

def layers_of(spec: dict) -> list[dict]:
    """Every unit spec (one mark) of a layered / concatenated Vega-Lite spec."""
    if "mark" in spec:
        return [spec]
    out = []
    for key in ("layer", "hconcat", "vconcat", "concat"):
        for sub in spec.get(key, []):
            out += layers_of(sub)
    return out


def rows_of(spec: dict, unit: dict) -> list[dict]:
    """The data rows of one unit spec (named datasets of the top-level spec)."""
    name = (unit.get("data") or {}).get("name")
    return spec["datasets"][name]


def mark_type(unit: dict) -> str:
    m = unit["mark"]
    return m if isinstance(m, str) else m["type"]


def strip_frame(rows: list[tuple[str, str, int, str, float]]) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415
    return pd.DataFrame(rows, columns=["profile", "arm", "concurrency", "outcome", "crossover"])


def test_verdict_strip_cells_colours_and_axis_follow_the_data() -> None:
    nan = float("nan")
    rows = [("Batch", "mtp", c, o, 12.0) for c, o in zip((1, 2, 8, 32), ("gain", "gain", "neutral", "loss"))]
    rows += [("Batch", "eagle", c, o, nan) for c, o in zip((1, 2, 8, 32), ("neutral", "neutral", "loss", "loss"))]
    rows += [("Latency <b>&", "mtp", c, o, nan) for c, o in zip((2, 8, 32), ("gain", "gain", "gain"))]
    spec = charts.verdict_strip(strip_frame(rows)).to_dict()
    units = layers_of(spec)
    cells = [u for u in units if mark_type(u) == "rect"]
    assert len(cells) == 1
    cell, enc = cells[0], cells[0]["encoding"]
    data = rows_of(spec, cell)
    # one cell per (profile, arm, level), carrying its outcome
    got = {(r["profile"], r["arm"], r["concurrency"]): r["outcome"] for r in data}
    assert got == {(p, a, c): o for p, a, c, o, _ in rows}
    # the colour scale maps each outcome to its own colour, and the legend says what each means
    scale = enc["color"]["scale"]
    colour = dict(zip(scale["domain"], scale["range"]))
    assert set(colour) == {"gain", "loss", "neutral"} and len(set(colour.values())) == 3
    label_expr = enc["color"]["legend"]["labelExpr"]
    for word, meaning in (("gain", "credibly better"), ("loss", "credibly worse"), ("neutral", "within noise")):
        assert f"'{word}'" in label_expr and meaning in label_expr
    # x: log2, a tick at every tested level; cells of one band tile the axis without overlapping
    x = enc["x"]
    assert x["scale"]["type"] == "log" and x["scale"]["base"] == 2 and x["axis"]["values"] == [1, 2, 8, 32]
    for band in {r["band"] for r in data}:
        spans = sorted((r["x_low"], r["concurrency"], r["x_high"]) for r in data if r["band"] == band)
        assert all(lo < c < hi for lo, c, hi in spans)
        assert all(a[2] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))
    # one band per profile × arm, in the frame's order, the full names on the axis (never cut)
    assert enc["y"]["sort"] == ["Batch\nmtp", "Batch\neagle", "Latency <b>&\nmtp"]
    assert enc["y"]["axis"]["labelLimit"] == 0
    # the crossover: one mark, on the mtp band of Batch only, at 12
    marks = [u for u in units if u is not cell]
    assert len(marks) == 1
    assert [(r["band"], r["crossover"]) for r in rows_of(spec, marks[0])] == [("Batch\nmtp", 12.0)]
    assert marks[0]["encoding"]["x"]["scale"] == x["scale"]
    # rendered: each outcome's colour is drawn, and the untrusted profile name is escaped
    picture = vlc.vegalite_to_svg(spec)
    for c in colour.values():
        assert c in picture.lower()
    assert "<b>&" not in picture and "&lt;b&gt;&amp;" in picture


def test_verdict_strip_rejects_bad_frames() -> None:
    frame = strip_frame([("Batch", "mtp", 4, "win", float("nan"))])
    with pytest.raises(ValueError, match="outcome 'win' is not one of gain, loss, neutral"):
        charts.verdict_strip(frame)
    with pytest.raises(ValueError, match="lacks column\\(s\\) outcome"):
        charts.verdict_strip(frame.drop(columns=["outcome"]))
    assert charts.verdict_strip(frame.iloc[:0]) is None
    no_crossover = charts.verdict_strip(frame.drop(columns=["crossover"]).assign(outcome="gain")).to_dict()
    assert [mark_type(u) for u in layers_of(no_crossover)] == ["rect"]


def test_verdict_strip_frame_from_recommendations(tmp_path: Path) -> None:
    from helpers import write_level_only  # noqa: PLC0415
    from specsweep import decide as recommend  # noqa: PLC0415

    # baseline; "up" gains 20 % at low concurrency and loses 30 % at high; "flat" changes nothing
    base = {1: (100.0, 100.0), 2: (190.0, 95.0), 4: (360.0, 90.0), 8: (640.0, 80.0), 16: (1100.0, 69.0)}
    up = {c: (a * f, u * f) for (c, (a, u)), f in zip(base.items(), (1.2, 1.2, 1.2, 0.7, 0.7))}
    sets = [write_level_only(tmp_path / "b", "baseline", base), write_level_only(tmp_path / "u", "up", up),
            write_level_only(tmp_path / "f", "flat", base)]
    comp = compare(load_result_sets(sets))
    recs = [recommend.recommend(comp, p) for p in recommend.DEFAULT_PROFILES]
    frame = charts.verdict_strip_frame(comp, recs)
    expected = []
    for rec in recs:
        for r in rec.levels.itertuples():
            cross = rec.up_to_concurrency if rec.up_to_concurrency is not None else rec.from_concurrency
            want = cross if cross is not None and r.arm == rec.arm else None
            expected.append((rec.profile.name, r.arm, r.concurrency, r.outcome, want))
    got = [(r.profile, r.arm, r.concurrency, r.outcome, None if r.crossover != r.crossover else r.crossover)
           for r in frame.itertuples()]
    assert sorted(got, key=str) == sorted(expected, key=str) and len(got) == len(expected) > 0
    assert frame["crossover"].notna().any() and frame["crossover"].isna().any()
    assert set(frame.loc[frame["crossover"].notna(), "arm"]) == {"up"}
    # arms in the comparison's order within each profile, profiles in the order given
    assert list(dict.fromkeys(frame["profile"])) == [r.profile.name for r in recs if not r.levels.empty]
    for _, part in frame.groupby("profile", sort=False):
        arms = list(dict.fromkeys(part["arm"]))
        assert arms == [a for a in comp.arms if a in arms]
    assert charts.verdict_strip(frame) is not None
    empty = charts.verdict_strip_frame(comp, [])
    assert list(empty.columns) == ["profile", "arm", "concurrency", "outcome", "crossover"] and empty.empty


# -------------------------------------------------------------- legible charts with several arms

#: labels like the demo's: long, and two of them differing only at the end
LONG_LABELS = {
    "baseline": "Baseline (no speculative decoding, the server's defaults)",
    "mtp": "MTP (simulated NEXTN; running requests capped at 48 as SGLang does)",
    "mtp-cap128": "MTP (simulated NEXTN; running requests capped at 48 as SGLang does, \"cap\" 128 \\ </script>)",
}


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    """Baseline and two arms with equal measurements (as the demo's MTP and MTP-cap-128 were):
    +30 % at low concurrency, −20 % at 64, so each arm's crossovers lie at the same concurrency."""
    from helpers import write_level_only  # noqa: PLC0415

    tmp = tmp_path_factory.mktemp("twins")
    base = {1: (100.0, 100.0), 2: (190.0, 95.0), 4: (360.0, 90.0), 8: (640.0, 80.0), 16: (1100.0, 69.0),
            32: (1800.0, 56.0), 64: (2600.0, 40.0)}
    gain = (1.3, 1.3, 1.25, 1.15, 1.05, 0.9, 0.8)
    arm = {c: (a * g, u * g) for (c, (a, u)), g in zip(base.items(), gain)}
    sets = [write_level_only(tmp / "b", "baseline", base, label=LONG_LABELS["baseline"],
                             server={"max_running_requests": 48}),
            write_level_only(tmp / "m", "mtp", arm, label=LONG_LABELS["mtp"], server={"max_running_requests": 48}),
            write_level_only(tmp / "c", "mtp-cap128", arm, label=LONG_LABELS["mtp-cap128"],
                             server={"max_running_requests": 48})]
    return compare(load_result_sets(sets))


def overlapping(boxes: list[tuple[str, float, float, float, float]]) -> list[tuple[object, object]]:
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if min(a[3], b[3]) - max(a[1], b[1]) > 0 and min(a[4], b[4]) - max(a[2], b[2]) > 0]


def test_crossover_labels_do_not_overlap(twins: Comparison) -> None:
    """The demo's two arms crossed at 49 and 57: both labels were drawn at one height ('crossover≈4957')."""
    cx = twins.crossovers
    assert len(cx[cx["metric"] == "output_tok_s"]) == 2  # both arms cross, at the same concurrency
    for panel_width in (None, 200):
        chart = charts.delta_chart(twins, width=panel_width)
        assert len(chart.hconcat) == 2
        for panel in chart.hconcat:  # (text positions are relative to their panel)
            boxes = [b for b in label_boxes(panel) if "crossover" in b[0]]
            assert len(boxes) == 2, boxes
            assert not overlapping(boxes), (panel_width, boxes)
            assert all(b[1] >= 0 and b[3] <= (panel_width or charts.PANEL_WIDTH) + 1 for b in boxes), boxes
            # each label names its arm, since there are two
            assert sorted(b[0].split(" ")[0] for b in boxes) == ["mtp", "mtp-cap128"]
    # in the spec: the two labels of rules at the same spot are placed apart (one beside the other, or below)
    spec = charts.delta_chart(twins, width=200).to_dict()
    texts = [r for u in layers_of(spec["hconcat"][0]) if mark_type(u) == "text" for r in spec["datasets"][u["data"]["name"]]]
    assert len(texts) == 2 and len({(r["label_x_px"], r["label_y_px"]) for r in texts}) == 2


def legends(svg_text: str) -> dict[str, list[dict[str, str]]]:
    """Legend title → its entries as drawn: label (lines joined by a space), the symbol's path,
    stroke dash and colour."""
    out: dict[str, list[dict[str, str]]] = {}
    for block in svg_text.split('class="mark-group role-legend"')[1:]:
        title = re.search(r'role-legend-title[^>]*>\s*<text[^>]*>([^<]*)</text>', block)
        entries = re.findall(r'role-legend-symbol[^>]*><path ([^>]*)/></g><g class="mark-text role-legend-label"'
                             r'[^>]*><text[^>]*>(.*?)</text>', block, re.S)
        rows = []
        for attrs, text in entries:
            get = lambda k, a=attrs: (re.search(rf'\b{k}="([^"]*)"', a) or [None, ""])[1]  # noqa: E731
            label = " ".join(re.findall(r"<tspan[^>]*>([^<]*)</tspan>", text)) or text
            rows.append({"label": label, "d": get("d"), "dash": get("stroke-dasharray"), "colour": get("stroke") or get("fill")})
        out[title.group(1) if title else ""] = rows
    return out


def unescape(text: str) -> str:
    import html  # noqa: PLC0415
    return html.unescape(text)


def test_legends_show_every_arm_name_whole_and_its_line_style(twins: Comparison, monkeypatch: pytest.MonkeyPatch) -> None:
    """Legends cut labels at ~25 characters ('MTP (simulated NEXTN; running …' twice), so colour alone
    told arms apart; now each entry is the arm's whole name, wrapped, beside a line in its own dash."""
    for how, names in (("short", {a: a for a in LONG_LABELS}), ("label", LONG_LABELS)):
        monkeypatch.setattr(charts, "ARM_NAMES", how)
        for make, shown in ((charts.throughput_chart, list(names)), (charts.user_speed_chart, list(names)),
                            (charts.delta_chart, ["mtp", "mtp-cap128"]), (charts.delta_fit_chart, ["mtp", "mtp-cap128"]),
                            (charts.concurrency_chart, list(names))):
            picture = svg(make(twins))
            assert "…" not in picture, make.__name__
            entries = legends(picture)["Arm"]
            assert [unescape(e["label"]) for e in entries] == [names[a] for a in shown], make.__name__
            dashes = [e["dash"] for e in entries]
            assert len(set(dashes)) == len(dashes), (make.__name__, dashes)  # a distinct line style each …
            assert all(e["d"].count("L") == 1 and "A" not in e["d"] for e in entries)  # … drawn as a line
            assert len({e["colour"] for e in entries}) == len(entries)


def line_paths(chart: alt.TopLevelMixin) -> list[tuple[str, str, str]]:
    """(stroke, dash, path) of every line mark in the rendered SVG."""
    out = []
    for group in re.findall(r'<g class="mark-line role-mark[^"]*"[^>]*>(.*?)</g>', svg(chart), re.S):
        for attrs in re.findall(r"<path ([^>]*)/>", group):
            get = lambda k, a=attrs: (re.search(rf'\b{k}="([^"]*)"', a) or [None, ""])[1]  # noqa: E731
            out.append((get("stroke"), get("stroke-dasharray"), get("d")))
    return out


def test_equal_lines_stay_visibly_distinct(twins: Comparison) -> None:
    """Two arms with equal measurements: one line hid the other. Now each is drawn in its own dash,
    a little apart, and their points nest (the later arm's smaller), so both show."""
    levels = twins.levels.set_index(["arm", "concurrency"])["output_tok_s"]
    assert levels["mtp"].tolist() == levels["mtp-cap128"].tolist()  # the data really are equal
    for chart in (charts.throughput_chart(twins), charts.delta_chart(twins), charts.concurrency_chart(twins)):
        lines = [p for p in line_paths(chart) if p[0] in (charts.ARM_COLOURS[0], charts.ARM_COLOURS[1])]
        mtp = [p for p in lines if p[0] == charts.ARM_COLOURS[0]]
        cap = [p for p in lines if p[0] == charts.ARM_COLOURS[1]]
        assert mtp and cap and len(mtp) == len(cap)
        for a, b in zip(mtp, cap):
            assert a[1] != b[1] and a[2] != b[2]  # different dash, and not the same path
    spec = charts.throughput_chart(twins).to_dict()
    points = {rows_of(spec, u)[0]["arm"] if False else u["transform"][0]["filter"]["equal"]: u["mark"]
              for u in layers_of(spec) if mark_type(u) == "point"}
    assert points["mtp"]["size"] > points["mtp-cap128"]["size"]
    assert (points["mtp"]["xOffset"], points["mtp"]["yOffset"]) != (points["mtp-cap128"]["xOffset"],
                                                                  points["mtp-cap128"]["yOffset"])


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    """Three measured arms (per-request samples, so latency percentiles), two of them equal."""
    from helpers import write_measured  # noqa: PLC0415

    tmp = tmp_path_factory.mktemp("measured")

    def levels(step: float, ttft: float) -> dict[int, dict[str, float]]:
        return {c: dict(tokens=40, step_s=step * (1 + c / 16), ttft_s=ttft * (1 + c / 8), jitter=0.1) for c in (1, 2, 4, 8)}

    sets = [write_measured(tmp / "b", "baseline", levels(0.01, 0.05)),
            write_measured(tmp / "m", "mtp", levels(0.007, 0.06), seed=5, label=LONG_LABELS["mtp"]),
            write_measured(tmp / "c", "mtp-cap128", levels(0.007, 0.06), seed=5, label=LONG_LABELS["mtp-cap128"])]
    return compare(load_result_sets(sets))


def test_latency_legend_tells_p50_from_p99_and_the_arms_apart(measured: Comparison) -> None:
    """The p50/p99 legend showed two identical dots; now two lines, solid and dashed, as the chart draws them."""
    chart = charts.latency_chart(measured)
    assert chart is not None
    found = legends(svg(chart))
    pct = found["Percentile"]
    assert [e["label"] for e in pct] == ["p50", "p99"]
    assert pct[0]["dash"] != pct[1]["dash"] and all(e["d"].count("L") == 1 for e in pct)
    arms = found["Arm"]
    assert [e["label"] for e in arms] == ["baseline", "mtp", "mtp-cap128"]
    assert len({e["d"] for e in arms}) == 3  # each arm its own point shape (and colour)
    # the chart draws p99 in the dash its legend shows, p50 in the other
    spec = chart.to_dict()
    dash = [u["encoding"]["strokeDash"] for u in layers_of(spec) if mark_type(u) == "line"]
    assert dash and all(d["field"] == "percentile" and d["scale"]["domain"] == ["p50", "p99"] for d in dash)
    drawn = {p[1] for p in line_paths(chart)}
    assert {pct[0]["dash"], pct[1]["dash"]} <= drawn


def test_charts_are_built_without_debug_mode_and_still_validated_once(comp: Comparison) -> None:
    """The library builds its charts with Altair's per-object validation off (``charts.validated_once``):
    debug mode is back on for the analyst's own objects afterwards (also after a build that raises),
    and a chart built that way is still checked against the schema as a whole when it is rendered."""
    import pandas as pd
    from altair.utils import schemapi

    assert schemapi.DEBUG_MODE
    seen: list[bool] = []

    @charts.validated_once
    def bad() -> alt.Chart:
        seen.append(schemapi.DEBUG_MODE)
        return alt.Chart(pd.DataFrame({"x": [1]})).mark_line(color=5).encode(x="x:Q")  # colour must be a string

    chart = bad()  # debug mode would have raised here
    assert seen == [False] and schemapi.DEBUG_MODE
    with pytest.raises(schemapi.SchemaValidationError):
        chart.to_dict()  # what a notebook's display, save() and the report's page call
    with pytest.raises(schemapi.SchemaValidationError):
        alt.MarkDef(color=5)  # the analyst's own objects keep debug mode's early error

    @charts.validated_once
    def fails() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fails()
    assert schemapi.DEBUG_MODE
    charts.delta_chart(comp).to_dict()  # a real chart passes the whole-spec validation
    assert schemapi.DEBUG_MODE


def test_charts_are_made_without_rebuilding_altairs_class_table_or_remaking_layers(
        comp: Comparison, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Altair costs the library's charts avoid (a third of a seed report's chart building): an
    encoding given as a string or ``alt.value(...)`` makes Altair hash all its ~600 schema classes
    again to find the channel's class (``_FromDict``, once per such encoding), and
    ``.properties()``/``.resolve_*()`` on a layered or concatenated chart makes it again, deep-copying
    every layer twice. Every chart of the seed report is built with channel objects and constructor
    arguments instead: no class table, and no layered or concatenated chart made again."""
    from altair.utils import schemapi
    from altair.vegalite.v6 import api

    from specsweep.decide import DEFAULT_PROFILES, recommend

    tables: list[int] = []
    remade: list[str] = []
    table_init = schemapi._FromDict.__init__
    monkeypatch.setattr(schemapi._FromDict, "__init__", lambda self, *a: (tables.append(1), table_init(self, *a))[1])
    for name in ("properties", "_set_resolve"):
        method = getattr(api.TopLevelMixin, name)

        def spy(self: object, *a: object, _method=method, _name=name, **k: object) -> object:
            if isinstance(self, (api.LayerChart, api.HConcatChart, api.VConcatChart)):
                remade.append(f"{type(self).__name__}.{_name}")
            return _method(self, *a, **k)

        monkeypatch.setattr(api.TopLevelMixin, name, spy)
    recs = [recommend(comp, p) for p in DEFAULT_PROFILES]
    built = [charts.throughput_chart(comp), charts.user_speed_chart(comp), charts.delta_chart(comp),
             charts.delta_fit_chart(comp), charts.pareto_chart(comp), charts.concurrency_chart(comp),
             charts.latency_chart(comp), charts.verdict_strip(charts.verdict_strip_frame(comp, recs))]
    assert tables == []
    assert remade == []
    for chart in built:
        if chart is not None:
            chart.to_dict()  # still valid as a whole
    charts.delta_chart(comp).properties(title="mine")  # the spy sees an analyst's restyling
    assert remade == ["HConcatChart.properties"]


def _rule_strokes(chart: alt.TopLevelMixin) -> set[tuple[str, str]]:
    """(stroke colour, dash array) of every rule mark in the rendered SVG: what the reader sees."""
    marks = re.findall(r'<g class="mark-rule role-mark[^"]*"[^>]*>(.*?)</g>', svg(chart), re.S)
    return {(s.lower(), d) for m in marks
            for s, d in re.findall(r'stroke="(#[0-9a-fA-F]{6}|[a-z]+)"[^>]*?stroke-dasharray="([\d., ]+)"', m)}


def test_chart_captions_are_written_from_the_charts_own_strokes(comp: Comparison, tmp_path: Path) -> None:
    """One arm crossing: a red dotted rule, and the caption says red dotted (never 'red dashed'); several
    arms crossing: each arm's colour, and the caption says so. The Pareto frontier's caption names its
    line's style. The notebook carries no hand-written stroke description."""
    from cases import BASE, cross8, scaled
    from helpers import write_level_only

    one = charts.delta_chart(comp)
    assert ("#b91c1c", "2,3") in _rule_strokes(one)  # as rendered
    assert charts.crossover_caption(one).startswith("A red dotted vertical line marks a crossover")
    sets = [write_level_only(tmp_path / "baseline", "baseline", BASE)]
    sets += [write_level_only(tmp_path / a, a, scaled(lambda c, k=k: cross8(c) * k)) for a, k in (("a", 1.0), ("b", 1.02))]
    two = charts.delta_chart(compare(load_result_sets(sets)))
    strokes = {s for s, d in _rule_strokes(two) if d == "2,3"}
    assert len(strokes) == 2 and "#b91c1c" not in strokes, strokes
    assert charts.crossover_caption(two).startswith("A dotted vertical line in each arm's colour marks a crossover")
    assert charts.pareto_caption(charts.pareto_chart(comp)).startswith("The black dotted line joins the Pareto frontier")
    notebook = (ROOT / "notebooks" / "report.ipynb").read_text()
    assert not re.search(r"(red|blue|black)? ?(dashed|dotted) (line|rule)", notebook), "a stroke described by hand"


def test_the_decomposition_chart_is_as_wide_as_the_others_and_its_legend_is_whole(comp: Comparison) -> None:
    """The what-if decomposition spans the page like the other charts, and its factor legend is not cut
    ('per-user speed from the batch siz…')."""
    from specsweep.analyze.whatif.decompose import FACTORS
    from specsweep.report import whatif_section

    chart = whatif_section.chart(comp, load_result_sets([SEED]))
    assert chart is not None
    width, _ = svg_size(chart)
    assert width >= 0.9 * svg_size(charts.throughput_chart(comp))[0], width
    drawn = svg(chart)
    assert "…" not in drawn
    for what in FACTORS.values():
        assert what.replace("&", "&amp;") in drawn, what


def _interval_units(spec: dict) -> list[dict]:
    """The unit specs that draw a 95 % interval (a bar, a tick at its end, a band, an error bar)."""
    return [u for u in layers_of(spec) if any((u.get("encoding") or {}).get(ch, {}).get("field") in
                                              ("ci_low_pct", "ci_high_pct") for ch in ("y", "y2"))]


def test_intervals_past_the_panel_are_clipped_to_its_domain_and_marked() -> None:
    """The real-engine reference: the control's and the self-draft arm's 95 % intervals reach +60 % and
    +15,899 % while every point estimate lies between -61 % and +5 %. Each delta panel's y domain is
    set from the point estimates (with a margin), every interval mark is clipped to it, and where an
    interval is cut a triangle at the edge says so (its tooltip how far it runs), with a note under the
    panel's title; the seed's narrow bands are clipped nowhere."""
    comp = compare(load_result_sets([ROOT / "data" / "reference" / "real-llamacpp-smollm2"]))
    agg = comp.deltas[comp.deltas["metric"] == "output_tok_s"]
    assert agg["ci_high_pct"].max() > 10_000 and agg["delta_pct"].max() < 10  # the premise
    for chart in (charts.delta_chart(comp), charts.delta_fit_chart(comp)):
        spec = chart.to_dict()
        for panel in spec["hconcat"]:
            units = _interval_units(panel)
            assert units and all(u["mark"].get("clip") is True for u in units), [u["mark"] for u in units]
            lo, hi = units[0]["encoding"]["y"]["scale"]["domain"]
            assert all(u["encoding"]["y"]["scale"]["domain"] == [lo, hi] for u in units)
            points = [r[k] for u in layers_of(panel) for r in rows_of(spec, u)
                      for k in ("delta_pct", "fit_delta_pct") if isinstance(r.get(k), float)]
            assert lo <= min(points) and max(points) <= hi < 200, (lo, hi)
            marks = [u for u in layers_of(panel) if isinstance(u["mark"], dict) and
                     u["mark"].get("shape") in ("triangle-up", "triangle-down")]
            ends = [r for u in marks for r in rows_of(spec, u)]
            assert any(r["clip_y"] == hi and r["ci_high_pct"] > hi for r in ends)
            assert all(r["clipped"].startswith(f"interval clipped at {r['clip_y']:+.0f}%") for r in ends)
            assert "clipped" in " ".join(panel["title"]["subtitle"])
    seed = charts.delta_chart(compare(load_result_sets([SEED]))).to_dict()
    assert not [u for u in layers_of(seed) if isinstance(u["mark"], dict) and u["mark"].get("shape")]
    assert all(isinstance(p["title"], str) for p in seed["hconcat"])


@pytest.mark.parametrize("noise", ["lognormal", "uniform"])
def test_the_delta_domain_holds_every_point_and_clips_exactly_the_intervals_beyond_it(noise: str) -> None:
    """Many draws of point estimates with intervals, some of them wild: the domain holds every point
    and 0, reaches no further than half the points' span (10 points at least) past them, and an
    interval end is marked as clipped exactly where it lies outside the domain."""
    import numpy as np
    import pandas as pd  # noqa: PLC0415

    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 8))
        points = rng.normal(rng.uniform(-50, 50), rng.uniform(1, 30), n)
        half = rng.lognormal(1.5, 1.5, n) if noise == "lognormal" else rng.uniform(0.5, 200, n)
        frame = pd.DataFrame({"arm_name": "a", "concurrency": range(n), "ci_low_pct": np.maximum(points - half, -100),
                              "ci_high_pct": points + half})
        lo, hi = charts.delta_domain(points, frame["ci_low_pct"], frame["ci_high_pct"])
        core = (min(points.min(), 0.0), max(points.max(), 0.0))
        pad = max(0.5 * (core[1] - core[0]), 10.0)
        assert lo <= core[0] and core[1] <= hi
        assert lo >= core[0] - pad * 1.1 - 1e-9 - 0.04 * (hi - lo) and hi <= core[1] + pad * 1.1 + 0.04 * (hi - lo)
        cut = charts.clipped_ends(frame, (lo, hi))
        want = int((frame["ci_high_pct"] > hi).sum() + (frame["ci_low_pct"] < lo).sum())
        assert len(cut) == want


def test_a_category_interval_past_the_panel_is_clipped_and_marked() -> None:
    """The category view's error bars follow the same rule: a control's per-category interval of
    −90 % to +4,000 % around points within ±12 % is clipped at the panel's edge and marked there."""
    import pandas as pd  # noqa: PLC0415

    comp = compare(load_result_sets([ROOT / "data" / "reference" / "real-llamacpp-smollm2"]))
    rows = []
    for arm, (lo, hi) in (("ngram", (-8.0, 20.0)), ("control", (-90.0, 4000.0))):
        for cat, d in (("copy", 12.0), ("edit-file", -5.0)):
            row = {"arm": arm, "concurrency": 4, "category": cat, "accept_length": 1.0}
            for name in ("user", "aggregate"):
                row.update({f"{name}_delta_pct": d, f"{name}_ci_low_pct": lo, f"{name}_ci_high_pct": hi,
                            f"{name}_ci_kind": "repeats", f"{name}_fit_pct": float("nan")})
            rows.append(row)
    spec = charts.category_chart(comp, pd.DataFrame(rows)).to_dict()
    for panel in spec["hconcat"]:
        (bar,) = [u for u in _interval_units(panel)]
        assert bar["mark"]["clip"] is True
        lo, hi = bar["encoding"]["y"]["scale"]["domain"]
        assert -30 < lo < -5 and 12 < hi < 40, (lo, hi)
        ends = [r for u in layers_of(panel) if isinstance(u["mark"], dict) and u["mark"].get("shape")
                for r in rows_of(spec, u)]
        assert sorted((r["arm_name"], r["clip_edge"]) for r in ends) == [("control", "bottom")] * 2 + [("control", "top")] * 2
        assert "clipped" in " ".join(panel["title"]["subtitle"])
