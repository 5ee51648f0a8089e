"""The published HTML renders every chart in a real headless browser with no network at all."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from browser import dump_dom, hover_in_chromium
from helpers import SEED
from specsweep.report import build_report


@pytest.fixture(scope="module")
def seed_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_report([SEED], "browser", out_dir=tmp_path_factory.mktemp("reports"))


@pytest.mark.browser
def test_every_chart_renders_offline(seed_html: Path, tmp_path: Path) -> None:
    html = seed_html
    source = html.read_text()
    expected = len(re.findall(r'class="specsweep-chart"', source))
    assert expected == 8  # verdict strip, throughput, per-user, Δ, fitted Δ, Pareto, concurrency, what-if decomposition
    dom = dump_dom(html, tmp_path)
    views = re.findall(r'<svg[^>]*class="marks"|<canvas[^>]*class="marks"', dom)
    assert len(views) == expected, f"{len(views)} chart views rendered, expected {expected}"
    assert not re.search(r">\s*chart failed:", dom), "a chart reported an error"
    assert not re.search(r"Error loading script", dom)


@pytest.mark.browser
def test_tooltips_work_offline(seed_html: Path) -> None:
    """Hover a point over the DevTools protocol; the Vega tooltip must show its data."""
    result = hover_in_chromium(seed_html)
    assert result["views"] == 8
    assert "visible" in (result["tooltip_class"] or ""), result
    text = result["tooltip_text"] or ""
    assert "arm" in text and "concurrency" in text, text
    assert result["scroll_width"] <= 1400, "the page scrolls sideways in a 1400 px window"
