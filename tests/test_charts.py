"""Chart functions take the obvious arguments and restyle the usual Altair ways (issue 8, item 17).

Charts are rendered to SVG/PNG with vl-convert (the same Vega that the report inlines), so a
restyle that changes nothing in the picture fails here.
"""
from __future__ import annotations

import re
from pathlib import Path

import altair as alt
import pytest
import vl_convert as vlc

from helpers import ROOT, SEED
from specsweep import charts
from specsweep.compare import Comparison, compare
from specsweep.store import load_result_sets


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
    """``.configure_range(category=...)`` used to change nothing: the scale carried its own range."""
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
    """On the seed, MTP's 64 and 128 points sit 64 tok/s apart: their labels used to print as '12864'."""
    boxes = label_boxes(charts.pareto_chart(comp))
    assert len(boxes) == 12, boxes
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap = min(a[3], b[3]) - max(a[1], b[1]) > 0 and min(a[4], b[4]) - max(a[2], b[2]) > 0
            assert not overlap, (a, b)


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- redraw-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md: the redraw snippet (marked <!-- redraw-snippet -->) is missing"
    return m.group(1)


def test_readme_redraw_snippet_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's 'load results, redraw one chart' lines, run from the repository root."""
    code = readme_snippet().strip().splitlines()
    assert len(code) <= 4
    monkeypatch.chdir(ROOT)
    scope: dict[str, object] = {}
    exec(compile("\n".join(code[:-1]), "README.md", "exec"), scope)  # noqa: S102 - the README's own code
    chart = eval(compile(code[-1], "README.md", "eval"), scope)  # noqa: S307 - its last line is the chart shown
    assert isinstance(chart, alt.TopLevelMixin)
    assert png(chart)[:4] == b"\x89PNG"
    assert not Path(ROOT / "throughput.html").exists()
